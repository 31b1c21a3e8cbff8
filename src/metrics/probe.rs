//! Per-probe series: the latest result of every (target, module,
//! direction) in the store, or of a single run for `/probe`.
//!
//! Failure semantics: after a failed probe, `probe_success` is 0,
//! throughput is 0 for every flow the direction implies, the failure
//! reason is shown, and every other figure of the latest probe (bytes, TCP,
//! UDP, CPU, interrupts, kernel) is left out rather than zeroed. A zero RTT
//! or a zero loss ratio would read as a real measurement; an absent series
//! reads as "no measurement", which is the truth. Counters keep their
//! values, and the last-run timestamp always moves.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::budget;
use super::expo::Exposition;
use super::names::{self, label::*};
use super::store::{ProbeKey, ResultStore, SeriesState, TargetState};
use crate::analysis::diagnosis::Limit;
use crate::analysis::result::SideSummary;
use crate::config::Detail;
use crate::probe::FlowDirection;

/// Seconds since the Unix epoch; 0 for a clock set before 1970.
pub(crate) fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Whether counters are part of the output. `/probe` shows one run, for
/// which a running total means nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counters {
    Include,
    Omit,
}

/// Every key's series, counters and skipped runs included; at
/// `metrics.detail: fleet`, only the fleet families per path and the
/// counters summed per module ([`super::budget`]).
pub(crate) fn render_store(out: &mut Exposition, store: &ResultStore) {
    let detail = store.detail();
    let targets = store.lock();
    if detail == Detail::Fleet {
        render_fleet(out, &targets);
        return;
    }
    for (key, target) in targets.iter() {
        render_target(out, Some(key), target, Counters::Include);
        out.add(
            &names::SCHEDULER_BUSY_RETRIES,
            &[(TARGET, &key.target), (MODULE, &key.module)],
            target.busy_retries as f64,
        );
        for (reason, n) in &target.skipped {
            out.add(
                &names::SCHEDULER_SKIPPED,
                &[
                    (TARGET, &key.target),
                    (MODULE, &key.module),
                    (REASON, reason),
                ],
                *n as f64,
            );
        }
    }
}

/// `detail: fleet`: per path the fleet families; the probe counters,
/// skipped runs and busy retries summed over targets per module (without
/// `target` and the target's own labels), so that they grow with the
/// modules and not with the fleet; the peer clock once per target.
fn render_fleet(out: &mut Exposition, targets: &std::collections::BTreeMap<ProbeKey, TargetState>) {
    type Results = BTreeMap<(String, String, &'static str, &'static str), u64>;
    let mut results: Results = BTreeMap::new();
    let mut skipped: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
    let mut busy: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_target: Option<&str> = None;
    for (key, target) in targets.iter() {
        // Keys are ordered by target: the first module of each carries
        // the peer's clock, which is the host's, not the module's.
        let clock = last_target != Some(key.target.as_str());
        last_target = Some(&key.target);
        for series in target.directions.values() {
            render_series(out, Some(key), series, Counters::Include, Fleet { clock });
            for (result, n) in &series.results {
                let k = (
                    key.module.clone(),
                    series.kind.clone(),
                    series.direction.as_str(),
                    *result,
                );
                let sum = results.entry(k).or_insert(0);
                *sum = sum.saturating_add(*n);
            }
        }
        let b = busy.entry(key.module.clone()).or_insert(0);
        *b = b.saturating_add(target.busy_retries);
        for (reason, n) in &target.skipped {
            let s = skipped.entry((key.module.clone(), reason)).or_insert(0);
            *s = s.saturating_add(*n);
        }
    }
    for ((module, kind, direction, result), n) in &results {
        out.add(
            &names::PROBES,
            &[
                (MODULE, module),
                (KIND, kind),
                (DIRECTION, direction),
                (RESULT, result),
            ],
            *n as f64,
        );
    }
    for (module, n) in &busy {
        out.add(
            &names::SCHEDULER_BUSY_RETRIES,
            &[(MODULE, module)],
            *n as f64,
        );
    }
    for ((module, reason), n) in &skipped {
        out.add(
            &names::SCHEDULER_SKIPPED,
            &[(MODULE, module), (REASON, reason)],
            *n as f64,
        );
    }
}

