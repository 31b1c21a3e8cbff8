//! /proc/stat: CPU time by mode, aggregated over all CPUs.
//!
//! Parsing is procfs' `KernelStats`; this file narrows its result to the
//! aggregate `cpu` line in ticks, and converts ticks to seconds for the
//! exporter.

#![warn(missing_docs)]

use std::collections::BTreeMap;

use procfs::{ExplicitSystemInfo, FromBufReadSI, KernelStats};

use super::error::{quoted, read_to_string, HostError};

const FILE: &str = "/proc/stat";

/// Ticks (USER_HZ units) spent in each mode, summed over all CPUs.
///
/// Modes the running kernel does not report are 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// Normal processes in user mode.
    pub user: u64,
    /// Niced processes in user mode.
    pub nice: u64,
    /// Kernel mode, interrupts excluded.
    pub system: u64,
    /// Nothing to run.
    pub idle: u64,
    /// Idle while I/O was outstanding.
    pub iowait: u64,
    /// Hardware interrupt handlers.
    pub irq: u64,
    /// Softirqs (network receive and transmit among them).
    pub softirq: u64,
    /// Taken by the hypervisor for other guests.
    pub steal: u64,
    /// Already included in `user`; kept only to report it separately.
    pub guest: u64,
    /// Already included in `nice`; kept only to report it separately.
    pub guest_nice: u64,
}

impl CpuTicks {
    /// All time, busy or not. Guest time is left out because the kernel
    /// already counts it in user and nice.
    pub fn total(&self) -> u64 {
        [
            self.user,
            self.nice,
            self.system,
            self.idle,
            self.iowait,
            self.irq,
            self.softirq,
            self.steal,
        ]
        .iter()
        .fold(0u64, |sum, &t| sum.saturating_add(t))
    }

    /// Time not spent idle or waiting for I/O. Steal counts as busy: the
    /// CPU was unavailable to us, which limits throughput like real work.
    pub fn busy(&self) -> u64 {
        self.total()
            .saturating_sub(self.idle)
            .saturating_sub(self.iowait)
    }

    /// Per-mode difference, 0 where a counter went backwards (iowait is
    /// documented to do so).
    pub fn saturating_sub(&self, earlier: &CpuTicks) -> CpuTicks {
        CpuTicks {
            user: self.user.saturating_sub(earlier.user),
            nice: self.nice.saturating_sub(earlier.nice),
            system: self.system.saturating_sub(earlier.system),
            idle: self.idle.saturating_sub(earlier.idle),
            iowait: self.iowait.saturating_sub(earlier.iowait),
            irq: self.irq.saturating_sub(earlier.irq),
            softirq: self.softirq.saturating_sub(earlier.softirq),
            steal: self.steal.saturating_sub(earlier.steal),
            guest: self.guest.saturating_sub(earlier.guest),
            guest_nice: self.guest_nice.saturating_sub(earlier.guest_nice),
        }
    }

    /// Seconds by mode, keyed by the mode names node_exporter uses
    /// (`user`, `nice`, `system`, `idle`, `iowait`, `irq`, `softirq`,
    /// `steal`). Guest modes are omitted so that summing the map gives the
    /// total CPU time without double counting.
    pub fn seconds_by_mode(&self, ticks_per_second: u64) -> BTreeMap<String, f64> {
        // A zero rate can only come from a broken libc; report zeros
        // rather than dividing by it.
        let seconds = |ticks: u64| {
            if ticks_per_second == 0 {
                0.0
            } else {
                ticks as f64 / ticks_per_second as f64
            }
        };
        [
            ("user", self.user),
            ("nice", self.nice),
            ("system", self.system),
            ("idle", self.idle),
            ("iowait", self.iowait),
            ("irq", self.irq),
            ("softirq", self.softirq),
            ("steal", self.steal),
        ]
        .into_iter()
        .map(|(mode, ticks)| (mode.to_string(), seconds(ticks)))
        .collect()
    }
}

/// Parses the text of /proc/stat into the aggregate CPU ticks.
pub fn parse_stat(text: &str) -> Result<CpuTicks, HostError> {
    // Only the raw tick counts are used, so the tick rate and other system
    // facts given to procfs do not affect the result.
    let info = ExplicitSystemInfo {
        boot_time_secs: 0,
        ticks_per_second: 100,
        page_size: 4096,
        is_little_endian: cfg!(target_endian = "little"),
    };
    let stats =
        KernelStats::from_buf_read(text.as_bytes(), &info).map_err(|e| diagnose(text, e))?;
    let t = stats.total;
    Ok(CpuTicks {
        user: t.user,
        nice: t.nice,
        system: t.system,
        idle: t.idle,
        iowait: t.iowait.unwrap_or(0),
        irq: t.irq.unwrap_or(0),
        softirq: t.softirq.unwrap_or(0),
        steal: t.steal.unwrap_or(0),
        guest: t.guest.unwrap_or(0),
        guest_nice: t.guest_nice.unwrap_or(0),
    })
}

