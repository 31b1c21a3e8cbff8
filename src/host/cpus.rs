//! Per-CPU lines of /proc/stat (`cpu0 ...`, `cpu1 ...`): how much of each
//! CPU went to hard and soft interrupts, to tell whether a data thread
//! shared its CPU with the network stack's interrupt work.

#![warn(missing_docs)]

use super::error::{quoted, read_to_string, HostError};
use super::stat::CpuTicks;

const FILE: &str = "/proc/stat";

/// Ticks of each online CPU, by CPU number (offline CPUs have no line).
pub fn parse_per_cpu_stat(text: &str) -> Result<Vec<(u32, CpuTicks)>, HostError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut fields = line.split_whitespace();
        let Some(label) = fields.next() else { continue };
        let Some(n) = label.strip_prefix("cpu") else {
            continue;
        };
        if n.is_empty() {
            continue; // the aggregate line
        }
        let cpu: u32 = n.parse().map_err(|_| {
            HostError::line(
                FILE,
                i + 1,
                format!("expected cpuN, found {}", quoted(label)),
            )
        })?;
        let mut counts = Vec::with_capacity(10);
        for token in fields {
            counts.push(token.parse::<u64>().map_err(|_| {
                HostError::line(
                    FILE,
                    i + 1,
                    format!("expected counts, found {}", quoted(token)),
                )
            })?);
        }
        if counts.len() < 4 {
            return Err(HostError::line(
                FILE,
                i + 1,
                format!(
                    "expected at least 4 counts after {label}, found {}",
                    counts.len()
                ),
            ));
        }
        let at = |k: usize| counts.get(k).copied().unwrap_or(0);
        out.push((
            cpu,
            CpuTicks {
                user: at(0),
                nice: at(1),
                system: at(2),
                idle: at(3),
                iowait: at(4),
                irq: at(5),
                softirq: at(6),
                steal: at(7),
                guest: at(8),
                guest_nice: at(9),
            },
        ));
    }
    Ok(out)
}

/// The CPUs this process may run on (its affinity mask, which a cgroup's
/// cpuset or `taskset` narrows), or `None` when the kernel does not say.
pub fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain bits, valid when zeroed; the kernel writes
    // at most its size, which is passed.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        set
    };
    let max = libc::CPU_SETSIZE as usize;
    // SAFETY: every index is below CPU_SETSIZE.
    Some(
        (0..max)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect(),
    )
}

/// `0-3,6` for a sorted list of CPU numbers, as the kernel writes lists.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

/// Reads and parses the per-CPU lines of /proc/stat.
pub fn read_per_cpu_stat() -> Result<Vec<(u32, CpuTicks)>, HostError> {
    parse_per_cpu_stat(&read_to_string(FILE)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 6]), "0-3,6");
        assert_eq!(format_cpu_list(&[1]), "1");
        assert_eq!(format_cpu_list(&[]), "");
        let here = allowed_cpus().unwrap();
        assert!(!here.is_empty());
    }

    #[test]
    fn parses_cpu_lines_skipping_the_aggregate() {
        let text =
            "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 1 9 0 0 0\ncpu3 5 0 5 40\nintr 5 0\n";
        let cpus = parse_per_cpu_stat(text).unwrap();
        assert_eq!(cpus.len(), 2);
        assert_eq!(cpus[0].0, 0);
        assert_eq!(cpus[0].1.softirq, 9);
        assert_eq!(cpus[0].1.irq, 1);
        // An old kernel's short line: the late modes read as 0.
        assert_eq!(
            cpus[1],
            (
                3,
                CpuTicks {
                    user: 5,
                    system: 5,
                    idle: 40,
                    ..CpuTicks::default()
                }
            )
        );
        assert!(parse_per_cpu_stat("cpux 1 2 3 4\n").is_err());
        assert!(parse_per_cpu_stat("cpu0 1 2\n").is_err());
        assert!(parse_per_cpu_stat("cpu0 1 2 z 4\n").is_err());
    }

    #[test]
    fn reads_this_machine() {
        assert!(!read_per_cpu_stat().unwrap().is_empty());
    }
}
