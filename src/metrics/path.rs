//! The paths `pathprobe serve` traced (`trace:`): each (target, module)'s
//! latest trace that reached the target, its changes, and the tracer's
//! counters, rendered as the `pathprobe_path_*` and `pathprobe_trace*`
//! series.
//!
//! A path's hops are replaced whole by each trace that reaches the target,
//! so a hop that left the path leaves /metrics with it. A trace that does
//! not reach the target replaces nothing: it says the target (or a router)
//! did not answer, not where the path goes; and a hop that does not answer
//! gets no series at all, so that silent routers across the mesh never
//! add up to one address.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use super::expo::Exposition;
use super::names::{self, label::*};
use super::probe::unix_seconds;
use crate::trace::Trace;

/// What became of one trace, or why none ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceResult {
    Reached,
    NotReached,
    Failed,
    RateLimited,
    Busy,
}

impl TraceResult {
    pub const ALL: [TraceResult; 5] = [
        TraceResult::Reached,
        TraceResult::NotReached,
        TraceResult::Failed,
        TraceResult::RateLimited,
        TraceResult::Busy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TraceResult::Reached => "reached",
            TraceResult::NotReached => "not_reached",
            TraceResult::Failed => "failed",
            TraceResult::RateLimited => "rate_limited",
            TraceResult::Busy => "busy",
        }
    }
}

#[derive(Debug, Default, Clone)]
struct PathEntry {
    /// The latest trace that reached the target.
    reached: Option<Trace>,
    changes: u64,
    last_trace: Option<SystemTime>,
    /// The latest trace whatever its end (the status page shows it): one
    /// trace, bounded by the tracer's limits, per path.
    latest: Option<Trace>,
}

/// What the status page shows of one path's traces.
#[derive(Debug, Clone, Default)]
pub struct PathTraces {
    /// The latest trace, whether it reached the target or not.
    pub latest: Option<Trace>,
    /// When it ran.
    pub at: Option<SystemTime>,
    /// The latest trace that reached the target: the hops on /metrics.
    pub reached: Option<Trace>,
    pub changes: u64,
}

/// Every traced path of this host, and the tracer's counters. Its keys
/// are held to the schedule's (target, module) pairs by [`PathTable::retain`].
#[derive(Debug, Default)]
pub struct PathTable {
    paths: Mutex<BTreeMap<(String, String), PathEntry>>,
    traces: [AtomicU64; TraceResult::ALL.len()],
    packets: AtomicU64,
}

impl PathTable {
    pub fn new() -> PathTable {
        PathTable::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), PathEntry>> {
        self.paths.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a trace that did not run (rate limited, busy, failed).
    pub fn count(&self, result: TraceResult) {
        self.traces[result as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Traces counted so far with `result`.
    pub fn counted(&self, result: TraceResult) -> u64 {
        self.traces[result as usize].load(Ordering::Relaxed)
    }

    /// Packets sent by the traces recorded so far.
    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }

    /// Makes the series of the paths about to be traced exist from the
    /// start (their change counter at 0).
    pub fn register<'a>(&self, keys: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut paths = self.lock();
        for (t, m) in keys {
            paths.entry((t.to_string(), m.to_string())).or_default();
        }
    }

    /// Keeps only the paths `keep` accepts (the schedule's), dropping the
    /// series of the others.
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        self.lock().retain(|(t, m), _| keep(t, m));
    }

    /// Records a finished trace of (target, module) at `at`; returns
    /// whether it shows another path than the latest one that reached.
    pub fn record(&self, target: &str, module: &str, trace: &Trace, at: SystemTime) -> bool {
        self.packets
            .fetch_add(u64::from(trace.packets), Ordering::Relaxed);
        self.count(if trace.reached() {
            TraceResult::Reached
        } else {
            TraceResult::NotReached
        });
        let mut paths = self.lock();
        let entry = paths
            .entry((target.to_string(), module.to_string()))
            .or_default();
        entry.last_trace = Some(at);
        entry.latest = Some(trace.clone());
        if !trace.reached() {
            return false;
        }
        let changed = entry
            .reached
            .as_ref()
            .is_some_and(|before| before.path_differs(trace));
        if changed {
            entry.changes += 1;
        }
        entry.reached = Some(trace.clone());
        changed
    }

    /// The latest trace of (target, module) that reached it, and the
    /// path's changes so far.
    pub fn path(&self, target: &str, module: &str) -> Option<(Option<Trace>, u64)> {
        self.lock()
            .get(&(target.to_string(), module.to_string()))
            .map(|e| (e.reached.clone(), e.changes))
    }

    /// The traces of (target, module) the status page shows; `None` for
    /// a path that is not traced.
    pub fn traces(&self, target: &str, module: &str) -> Option<PathTraces> {
        self.lock()
            .get(&(target.to_string(), module.to_string()))
            .map(|e| PathTraces {
                latest: e.latest.clone(),
                at: e.last_trace,
                reached: e.reached.clone(),
                changes: e.changes,
            })
    }