/// Explains why procfs rejected the text: its own errors point at procfs'
/// source lines rather than at the input, so re-check the lines it requires
/// (every `cpu` line, `ctxt`, `btime`, `processes`) and name the bad one.
fn diagnose(text: &str, procfs_error: procfs::ProcError) -> HostError {
    let mut seen = [
        ("cpu", false),
        ("ctxt", false),
        ("btime", false),
        ("processes", false),
    ];
    for (i, line) in text.lines().enumerate() {
        let mut fields = line.split_whitespace();
        let Some(label) = fields.next() else { continue };
        let counts: Vec<&str> = fields.collect();
        // procfs reads every `cpuN` line too, so they must be sound even
        // though only the aggregate one is required.
        let wanted = if label.starts_with("cpu") {
            4
        } else if seen.iter().any(|(key, _)| *key == label) {
            1
        } else {
            continue;
        };
        if let Some(bad) = counts.iter().find(|c| c.parse::<u64>().is_err()) {
            return HostError::line(
                FILE,
                i + 1,
                format!("expected counts after {label:?}, found {}", quoted(bad)),
            );
        }
        if counts.len() < wanted {
            return HostError::line(
                FILE,
                i + 1,
                format!(
                    "expected at least {wanted} count(s) after {label:?}, found {}",
                    counts.len()
                ),
            );
        }
        if let Some(entry) = seen.iter_mut().find(|(key, _)| *key == label) {
            entry.1 = true;
        }
    }
    if let Some((missing, _)) = seen.iter().find(|(_, found)| !found) {
        return HostError::file(FILE, format!("expected a {missing:?} line, found none"));
    }
    HostError::file(FILE, format!("not understood: {procfs_error}"))
}

/// Reads and parses /proc/stat.
pub fn read_stat() -> Result<CpuTicks, HostError> {
    parse_stat(&read_to_string(FILE)?)
}

/// CPU seconds by mode since boot, summed over all CPUs; see
/// [`CpuTicks::seconds_by_mode`] for the keys.
pub fn read_cpu_seconds() -> Result<BTreeMap<String, f64>, HostError> {
    Ok(read_stat()?.seconds_by_mode(procfs::ticks_per_second()))
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
        let ticks = parse_stat(&fixture("stat_vm_2cpu")).unwrap();
        assert_eq!(
            ticks,
            CpuTicks {
                user: 16308,
                nice: 0,
                system: 4015,
                idle: 759853,
                iowait: 571,
                irq: 0,
                softirq: 49,
                steal: 134,
                guest: 0,
                guest_nice: 0,
            }
        );
        assert_eq!(ticks.total(), 16308 + 4015 + 759853 + 571 + 49 + 134);
        assert_eq!(ticks.busy(), 16308 + 4015 + 49 + 134);
    }

    #[test]
    fn guest_time_is_not_counted_twice() {
        let ticks = parse_stat(&fixture("stat_4cpu_before")).unwrap();
        assert_eq!(ticks.guest, 30);
        assert_eq!(ticks.total(), 1000 + 100 + 400 + 8000 + 200 + 10 + 40 + 5);
        let seconds = ticks.seconds_by_mode(100);
        assert_eq!(seconds.len(), 8);
        assert!(!seconds.contains_key("guest"));
        assert_eq!(seconds["user"], 10.0);
        assert_eq!(seconds["idle"], 80.0);
        assert_eq!(seconds["steal"], 0.05);
        assert!(ticks.seconds_by_mode(0).values().all(|&s| s == 0.0));
    }

    #[test]
    fn old_kernels_without_late_columns() {
        // Kernels before 2.6.11 stop after softirq; missing modes are 0.
        let text =
            "cpu  10 20 30 40 50 60 70\ncpu0 10 20 30 40 50 60 70\nctxt 1\nbtime 2\nprocesses 3\n";
        let ticks = parse_stat(text).unwrap();
        assert_eq!((ticks.user, ticks.softirq, ticks.steal), (10, 70, 0));
    }

    #[test]
    fn saturating_difference() {
        let before = parse_stat(&fixture("stat_4cpu_before")).unwrap();
        let after = parse_stat(&fixture("stat_4cpu_after")).unwrap();
        let d = after.saturating_sub(&before);
        assert_eq!((d.user, d.nice, d.system, d.idle), (700, 100, 300, 350));
        assert_eq!((d.iowait, d.irq, d.softirq, d.steal), (50, 20, 80, 0));
        assert_eq!(d.guest, 100);
        assert_eq!(before.saturating_sub(&after), CpuTicks::default());
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let tail = "ctxt 1\nbtime 2\nprocesses 3\n";
        let cases = [
            (
                "".to_string(),
                "/proc/stat: expected a \"cpu\" line, found none",
            ),
            (
                format!("cpu  1 2 x 4\n{tail}"),
                "/proc/stat: line 1: expected counts after \"cpu\", found \"x\"",
            ),
            (
                format!("cpu  1 2\n{tail}"),
                "/proc/stat: line 1: expected at least 4 count(s) after \"cpu\", found 2",
            ),
            (
                format!("cpu  1 2 3 4\ncpu0 1 2 3\n{tail}"),
                "/proc/stat: line 2: expected at least 4 count(s) after \"cpu0\", found 3",
            ),
            (
                format!("cpu0 1 2 3 4\n{tail}"),
                "/proc/stat: expected a \"cpu\" line, found none",
            ),
            (
                "cpu  1 2 3 4\nctxt 1\nprocesses 3\n".to_string(),
                "/proc/stat: expected a \"btime\" line, found none",
            ),
            (
                "cpu  1 2 3 4\nctxt -1\nbtime 2\nprocesses 3\n".to_string(),
                "/proc/stat: line 2: expected counts after \"ctxt\", found \"-1\"",
            ),
        ];
        for (text, want) in cases {
            let err = parse_stat(&text).unwrap_err();
            assert_eq!(err.to_string(), want, "input {text:?}");
        }
        let text = fixture("stat_vm_2cpu");
        for cut in (0..text.len()).filter(|&i| text.is_char_boundary(i)) {
            let _ = parse_stat(&text[..cut]);
        }
    }

    #[test]
    fn reads_this_machine() {
        let seconds = read_cpu_seconds().unwrap();
        assert!(seconds["idle"] > 0.0 || seconds["user"] > 0.0);
    }
}
