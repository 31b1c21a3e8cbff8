//! The CPU quota this process runs under, and how often the kernel
//! throttled it: `cpu.stat` of the process's `cpu` cgroup (v1) or of its
//! unified cgroup (v2). A container's CPU limit holds every thread of the
//! group to a share of a CPU; a throttled thread waits outside the run
//! queue's reckoning, so its own run and wait times can read as if it was
//! not CPU-bound when the quota was what held it.

use std::path::{Path, PathBuf};

/// Counters of `cpu.stat` (v1 and v2 name them differently).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuStat {
    /// Enforcement periods that have elapsed with runnable tasks in the group.
    pub periods: u64,
    /// Of those, the periods in which the group used its quota up.
    pub throttled_periods: u64,
    /// Time the group's tasks spent throttled, in seconds.
    pub throttled_seconds: f64,
}

impl CpuStat {
    /// The counters from `earlier` to `self`; any that went backwards (the
    /// group was recreated) count as 0.
    pub fn since(&self, earlier: &CpuStat) -> CpuStat {
        CpuStat {
            periods: self.periods.saturating_sub(earlier.periods),
            throttled_periods: self
                .throttled_periods
                .saturating_sub(earlier.throttled_periods),
            throttled_seconds: (self.throttled_seconds - earlier.throttled_seconds).max(0.0),
        }
    }
}

/// Parses `cpu.stat`: `nr_periods`, `nr_throttled`, and `throttled_time`
/// (v1, nanoseconds) or `throttled_usec` (v2). Other keys are ignored;
/// `None` when neither period count is there (a v2 group without the
/// `cpu` controller has only usage figures).
pub fn parse_cpu_stat(text: &str) -> Option<CpuStat> {
    let mut stat = CpuStat::default();
    let (mut periods, mut throttled) = (false, false);
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(key), Some(value), None) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        match key {
            "nr_periods" => {
                stat.periods = value;
                periods = true;
            }
            "nr_throttled" => {
                stat.throttled_periods = value;
                throttled = true;
            }
            "throttled_time" => stat.throttled_seconds = value as f64 / 1e9,
            "throttled_usec" => stat.throttled_seconds = value as f64 / 1e6,
            _ => {}
        }
    }
    (periods && throttled).then_some(stat)
}

/// The group's quota in CPUs: v1 `cpu.cfs_quota_us` over
/// `cpu.cfs_period_us` (quota -1: none), or v2 `cpu.max` ("max 100000":
/// none). `None` for no quota or text not understood.
pub fn parse_quota(
    v1_quota: Option<&str>,
    v1_period: Option<&str>,
    v2_max: Option<&str>,
) -> Option<f64> {
    let (quota, period) = match (v1_quota, v1_period, v2_max) {
        (Some(q), Some(p), _) => (q.trim().parse::<i64>().ok()?, p.trim().parse::<i64>().ok()?),
        (_, _, Some(max)) => {
            let mut words = max.split_whitespace();
            let q = words.next()?;
            if q == "max" {
                return None;
            }
            (q.parse().ok()?, words.next()?.parse().ok()?)
        }
        _ => return None,
    };
    (quota > 0 && period > 0).then(|| quota as f64 / period as f64)
}

/// The directory of this process's CPU cgroup, from the text of
/// `/proc/self/cgroup`: the v1 hierarchy holding the `cpu` controller
/// (mounted at `/sys/fs/cgroup/cpu` or `cpu,cpuacct`), else the unified
/// hierarchy (`0::/path`, at `/sys/fs/cgroup`).
pub fn cpu_cgroup_dir(proc_self_cgroup: &str, root: &Path) -> Option<PathBuf> {
    let mut unified = None;
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        // A path that climbs out of the hierarchy is not one we read.
        if path.split('/').any(|p| p == "..") {
            return None;
        }
        if controllers.split(',').any(|c| c == "cpu") {
            for mount in [controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"] {
                let dir = root.join(mount);
                if dir.is_dir() {
                    return Some(dir.join(path));
                }
            }
        } else if controllers.is_empty() {
            unified = Some(root.join(path));
        }
    }
    unified
}

/// This process's CPU cgroup now: its counters and quota, or `None` when
/// there is no readable CPU cgroup (not Linux, or hidden in a container).
pub fn read_cpu_cgroup() -> Option<(CpuStat, Option<f64>)> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let dir = cpu_cgroup_dir(&text, Path::new("/sys/fs/cgroup"))?;
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let stat = parse_cpu_stat(&read("cpu.stat")?)?;
    let quota = parse_quota(
        read("cpu.cfs_quota_us").as_deref(),
        read("cpu.cfs_period_us").as_deref(),
        read("cpu.max").as_deref(),
    );
    Some((stat, quota))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_cpu_stat() {
        let v1 = "nr_periods 120\nnr_throttled 117\nthrottled_time 9750000000\nnr_bursts 0\nburst_time 0\n";
        assert_eq!(
            parse_cpu_stat(v1),
            Some(CpuStat {
                periods: 120,
                throttled_periods: 117,
                throttled_seconds: 9.75
            })
        );
        let v2 = "usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\nnr_periods 10\nnr_throttled 4\nthrottled_usec 250000\n";
        assert_eq!(
            parse_cpu_stat(v2),
            Some(CpuStat {
                periods: 10,
                throttled_periods: 4,
                throttled_seconds: 0.25
            })
        );
        // v2 without the cpu controller: usage only.
        assert_eq!(parse_cpu_stat("usage_usec 5\nuser_usec 3\n"), None);
        assert_eq!(parse_cpu_stat("nr_periods x\nnr_throttled\n"), None);
    }

    #[test]
    fn counters_that_went_backwards_count_zero() {
        let a = CpuStat {
            periods: 10,
            throttled_periods: 5,
            throttled_seconds: 1.0,
        };
        let b = CpuStat {
            periods: 3,
            throttled_periods: 1,
            throttled_seconds: 0.5,
        };
        assert_eq!(b.since(&a), CpuStat::default());
        assert_eq!(a.since(&b).periods, 7);
    }

    #[test]
    fn quotas() {
        assert_eq!(
            parse_quota(Some("15000\n"), Some("100000\n"), None),
            Some(0.15)
        );
        assert_eq!(parse_quota(Some("-1"), Some("100000"), None), None);
        assert_eq!(parse_quota(None, None, Some("max 100000\n")), None);
        assert_eq!(parse_quota(None, None, Some("50000 100000\n")), Some(0.5));
        assert_eq!(parse_quota(None, None, Some("junk")), None);
        assert_eq!(parse_quota(None, None, None), None);
    }

    #[test]
    fn the_cpu_hierarchy_is_found_in_proc_self_cgroup() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("cpu,cpuacct")).unwrap();
        let v1 = "12:pids:/x\n4:cpu,cpuacct:/docker/abc\n0::/\n";
        assert_eq!(
            cpu_cgroup_dir(v1, dir.path()),
            Some(dir.path().join("cpu,cpuacct/docker/abc"))
        );
        let v2 = "0::/system.slice/pathprobe.service\n";
        assert_eq!(
            cpu_cgroup_dir(v2, dir.path()),
            Some(dir.path().join("system.slice/pathprobe.service"))
        );
        assert_eq!(cpu_cgroup_dir("0::/../../etc\n", dir.path()), None);
        assert_eq!(cpu_cgroup_dir("garbage", dir.path()), None);
    }
}
