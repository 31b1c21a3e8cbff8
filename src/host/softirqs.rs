//! /proc/softirqs: software interrupt counts per type and per CPU, summed
//! across CPUs (NET_RX and NET_TX are the ones a network probe cares about).
//!
//! procfs has no parser for this file, so this is our own. Unlike
//! /proc/interrupts every row is a bare list of counts, so any extra or
//! missing column means the layout is not what we think and is an error.

#![warn(missing_docs)]

use std::collections::BTreeMap;

use super::error::{quoted, read_to_string, HostError};
use super::percpu::{found_instead, leading_counts, saturating_sum, split_label, table};

const FILE: &str = "/proc/softirqs";

/// Parses the text of /proc/softirqs into the count of each softirq type
/// (`"NET_RX"`, `"TIMER"`, ...) summed over all CPUs.
pub fn parse_softirqs(text: &str) -> Result<BTreeMap<String, u64>, HostError> {
    let (cpus, lines) = table(FILE, text)?;

    let mut totals = BTreeMap::new();
    for (line_no, line) in lines {
        let (name, rest) = split_label(FILE, line_no, line)?;
        let (counts, rest) = leading_counts(rest, cpus);
        if counts.len() < cpus {
            return Err(HostError::line(
                FILE,
                line_no,
                format!(
                    "expected a count per CPU ({cpus} CPUs), found {} after {} count(s)",
                    found_instead(rest),
                    counts.len()
                ),
            ));
        }
        if let Some(extra) = rest.split_whitespace().next() {
            return Err(HostError::line(
                FILE,
                line_no,
                format!(
                    "expected {cpus} counts (one per CPU), found an extra column {}",
                    quoted(extra)
                ),
            ));
        }
        let total: &mut u64 = totals.entry(name.to_string()).or_default();
        *total = total.saturating_add(saturating_sum(&counts));
    }
    Ok(totals)
}

/// Reads and parses /proc/softirqs.
pub fn read_softirqs() -> Result<BTreeMap<String, u64>, HostError> {
    parse_softirqs(&read_to_string(FILE)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!("{}/tests/fixtures/proc/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn parses_real_vm_file() {
        let totals = parse_softirqs(&fixture("softirqs_vm_2cpu")).unwrap();
        let names: Vec<&str> = totals.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "BLOCK", "HI", "HRTIMER", "IRQ_POLL", "NET_RX", "NET_TX", "RCU", "SCHED",
                "TASKLET", "TIMER"
            ]
        );
        assert_eq!(totals["NET_RX"], 14846 + 12324);
        assert_eq!(totals["NET_TX"], 11025 + 8548);
        assert_eq!(totals["HI"], 0);
    }

    #[test]
    fn parses_four_cpu_file() {
        let totals = parse_softirqs(&fixture("softirqs_4cpu_before")).unwrap();
        assert_eq!(totals.len(), 10);
        assert_eq!(totals["NET_RX"], 3000);
        assert_eq!(totals["NET_TX"], 100);
        assert_eq!(totals["TIMER"], 20000);
        assert_eq!(totals["BLOCK"], 50);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let cases: [(&str, &str); 6] = [
            ("\n\n", "/proc/softirqs: expected a header of CPU names, found an empty file"),
            (
                "  CPU0 CPU1\n  HI: 0 0\n  NET_RX: 1 abc\n",
                "/proc/softirqs: line 3: expected a count per CPU (2 CPUs), found \"abc\" after 1 count(s)",
            ),
            (
                "  CPU0 CPU1\n  NET_RX: 1\n",
                "/proc/softirqs: line 2: expected a count per CPU (2 CPUs), found end of line after 1 count(s)",
            ),
            (
                "  CPU0 CPU1\n  NET_RX: 1 2 3\n",
                "/proc/softirqs: line 2: expected 2 counts (one per CPU), found an extra column \"3\"",
            ),
            (
                "  CPU0 CPU1\n  NET_RX 1 2\n",
                "/proc/softirqs: line 2: expected a row label ending in ':', found \"NET_RX 1 2\"",
            ),
            (
                "   \n  HI: 0\n",
                "/proc/softirqs: line 2: expected a header of CPU names like \"CPU0\", found \"HI:\"",
            ),
        ];
        for (text, want) in cases {
            let err = parse_softirqs(text).unwrap_err();
            assert_eq!(err.to_string(), want, "input {text:?}");
        }
    }

    #[test]
    fn truncated_real_file_fails_cleanly() {
        let text = fixture("softirqs_vm_2cpu");
        for cut in (0..text.len()).filter(|&i| text.is_char_boundary(i)) {
            let _ = parse_softirqs(&text[..cut]);
        }
    }

    #[test]
    fn reads_this_machine() {
        let totals = read_softirqs().unwrap();
        assert!(totals.contains_key("NET_RX"));
        assert!(totals.contains_key("NET_TX"));
    }
}
