//! `trace:` path tracing from `pathprobe serve` (docs/TRACE.md): whether
//! the service traces the paths it probes, how often, and the bounds of
//! each trace and of all of them together.
//!
//! Off by default: a trace sends packets the operator did not ask for
//! (up to `max_hops x probes_per_hop` per trace), and opens and resets one
//! connection at the target's responder.

use std::time::Duration;

use serde::Deserialize;

use super::quantity;
use crate::trace::TraceLimits;

/// `trace:` the section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TraceSection {
    /// Trace the paths this host probes (off by default).
    pub enabled: bool,
    /// The bounded schedule: a path is traced again at least this often
    /// after a probe, even when nothing changed.
    #[serde(deserialize_with = "quantity::duration")]
    pub interval: Duration,
    /// A probe whose headline figure moved by more than this fraction of
    /// the figure at the path's last trace (up or down) asks for a trace
    /// now (still subject to `min_interval`).
    pub change_ratio: f64,
    /// The least time between two traces to one host, whatever asks.
    #[serde(deserialize_with = "quantity::duration")]
    pub min_interval: Duration,
    /// Traces running at once, over all paths.
    pub max_concurrent: usize,
    /// Highest TTL tried.
    pub max_hops: u8,
    /// Packets per TTL.
    pub probes_per_hop: u8,
    /// The whole trace's time budget.
    #[serde(deserialize_with = "quantity::duration")]
    pub time_limit: Duration,
}

impl Default for TraceSection {
    fn default() -> Self {
        let limits = TraceLimits::default();
        TraceSection {
            enabled: false,
            interval: Duration::from_secs(3600),
            change_ratio: 0.3,
            min_interval: Duration::from_secs(60),
            max_concurrent: 2,
            max_hops: limits.max_hops,
            probes_per_hop: limits.probes_per_hop,
            time_limit: limits.time_limit,
        }
    }
}

impl TraceSection {
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        let max = TraceLimits::MAX;
        if self.max_hops == 0 || self.max_hops > max.max_hops {
            return Err(("max_hops", format!("must be 1 to {}", max.max_hops)));
        }
        if self.probes_per_hop == 0 || self.probes_per_hop > max.probes_per_hop {
            return Err((
                "probes_per_hop",
                format!("must be 1 to {}", max.probes_per_hop),
            ));
        }
        if self.time_limit < Duration::from_millis(100) || self.time_limit > max.time_limit {
            return Err(("time_limit", "must be 100ms to 60s".into()));
        }
        if self.min_interval < Duration::from_secs(1) {
            return Err((
                "min_interval",
                "must be at least 1s: it is what keeps the tracer from becoming a packet source"
                    .into(),
            ));
        }
        if self.interval < self.min_interval {
            return Err((
                "interval",
                "must be at least min_interval (a path is never traced more often than that)"
                    .into(),
            ));
        }
        if !(1..=64).contains(&self.max_concurrent) {
            return Err(("max_concurrent", "must be 1 to 64".into()));
        }
        if !self.change_ratio.is_finite() || self.change_ratio <= 0.0 {
            return Err((
                "change_ratio",
                "must be a fraction above 0 (0.3: 30%)".into(),
            ));
        }
        Ok(())
    }

    /// The bounds of one trace.
    pub fn limits(&self) -> TraceLimits {
        TraceLimits {
            max_hops: self.max_hops,
            probes_per_hop: self.probes_per_hop,
            time_limit: self.time_limit,
            ..TraceLimits::default()
        }
        .clamped()
    }

    /// The cost in one sentence, for check-config and the startup log:
    /// packets per trace at most, and traces per path and hour at most.
    pub fn cost_sentence(&self, paths: usize) -> String {
        if !self.enabled {
            return "trace: off (trace.enabled: false): no path is traced".to_string();
        }
        let per_trace = self.limits().max_packets();
        let per_hour = (3600.0 / self.min_interval.as_secs_f64()).max(1.0).floor() as u64;
        format!(
            "trace: at most {} per trace ({} x {}); each of {} \
             traced again every {} at least, after a figure change of more than {:.0}%, \
             never more than once per {} per host ({} an hour at most per host), \
             {} at once",
            crate::units::plural(per_trace, "packet"),
            crate::units::plural(self.max_hops, "hop"),
            crate::units::plural(self.probes_per_hop, "probe"),
            crate::units::plural(paths, "path"),
            crate::units::format_duration(self.interval),
            self.change_ratio * 100.0,
            crate::units::format_duration(self.min_interval),
            crate::units::plural(per_hour, "trace"),
            self.max_concurrent,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_off() {
        let t = TraceSection::default();
        assert!(t.check().is_ok());
        assert!(!t.enabled);
        assert_eq!(t.limits().max_packets(), 60);
    }

    #[test]
    fn bounds_are_refused() {
        let bad = |f: fn(&mut TraceSection)| {
            let mut t = TraceSection::default();
            f(&mut t);
            t.check().unwrap_err().0
        };
        assert_eq!(bad(|t| t.max_hops = 65), "max_hops");
        assert_eq!(bad(|t| t.probes_per_hop = 0), "probes_per_hop");
        assert_eq!(bad(|t| t.min_interval = Duration::ZERO), "min_interval");
        assert_eq!(bad(|t| t.interval = Duration::from_secs(10)), "interval");
        assert_eq!(bad(|t| t.max_concurrent = 0), "max_concurrent");
        assert_eq!(bad(|t| t.change_ratio = f64::NAN), "change_ratio");
        assert_eq!(
            bad(|t| t.time_limit = Duration::from_secs(61)),
            "time_limit"
        );
    }

    #[test]
    fn cost_is_stated() {
        let t = TraceSection {
            enabled: true,
            ..Default::default()
        };
        let s = t.cost_sentence(4);
        assert!(s.contains("at most 60 packets per trace"), "{s}");
        assert!(s.contains("4 paths"), "{s}");
        assert!(s.contains("60 traces an hour"), "{s}");
    }

    /// A count of one takes the singular (a path traced
    /// with one probe per hop, at most once an hour).
    #[test]
    fn cost_counts_of_one_read_in_the_singular() {
        let t = TraceSection {
            enabled: true,
            max_hops: 1,
            probes_per_hop: 1,
            min_interval: Duration::from_secs(3600),
            interval: Duration::from_secs(3600),
            ..Default::default()
        };
        let s = t.cost_sentence(1);
        assert!(
            s.starts_with("trace: at most 1 packet per trace (1 hop x 1 probe); each of 1 path "),
            "{s}"
        );
        assert!(s.contains("(1 trace an hour at most per host)"), "{s}");
    }
}
