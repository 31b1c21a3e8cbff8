//! Metrics about pathprobe itself: build, configuration reloads, scheduler
//! lag, and the responder's counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::expo::Exposition;
use super::names::{self, label::*};
use super::probe::unix_seconds;
use crate::byte_budget::{BudgetRole, HostBudget};
use crate::responder::ResponderCounters;
use crate::slot::{HostSlot, SlotReason};

/// Upper bounds of the scheduler lag histogram. Timer wake-ups are late by
/// milliseconds; waiting for the one probe slot of a host costs a probe's
/// duration (seconds) and more under load; the long tail says the schedule
/// does not fit the interval.
pub const SCHEDULER_LAG_BUCKETS: [f64; 11] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0,
];

#[derive(Debug)]
struct Reload {
    successful: bool,
    last_success: SystemTime,
}

#[derive(Debug, Default)]
struct Lag {
    /// Per bucket, not cumulative; made cumulative when rendered.
    counts: [u64; SCHEDULER_LAG_BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// The mesh plan's figures, as the gauges show them.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshFigures {
    pub cycle: Duration,
    pub slot: Duration,
    /// The margin a slot leaves for clock skew between members.
    pub guard: Duration,
    pub members: usize,
    /// In a grouped plan, `scheduler.mesh.group_by` and this host's value
    /// of it: a group-level Prometheus needs the source group of every
    /// result, and only the host knows which entry is its own.
    pub group: Option<(String, String)>,
}

/// State the service updates and /metrics shows: configuration reloads,
/// scheduler lag, the host's test slot and the mesh plan. Thread-safe;
/// share it in an `Arc`.
#[derive(Debug)]
pub struct ServiceState {
    reload: Mutex<Reload>,
    lag: Mutex<Lag>,
    http_refusals: [AtomicU64; HttpRefusal::ALL.len()],
    /// The host's test slot, which the service gives its responder and
    /// scheduler; its counters are shown here.
    slot: Arc<HostSlot>,
    /// The host's byte budget, shared the same way; its figures are shown
    /// here.
    budget: Arc<HostBudget>,
    mesh: Mutex<Option<MeshFigures>>,
    /// The traced paths and the tracer's counters (`trace:`).
    paths: Arc<super::path::PathTable>,
    /// Whether `trace.enabled` is in force: the tracer's counters exist
    /// from the start then.
    tracing: std::sync::atomic::AtomicBool,
    /// History file saves: successful, failed.
    history_saves: [AtomicU64; 2],
}

/// Why the HTTP server turned a connection or a `/probe` request away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpRefusal {
    /// Over `http.max_connections`: closed at accept.
    Connections,
    /// Over `http.probe_max_concurrent`: 503.
    ProbeBusy,
    /// Target outside `http.probe_allow` or the static targets: 403.
    ProbeForbidden,
    /// No or wrong basic-auth credentials (`--web.config.file`): 401.
    Unauthorized,
    /// Too many password checks waiting: 429.
    AuthBusy,
    /// A TLS handshake that failed or timed out, plain HTTP to the TLS
    /// port, a client certificate missing or not verified.
    TlsHandshake,
}

impl HttpRefusal {
    pub const ALL: [HttpRefusal; 6] = [
        HttpRefusal::Connections,
        HttpRefusal::ProbeBusy,
        HttpRefusal::ProbeForbidden,
        HttpRefusal::Unauthorized,
        HttpRefusal::AuthBusy,
        HttpRefusal::TlsHandshake,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HttpRefusal::Connections => "connections",
            HttpRefusal::ProbeBusy => "probe_busy",
            HttpRefusal::ProbeForbidden => "probe_forbidden",
            HttpRefusal::Unauthorized => "unauthorized",
            HttpRefusal::AuthBusy => "auth_busy",
            HttpRefusal::TlsHandshake => "tls_handshake",
        }
    }
}

impl ServiceState {
    /// State after the configuration was first loaded at `loaded_at`; the
    /// first load counts as a successful reload, as in Prometheus itself.
    pub fn new(loaded_at: SystemTime) -> Self {
        ServiceState {
            reload: Mutex::new(Reload {
                successful: true,
                last_success: loaded_at,
            }),
            lag: Mutex::new(Lag::default()),
            http_refusals: Default::default(),
            slot: HostSlot::new(),
            budget: Arc::new(HostBudget::default()),
            mesh: Mutex::new(None),
            paths: Arc::new(super::path::PathTable::new()),
            tracing: Default::default(),
            history_saves: Default::default(),
        }
    }