    /// Paths known (traced or about to be).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The tracer's counters (from the start, every result at 0) and each
/// path's series.
pub(crate) fn render_paths(out: &mut Exposition, table: &PathTable, tracing: bool) {
    if !tracing && table.is_empty() && table.packets() == 0 {
        return;
    }
    for r in TraceResult::ALL {
        out.add(
            &names::TRACES,
            &[(RESULT, r.as_str())],
            table.counted(r) as f64,
        );
    }
    out.add(&names::TRACE_PACKETS, &[], table.packets() as f64);
    let paths = table.lock();
    for ((target, module), e) in paths.iter() {
        let base = [(TARGET, target.as_str()), (MODULE, module.as_str())];
        out.add(&names::PATH_CHANGES, &base, e.changes as f64);
        if let Some(t) = e.last_trace {
            out.add(&names::PATH_LAST_TRACE, &base, unix_seconds(t));
        }
        let Some(trace) = &e.reached else { continue };
        if let Some(h) = trace.hop_count() {
            out.add(&names::PATH_HOPS, &base, f64::from(h));
        }
        for hop in &trace.hops {
            let Some(addr) = hop.address else { continue };
            let ttl = hop.ttl.to_string();
            let addr = addr.to_string();
            out.add(
                &names::PATH_HOP_INFO,
                &[
                    (TARGET, target.as_str()),
                    (MODULE, module.as_str()),
                    (HOP, ttl.as_str()),
                    (ADDRESS, addr.as_str()),
                ],
                1.0,
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::trace::{Hop, Proto, Stop};
    use std::net::IpAddr;

    pub(crate) fn trace_of(hops: &[Option<&str>], stop: Stop) -> Trace {
        Trace {
            protocol: Proto::Tcp,
            destination: "10.0.9.2:5301".parse().unwrap(),
            source: Some("10.0.1.1:40000".parse().unwrap()),
            flow_matched: true,
            stop,
            hops: hops
                .iter()
                .enumerate()
                .map(|(i, a)| Hop {
                    ttl: i as u8 + 1,
                    address: a.map(|a| a.parse::<IpAddr>().unwrap()),
                    rtt_ms: vec![a.map(|_| 0.2)],
                })
                .collect(),
            packets: hops.len() as u32 * 2,
            elapsed_ms: 3.0,
        }
    }

    fn render(table: &PathTable) -> String {
        let mut out = Exposition::default();
        render_paths(&mut out, table, true);
        out.encode().unwrap()
    }

    #[test]
    fn hops_are_series_and_a_change_replaces_them() {
        let table = PathTable::new();
        table.register([("b", "tcp")]);
        let body = render(&table);
        assert!(body.contains("pathprobe_path_changes_total{target=\"b\",module=\"tcp\"} 0"));
        assert!(!body.contains("pathprobe_path_hops{"), "{body}");
        assert!(body.contains("pathprobe_traces_total{result=\"reached\"} 0"));

        let first = trace_of(
            &[Some("10.0.1.2"), None, Some("10.0.3.2"), Some("10.0.9.2")],
            Stop::Reached,
        );
        assert!(!table.record("b", "tcp", &first, SystemTime::now()));
        let body = render(&table);
        assert!(
            body.contains("pathprobe_path_hops{target=\"b\",module=\"tcp\"} 4"),
            "{body}"
        );
        assert!(body.contains(
            "pathprobe_path_hop_info{target=\"b\",module=\"tcp\",hop=\"1\",address=\"10.0.1.2\"} 1"
        ));
        assert!(body.contains(
            "pathprobe_path_hop_info{target=\"b\",module=\"tcp\",hop=\"4\",address=\"10.0.9.2\"} 1"
        ));
        // The silent hop has no series.
        assert!(!body.contains("hop=\"2\""), "{body}");
        assert_eq!(body.matches("pathprobe_path_hop_info{").count(), 3);

        // Hop 3 now answers from another router: a change, and the old
        // address is gone.
        let second = trace_of(
            &[
                Some("10.0.1.2"),
                Some("10.0.2.2"),
                Some("10.0.4.2"),
                Some("10.0.9.2"),
            ],
            Stop::Reached,
        );
        assert!(table.record("b", "tcp", &second, SystemTime::now()));
        let body = render(&table);
        assert!(body.contains("pathprobe_path_changes_total{target=\"b\",module=\"tcp\"} 1"));
        assert!(!body.contains("10.0.3.2"), "stale hop: {body}");
        assert!(body.contains("address=\"10.0.4.2\""));
        assert_eq!(body.matches("pathprobe_path_hop_info{").count(), 4);
        assert!(body.contains("pathprobe_trace_packets_total 16"), "{body}");

        // A trace that does not reach the target leaves the path as it was.
        let lost = trace_of(&[Some("10.0.1.2")], Stop::Gap);
        assert!(!table.record("b", "tcp", &lost, SystemTime::now()));
        let body = render(&table);
        assert!(body.contains("pathprobe_traces_total{result=\"not_reached\"} 1"));
        assert!(body.contains("pathprobe_path_hops{target=\"b\",module=\"tcp\"} 4"));
        assert!(body.contains("pathprobe_path_changes_total{target=\"b\",module=\"tcp\"} 1"));

        // A path no longer scheduled takes its series with it.
        table.retain(|t, _| t != "b");
        let body = render(&table);
        assert!(!body.contains("target=\"b\""), "{body}");
    }

    #[test]
    fn nothing_without_tracing() {
        let table = PathTable::new();
        let mut out = Exposition::default();
        render_paths(&mut out, &table, false);
        assert_eq!(out.encode().unwrap(), "");
    }
}
