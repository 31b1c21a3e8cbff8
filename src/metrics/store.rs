//! The latest probe results and the counters that outlive them, written by
//! the scheduler and read at scrape time.
//!
//! Scrapes only read this store, so any number of Prometheus servers can
//! scrape without causing a single probe. Everything about a (target,
//! module) pair lives under one [`ProbeKey`], so removing the key removes
//! every series of that pair from /metrics, counters included.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use crate::kinds::kind::Series;
use crate::probe::{Direction, FlowDirection, ProbeError, ProbeResult};
use crate::protocol::crr::CrrFailure;

use super::names;
use super::MetricsError;

/// What the scheduler runs: one module against one target.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProbeKey {
    /// The target's configured (or discovered) name.
    pub target: String,
    /// The module's name in the configuration.
    pub module: String,
}

impl ProbeKey {
    pub fn new(target: impl Into<String>, module: impl Into<String>) -> Self {
        ProbeKey {
            target: target.into(),
            module: module.into(),
        }
    }
}

/// Why a probe produced no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeFailure {
    /// A label value from a fixed set: [`ProbeError::reason`], or `panic`
    /// when the probe task died. `&'static` so that no free text (an
    /// address, an OS message) can become a label and grow cardinality.
    pub reason: &'static str,
    /// The full error, for logs, `/probe?debug=true` and the landing page;
    /// never exported as a label.
    pub message: String,
}

impl ProbeFailure {
    /// Every value of the `result` label: `success`, every
    /// [`ProbeError::reason`], and `panic` for a probe task that died.
    pub const RESULTS: &'static [&'static str] = &{
        const N: usize = ProbeError::REASONS.len();
        let mut all = [""; N + 2];
        all[0] = "success";
        let mut i = 0;
        while i < N {
            all[i + 1] = ProbeError::REASONS[i];
            i += 1;
        }
        all[N + 1] = "panic";
        all
    };
}

impl From<&ProbeError> for ProbeFailure {
    fn from(e: &ProbeError) -> Self {
        ProbeFailure {
            reason: e.reason(),
            message: e.to_string(),
        }
    }
}

/// One finished probe, as the scheduler records it.
///
/// A module with direction `both` runs two probes, send then receive, and
/// records two outcomes with [`Direction::Send`] and [`Direction::Receive`];
/// each keeps its own series. A `bidir` module records one outcome with
/// [`Direction::Bidir`] whose result holds both flows.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOutcome {
    /// The module's kind: `tcp`, `udp`, `loopback_tcp` or `loopback_udp`.
    pub kind: String,
    /// The direction this probe ran in.
    pub direction: Direction,
    /// The target's own labels from configuration or discovery. Names must
    /// pass [`check_user_label`]; others are dropped with a warning.
    pub labels: BTreeMap<String, String>,
    /// When the probe started (before connecting).
    pub started: SystemTime,
    /// How long the whole probe took, setup and teardown included, and
    /// not the wait for a slot before it.
    pub duration: Duration,
    /// For `/probe`: how long the request waited for a running scheduled
    /// probe to finish before its own started. `None` for scheduled runs.
    pub slot_wait: Option<Duration>,
    pub result: Result<ProbeResult, ProbeFailure>,
}

impl ProbeOutcome {
    pub fn succeeded(&self) -> bool {
        self.result.is_ok()
    }

    /// The `result` label value: `success` or the failure reason.
    pub fn result_label(&self) -> &'static str {
        match &self.result {
            Ok(_) => "success",
            Err(f) => f.reason,
        }
    }

    /// When the probe ended; this is what tells how fresh its figures are.
    pub fn ended(&self) -> SystemTime {
        self.started
            .checked_add(self.duration)
            .unwrap_or(self.started)
    }
}