    /// Counts one save of the history file.
    pub fn history_saved(&self, ok: bool) {
        self.history_saves[usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
    }

    /// History file saves so far: (successful, failed).
    pub fn history_saves(&self) -> (u64, u64) {
        (
            self.history_saves[0].load(Ordering::Relaxed),
            self.history_saves[1].load(Ordering::Relaxed),
        )
    }

    /// Counts one refusal by the HTTP server.
    pub fn http_refused(&self, why: HttpRefusal) {
        self.http_refusals[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Refusals so far for `why`.
    pub fn http_refusals(&self, why: HttpRefusal) -> u64 {
        self.http_refusals[why as usize].load(Ordering::Relaxed)
    }

    /// The traced paths (`trace:`).
    pub fn paths(&self) -> Arc<super::path::PathTable> {
        self.paths.clone()
    }

    /// Whether the service traces paths now (`trace.enabled`).
    pub fn set_tracing(&self, on: bool) {
        self.tracing.store(on, Ordering::Relaxed);
    }

    /// See [`ServiceState::set_tracing`].
    pub fn tracing(&self) -> bool {
        self.tracing.load(Ordering::Relaxed)
    }

    /// The host's test slot.
    pub fn host_slot(&self) -> Arc<HostSlot> {
        self.slot.clone()
    }

    /// The host's byte budget (`scheduler.max_bytes_per_hour`).
    pub fn host_budget(&self) -> Arc<HostBudget> {
        self.budget.clone()
    }

    /// The mesh plan in force, or `None` when not in mesh mode.
    pub fn set_mesh(&self, figures: Option<MeshFigures>) {
        *self.mesh.lock().unwrap_or_else(|p| p.into_inner()) = figures;
    }

    /// The mesh plan's cycle, or `None` when not in mesh mode.
    pub fn mesh_cycle(&self) -> Option<Duration> {
        self.mesh
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|m| m.cycle)
    }

    pub fn reload_succeeded(&self, at: SystemTime) {
        let mut r = self.reload.lock().unwrap_or_else(|p| p.into_inner());
        r.successful = true;
        r.last_success = at;
    }

    /// The old configuration keeps running; the success time stays that of
    /// the configuration in use.
    pub fn reload_failed(&self) {
        self.reload
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .successful = false;
    }

    /// Records how late a probe started relative to its scheduled time.
    pub fn observe_scheduler_lag(&self, lag: Duration) {
        let seconds = lag.as_secs_f64();
        let mut l = self.lag.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = SCHEDULER_LAG_BUCKETS.iter().position(|b| seconds <= *b) {
            l.counts[i] += 1;
        }
        l.sum += seconds;
        l.count += 1;
    }
}

pub(crate) fn render_service(out: &mut Exposition, s: &ServiceState) {
    out.add(
        &names::BUILD_INFO,
        &[(VERSION, env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    let (successful, last_success) = {
        let r = s.reload.lock().unwrap_or_else(|p| p.into_inner());
        (r.successful, r.last_success)
    };
    out.add(
        &names::CONFIG_RELOAD_SUCCESSFUL,
        &[],
        if successful { 1.0 } else { 0.0 },
    );
    out.add(
        &names::CONFIG_RELOAD_SUCCESS_TIME,
        &[],
        unix_seconds(last_success),
    );
    let (buckets, sum, count) = {
        let l = s.lag.lock().unwrap_or_else(|p| p.into_inner());
        let mut cumulative = 0;
        let buckets: Vec<(f64, u64)> = SCHEDULER_LAG_BUCKETS
            .iter()
            .zip(l.counts)
            .map(|(bound, n)| {
                cumulative += n;
                (*bound, cumulative)
            })
            .collect();
        (buckets, l.sum, l.count)
    };
    out.add_histogram(&names::SCHEDULER_LAG, &[], &buckets, sum, count);
    // Every reason from the start, at 0, so rate() works from the first
    // refusal.
    for why in HttpRefusal::ALL {
        out.add(
            &names::HTTP_REFUSALS,
            &[(REASON, why.as_str())],
            s.http_refusals(why) as f64,
        );
    }
    let c = s.slot.counters();
    for reason in SlotReason::ALL {
        out.add(
            &names::HOST_SLOT_REFUSALS,
            &[(REASON, reason.as_str())],
            c.refused(reason) as f64,
        );
    }
    // A probe waits for what holds the slot: a served test or its own
    // probes; it never waits "for its turn".
    for reason in [SlotReason::Serving, SlotReason::Probing] {
        out.add(
            &names::HOST_SLOT_WAITS,
            &[(REASON, reason.as_str())],
            c.waits(reason) as f64,
        );
        out.add(
            &names::HOST_SLOT_WAIT_TIMEOUTS,
            &[(REASON, reason.as_str())],
            c.wait_timeouts(reason) as f64,
        );
    }
    out.add(
        &names::HOST_SLOT_WAIT_SECONDS,
        &[],
        c.wait_time().as_secs_f64(),
    );
    // The byte budget: its figures exist from the start, at 0 without one.
    let b = &s.budget;
    out.add(&names::BUDGET_MAX_BYTES_PER_HOUR, &[], b.limit() as f64);
    out.add(&names::BUDGET_WINDOW_BYTES, &[], b.spent() as f64);
    for role in BudgetRole::ALL {
        out.add(
            &names::BUDGET_BYTES,
            &[(names::label::ROLE, role.as_str())],
            b.charged(role) as f64,
        );
        out.add(
            &names::BUDGET_REFUSALS,
            &[(names::label::ROLE, role.as_str())],
            b.refused(role) as f64,
        );
    }
    out.add(&names::HOST_SLOT_YIELDS, &[], c.yields() as f64);
    out.add(&names::HOST_SLOT_SETTLES, &[], c.settles() as f64);
    let (saved, failed) = s.history_saves();
    for (result, n) in [("success", saved), ("failure", failed)] {
        out.add(&names::HISTORY_SAVES, &[(RESULT, result)], n as f64);
    }
    let mesh = s.mesh.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(m) = mesh {
        out.add(&names::MESH_CYCLE_SECONDS, &[], m.cycle.as_secs_f64());
        out.add(&names::MESH_SLOT_SECONDS, &[], m.slot.as_secs_f64());
        out.add(&names::MESH_GUARD_SECONDS, &[], m.guard.as_secs_f64());
        out.add(&names::MESH_MEMBERS, &[], m.members as f64);
        if let Some((label, value)) = &m.group {
            out.add(
                &names::MESH_GROUP_INFO,
                &[
                    (names::label::GROUP_BY, label.as_str()),
                    (names::label::GROUP, value.as_str()),
                ],
                1.0,
            );
        }
    }
}

pub(crate) fn render_responder(out: &mut Exposition, c: &ResponderCounters) {
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
    // tests_succeeded/failed count every test; the iperf3 ones are also
    // counted apart, so pathprobe's own are the difference. Both series
    // exist from the start, at 0.
    for (result, all, iperf3) in [
        ("success", &c.tests_succeeded, &c.iperf3_tests_succeeded),
        ("failure", &c.tests_failed, &c.iperf3_tests_failed),
    ] {
        let iperf3 = iperf3.load(Ordering::Relaxed);
        let own = all.load(Ordering::Relaxed).saturating_sub(iperf3);
        for (protocol, n) in [("pathprobe", own), ("iperf3", iperf3)] {
            out.add(
                &names::RESPONDER_TESTS,
                &[(PROTOCOL, protocol), (RESULT, result)],
                n as f64,
            );
        }
    }
    for (reason, counter) in [
        ("busy", &c.rejected_busy),
        ("limit", &c.rejected_limit),
        ("version_mismatch", &c.rejected_version),
        ("protocol_error", &c.protocol_errors),
        ("timeout", &c.timeouts),
        ("auth_required", &c.rejected_auth_required),
        ("auth_failed", &c.rejected_auth_failed),
        ("denied", &c.rejected_denied),
        ("rate_limited", &c.rejected_rate_limited),
        ("budget_exhausted", &c.rejected_budget),
        ("bad_token", &c.rejected_bad_token),
        ("connection_limit", &c.rejected_connection_limit),
        ("out_of_turn", &c.rejected_out_of_turn),
        ("overload", &c.overload),
    ] {
        out.add(
            &names::RESPONDER_REJECTIONS,
            &[(REASON, reason)],
            get(counter),
        );
    }
    for (i, n) in c.handshakes_by_version.iter().enumerate() {
        let version = (crate::protocol::OLDEST_PROTOCOL_VERSION + i as u32).to_string();
        out.add(&names::RESPONDER_HANDSHAKES, &[(VERSION, &version)], get(n));
    }
    out.add(
        &names::RESPONDER_IGNORED_DATAGRAMS,
        &[],
        get(&c.udp_ignored),
    );
    out.add(&names::RESPONDER_CLAMPED_TESTS, &[], get(&c.tests_clamped));
    out.add(&names::RESPONDER_ACTIVE_TESTS, &[], get(&c.active_tests));
    out.add(&names::RESPONDER_BYTES, &[], get(&c.bytes));
}
