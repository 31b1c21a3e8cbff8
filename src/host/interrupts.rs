//! /proc/interrupts: hardware interrupt counts per IRQ line and per CPU.
//!
//! procfs has no parser for this file, so this is our own. Rows come in two
//! shapes: one count per CPU followed by a free-text description (numbered
//! IRQs and per-CPU architecture rows such as `LOC:` or `IPI0:`), and
//! system-wide error counters with a single count and no description
//! (`ERR:`, `MIS:` on x86, `Err:` on arm).

#![warn(missing_docs)]

use super::error::{read_to_string, HostError};
use super::percpu::{found_instead, leading_counts, saturating_sum, split_label, table};

const FILE: &str = "/proc/interrupts";

/// Rows that are single system-wide counters even when the machine has one
/// CPU, where their shape alone would look like a per-CPU row.
const SINGLE_COUNT_ROWS: [&str; 3] = ["ERR", "MIS", "Err"];

/// One row of /proc/interrupts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IrqRow {
    /// The label before the colon: an IRQ number such as `"24"`, or an
    /// architecture row such as `"LOC"`.
    pub id: String,
    /// Sum over all CPUs (or the single count of an `ERR:`-style row).
    pub total: u64,
    /// One count per CPU column of the header; empty for single-count rows.
    pub per_cpu: Vec<u64>,
    /// Chip, hardware IRQ, trigger and action names, with runs of spaces
    /// collapsed to one, e.g. `"PCI-MSI 524288-edge eth0-TxRx-0"`.
    pub description: String,
}

impl IrqRow {
    /// Whether the row counts interrupts delivered to CPUs (as opposed to a
    /// system-wide error counter such as `ERR:`).
    pub fn is_per_cpu(&self) -> bool {
        !self.per_cpu.is_empty()
    }
}