/// Whether `name` can be a label of a target. It must be a Prometheus label
/// name, not start with `__` (reserved for Prometheus itself), and not be a
/// label some per-probe metric already has, which would make two labels
/// with one name.
pub fn check_user_label(name: &str) -> Result<(), MetricsError> {
    let invalid = |why: &'static str| MetricsError::InvalidLabelName {
        name: name.to_string(),
        why,
    };
    let mut bytes = name.bytes();
    match bytes.next() {
        None => return Err(invalid("it is empty")),
        Some(b) if !(b.is_ascii_alphabetic() || b == b'_') => {
            return Err(invalid("it must start with a letter or '_'"))
        }
        Some(_) => {}
    }
    if !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(invalid("only letters, digits and '_' are allowed"));
    }
    if name.starts_with("__") {
        return Err(invalid(
            "names starting with '__' are reserved by Prometheus",
        ));
    }
    if let Some(owner) = names::label_owner(name) {
        return Err(invalid(owner));
    }
    Ok(())
}

/// The latest outcome of one (target, module, direction) and its counters.
#[derive(Debug, Clone)]
pub(crate) struct SeriesState {
    /// The module's kind, direction and the target's labels: known from
    /// the configuration before the first probe, so that the counters can
    /// exist at 0 from the start.
    pub kind: String,
    pub direction: Direction,
    pub labels: BTreeMap<String, String>,
    /// `None` until the first probe of this direction ends.
    pub latest: Option<ProbeOutcome>,
    /// When the newest successful probe ended; `None` before the first.
    pub newest_success: Option<SystemTime>,
    /// Probes by result label; `success` is always present so that a
    /// success ratio can be computed from the first probe on.
    pub results: BTreeMap<&'static str, u64>,
    pub sent_bytes: BTreeMap<FlowDirection, u64>,
    /// Only flows that have had a TCP result, or of a TCP module.
    pub retransmits: BTreeMap<FlowDirection, u64>,
    /// tcp_rr and tcp_crr: every probe's transaction latencies added up.
    pub latency: Option<LatencyHistogram>,
    /// udp_rr: datagrams lost on each leg (send: requests, receive:
    /// replies) over every probe; both legs at 0 from the start.
    pub rr_lost: BTreeMap<FlowDirection, u64>,
    /// tcp_crr: every probe's connection set-up times added up.
    pub connect: Option<LatencyHistogram>,
    /// tcp_crr: failed transactions by reason over every probe; every
    /// reason at 0 from the start.
    pub crr_failures: BTreeMap<CrrFailure, u64>,
    /// The step detector on this path's probes and what it found.
    pub steps: super::steps::PathSteps,
    /// Adaptive probes by why they stopped; every reason at 0
    /// from the start for an adaptive module.
    pub adaptive_stops: BTreeMap<&'static str, u64>,
}

/// Transaction latencies of every probe of a series, in the buckets of
/// [`crate::protocol::latency::LATENCY_BUCKETS`] (not cumulative; one more for
/// above the last bound).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LatencyHistogram {
    pub counts: Vec<u64>,
    pub sum: f64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            counts: vec![0; crate::protocol::latency::LATENCY_BUCKETS.len() + 1],
            sum: 0.0,
        }
    }
}

impl LatencyHistogram {
    /// Adds one probe's buckets; a peer's list of another length is cut
    /// or padded, never allowed to grow the series.
    fn add(&mut self, latency: &crate::protocol::latency::LatencyStats) {
        for (c, n) in self.counts.iter_mut().zip(&latency.buckets) {
            *c = c.saturating_add(*n);
        }
        if latency.sum.is_finite() && latency.sum > 0.0 {
            self.sum += latency.sum;
        }
    }

    /// (upper bound, cumulative count) per bucket, the total, and the sum.
    pub fn cumulative(&self) -> (Vec<(f64, u64)>, u64) {
        let mut total = 0u64;
        let buckets = crate::protocol::latency::LATENCY_BUCKETS
            .iter()
            .zip(&self.counts)
            .map(|(le, n)| {
                total = total.saturating_add(*n);
                (*le, total)
            })
            .collect();
        let all = self.counts.iter().fold(0u64, |a, n| a.saturating_add(*n));
        (buckets, all)
    }
}