/// One key's series; without a key, the `target` and `module` labels are
/// left out (for `/probe`, where Prometheus knows both from the URL).
pub(crate) fn render_target(
    out: &mut Exposition,
    key: Option<&ProbeKey>,
    target: &TargetState,
    counters: Counters,
) {
    for series in target.directions.values() {
        render_series(out, key, series, counters, Full);
    }
}

/// A latency summary as the `percentile` label values of its gauges.
fn percentiles(l: &crate::protocol::latency::LatencyStats) -> [(&'static str, f64); 6] {
    [
        ("0", l.min),
        ("50", l.p50),
        ("90", l.p90),
        ("99", l.p99),
        ("99.9", l.p999),
        ("100", l.max),
    ]
}

/// How much of a series to render: everything, or the fleet families
/// (with the peer's clock or not).
#[derive(Clone, Copy)]
enum Level {
    Full,
    Fleet { clock: bool },
}
use Level::{Fleet, Full};

fn render_series(
    out: &mut Exposition,
    key: Option<&ProbeKey>,
    series: &SeriesState,
    counters: Counters,
    level: Level,
) {
    let mut base: Vec<(&str, &str)> = Vec::with_capacity(6 + series.labels.len());
    if let Some(key) = key {
        base.push((TARGET, &key.target));
        base.push((MODULE, &key.module));
    }
    base.push((KIND, &series.kind));
    base.push((DIRECTION, series.direction.as_str()));
    base.extend(series.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));

    let fleet = matches!(level, Fleet { .. });
    // tcp_rr's histogram adds up every probe, and exists at 0 from the start.
    if let Some(h) = series.latency.as_ref().filter(|_| !fleet) {
        let (buckets, count) = h.cumulative();
        out.add_histogram(&names::RR_LATENCY, &base, &buckets, h.sum, count);
    }
    if let Some(h) = series.connect.as_ref().filter(|_| !fleet) {
        let (buckets, count) = h.cumulative();
        out.add_histogram(&names::RR_CONNECT, &base, &buckets, h.sum, count);
    }
    // An rr kind has a latency histogram from the start: at `fleet` its
    // throughput (the bytes of its transactions) is left to its latency,
    // as the alerts and the Fleet dashboard judge it.
    let rr = series.latency.is_some();
    let mut add = |def: &'static names::MetricDef, extra: &[(&str, &str)], value: f64| {
        if let Fleet { clock } = level {
            let keep = budget::kept_at_fleet(def)
                && (clock
                    || !(std::ptr::eq(def, &names::PEER_CLOCK_OFFSET)
                        || std::ptr::eq(def, &names::PEER_CLOCK_UNCERTAINTY)))
                && !(rr && std::ptr::eq(def, &names::THROUGHPUT))
                && extra.iter().all(|(name, value)| match *name {
                    PERCENTILE => budget::FLEET_PERCENTILES.contains(value),
                    SIDE => *value == "local",
                    _ => true,
                });
            if !keep {
                return;
            }
        }
        let mut labels = Vec::with_capacity(base.len() + extra.len());
        labels.extend_from_slice(&base);
        labels.extend_from_slice(extra);
        out.add(def, &labels, value);
    };

    let clamped = series
        .latest
        .as_ref()
        .and_then(|o| o.result.as_ref().ok())
        .is_some_and(|r| !r.clamped.is_empty());
    add(&names::PROBE_CLAMPED, &[], if clamped { 1.0 } else { 0.0 });
    if counters == Counters::Include {
        // 0 before the first success: time() minus it is then "never".
        add(
            &names::PROBE_LAST_SUCCESS,
            &[],
            series.newest_success.map_or(0.0, unix_seconds),
        );
        for (result, n) in &series.results {
            add(&names::PROBES, &[(RESULT, result)], *n as f64);
        }
        for flow in series.direction.flows() {
            let f = [(FLOW, flow.as_str())];
            let sent = series.sent_bytes.get(flow).copied().unwrap_or(0);
            add(&names::SENT_BYTES, &f, sent as f64);
            if let Some(n) = series.retransmits.get(flow) {
                add(&names::TCP_RETRANSMITS_TOTAL, &f, *n as f64);
            }
        }
        for (flow, n) in &series.rr_lost {
            add(&names::RR_LOST_TOTAL, &[(FLOW, flow.as_str())], *n as f64);
        }
        for (reason, n) in &series.adaptive_stops {
            add(&names::ADAPTIVE_STOPS_TOTAL, &[(REASON, reason)], *n as f64);
        }
        for (reason, n) in &series.crr_failures {
            add(
                &names::RR_CONNECTION_FAILURES_TOTAL,
                &[(REASON, reason.as_str())],
                *n as f64,
            );
        }
    }
    render_steps(&mut add, series, counters);
    // Before its first probe a series has only its counters and the
    // clamped flag, at 0: no measurement is not a measurement of 0.
    let Some(o) = &series.latest else { return };
    let result = o.result.as_ref().ok();
    add(
        &names::PROBE_SUCCESS,
        &[],
        if result.is_some() { 1.0 } else { 0.0 },
    );
    add(&names::PROBE_DURATION, &[], o.duration.as_secs_f64());
    if let Some(wait) = o.slot_wait {
        add(&names::PROBE_SLOT_WAIT, &[], wait.as_secs_f64());
    }
    add(&names::PROBE_LAST_RUN, &[], unix_seconds(o.ended()));
    if let Err(failure) = &o.result {
        add(&names::PROBE_FAILURE_INFO, &[(REASON, failure.reason)], 1.0);
    }
    if let Some(a) = result.and_then(|r| r.adaptive) {
        add(
            &names::ADAPTIVE_CONVERGED,
            &[],
            if a.converged { 1.0 } else { 0.0 },
        );
        add(&names::ADAPTIVE_SECONDS, &[], a.elapsed_seconds);
        add(&names::ADAPTIVE_BYTES, &[], a.bytes as f64);
        if let Some(e) = a.estimate {
            add(&names::ADAPTIVE_ESTIMATE, &[], e.bits_per_second / 8.0);
            add(
                &names::ADAPTIVE_UNCERTAINTY,
                &[],
                e.half_width_bits_per_second / 8.0,
            );
        }
    }
    if let Some(clock) = result.and_then(|r| r.peer_clock) {
        add(&names::PEER_CLOCK_OFFSET, &[], clock.offset_seconds);
        add(
            &names::PEER_CLOCK_UNCERTAINTY,
            &[],
            clock.uncertainty_seconds,
        );
    }

    for flow in o.direction.flows() {
        let f = [(FLOW, flow.as_str())];
        let summary = result.and_then(|r| r.direction(*flow));
        add(
            &names::THROUGHPUT,
            &f,
            summary.map_or(0.0, |d| d.throughput_bits_per_second / 8.0),
        );
        let Some(d) = summary else { continue };
        add(&names::RECEIVED_BYTES, &f, d.bytes as f64);
        if let Some(tcp) = &d.tcp {
            add(&names::TCP_RETRANSMITS, &f, tcp.retransmits as f64);
            // Unknown (a sender that does not report them) is absent,
            // not 0.
            if let Some(v) = tcp.rtt_seconds {
                add(&names::TCP_RTT, &f, v);
            }
            if let Some(v) = tcp.min_rtt_seconds {
                add(&names::TCP_MIN_RTT, &f, v);
            }
            if let Some(v) = tcp.cwnd_bytes {
                add(&names::TCP_CWND, &f, v as f64);
            }
            if let Some(v) = tcp.mss_bytes {
                add(&names::TCP_MSS, &f, f64::from(v));
            }
        }
        if let Some(udp) = &d.udp {
            add(&names::UDP_SENT, &f, udp.packets_sent as f64);
            add(&names::UDP_RECEIVED, &f, udp.packets_received as f64);
            add(&names::UDP_LOST, &f, udp.packets_lost as f64);
            add(
                &names::UDP_OUT_OF_ORDER,
                &f,
                udp.packets_out_of_order as f64,
            );
            add(&names::UDP_DUPLICATED, &f, udp.packets_duplicated as f64);
            add(&names::UDP_LOSS, &f, udp.loss_ratio);
            add(&names::UDP_JITTER, &f, udp.jitter_seconds);
            add(
                &names::UDP_SOCKET_DROPS,
                &f,
                udp.packets_dropped_at_socket as f64,
            );
        }
        // Kinds without a verdict (request/response) have no verdict
        // series, rather than a standing "unknown".
        let Some(verdict) = &d.diagnosis else {
            continue;
        };
        for cause in Limit::ALL {
            let named =
                verdict.limit == cause || verdict.also.as_ref().is_some_and(|a| a.limit == cause);
            add(
                &names::PROBE_LIMITED_BY,
                &[(FLOW, flow.as_str()), (CAUSE, cause.as_str())],
                if named { 1.0 } else { 0.0 },
            );
        }
        for c in &verdict.candidates {
            add(
                &names::PROBE_LIMIT_STRENGTH,
                &[(FLOW, flow.as_str()), (CAUSE, c.limit.as_str())],
                c.strength,
            );
        }
    }

    let Some(r) = result else { return };
    if let Some(rr) = r.rr() {
        add(
            &names::RR_TRANSACTIONS_RATE,
            &[],
            rr.transactions_per_second,
        );
        if let Some(l) = &rr.latency {
            for (q, v) in percentiles(l) {
                add(&names::RR_LATENCY_PERCENTILE, &[(PERCENTILE, q)], v);
            }
        }
        if let Some(l) = r.crr().and_then(|c| c.connect.as_ref()) {
            for (q, v) in percentiles(l) {
                add(&names::RR_CONNECT_PERCENTILE, &[(PERCENTILE, q)], v);
            }
        }
        for (side, us) in [
            ("local", rr.local_service_demand_microseconds),
            ("remote", rr.remote_service_demand_microseconds),
        ] {
            add(&names::RR_CPU_PER_TRANSACTION, &[(SIDE, side)], us / 1e6);
        }
    }
    if let Some(u) = r.udp_rr() {
        if let Some(l) = &u.rtt {
            for (q, v) in percentiles(l) {
                add(&names::RR_LATENCY_PERCENTILE, &[(PERCENTILE, q)], v);
            }
        }
        let legs = [
            (
                FlowDirection::Send,
                u.upstream_loss_percent,
                &u.ipdv_upstream,
            ),
            (
                FlowDirection::Receive,
                u.downstream_loss_percent,
                &u.ipdv_downstream,
            ),
        ];
        for (flow, loss, ipdv) in legs {
            let f = [(FLOW, flow.as_str())];
            add(&names::RR_LOSS, &f, loss / 100.0);
            if let Some(i) = ipdv {
                add(&names::RR_IPDV, &f, i.mean);
            }
        }
    }
    let sides: [(&str, &SideSummary); 2] = [("local", &r.local), ("remote", &r.remote)];
    for (side, s) in sides {
        add(
            &names::PROBE_CPU,
            &[(SIDE, side), (MODE, "user")],
            s.cpu_user,
        );
        add(
            &names::PROBE_CPU,
            &[(SIDE, side), (MODE, "system")],
            s.cpu_system,
        );
        // A figure the peer cannot tell (a stock iperf3 server's host
        // counters) has no series rather than a 0.
        if let Some(v) = s.host_cpu_utilization {
            add(&names::PROBE_HOST_CPU, &[(SIDE, side)], v);
        }
        if let Some(v) = s.interrupts {
            add(&names::PROBE_INTERRUPTS, &[(SIDE, side)], v as f64);
        }
        if let Some(v) = s.interface_interrupts {
            add(
                &names::PROBE_INTERFACE_INTERRUPTS,
                &[(SIDE, side)],
                v as f64,
            );
        }
        if let Some(v) = s.softirq_net_rx {
            add(
                &names::PROBE_SOFTIRQS,
                &[(SIDE, side), (TYPE, "NET_RX")],
                v as f64,
            );
        }
        if let Some(v) = s.softirq_net_tx {
            add(
                &names::PROBE_SOFTIRQS,
                &[(SIDE, side), (TYPE, "NET_TX")],
                v as f64,
            );
        }
        if let Some(c) = &s.cross_traffic {
            add(
                &names::PROBE_CROSS_TRAFFIC,
                &[(SIDE, side), (TYPE, "received")],
                c.other_received as f64,
            );
            add(
                &names::PROBE_CROSS_TRAFFIC,
                &[(SIDE, side), (TYPE, "sent")],
                c.other_sent as f64,
            );
        }
        // An unknown release (an old responder, a failed uname) would
        // make a series with an empty label, which says nothing.
        if !s.kernel_release.is_empty() {
            // A peer that makes up a release each probe is exported
            // under one value, not a new series each time.
            let release = match side {
                "remote" => series.steps.remote_label(&s.kernel_release),
                _ => s.kernel_release.as_str(),
            };
            add(
                &names::PROBE_KERNEL_INFO,
                &[(SIDE, side), (RELEASE, release)],
                1.0,
            );
        }
    }
}