/// Parses the text of /proc/interrupts.
pub fn parse_interrupts(text: &str) -> Result<Vec<IrqRow>, HostError> {
    let (cpus, lines) = table(FILE, text)?;

    let mut rows = Vec::new();
    for (line_no, line) in lines {
        let (id, rest) = split_label(FILE, line_no, line)?;
        let (counts, rest) = leading_counts(rest, cpus);
        let description = rest.split_whitespace().collect::<Vec<_>>().join(" ");
        // Numbered IRQs always carry per-CPU counts, so a lone count after
        // a number is a truncated row, not an error counter.
        let single_count = counts.len() == 1
            && description.is_empty()
            && if cpus > 1 {
                !id.bytes().all(|b| b.is_ascii_digit())
            } else {
                SINGLE_COUNT_ROWS.contains(&id)
            };
        if single_count {
            rows.push(IrqRow {
                id: id.to_string(),
                total: counts[0],
                per_cpu: Vec::new(),
                description,
            });
        } else if counts.len() == cpus {
            rows.push(IrqRow {
                id: id.to_string(),
                total: saturating_sum(&counts),
                per_cpu: counts,
                description,
            });
        } else {
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
    }
    Ok(rows)
}

/// Total interrupts delivered to CPUs: the sum over every row with per-CPU
/// counts, numbered IRQs and architecture rows (timer, IPIs, ...) alike.
///
/// The single-count `ERR:`/`MIS:` rows are left out: they count failures,
/// not interrupts handled. This is the figure the `intr` line of /proc/stat
/// reports on x86, but taken from the file whose rows we keep anyway.
pub fn total_interrupts(rows: &[IrqRow]) -> u64 {
    rows.iter()
        .filter(|row| row.is_per_cpu())
        .fold(0u64, |sum, row| sum.saturating_add(row.total))
}

/// Reads and parses /proc/interrupts.
pub fn read_interrupts() -> Result<Vec<IrqRow>, HostError> {
    parse_interrupts(&read_to_string(FILE)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!("{}/tests/fixtures/proc/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn row<'a>(rows: &'a [IrqRow], id: &str) -> &'a IrqRow {
        rows.iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("no row {id}"))
    }

    #[test]
    fn parses_real_vm_file() {
        let rows = parse_interrupts(&fixture("interrupts_vm_2cpu")).unwrap();
        assert_eq!(rows.len(), 35);
        assert_eq!(
            row(&rows, "24"),
            &IrqRow {
                id: "24".into(),
                total: 1,
                per_cpu: vec![1, 0],
                description: "IO-APIC 5-edge ACPI:Ged".into(),
            }
        );
        let rx = row(&rows, "38");
        assert_eq!(rx.per_cpu, vec![0, 2003]);
        assert_eq!(
            rx.description,
            "PCI-MSIX-0000:00:03.0 1-edge virtio2-input.0"
        );
        let loc = row(&rows, "LOC");
        assert_eq!(loc.per_cpu, vec![64150, 78951]);
        assert_eq!(loc.total, 143101);
        assert_eq!(loc.description, "Local timer interrupts");
        let err = row(&rows, "ERR");
        assert!(!err.is_per_cpu());
        assert_eq!(err.total, 0);
        assert_eq!(err.description, "");
        assert!(!row(&rows, "MIS").is_per_cpu());
    }

    #[test]
    fn parses_server_file_with_nic_queues() {
        let rows = parse_interrupts(&fixture("interrupts_4cpu_before")).unwrap();
        assert_eq!(rows.len(), 15);
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "0", "8", "24", "25", "26", "27", "28", "30", "90", "91", "92", "NMI", "LOC",
                "ERR", "MIS"
            ]
        );
        let q1 = row(&rows, "25");
        assert_eq!(q1.per_cpu, vec![0, 3000, 400, 0]);
        assert_eq!(q1.total, 3400);
        assert_eq!(q1.description, "PCI-MSI 524289-edge eth0-TxRx-1");
        assert_eq!(
            row(&rows, "90").description,
            "IR-PCI-MSIX-0000:3b:00.0 1-edge mlx5_comp0@pci:0000:3b:00.0"
        );
        assert_eq!(
            row(&rows, "27").description,
            "PCI-MSIX-0000:00:05.0 1-edge virtio0-input.0"
        );
        assert_eq!(row(&rows, "27").total, 100);
        let err = row(&rows, "ERR");
        assert_eq!((err.total, err.per_cpu.len()), (7, 0));
        // 35+1+1200+3400+5+100+4+9+700+800+2 numbered, NMI 12, LOC 40000;
        // ERR's 7 is excluded.
        assert_eq!(total_interrupts(&rows), 46268);
    }

    #[test]
    fn parses_arm64_layout() {
        let rows = parse_interrupts(&fixture("interrupts_arm64_2cpu")).unwrap();
        assert_eq!(rows.len(), 6);
        assert_eq!(row(&rows, "11").description, "GICv3 27 Level arch_timer");
        assert_eq!(row(&rows, "11").total, 35801);
        assert_eq!(row(&rows, "IPI0").per_cpu, vec![100, 200]);
        assert!(!row(&rows, "Err").is_per_cpu());
        assert_eq!(total_interrupts(&rows), 35801 + 890 + 300 + 70);
    }

    #[test]
    fn single_cpu_error_rows_stay_error_rows() {
        let text =
            "   CPU0\n  0:  5  IO-APIC 2-edge timer\nLOC: 9 Local timer interrupts\nERR: 3\n";
        let rows = parse_interrupts(text).unwrap();
        assert_eq!(rows[0].per_cpu, vec![5]);
        assert!(rows[1].is_per_cpu());
        assert!(!rows[2].is_per_cpu());
        assert_eq!(total_interrupts(&rows), 14);
    }

    #[test]
    fn extra_numeric_columns_become_description() {
        // A kernel printing more numbers than CPUs must not shift counts;
        // the surplus is kept as text rather than guessed at.
        let text = "  CPU0 CPU1\n 24: 1 2 3 IO-APIC\n";
        let rows = parse_interrupts(text).unwrap();
        assert_eq!(rows[0].per_cpu, vec![1, 2]);
        assert_eq!(rows[0].description, "3 IO-APIC");
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let cases: [(&str, &str); 8] = [
            (
                " CPU0 CPU1\n 24: 1\n",
                "/proc/interrupts: line 2: expected a count per CPU (2 CPUs), found end of line after 1 count(s)",
            ),
            ("", "/proc/interrupts: expected a header of CPU names, found an empty file"),
            (
                " 24: 1 2\n",
                "/proc/interrupts: line 1: expected a header of CPU names like \"CPU0\", found \"24:\"",
            ),
            (
                " CPU0 CPU1 CPU2\n 24: 1 2\n",
                "/proc/interrupts: line 2: expected a count per CPU (3 CPUs), found end of line after 2 count(s)",
            ),
            (
                " CPU0 CPU1\n 24: 1 abc IO-APIC\n",
                "/proc/interrupts: line 2: expected a count per CPU (2 CPUs), found \"abc\" after 1 count(s)",
            ),
            (
                " CPU0 CPU1\n\n 24:\n",
                "/proc/interrupts: line 3: expected a count per CPU (2 CPUs), found end of line after 0 count(s)",
            ),
            (
                " CPU0 CPU1\n 24 1 2\n",
                "/proc/interrupts: line 2: expected a row label ending in ':', found \"24 1 2\"",
            ),
            (
                " CPU0 CPU1\n 24: -1 2 x\n",
                "/proc/interrupts: line 2: expected a count per CPU (2 CPUs), found \"-1\" after 0 count(s)",
            ),
        ];
        for (text, want) in cases {
            let err = parse_interrupts(text).unwrap_err();
            assert_eq!(err.to_string(), want, "input {text:?}");
        }
        // Counts too large for u64 are not numbers we can use.
        assert!(parse_interrupts(" CPU0\n 1: 99999999999999999999999 x\n").is_err());
    }

    #[test]
    fn truncated_real_file_fails_cleanly() {
        let text = fixture("interrupts_vm_2cpu");
        // Cut inside every line in turn: the result may parse (the cut fell
        // inside a description) or fail, but must never panic.
        for cut in (0..text.len()).filter(|&i| text.is_char_boundary(i)) {
            let _ = parse_interrupts(&text[..cut]);
        }
    }

    #[test]
    fn reads_this_machine() {
        let rows = read_interrupts().unwrap();
        assert!(rows.iter().any(|r| r.is_per_cpu()));
        assert!(total_interrupts(&rows) > 0);
    }
}