impl SeriesState {
    fn new(kind: &str, direction: Direction, labels: BTreeMap<String, String>, tcp: bool) -> Self {
        let flows = direction.flows();
        // `kind` is a module kind's name (`loopback_tcp`, `iperf3_udp`, …).
        let series =
            crate::kinds::registry::by_module_name(kind).map_or(&[][..], |(k, _)| k.series());
        let has = |s: Series| series.contains(&s);
        SeriesState {
            kind: kind.to_string(),
            direction,
            labels,
            latest: None,
            newest_success: None,
            // Every result at 0 from the start: a reason whose series first
            // appeared at 1 would be invisible to increase() and rate(), and
            // a path's first failures would not show in its success ratio.
            results: ProbeFailure::RESULTS.iter().map(|r| (*r, 0)).collect(),
            sent_bytes: flows.iter().map(|f| (*f, 0)).collect(),
            retransmits: if tcp {
                flows.iter().map(|f| (*f, 0)).collect()
            } else {
                BTreeMap::new()
            },
            // Known from the kind (the registry lists its series), so the
            // histograms and counters exist at 0 from the start.
            latency: has(Series::Latency).then(LatencyHistogram::default),
            rr_lost: if has(Series::RoundTripLoss) {
                BTreeMap::from([(FlowDirection::Send, 0), (FlowDirection::Receive, 0)])
            } else {
                BTreeMap::new()
            },
            connect: has(Series::Connect).then(LatencyHistogram::default),
            crr_failures: if has(Series::ConnectionFailures) {
                CrrFailure::ALL.iter().map(|r| (*r, 0)).collect()
            } else {
                BTreeMap::new()
            },
            steps: super::steps::PathSteps::new(kind),
            adaptive_stops: BTreeMap::new(),
        }
    }
}