/// Free text from a peer or the advice as a label value: at most
/// [`MAX_TEXT_LABEL`] bytes, cut at a character boundary, so that one
/// series' labels stay bounded whatever a peer sends.
fn bounded(s: &str) -> &str {
    let mut end = s.len().min(MAX_TEXT_LABEL);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The part of an advice that lasts from probe to probe: the diagnosis
/// writes "the send buffer limited 46% of the time: raise …", whose share
/// changes at every probe and would make a new series each time; what
/// to do (after the colon) does not.
fn lasting(advice: Option<&str>) -> &str {
    let a = advice.unwrap_or("");
    a.split_once(": ").map_or(a, |(_, todo)| todo)
}

/// The longest free-text label value (advice, changed settings).
pub(crate) const MAX_TEXT_LABEL: usize = 200;

/// The step detector's series of one path: each side's
/// fingerprint, the steps found per figure (at 0 from the start), the
/// newest step of each figure, and the stable verdict.
fn render_steps(
    add: &mut impl FnMut(&'static names::MetricDef, &[(&str, &str)], f64),
    series: &SeriesState,
    counters: Counters,
) {
    let st = &series.steps;
    for (side, f) in [("local", &st.local), ("remote", &st.remote)] {
        if let Some(f) = f {
            let hash = f.hash();
            let kernel = f
                .get(crate::protocol::fingerprint::setting::KERNEL)
                .unwrap_or("");
            let (hash, kernel) = match side {
                "remote" => (st.remote_label(&hash), st.remote_label(kernel)),
                _ => (hash.as_str(), kernel),
            };
            add(
                &names::PROBE_FINGERPRINT_INFO,
                &[(SIDE, side), (HASH, hash), (KERNEL_RELEASE, kernel)],
                1.0,
            );
        }
    }
    if counters == Counters::Include {
        add(
            &names::PROBE_REMOTE_UNSTABLE,
            &[],
            st.remote_unstable_probes as f64,
        );
        for (figure, n) in &st.detected {
            add(
                &names::STEP_DETECTED,
                &[(FIGURE, figure.as_str())],
                *n as f64,
            );
        }
    }
    for (figure, step) in &st.last {
        let before = figure.format(step.before);
        let after = figure.format(step.after);
        let changes = step.changes_text("local", "remote", MAX_TEXT_LABEL);
        // The releases are this host's when its kernel changed, the
        // peer's otherwise: a churning peer's are exported as one value.
        let local_kernel = step.changes.iter().any(|(end, c)| {
            *end == crate::analysis::step::End::Local
                && c.setting == crate::protocol::fingerprint::setting::KERNEL
        });
        let release = |r: &Option<String>| -> String {
            let r = r.as_deref().unwrap_or("");
            if local_kernel || r.is_empty() {
                r.to_string()
            } else {
                st.remote_label(r).to_string()
            }
        };
        let (from_release, to_release) =
            (release(&step.release_before), release(&step.release_after));
        add(
            &names::STEP_LAST_RATIO,
            &[
                (FIGURE, figure.as_str()),
                (FROM_RELEASE, &from_release),
                (TO_RELEASE, &to_release),
                (BEFORE, &before),
                (AFTER, &after),
                (VERDICT, step.verdict.as_deref().unwrap_or("")),
                (ADVICE, bounded(lasting(step.advice.as_deref()))),
                (CHANGES, bounded(&changes)),
            ],
            step.ratio,
        );
        add(
            &names::STEP_LAST_TIME,
            &[(FIGURE, figure.as_str())],
            step.detected_seconds,
        );
    }
    if let Some((verdict, advice)) = st.stable_verdict() {
        add(
            &names::PROBE_STABLE_VERDICT,
            &[
                (CAUSE, &verdict),
                (ADVICE, bounded(lasting(advice.as_deref()))),
            ],
            1.0,
        );
    }
}
