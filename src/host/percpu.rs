//! The table layout shared by /proc/interrupts and /proc/softirqs: a header
//! line naming one column per CPU, then one `LABEL: count count ...` row per
//! interrupt source.

#![warn(missing_docs)]

use super::error::{quoted, HostError};

/// Non-blank lines with their 1-based line numbers, so that error messages
/// point at the line a person would see in an editor.
fn numbered_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line))
        .filter(|(_, line)| !line.trim().is_empty())
}

/// Reads the header of `file`'s `text`: the number of CPU columns (at
/// least one), and the numbered rows after it.
pub(super) fn table<'a>(
    file: &'static str,
    text: &'a str,
) -> Result<(usize, impl Iterator<Item = (usize, &'a str)>), HostError> {
    let mut lines = numbered_lines(text);
    let Some((header_no, header)) = lines.next() else {
        return Err(HostError::file(
            file,
            "expected a header of CPU names, found an empty file",
        ));
    };
    let cpus = cpu_columns(file, header_no, header)?;
    if cpus == 0 {
        return Err(HostError::line(
            file,
            header_no,
            "expected a header of CPU names, found none",
        ));
    }
    Ok((cpus, lines))
}

/// Counts the CPU columns of a header such as `   CPU0  CPU1  CPU3`.
///
/// The names are not required to be contiguous: offline CPUs are left out
/// of the header, and what matters is how many counts each row carries.
fn cpu_columns(file: &'static str, line_no: usize, line: &str) -> Result<usize, HostError> {
    let mut columns = 0;
    for token in line.split_whitespace() {
        if !is_cpu_name(token) {
            return Err(HostError::line(
                file,
                line_no,
                format!(
                    "expected a header of CPU names like \"CPU0\", found {}",
                    quoted(token)
                ),
            ));
        }
        columns += 1;
    }
    Ok(columns)
}

fn is_cpu_name(token: &str) -> bool {
    token
        .strip_prefix("CPU")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Splits a row into its label (without the colon) and the rest of the line.
pub(super) fn split_label<'a>(
    file: &'static str,
    line_no: usize,
    line: &'a str,
) -> Result<(&'a str, &'a str), HostError> {
    let trimmed = line.trim_start();
    match trimmed.split_once(':') {
        Some((label, rest)) if !label.is_empty() && !label.contains(char::is_whitespace) => {
            Ok((label, rest))
        }
        _ => Err(HostError::line(
            file,
            line_no,
            format!(
                "expected a row label ending in ':', found {}",
                quoted(trimmed)
            ),
        )),
    }
}

/// Takes up to `max` leading whitespace-separated unsigned integers from
/// `rest`; returns them and the remainder, which starts at the first token
/// that is not a count.
pub(super) fn leading_counts(rest: &str, max: usize) -> (Vec<u64>, &str) {
    let mut counts = Vec::with_capacity(max);
    let mut rest = rest;
    while counts.len() < max {
        let trimmed = rest.trim_start();
        let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
        match trimmed[..end].parse::<u64>() {
            Ok(count) => {
                counts.push(count);
                rest = &trimmed[end..];
            }
            Err(_) => break,
        }
    }
    (counts, rest)
}

/// Describes what stands where a count was expected, for error messages.
pub(super) fn found_instead(rest: &str) -> String {
    match rest.split_whitespace().next() {
        Some(token) => quoted(token),
        None => "end of line".to_string(),
    }
}

/// Sums counters that may, on a machine with many CPUs and a long uptime,
/// approach u64::MAX; saturating keeps a silly input from panicking in
/// debug builds.
pub(super) fn saturating_sum(counts: &[u64]) -> u64 {
    counts.iter().fold(0u64, |sum, &c| sum.saturating_add(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_counts_cpu_columns() {
        assert_eq!(cpu_columns("f", 1, "   CPU0   CPU1   CPU3  ").unwrap(), 3);
        assert_eq!(cpu_columns("f", 1, "").unwrap(), 0);
        let e = cpu_columns("/proc/softirqs", 1, "CPU0 NET_RX:").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/proc/softirqs: line 1: expected a header of CPU names like \"CPU0\", found \"NET_RX:\""
        );
        assert!(cpu_columns("f", 1, "CPU CPUx").is_err());
    }

    #[test]
    fn labels_and_counts() {
        assert_eq!(split_label("f", 2, "  24:  1 2").unwrap(), ("24", "  1 2"));
        // Only the first colon ends the label; descriptions contain colons.
        assert_eq!(
            split_label("f", 2, " 90: 7 mlx5_comp0@pci:0000:3b:00.0").unwrap(),
            ("90", " 7 mlx5_comp0@pci:0000:3b:00.0")
        );
        assert!(split_label("f", 2, "no colon here").is_err());
        assert!(split_label("f", 2, ": 1 2").is_err());
        assert!(split_label("f", 2, "two words: 1").is_err());

        assert_eq!(leading_counts(" 1  2 3 x", 2), (vec![1, 2], " 3 x"));
        assert_eq!(leading_counts(" 1 abc 3", 3), (vec![1], " abc 3"));
        assert_eq!(leading_counts("", 3), (vec![], ""));
        assert_eq!(leading_counts(" -1", 1), (vec![], " -1"));
        assert_eq!(found_instead("  abc def"), "\"abc\"");
        assert_eq!(found_instead("   "), "end of line");
        assert_eq!(saturating_sum(&[u64::MAX, 5]), u64::MAX);
        assert_eq!(saturating_sum(&[3, 4]), 7);
    }
}