/// The target's labels that can be metric labels; the configuration
/// check and discovery have refused the others already.
fn usable_labels(labels: &BTreeMap<String, String>, warn: bool) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(name, _)| match check_user_label(name) {
            Ok(()) => true,
            Err(e) => {
                if warn {
                    tracing::warn!(error = %e, "dropping a target label from metrics");
                }
                false
            }
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Everything known about one [`ProbeKey`].
#[derive(Debug, Clone, Default)]
pub(crate) struct TargetState {
    /// By [`Direction::as_str`], as `Direction` has no ordering.
    pub directions: BTreeMap<&'static str, SeriesState>,
    pub skipped: BTreeMap<&'static str, u64>,
    /// Attempts a responder answered `busy` that were tried again within
    /// the interval: not failed probes (only giving up is one).
    pub busy_retries: u64,
    /// When the key was last registered, probed or skipped, for
    /// [`ResultStore::expire`]; tokio's clock so that tests can pause it.
    pub touched: Option<tokio::time::Instant>,
}

impl TargetState {
    /// Records a finished probe; returns the steps it completes on its path.
    /// `seed`: the path's probes from before a restart, fed to its step
    /// detector first.
    pub fn record(
        &mut self,
        mut outcome: ProbeOutcome,
        seed: Option<Vec<crate::analysis::step::Observation>>,
    ) -> Vec<crate::analysis::step::Step> {
        outcome.labels = usable_labels(&outcome.labels, true);
        let series = self
            .directions
            .entry(outcome.direction.as_str())
            .or_insert_with(|| {
                SeriesState::new(
                    &outcome.kind,
                    outcome.direction,
                    outcome.labels.clone(),
                    false,
                )
            });
        series.kind.clone_from(&outcome.kind);
        series.labels.clone_from(&outcome.labels);
        series.direction = outcome.direction;
        if series.steps.figures.is_empty() {
            // Registered before its kind was known, or the module's kind
            // changed at a reload: the figures follow the kind.
            series.steps = super::steps::PathSteps::new(&series.kind);
        }
        if let Some(seed) = seed {
            series.steps.seed(seed);
        }
        let steps = series
            .steps
            .observe(outcome.started, outcome.result.as_ref().ok());
        let latest = series.latest.insert(outcome);
        if latest.result.is_ok() {
            series.newest_success = Some(latest.ended());
        }
        let SeriesState {
            results,
            sent_bytes,
            retransmits,
            latency,
            rr_lost,
            connect,
            crr_failures,
            adaptive_stops,
            ..
        } = series;
        if let Some(a) = latest.result.as_ref().ok().and_then(|r| r.adaptive) {
            let n = adaptive_stops.entry(a.stop_reason.as_str()).or_insert(0);
            *n = n.saturating_add(1);
        }
        if let Some(l) = latest
            .result
            .as_ref()
            .ok()
            .and_then(|r| r.rr())
            .and_then(|rr| rr.latency.as_ref())
        {
            latency.get_or_insert_with(LatencyHistogram::default).add(l);
        }
        if let Some(c) = latest.result.as_ref().ok().and_then(|r| r.crr()) {
            if let Some(l) = &c.connect {
                connect.get_or_insert_with(LatencyHistogram::default).add(l);
            }
            for reason in CrrFailure::ALL {
                let n = crr_failures.entry(reason).or_insert(0);
                *n = n.saturating_add(c.failures.get(reason));
            }
        }
        if let Some(u) = latest.result.as_ref().ok().and_then(|r| r.udp_rr()) {
            if let Some(l) = &u.rtt {
                latency.get_or_insert_with(LatencyHistogram::default).add(l);
            }
            for (flow, n) in [
                (FlowDirection::Send, u.upstream_lost),
                (FlowDirection::Receive, u.downstream_lost),
            ] {
                let c = rr_lost.entry(flow).or_insert(0);
                *c = c.saturating_add(n);
            }
        }
        *results.entry(latest.result_label()).or_insert(0) += 1;
        for flow in latest.direction.flows() {
            sent_bytes.entry(*flow).or_insert(0);
        }
        if let Ok(result) = &latest.result {
            for d in &result.directions {
                let sent = sent_bytes.entry(d.direction).or_insert(0);
                *sent = sent.saturating_add(d.sender_bytes);
                if let Some(tcp) = &d.tcp {
                    let r = retransmits.entry(d.direction).or_insert(0);
                    *r = r.saturating_add(tcp.retransmits);
                }
            }
        }
        steps
    }
}

/// What the configuration tells of a job's series before it first runs.
#[derive(Debug, Clone)]
pub struct SeriesPlan<'a> {
    /// The module's kind label.
    pub kind: &'a str,
    /// Whether it is a TCP kind (which has retransmit counters).
    pub tcp: bool,
    /// The probes it runs (two for a `both` module).
    pub directions: Vec<Direction>,
    /// The target's own labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Every reason a scheduled run can be skipped for.
    pub skip_reasons: &'a [&'static str],
    /// An adaptive module (`duration: auto`): its stop reasons exist at 0.
    pub adaptive: bool,
}

/// Thread-safe store of the latest results, shared by the scheduler (which
/// writes) and the HTTP server (which renders).
#[derive(Debug, Default)]
pub struct ResultStore {
    targets: Mutex<BTreeMap<ProbeKey, TargetState>>,
    /// `metrics.detail`, read at each scrape.
    detail: Mutex<crate::config::Detail>,
    /// Probes read back from the history at start, per path (key and
    /// direction) with the module's kind then, waiting for the path's
    /// first live probe to seed its step detector (see
    /// [`ResultStore::seed_steps`]).
    seeds: Mutex<BTreeMap<(ProbeKey, &'static str), StepSeed>>,
}

/// One path's probes from before a restart, oldest first.
#[derive(Debug)]
struct StepSeed {
    kind: String,
    probes: Vec<crate::analysis::step::Observation>,
}

impl ResultStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, BTreeMap<ProbeKey, TargetState>> {
        // A panic elsewhere while holding the lock leaves whole entries
        // behind (every update is a few map operations), so the data is
        // still worth serving.
        self.targets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores a finished probe: it becomes the latest for its key and
    /// direction, and its figures are added to the counters. Returns the
    /// steps it completes on its path (see [`crate::analysis::step`]).
    pub fn record(&self, key: ProbeKey, outcome: ProbeOutcome) -> Vec<crate::analysis::step::Step> {
        let seed = self
            .seeds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(key.clone(), outcome.direction.as_str()))
            // A module whose kind changed since has other figures.
            .filter(|s| s.kind == outcome.kind)
            .map(|s| s.probes);
        let mut targets = self.lock();
        let target = targets.entry(key).or_default();
        target.touched = Some(tokio::time::Instant::now());
        target.record(outcome, seed)
    }

