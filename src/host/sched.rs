//! The scheduler's view of the calling thread: how long it ran, how long it
//! waited runnable for a CPU (/proc/thread-self/schedstat), and which CPU it
//! is on (sched_getcpu). Waiting includes time held back by a cgroup CPU
//! quota, so a thread starved of CPU shows as wanting it, not as idle.

#![warn(missing_docs)]

use std::time::Duration;

use super::error::{quoted, HostError};

const FILE: &str = "/proc/thread-self/schedstat";

/// Run and wait time of one thread since it started, or between readings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedStat {
    /// Time on a CPU.
    pub run: Duration,
    /// Time runnable on a run queue without a CPU.
    pub wait: Duration,
}

impl SchedStat {
    /// Reading of the calling thread; `None` on a kernel without
    /// CONFIG_SCHED_INFO (the file is absent) or when it cannot be parsed.
    pub fn current() -> Option<SchedStat> {
        let text = std::fs::read_to_string(FILE).ok()?;
        parse_schedstat(&text).ok()
    }

    /// From `earlier` to `self`, 0 where a counter went backwards.
    pub fn since(&self, earlier: &SchedStat) -> SchedStat {
        SchedStat {
            run: self.run.saturating_sub(earlier.run),
            wait: self.wait.saturating_sub(earlier.wait),
        }
    }
}

/// Parses `RUN_NS WAIT_NS TIMESLICES`.
pub fn parse_schedstat(text: &str) -> Result<SchedStat, HostError> {
    let mut fields = text.split_whitespace();
    let mut next = |what: &str| -> Result<u64, HostError> {
        let token = fields
            .next()
            .ok_or_else(|| HostError::line(FILE, 1, format!("expected {what}, found the end")))?;
        token.parse().map_err(|_| {
            HostError::line(FILE, 1, format!("expected {what}, found {}", quoted(token)))
        })
    };
    let run = next("the run time in ns")?;
    let wait = next("the wait time in ns")?;
    Ok(SchedStat {
        run: Duration::from_nanos(run),
        wait: Duration::from_nanos(wait),
    })
}

/// The CPU the calling thread runs on now (a vDSO call, cheap enough to
/// sample from a data loop).
pub fn current_cpu() -> Option<u32> {
    // SAFETY: no arguments; returns -1 on failure.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let s = parse_schedstat("1073527 250 1\n").unwrap();
        assert_eq!(s.run, Duration::from_nanos(1_073_527));
        assert_eq!(s.wait, Duration::from_nanos(250));
        assert!(parse_schedstat("").is_err());
        assert!(parse_schedstat("12 x 1").is_err());
        let later = SchedStat {
            run: Duration::from_millis(5),
            wait: Duration::ZERO,
        };
        assert_eq!(later.since(&s).wait, Duration::ZERO);
    }

    #[test]
    fn reads_this_thread() {
        let before = SchedStat::current().expect("schedstat on this kernel");
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let used = SchedStat::current().unwrap().since(&before);
        assert!(used.run > Duration::ZERO, "{used:?}");
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        assert!(current_cpu().is_some_and(|c| c < n.max(1024)));
    }
}
