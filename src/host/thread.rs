//! CPU time and context switches of the calling thread, so a probe can say
//! how much CPU its own send/receive loop used (a saturated stream thread
//! explains a throughput ceiling).

#![warn(missing_docs)]

use std::time::Duration;

/// Resource usage of one thread since it started, or between two readings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadUsage {
    /// CPU time in user mode.
    pub user: Duration,
    /// CPU time in the kernel on the thread's behalf.
    pub system: Duration,
    /// Times the thread gave up the CPU by blocking (e.g. on a socket).
    pub voluntary_switches: u64,
    /// Times the thread was preempted; high values mean CPU contention.
    pub involuntary_switches: u64,
}

impl ThreadUsage {
    /// Usage of the calling thread (getrusage RUSAGE_THREAD). All zeros if
    /// the kernel refuses, which only happens before Linux 2.6.26.
    pub fn current() -> ThreadUsage {
        // SAFETY: rusage is plain integers, for which all-zero is valid.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is a valid, writable rusage for the call.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
            return ThreadUsage::default();
        }
        ThreadUsage {
            user: duration(usage.ru_utime),
            system: duration(usage.ru_stime),
            voluntary_switches: u64::try_from(usage.ru_nvcsw).unwrap_or(0),
            involuntary_switches: u64::try_from(usage.ru_nivcsw).unwrap_or(0),
        }
    }

    /// Usage between `earlier` and `self`, 0 where a reading went backwards
    /// (readings from different threads passed by mistake).
    pub fn since(&self, earlier: &ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
        }
    }

    /// User plus system time.
    pub fn cpu(&self) -> Duration {
        self.user.saturating_add(self.system)
    }
}

fn duration(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u32::try_from(tv.tv_usec).unwrap_or(0).min(999_999);
    Duration::new(secs, micros * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn burn(for_how_long: Duration) -> u64 {
        let start = Instant::now();
        let mut x = 1u64;
        while start.elapsed() < for_how_long {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        x
    }

    #[test]
    fn grows_after_burning_cpu() {
        let before = ThreadUsage::current();
        burn(Duration::from_millis(50));
        let used = ThreadUsage::current().since(&before);
        assert!(used.cpu() > Duration::ZERO, "{used:?}");
        // The loop ran ~50 ms of wall time; the thread cannot have used
        // more CPU than that plus scheduling slack.
        assert!(used.cpu() < Duration::from_secs(5), "{used:?}");
    }

    #[test]
    fn is_per_thread() {
        // CPU burnt by another thread must not show up in ours.
        let before = ThreadUsage::current();
        let other = std::thread::spawn(|| {
            // Burn until this thread has used 50 ms of CPU, however loaded
            // the machine (a wall-clock burn may get little of a busy CPU),
            // within a bound.
            let start = ThreadUsage::current();
            let deadline = Instant::now() + Duration::from_secs(10);
            while ThreadUsage::current().since(&start).cpu() < Duration::from_millis(50)
                && Instant::now() < deadline
            {
                burn(Duration::from_millis(5));
            }
            ThreadUsage::current().since(&start)
        });
        let theirs = other.join().unwrap();
        let ours = ThreadUsage::current().since(&before);
        assert!(theirs.cpu() >= Duration::from_millis(20), "{theirs:?}");
        assert!(ours.cpu() < theirs.cpu(), "ours {ours:?} theirs {theirs:?}");
        // Waiting in join() blocked us at least once.
        assert!(ours.voluntary_switches >= 1, "{ours:?}");
    }

    #[test]
    fn since_saturates() {
        let a = ThreadUsage {
            user: Duration::from_millis(30),
            system: Duration::from_millis(5),
            voluntary_switches: 4,
            involuntary_switches: 1,
        };
        let b = ThreadUsage {
            user: Duration::from_millis(50),
            system: Duration::from_millis(2),
            voluntary_switches: 10,
            involuntary_switches: 1,
        };
        assert_eq!(
            b.since(&a),
            ThreadUsage {
                user: Duration::from_millis(20),
                system: Duration::ZERO,
                voluntary_switches: 6,
                involuntary_switches: 0,
            }
        );
        assert_eq!(a.since(&b).cpu(), Duration::from_millis(3));
    }

    #[test]
    fn timeval_conversion() {
        let tv = libc::timeval {
            tv_sec: 2,
            tv_usec: 500_000,
        };
        assert_eq!(duration(tv), Duration::from_millis(2500));
        let bad = libc::timeval {
            tv_sec: -1,
            tv_usec: -5,
        };
        assert_eq!(duration(bad), Duration::ZERO);
    }
}