    /// Keeps the probes of `key`'s path in `direction` that the history
    /// held at start (oldest first; module kind `kind`), to seed its step
    /// detector just before its first live probe is fed: steps survive a
    /// restart. A path never probed again keeps its seed: at most a
    /// detector's window each, for the paths the history held.
    pub fn seed_steps(
        &self,
        key: ProbeKey,
        kind: &str,
        direction: crate::probe::Direction,
        probes: Vec<crate::analysis::step::Observation>,
    ) {
        if probes.is_empty() {
            return;
        }
        self.seeds.lock().unwrap_or_else(|p| p.into_inner()).insert(
            (key, direction.as_str()),
            StepSeed {
                kind: kind.to_string(),
                probes,
            },
        );
    }

    /// Whether `key`'s peer in `direction` churns its release or
    /// fingerprint too fast to be shown as it is (see
    /// [`super::steps::UNSTABLE`]).
    pub fn remote_unstable(&self, key: &ProbeKey, direction: crate::probe::Direction) -> bool {
        self.lock()
            .get(key)
            .and_then(|t| t.directions.get(direction.as_str()))
            .is_some_and(|s| s.steps.remote_unstable)
    }

    /// The stable verdict and its advice of `key`'s path in `direction`
    /// (the mode of its recent probes' verdicts), if any.
    pub fn stable_verdict(
        &self,
        key: &ProbeKey,
        direction: crate::probe::Direction,
    ) -> Option<(std::sync::Arc<str>, Option<std::sync::Arc<str>>)> {
        self.lock()
            .get(key)?
            .directions
            .get(direction.as_str())?
            .steps
            .stable_verdict()
    }

    /// Sets `metrics.detail` for the scrapes from now on.
    pub fn set_detail(&self, detail: crate::config::Detail) {
        *self.detail.lock().unwrap_or_else(|p| p.into_inner()) = detail;
    }

