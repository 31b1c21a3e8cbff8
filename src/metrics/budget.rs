//! The series budget of `metrics.detail: fleet`: which families a path
//! keeps, how many series that is at most, and what a host or a fleet
//! exports at either level (for check-config, the startup log and the
//! mesh simulator), and, for federation by group, the pair-of-groups
//! series config/federation.yml records and what each level of
//! Prometheus then holds.
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
    // Absent until a path steps: the step alert reads them.
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

/// What a group-level series of config/federation.yml is kept per, within
/// one pair of groups: its rule's `by` clause and the family it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairGrain {
    /// Per module and direction, every kind (success, last success).
    Direction,
    /// Per flow of a throughput kind (tcp, udp, iperf3_*): throughput.
    ThroughputFlow,
    /// Per flow of a udp probe: its loss.
    UdpFlow,
    /// Per direction of a request/response kind: its p99.
    RrDirection,
    /// Per flow (leg) of a udp_rr probe: its loss.
    UdpRrFlow,
}

/// Every pair-of-groups series config/federation.yml records, by grain,
/// in the file's order; `tests/integration/rules.rs` holds this list to
/// the file (names, the family each reads and whether it keeps `flow`).
pub static GROUP_PAIR_RECORDS: &[(&str, PairGrain)] = &[
    (
        "pathprobe_group_pair:probe_success:ratio",
        PairGrain::Direction,
    ),
    (
        "pathprobe_group_pair:probe_success:failing",
        PairGrain::Direction,
    ),
    (
        "pathprobe_group_pair:probe_last_success_timestamp_seconds:max",
        PairGrain::Direction,
    ),
    (
        "pathprobe_group_pair:throughput_bytes_per_second:min",
        PairGrain::ThroughputFlow,
    ),
    (
        "pathprobe_group_pair:throughput_bytes_per_second:median",
        PairGrain::ThroughputFlow,
    ),
    (
        "pathprobe_group_pair:throughput_bytes_per_second:max",
        PairGrain::ThroughputFlow,
    ),
    (
        "pathprobe_group_pair:udp_loss_ratio:median",
        PairGrain::UdpFlow,
    ),
    (
        "pathprobe_group_pair:udp_loss_ratio:max",
        PairGrain::UdpFlow,
    ),
    (
        "pathprobe_group_pair:rr_latency_p99_seconds:median",
        PairGrain::RrDirection,
    ),
    (
        "pathprobe_group_pair:rr_latency_p99_seconds:max",
        PairGrain::RrDirection,
    ),
    (
        "pathprobe_group_pair:rr_loss_ratio:max",
        PairGrain::UdpRrFlow,
    ),
];

/// The paths one pair of groups has, per grain: e.g. config/examples/
/// mesh.yml's tcp both ways and udp one way are 3 directions, 3
/// throughput flows, 1 udp flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PairPaths {
    pub directions: usize,
    pub throughput_flows: usize,
    pub udp_flows: usize,
    pub rr_directions: usize,
    pub udp_rr_flows: usize,
}

impl PairPaths {
    /// The series config/federation.yml records for one pair of groups
    /// with these paths.
    pub fn series(&self) -> usize {
        GROUP_PAIR_RECORDS
            .iter()
            .map(|(_, grain)| match grain {
                PairGrain::Direction => self.directions,
                PairGrain::ThroughputFlow => self.throughput_flows,
                PairGrain::UdpFlow => self.udp_flows,
                PairGrain::RrDirection => self.rr_directions,
                PairGrain::UdpRrFlow => self.udp_rr_flows,
            })
            .sum()
    }
}

/// Federation by group (docs/MESH.md): what one group's Prometheus and the
/// global one hold for a fleet of `groups` groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Federation {
    /// The group's hosts' own series, as scraped.
    pub scraped: u128,
    /// What config/federation.yml records there: one
    /// `pathprobe_host:mesh_group:info` per host and the group's pair
    /// series (its pairs with every group, its own included).
    pub recorded: u128,
    /// The global Prometheus: every pair of groups' series, nothing else.
    pub global: u128,
}

impl Federation {
    /// For groups of `sizes` hosts (the largest one's Prometheus; a group
    /// of one has no pair with itself), each host exporting `per_host`
    /// series, and `pair` series per pair of groups.
    pub fn new(sizes: &[usize], per_host: usize, pair: usize) -> Federation {
        let groups = sizes.len() as u128;
        let pairs_of = |size: usize| groups - 1 + u128::from(size > 1);
        let largest = sizes.iter().copied().max().unwrap_or(0);
        let pair = pair as u128;
        Federation {
            scraped: largest as u128 * per_host as u128,
            recorded: largest as u128 + pairs_of(largest) * pair,
            global: sizes.iter().map(|&s| pairs_of(s) * pair).sum(),
        }
    }

    /// The largest group's Prometheus.
    pub fn per_group(&self) -> u128 {
        self.scraped + self.recorded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// config/examples/mesh.yml's modules: tcp both ways (2 directions, a
    /// flow each) and udp one way. tests/rules/federation.yml counts the
    /// same 20 on promtool's output of config/federation.yml.
    const MESH_EXAMPLE: PairPaths = PairPaths {
        directions: 3,
        throughput_flows: 3,
        udp_flows: 1,
        rr_directions: 0,
        udp_rr_flows: 0,
    };

    #[test]
    fn the_mesh_example_makes_20_series_per_pair_of_groups() {
        assert_eq!(MESH_EXAMPLE.series(), 20);
        // udp_rr one way, as the promtool test's urr: 3 + 2 + 1.
        let urr = PairPaths {
            directions: 1,
            rr_directions: 1,
            udp_rr_flows: 1,
            ..PairPaths::default()
        };
        assert_eq!(urr.series(), 6);
    }

    #[test]
    fn federation_counts_each_pair_of_groups_once() {
        // 10,000 hosts in 100 groups of 100 at fleet (6,080 a host): each
        // group's Prometheus scrapes 608,000 and records 100 infos and its
        // 100 pairs (99 others and its own); the global holds 100 x 100
        // pairs of 20.
        let f = Federation::new(&[100; 100], 6080, 20);
        assert_eq!(f.scraped, 608_000);
        assert_eq!(f.recorded, 100 + 100 * 20);
        assert_eq!(f.per_group(), 610_100);
        assert_eq!(f.global, 200_000);
        // 10 hosts as 3 + 3 + 3 + 1: the lone host's group has no pair
        // with itself.
        let f = Federation::new(&[3, 3, 3, 1], 290, 20);
        assert_eq!(f.global, (3 * 4 + 3) * 20);
        assert_eq!(f.scraped, 3 * 290);
    }
}
