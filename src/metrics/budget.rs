//! The series budget of `metrics.detail: fleet`: which families a path
//! keeps, how many series that is at most, and what a host or a fleet
//! exports at either level (for check-config, the startup log and the
//! mesh simulator).
//!
//! A *path* is what config/alerts.yml calls one: one target, module,
//! direction and flow. At `fleet` a path keeps only what the alerts and
//! the Fleet dashboard read; the probe counters, skipped runs and busy
//! retries are summed over targets, per module, so they grow with the
//! modules, not with the fleet.

use crate::config::Detail;

use super::names::{self, MetricDef};

/// At most this many series per path at `detail: fleet`, the peer's clock
/// (2 series per target) included. `tests::fleet_budget_*` and the
/// integration test `serve::fleet_detail_holds_the_series_budget` count
/// them on /metrics.
pub const FLEET_SERIES_PER_PATH: usize = 10;

/// Per path and module at `detail: full`, about: the in-process count
/// (`serve::fleet_detail_holds_the_series_budget`) found 64 for tcp, 63
/// for udp, 77 for tcp_rr and 80 for udp_rr (their 40 histogram buckets).
/// An estimate, not a bound: a verdict's candidates vary.
pub const FULL_SERIES_PER_PATH: usize = 70;

/// Per module at `fleet`: `pathprobe_probes_total` per result and
/// direction (counted for one direction), the skipped runs per reason and
/// the busy retries, summed over targets.
pub fn fleet_series_per_module(skip_reasons: usize) -> usize {
    crate::metrics::ProbeFailure::RESULTS.len() + skip_reasons + 1
}

/// Series that do not depend on the targets (host, responder, service),
/// about: 80 on the test machine; the host's IRQ series vary with its
/// NICs' queues.
pub const HOST_SERIES: usize = 100;

/// Whether `def` is exported per path at `fleet`. The probe counters
/// (`pathprobe_probes_total`, skipped runs, busy retries) are exported
/// too, summed per module: see [`super::probe`].
pub fn kept_at_fleet(def: &MetricDef) -> bool {
    FLEET_FAMILIES.iter().any(|d| std::ptr::eq(*d, def))
}

/// What the alerts (config/alerts.yml) and the Fleet dashboard read per
/// path; everything else stays on the status page, the history API and
/// JSON. `tests/integration/rules.rs` checks that every family the rules
/// read is in this list.
pub static FLEET_FAMILIES: &[&MetricDef] = &[
    // Absent until a path steps (issue 24): the step alert reads them.
    &names::STEP_LAST_RATIO,
    &names::STEP_LAST_TIME,
    &names::PROBE_SUCCESS,
    &names::PROBE_LAST_RUN,
    &names::PROBE_LAST_SUCCESS,
    &names::PROBE_FAILURE_INFO,
    &names::THROUGHPUT,
    &names::RECEIVED_BYTES,
    &names::TCP_RETRANSMITS,
    &names::TCP_MSS,
    &names::UDP_LOSS,
    &names::RR_LATENCY_PERCENTILE,
    &names::RR_LOSS,
    &names::PROBE_KERNEL_INFO,
    &names::PEER_CLOCK_OFFSET,
    &names::PEER_CLOCK_UNCERTAINTY,
];

/// The percentiles of `pathprobe_rr_latency_percentile_seconds` kept at
/// `fleet`: the Fleet dashboard's latency matrices and the latency alert.
pub const FLEET_PERCENTILES: [&str; 2] = ["50", "99"];

/// What a host exports, as check-config and the startup log say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostSeries {
    pub detail: Detail,
    /// Paths: (target, module, direction, flow) this host probes, or
    /// (group, module, ...) for between-group results at `fleet`.
    pub paths: usize,
    /// Modules this host runs.
    pub modules: usize,
    pub skip_reasons: usize,
}

impl HostSeries {
    /// Per-path series at most (`fleet`) or about (`full`).
    pub fn per_path(&self) -> usize {
        match self.detail {
            Detail::Fleet => FLEET_SERIES_PER_PATH,
            Detail::Full => FULL_SERIES_PER_PATH,
        }
    }

    /// The total: paths × per path, plus the per-module counters at
    /// `fleet` (at `full` they are per path, and in its estimate), plus
    /// the host's own.
    pub fn total(&self) -> usize {
        let per_module = match self.detail {
            Detail::Fleet => fleet_series_per_module(self.skip_reasons),
            Detail::Full => 0,
        };
        self.paths * self.per_path() + self.modules * per_module + HOST_SERIES
    }

    /// One sentence for check-config and the startup log.
    pub fn sentence(&self) -> String {
        let paths = crate::units::plural(self.paths, "path");
        match self.detail {
            Detail::Fleet => format!(
                "metrics.detail: fleet: this host exports at most {} series on /metrics: \
                 {paths} x at most {} series, {} per module for its counters summed over \
                 targets, and about {HOST_SERIES} of its own",
                self.total(),
                FLEET_SERIES_PER_PATH,
                fleet_series_per_module(self.skip_reasons),
            ),
            Detail::Full => format!(
                "metrics.detail: full: this host exports about {} series on /metrics: \
                 {paths} x about {} series and about {HOST_SERIES} of its own \
                 (metrics.detail: fleet would be at most {})",
                self.total(),
                FULL_SERIES_PER_PATH,
                HostSeries {
                    detail: Detail::Fleet,
                    ..*self
                }
                .total(),
            ),
        }
    }
}

/// A fleet's total series when each of `hosts` hosts probes `paths_per_host`
/// paths of `modules` modules, for the mesh simulator's table.
pub fn fleet_total(
    detail: Detail,
    hosts: usize,
    paths_per_host: usize,
    modules: usize,
    skip_reasons: usize,
) -> u128 {
    let per_host = HostSeries {
        detail,
        paths: paths_per_host,
        modules,
        skip_reasons,
    }
    .total();
    hosts as u128 * per_host as u128
}