    pub fn detail(&self) -> crate::config::Detail {
        *self.detail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets every key that has been neither registered, probed nor
    /// skipped for `after`: a target that left discovery, or a member
    /// the grouped plan no longer sends this host to. Returns how many
    /// keys went.
    pub fn expire(&self, after: Duration) -> usize {
        let now = tokio::time::Instant::now();
        let mut targets = self.lock();
        let before = targets.len();
        targets.retain(|_, t| {
            t.touched
                .is_none_or(|at| now.saturating_duration_since(at) < after)
        });
        before - targets.len()
    }

    /// Creates `key`'s counters at 0 (and keeps any it has), so that they
    /// exist from the moment the job does, as Prometheus' instrumentation
    /// guidelines ask: a dashboard then shows 0, not "No data", and
    /// `rate()` sees the first increase.
    pub fn register(&self, key: ProbeKey, plan: SeriesPlan<'_>) {
        let labels = usable_labels(plan.labels, false);
        let mut targets = self.lock();
        let target = targets.entry(key).or_default();
        // Only a new key starts its clock: registering again at every
        // reload or discovery refresh must not keep a key that is never
        // probed alive for ever.
        target.touched.get_or_insert_with(tokio::time::Instant::now);
        for reason in plan.skip_reasons {
            target.skipped.entry(reason).or_insert(0);
        }
        for direction in plan.directions {
            let series = target
                .directions
                .entry(direction.as_str())
                .or_insert_with(|| {
                    SeriesState::new(plan.kind, direction, labels.clone(), plan.tcp)
                });
            if series.latest.is_none() {
                series.labels.clone_from(&labels);
            }
            if plan.adaptive {
                for r in crate::protocol::adaptive::StopReason::ALL {
                    series.adaptive_stops.entry(r.as_str()).or_insert(0);
                }
            }
        }
    }

    /// Counts an attempt of `key` that a responder answered `busy` and that
    /// the scheduler may try again within the interval.
    pub fn record_busy_retry(&self, key: &ProbeKey) {
        let mut targets = self.lock();
        targets.entry(key.clone()).or_default().busy_retries += 1;
    }

    /// Counts a scheduled run of `key` that did not happen, with a reason
    /// from a fixed set (e.g. `overrun`, `slot_busy`, `shutdown`).
    pub fn record_skipped(&self, key: &ProbeKey, reason: &'static str) {
        let mut targets = self.lock();
        let target = targets.entry(key.clone()).or_default();
        target.touched = Some(tokio::time::Instant::now());
        *target.skipped.entry(reason).or_insert(0) += 1;
    }

    /// Forgets every module of `target`; returns how many keys went.
    pub fn remove_target(&self, target: &str) -> usize {
        let mut targets = self.lock();
        let before = targets.len();
        targets.retain(|key, _| key.target != target);
        before - targets.len()
    }

    /// Keeps only the keys for which `keep` is true, e.g. those still in
    /// the configuration after a reload.
    pub fn retain(&self, mut keep: impl FnMut(&ProbeKey) -> bool) {
        self.lock().retain(|key, _| keep(key));
    }

    /// The latest outcome of every key and direction, for the landing page.
    pub fn latest(&self) -> Vec<(ProbeKey, ProbeOutcome)> {
        self.lock()
            .iter()
            .flat_map(|(key, t)| {
                t.directions
                    .values()
                    .filter_map(move |s| Some((key.clone(), s.latest.clone()?)))
            })
            .collect()
    }

    /// The latest outcome of `key` in each direction, for its page.
    pub fn latest_of(&self, key: &ProbeKey) -> Vec<ProbeOutcome> {
        self.lock()
            .get(key)
            .map(|t| {
                t.directions
                    .values()
                    .filter_map(|s| s.latest.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The keys that have a result or a skipped run.
    pub fn keys(&self) -> Vec<ProbeKey> {
        self.lock().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_label_names_are_checked() {
        assert!(check_user_label("site").is_ok());
        assert!(check_user_label("_dc2").is_ok());
        for (bad, why) in [
            ("", "it is empty"),
            ("2dc", "it must start with a letter or '_'"),
            ("rack-1", "only letters, digits and '_' are allowed"),
            (
                "__name__",
                "names starting with '__' are reserved by Prometheus",
            ),
            ("target", "pathprobe sets it itself"),
            ("flow", "pathprobe sets it itself"),
            ("job", "Prometheus sets it when it scrapes"),
        ] {
            let e = check_user_label(bad).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid target label name {bad:?}: {why}")
            );
        }
    }

    #[test]
    fn ended_is_start_plus_duration() {
        let o = ProbeOutcome {
            kind: "tcp".into(),
            direction: Direction::Send,
            labels: BTreeMap::new(),
            started: SystemTime::UNIX_EPOCH + Duration::from_secs(100),
            duration: Duration::from_millis(2500),
            slot_wait: None,
            result: Err(ProbeFailure {
                reason: "timeout",
                message: "no answer".into(),
            }),
        };
        assert_eq!(
            o.ended(),
            SystemTime::UNIX_EPOCH + Duration::from_millis(102_500)
        );
        assert_eq!(o.result_label(), "timeout");
        assert!(!o.succeeded());
    }

    #[test]
    fn failure_from_probe_error_keeps_reason_and_message() {
        let e = ProbeError::Protocol("bad frame".into());
        let f = ProbeFailure::from(&e);
        assert_eq!(f.reason, "protocol_error");
        assert_eq!(f.message, e.to_string());
    }
}
