//! The host's test slot, shared by both roles: the responder serving a
//! prober, and this host's own probes (scheduled, `/probe`, loopback).
//!
//! Two tests on one host at once share its CPU, softirqs and NIC, and both
//! figures are then suspect, whichever side of each test the host is on.
//! So a host runs tests of one role at a time:
//!
//! - while it probes out, incoming probers are refused (told busy);
//! - while it serves, its own probes wait for the slot, within a deadline;
//! - a probe that waited for a served test to end has the next turn: new
//!   probers are refused until it has run, so that a stream of incoming
//!   tests cannot keep the host's own schedule out.
//!
//! Each role may hold several slots at once if configured to (the
//! responder's `max_concurrent_tests`, the scheduler's
//! `max_concurrent_probes`), but the roles never overlap. Every wait and
//! refusal is counted by reason ([`SlotCounters`]).
//!
//! The type sits below both the responder and the service, which share one
//! per process; a standalone `pathprobe respond` (or a loopback probe's
//! in-process responder) has a slot of its own.
//!
//! Two hosts probing each other start their probes at the same
//! instant whenever their schedules line up: each holds its own slot for
//! its probe, so each responder tells the other `busy`, and both retry.
//! One side gives way instead ([`gives_way`]): when a prober asks for a
//! test while the slot is held by one scheduled probe of ours aimed at that
//! very prober, which has not started moving data, the end with the lower
//! address (both ends compare the same two addresses, so exactly one
//! yields) serves the incoming test, and its own probe is called off
//! ([`SlotPermit::given_way`]) and runs right after the served test. A
//! peer cannot use this to take the slot at will: only our own current
//! target, only before our probe moves data, and only as often as the
//! probe's claim allows ([`SlotPermit::claim`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How long a prober may wait for our own probes to let go of the slot
/// before it is told busy ([`HostSlot::settle`]): what a probe takes
/// between its data ending and its letting go (results, recording, the
/// next test of a `both` run) is milliseconds; this leaves room for a
/// loaded host, and is well inside a prober's wait for its answer (5 s).
pub const SETTLE_GRACE: Duration = Duration::from_secs(1);

/// Which side of a test the host is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The responder serves a prober.
    Serving,
    /// This host probes out.
    Probing,
}

/// Why a test could not take the slot at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotReason {
    /// The host is serving a test (or, for a prober, as many as allowed).
    Serving,
    /// The host is probing out (or, for a probe, as many as allowed).
    Probing,
    /// One of the host's own probes waits for its turn after a served test.
    ProbeWaiting,
}

impl SlotReason {
    /// Every reason, for series that exist from the start.
    pub const ALL: [SlotReason; 3] = [
        SlotReason::Serving,
        SlotReason::Probing,
        SlotReason::ProbeWaiting,
    ];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            SlotReason::Serving => "serving",
            SlotReason::Probing => "probing",
            SlotReason::ProbeWaiting => "probe_waiting",
        }
    }
}

/// A refused incoming test: why, and how long until the slot is likely free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub reason: SlotReason,
    pub retry_after: Duration,
}

/// Counts of waits and refusals; read by the metrics.
#[derive(Debug, Default)]
pub struct SlotCounters {
    /// Incoming tests refused, by [`SlotReason`] index.
    refused: [AtomicU64; 3],
    /// Own probes that had to wait, by the reason of their first wait.
    waits: [AtomicU64; 3],
    /// Own probes that gave up waiting at their deadline, by last reason.
    wait_timeouts: [AtomicU64; 3],
    /// Total time own probes waited, in nanoseconds.
    wait_nanos: AtomicU64,
    /// Own probes called off so that the peer they were aimed at could
    /// run its test here first ([`gives_way`]).
    yields: AtomicU64,
    /// Incoming tests that waited for our own probes to let go of the
    /// slot rather than be told busy at once ([`HostSlot::settle`]).
    settles: AtomicU64,
}

fn index(r: SlotReason) -> usize {
    match r {
        SlotReason::Serving => 0,
        SlotReason::Probing => 1,
        SlotReason::ProbeWaiting => 2,
    }
}

impl SlotCounters {
    /// Incoming tests refused for `reason`.
    pub fn refused(&self, reason: SlotReason) -> u64 {
        self.refused[index(reason)].load(Ordering::Relaxed)
    }
    /// Own probes that waited, first for `reason`.
    pub fn waits(&self, reason: SlotReason) -> u64 {
        self.waits[index(reason)].load(Ordering::Relaxed)
    }
    /// Own probes that gave up waiting, last for `reason`.
    pub fn wait_timeouts(&self, reason: SlotReason) -> u64 {
        self.wait_timeouts[index(reason)].load(Ordering::Relaxed)
    }
    /// Total time own probes spent waiting for the slot.
    pub fn wait_time(&self) -> Duration {
        Duration::from_nanos(self.wait_nanos.load(Ordering::Relaxed))
    }
    /// Own probes that gave way to the peer they were aimed at.
    pub fn yields(&self) -> u64 {
        self.yields.load(Ordering::Relaxed)
    }
    /// Incoming tests that waited for our own probes to let go.
    pub fn settles(&self) -> u64 {
        self.settles.load(Ordering::Relaxed)
    }
}

/// The two ends of an incoming test as the responder sees them: the
/// prober's address, and this host's address that it reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asker {
    pub peer: SocketAddr,
    pub local: SocketAddr,
}

/// An address with IPv4-mapped IPv6 read as IPv4, so that a dual-stack
/// listener and a plain IPv4 prober name one host alike.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The tie-break between two hosts that probe each other at once: whether
/// this host, reached at `local` by a prober from `asker`, gives way to it
/// while its own probe is aimed at `target`.
///
/// Only when the asker is the very host our probe is aimed at (same
/// address), and only on the end whose address is the lower: host A sees
/// (A, B) and host B sees (B, A), the same two addresses, so exactly one
/// of them yields and the other keeps its probe. Ports count too, so two
/// responders on one address (a lab, a test) still differ. Behind NAT the
/// two may see different addresses; then both or neither yield, which
/// costs one retry (the claim allows a bounded number of yields).
pub fn gives_way(local: SocketAddr, asker: IpAddr, target: SocketAddr) -> bool {
    let key = |a: SocketAddr| (canonical(a.ip()), a.port());
    canonical(asker) == canonical(target.ip()) && key(local) < key(target)
}

/// Told to a probe that gave way: set once, awaited by its scheduler.
#[derive(Debug, Default)]
struct GaveWay {
    done: AtomicBool,
    notify: Notify,
}

struct Held {
    id: u64,
    role: Role,
    /// When the holder is expected to let go: the basis of retry hints.
    end: Instant,
    /// A scheduled probe's peer, once it knows the address.
    aim: Option<SocketAddr>,
    /// The probe's test was accepted: data moves, so it never gives way.
    moving: bool,
    /// Whether the holder may still give way (its claim's allowance).
    may_yield: bool,
    gave_way: Arc<GaveWay>,
}

#[derive(Default)]
struct Inner {
    held: Vec<Held>,
    next_id: u64,
    /// Own probes waiting because the host serves, with how long each
    /// plans to hold the slot; while any waits, new probers are refused.
    probes_waiting: Vec<(u64, Duration)>,
}

impl Inner {
    fn count(&self, role: Role) -> usize {
        self.held.iter().filter(|h| h.role == role).count()
    }

    /// When the soonest holder of the slot is expected to let go, from now.
    fn soonest_end(&self, now: Instant) -> Duration {
        self.held
            .iter()
            .map(|h| h.end.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::ZERO)
    }

    fn take(&mut self, role: Role, end: Instant) -> (u64, Arc<GaveWay>) {
        let id = self.next_id;
        self.next_id += 1;
        let gave_way = Arc::new(GaveWay::default());
        self.held.push(Held {
            id,
            role,
            end,
            aim: None,
            moving: false,
            may_yield: false,
            gave_way: gave_way.clone(),
        });
        (id, gave_way)
    }

    /// The one probe that gives way to `asker`, if the rule says so: the
    /// slot is held by exactly one probe and nothing else (no served
    /// test), aimed at the asker, not yet moving data, with a yield left
    /// in its claim.
    ///
    /// Own probes waiting for their turn do not stop it: they wait for the
    /// holder anyway, and one of them is often this very run's other job
    /// (two modules for the same peer); refusing the peer then made both
    /// ends tell each other busy.
    fn yielder(&self, asker: Asker) -> Option<usize> {
        if self.count(Role::Serving) > 0 {
            return None;
        }
        let mut probing = self
            .held
            .iter()
            .enumerate()
            .filter(|(_, h)| h.role == Role::Probing);
        let (i, h) = probing.next()?;
        if probing.next().is_some() || h.moving || !h.may_yield {
            return None;
        }
        let target = h.aim?;
        gives_way(asker.local, asker.peer.ip(), target).then_some(i)
    }

    /// Whether a prober should wait a moment for the slot rather than be
    /// told busy at once: it is held by our own probes only, none moving
    /// data, and none gives way to this prober (that is decided at once).
    /// Such a holder is letting go (reading its results, recording them),
    /// between the two tests of a `both` run, or asking its own target,
    /// which is often this very prober, which then gives way to it.
    ///
    /// A probe moving data whose test should be over by `horizon` counts
    /// as letting go (it is reading its results), and so does an own probe
    /// waiting for its turn while nothing holds the slot (it is about to
    /// take it, and may then give way).
    fn settling(&self, asker: Option<Asker>, horizon: Instant) -> bool {
        (self.count(Role::Probing) > 0 || !self.probes_waiting.is_empty())
            && self
                .held
                .iter()
                .all(|h| h.role == Role::Probing && (!h.moving || h.end <= horizon))
            && asker.and_then(|a| self.yielder(a)).is_none()
    }
}

/// The host's test slot. Share it in an `Arc`.
#[derive(Default)]
pub struct HostSlot {
    inner: Mutex<Inner>,
    freed: Notify,
    counters: SlotCounters,
}

impl std::fmt::Debug for HostSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("HostSlot")
            .field("serving", &inner.count(Role::Serving))
            .field("probing", &inner.count(Role::Probing))
            .field("probes_waiting", &inner.probes_waiting.len())
            .finish()
    }
}

/// A slot held; released when dropped.
pub struct SlotPermit {
    slot: Arc<HostSlot>,
    id: u64,
    gave_way: Arc<GaveWay>,
}

impl std::fmt::Debug for SlotPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotPermit").field("id", &self.id).finish()
    }
}

impl SlotPermit {
    /// The test now plans to end at `end` (for example once it started).
    pub fn set_end(&self, end: Instant) {
        let mut inner = self.slot.lock();
        if let Some(h) = inner.held.iter_mut().find(|h| h.id == self.id) {
            h.end = end;
        }
    }

    /// For a scheduled probe: a handle its probe reports through (whom it
    /// aims at, when data starts; see [`ProbeClaim::scope`]), and whether
    /// this hold may still give way to that peer ([`gives_way`]). The
    /// scheduler allows it a bounded number of times per run, so that a
    /// peer asking again and again cannot keep our own probe out.
    pub fn claim(&self, may_yield: bool) -> ProbeClaim {
        let mut inner = self.slot.lock();
        if let Some(h) = inner.held.iter_mut().find(|h| h.id == self.id) {
            h.may_yield = may_yield && h.role == Role::Probing;
        }
        ProbeClaim {
            slot: self.slot.clone(),
            id: self.id,
        }
    }

    /// Whether this hold gave way to the peer its probe was aimed at: the
    /// slot is no longer this holder's, and its probe must not go on.
    pub fn has_given_way(&self) -> bool {
        self.gave_way.done.load(Ordering::Acquire)
    }

    /// Resolves once this hold has given way (never, if it does not).
    pub async fn given_way(&self) {
        loop {
            let told = self.gave_way.notify.notified();
            tokio::pin!(told);
            told.as_mut().enable();
            if self.has_given_way() {
                return;
            }
            told.await;
        }
    }
}

/// What a scheduled probe tells the slot about itself while it runs.
/// Cheap to clone; stale once the permit is dropped (then every call is a
/// no-op).
#[derive(Clone)]
pub struct ProbeClaim {
    slot: Arc<HostSlot>,
    id: u64,
}

impl std::fmt::Debug for ProbeClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeClaim").field("id", &self.id).finish()
    }
}

tokio::task_local! {
    /// The claim of the scheduled probe running in this task. A task-local
    /// rather than a parameter, because the probe runs several layers down
    /// (runner, probe task, client) and only the client knows the peer's
    /// address and when data starts; /probe and the CLI run without one.
    static CLAIM: ProbeClaim;
}

impl ProbeClaim {
    /// The claim of the probe running in this task, if any.
    pub fn current() -> Option<ProbeClaim> {
        CLAIM.try_with(|c| c.clone()).ok()
    }

    /// Runs `fut` with this claim as the current one.
    pub async fn scope<F: std::future::Future>(self, fut: F) -> F::Output {
        CLAIM.scope(self, fut).await
    }

    fn with_held(&self, f: impl FnOnce(&mut Held)) {
        {
            let mut inner = self.slot.lock();
            if let Some(h) = inner.held.iter_mut().find(|h| h.id == self.id) {
                f(h);
            }
        }
        // A prober waiting for the slot to settle looks again: the holder
        // may now give way to it, or be moving data (then it is told busy
        // at once, with the test's real end).
        self.slot.freed.notify_waiters();
    }
}

/// The current probe is about to ask `peer` for a test: a test `peer`
/// asks of us meanwhile may be given way to. No-op outside a claim.
pub fn aim(peer: SocketAddr) {
    if let Some(c) = ProbeClaim::current() {
        c.with_held(|h| h.aim = Some(peer));
    }
}

/// The current probe's test was accepted and data starts; it should be
/// over in `remaining`. Until the returned guard is dropped (the test is
/// over, well or not) it never gives way, and probers told busy meanwhile
/// hear of its planned end rather than the run's deadline. After it, the
/// hold may give way again: a `both` run between its two tests, or a run
/// whose results are still being read, would otherwise refuse the peer
/// that has just served it, which in turn refuses that run's next test.
pub fn moving(remaining: Duration) -> Moving {
    let claim = ProbeClaim::current();
    if let Some(c) = &claim {
        let end = Instant::now() + remaining;
        c.with_held(|h| {
            h.moving = true;
            h.end = end;
        });
    }
    Moving(claim)
}

/// Returned by [`moving`]: the test's data phase, ended on drop.
#[must_use = "the data phase ends when this is dropped"]
pub struct Moving(Option<ProbeClaim>);

impl Drop for Moving {
    fn drop(&mut self) {
        if let Some(c) = &self.0 {
            c.with_held(|h| h.moving = false);
        }
    }
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        self.slot.lock().held.retain(|h| h.id != self.id);
        self.slot.freed.notify_waiters();
    }
}

/// Takes a probe's place in the turn queue off when its wait ends, however
/// it ends (taken, deadline, or the task dropped).
struct WaitTicket<'a> {
    slot: &'a HostSlot,
    id: Option<u64>,
}

impl Drop for WaitTicket<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.slot.lock().probes_waiting.retain(|(w, _)| *w != id);
            // A prober refused for our turn may now go.
            self.slot.freed.notify_waiters();
        }
    }
}

impl HostSlot {
    /// A free slot.
    pub fn new() -> Arc<HostSlot> {
        Arc::new(HostSlot::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The counters of waits and refusals.
    pub fn counters(&self) -> &SlotCounters {
        &self.counters
    }

    /// Tests held now in `role`.
    pub fn held(&self, role: Role) -> usize {
        self.lock().count(role)
    }

    /// For the responder: takes a serving slot at once, planned to end at
    /// `planned_end`, with at most `max_serving` tests served at once; or
    /// says why not and when to retry. Counted by reason when refused.
    pub fn try_serve(
        self: &Arc<Self>,
        max_serving: usize,
        planned_end: Instant,
    ) -> Result<SlotPermit, Refused> {
        self.try_serve_from(max_serving, planned_end, None)
    }

    /// [`HostSlot::try_serve`] for a prober at a known address: when our
    /// own probe is aimed at that prober and the tie-break says this end
    /// yields ([`gives_way`]), the probe is called off (its permit hears
    /// of it) and the prober is served. Counted in [`SlotCounters::yields`].
    pub fn try_serve_from(
        self: &Arc<Self>,
        max_serving: usize,
        planned_end: Instant,
        asker: Option<Asker>,
    ) -> Result<SlotPermit, Refused> {
        let now = Instant::now();
        let mut inner = self.lock();
        let yielded = match asker.and_then(|a| inner.yielder(a)) {
            Some(i) => {
                let h = inner.held.remove(i);
                h.gave_way.done.store(true, Ordering::Release);
                h.gave_way.notify.notify_one();
                self.counters.yields.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        };
        let reason = if inner.count(Role::Probing) > 0 {
            Some(SlotReason::Probing)
        } else if !yielded && !inner.probes_waiting.is_empty() {
            // Our own probes' turn keeps strangers out; a peer given way to
            // takes the turn of the probe that gave way, and the waiting
            // ones run after it as they would have after that probe.
            Some(SlotReason::ProbeWaiting)
        } else if inner.count(Role::Serving) >= max_serving.max(1) {
            Some(SlotReason::Serving)
        } else {
            None
        };
        if let Some(reason) = reason {
            // The slot frees when the soonest holder ends (tests end on time
            // or earlier); waiting probes then run first.
            let queued: Duration = inner.probes_waiting.iter().map(|(_, d)| *d).sum();
            let retry_after = inner.soonest_end(now) + queued + Duration::from_secs(1);
            drop(inner);
            self.counters.refused[index(reason)].fetch_add(1, Ordering::Relaxed);
            return Err(Refused {
                reason,
                retry_after,
            });
        }
        let (id, gave_way) = inner.take(Role::Serving, planned_end);
        Ok(SlotPermit {
            slot: self.clone(),
            id,
            gave_way,
        })
    }

    /// For the responder, before [`HostSlot::try_serve_from`]: while the
    /// slot is held by this host's own probes only and none of them moves
    /// data, waits up to `grace` for it to free (or for one of them to give
    /// way to `asker`, or to start moving data). Two hosts probing each
    /// other otherwise told each other busy in the instants between one's
    /// test ending at the other and its probe letting go of its own slot
    ///, and each such busy cost the other a retry.
    /// Bounded: a prober waits at most `grace` more before its answer.
    /// Returns whether it waited.
    pub async fn settle(&self, asker: Option<Asker>, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        let horizon = Instant::now() + grace;
        let mut waited = false;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if !self.lock().settling(asker, horizon) {
                break;
            }
            waited = true;
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                break;
            }
        }
        if waited {
            self.counters.settles.fetch_add(1, Ordering::Relaxed);
        }
        waited
    }

    /// For this host's own probes: waits for a probing slot (at most
    /// `max_probing` probes at once, and none while serving), until
    /// `deadline`. `planned` is how long the probe expects to hold it.
    /// On timeout, returns the reason it last waited for.
    pub async fn acquire_probe(
        self: &Arc<Self>,
        max_probing: usize,
        planned: Duration,
        deadline: tokio::time::Instant,
    ) -> Result<SlotPermit, SlotReason> {
        let started = tokio::time::Instant::now();
        let mut ticket = WaitTicket {
            slot: self,
            id: None,
        };
        let mut first_reason = None;
        let mut last_reason;
        let result = loop {
            // Registered before looking, so that a release between the look
            // and the wait still wakes us.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut inner = self.lock();
                let serving = inner.count(Role::Serving);
                if serving == 0 && inner.count(Role::Probing) < max_probing.max(1) {
                    let end = Instant::now() + planned;
                    let (id, gave_way) = inner.take(Role::Probing, end);
                    if let Some(w) = ticket.id.take() {
                        inner.probes_waiting.retain(|(x, _)| *x != w);
                        // A prober waiting for our turn to be taken
                        // (HostSlot::settle) looks again: we may give way.
                        self.freed.notify_waiters();
                    }
                    break Ok(SlotPermit {
                        slot: self.clone(),
                        id,
                        gave_way,
                    });
                }
                last_reason = if serving > 0 {
                    SlotReason::Serving
                } else {
                    SlotReason::Probing
                };
                // Waiting behind a served test claims the next turn; behind
                // our own probes, it does not, so that a long queue of own
                // probes cannot keep every prober out.
                if serving > 0 && ticket.id.is_none() {
                    let id = inner.next_id;
                    inner.next_id += 1;
                    inner.probes_waiting.push((id, planned));
                    ticket.id = Some(id);
                }
            }
            if first_reason.is_none() {
                first_reason = Some(last_reason);
                self.counters.waits[index(last_reason)].fetch_add(1, Ordering::Relaxed);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                self.counters.wait_timeouts[index(last_reason)].fetch_add(1, Ordering::Relaxed);
                break Err(last_reason);
            }
        };
        drop(ticket);
        if first_reason.is_some() {
            let waited = started.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            self.counters
                .wait_nanos
                .fetch_add(waited, Ordering::Relaxed);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn later(s: u64) -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs(s)
    }

    #[tokio::test(start_paused = true)]
    async fn probing_refuses_probers_and_serving_makes_probes_wait() {
        let slot = HostSlot::new();
        let probe = slot
            .acquire_probe(1, Duration::from_secs(5), later(1))
            .await
            .unwrap();
        let r = slot
            .try_serve(1, Instant::now() + Duration::from_secs(5))
            .unwrap_err();
        assert_eq!(r.reason, SlotReason::Probing);
        assert!(r.retry_after >= Duration::from_secs(5), "{r:?}");
        assert_eq!(slot.counters().refused(SlotReason::Probing), 1);
        drop(probe);

        let served = slot
            .try_serve(1, Instant::now() + Duration::from_secs(5))
            .unwrap();
        assert_eq!(slot.held(Role::Serving), 1);
        // A second prober: the responder is full.
        let r = slot.try_serve(1, Instant::now()).unwrap_err();
        assert_eq!(r.reason, SlotReason::Serving);
        // Our own probe waits for the served test, and gives up at its deadline.
        let t0 = tokio::time::Instant::now();
        let gave_up = slot
            .acquire_probe(1, Duration::from_secs(5), later(3))
            .await
            .unwrap_err();
        assert_eq!(gave_up, SlotReason::Serving);
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        assert_eq!(slot.counters().waits(SlotReason::Serving), 1);
        assert_eq!(slot.counters().wait_timeouts(SlotReason::Serving), 1);
        assert_eq!(slot.counters().wait_time(), Duration::from_secs(3));
        // The probe gave up, so it no longer holds a turn: a new prober
        // is refused only because the responder is full.
        let r = slot.try_serve(1, Instant::now()).unwrap_err();
        assert_eq!(r.reason, SlotReason::Serving);

        // A probe that waits gets the slot the moment the test ends.
        let waiter = {
            let slot = slot.clone();
            tokio::spawn(async move {
                let t = tokio::time::Instant::now();
                let p = slot
                    .acquire_probe(1, Duration::from_secs(5), later(60))
                    .await
                    .unwrap();
                (t.elapsed(), p)
            })
        };
        tokio::time::sleep(Duration::from_secs(2)).await;
        // While it waits, new probers are refused for its turn.
        assert_eq!(
            slot.try_serve(2, Instant::now()).unwrap_err().reason,
            SlotReason::ProbeWaiting
        );
        drop(served);
        let (waited, permit) = waiter.await.unwrap();
        assert_eq!(waited, Duration::from_secs(2));
        assert_eq!(slot.held(Role::Probing), 1);
        assert_eq!(slot.held(Role::Serving), 0);
        assert_eq!(slot.counters().waits(SlotReason::Serving), 2);
        drop(permit);
        assert!(slot.try_serve(1, Instant::now()).is_ok());
        assert_eq!(slot.counters().refused(SlotReason::ProbeWaiting), 1);
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn exactly_one_of_two_hosts_gives_way() {
        let pairs = [
            ("10.0.0.1:5301", "10.0.0.2:5301"),
            ("10.0.0.9:5301", "10.0.0.10:5301"),
            // Two responders on one address: the ports decide.
            ("127.0.0.1:40001", "127.0.0.1:39999"),
            ("[2001:db8::1]:5301", "[2001:db8::2]:5301"),
            ("10.0.0.1:5301", "[2001:db8::2]:5301"),
        ];
        for (a, b) in pairs {
            let (a, b) = (addr(a), addr(b));
            // A is asked by B while aimed at B; B likewise.
            let a_yields = gives_way(a, b.ip(), b);
            let b_yields = gives_way(b, a.ip(), a);
            assert!(a_yields != b_yields, "{a} {b}: {a_yields} {b_yields}");
            assert_eq!(
                a_yields,
                (canonical(a.ip()), a.port()) < (canonical(b.ip()), b.port())
            );
        }
        // A dual-stack listener sees an IPv4 prober as IPv4-mapped; both
        // ends still compare the same two addresses.
        let mapped = addr("[::ffff:10.0.0.1]:5301");
        assert!(gives_way(
            mapped,
            "::ffff:10.0.0.2".parse().unwrap(),
            addr("10.0.0.2:5301")
        ));
        assert!(!gives_way(
            addr("10.0.0.2:5301"),
            "10.0.0.1".parse().unwrap(),
            mapped
        ));
        // A prober other than our target never gets the way.
        assert!(!gives_way(
            addr("10.0.0.1:5301"),
            "10.0.0.3".parse().unwrap(),
            addr("10.0.0.2:5301")
        ));
    }

    fn asker(peer: &str, local: &str) -> Option<Asker> {
        Some(Asker {
            peer: addr(peer),
            local: addr(local),
        })
    }

    /// Our probe holds the slot, aimed at 10.0.0.2, whose own probe asks
    /// us (10.0.0.1, the lower address) for a test at the same moment.
    #[tokio::test(start_paused = true)]
    async fn the_lower_end_serves_its_target_and_calls_its_probe_off() {
        let slot = HostSlot::new();
        let probe = slot
            .acquire_probe(1, Duration::from_secs(20), later(1))
            .await
            .unwrap();
        let claim = probe.claim(true);
        claim
            .clone()
            .scope(async { aim(addr("10.0.0.2:5301")) })
            .await;
        let end = Instant::now() + Duration::from_secs(2);
        let served = slot
            .try_serve_from(1, end, asker("10.0.0.2:41234", "10.0.0.1:5301"))
            .unwrap();
        assert!(probe.has_given_way());
        // The scheduler hears of it at once.
        tokio::time::timeout(Duration::from_millis(1), probe.given_way())
            .await
            .unwrap();
        assert_eq!(slot.counters().yields(), 1);
        assert_eq!(slot.counters().refused(SlotReason::Probing), 0);
        assert_eq!((slot.held(Role::Serving), slot.held(Role::Probing)), (1, 0));
        // The called-off probe's permit frees nothing of the served test,
        // and its late reports change nothing.
        drop(claim.scope(async { moving(Duration::from_secs(1)) }).await);
        drop(probe);
        assert_eq!(slot.held(Role::Serving), 1);
        // Its next try waits for the served test and has the next turn.
        let again = {
            let slot = slot.clone();
            tokio::spawn(async move {
                let p = slot
                    .acquire_probe(1, Duration::from_secs(20), later(60))
                    .await
                    .unwrap();
                (tokio::time::Instant::now(), p)
            })
        };
        tokio::time::sleep(Duration::from_secs(2)).await;
        let freed = tokio::time::Instant::now();
        drop(served);
        let (took, again) = again.await.unwrap();
        assert_eq!(took, freed);
        // That try holds firm: the claim allows no more yields.
        again
            .claim(false)
            .scope(async { aim(addr("10.0.0.2:5301")) })
            .await;
        let r = slot
            .try_serve_from(1, Instant::now(), asker("10.0.0.2:41235", "10.0.0.1:5301"))
            .unwrap_err();
        assert_eq!(r.reason, SlotReason::Probing);
        assert!(!again.has_given_way());
        assert_eq!(slot.counters().yields(), 1);
    }

    /// A host probing its peer with two modules has one
    /// run holding the slot and the other waiting for its turn. The peer
    /// asking then was refused (the waiting turn stopped the yield), and
    /// refused us in turn: both ends told each other busy.
    #[tokio::test(start_paused = true)]
    async fn a_probe_waiting_for_its_turn_does_not_stop_the_holder_giving_way() {
        let slot = HostSlot::new();
        let served = slot
            .try_serve(1, Instant::now() + Duration::from_secs(1))
            .unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        for _ in 0..2 {
            let (slot, tx) = (slot.clone(), tx.clone());
            tokio::spawn(async move {
                let p = slot
                    .acquire_probe(1, Duration::from_secs(20), later(60))
                    .await
                    .unwrap();
                let _ = tx.send(p).await;
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(served);
        let holder = rx.recv().await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        // One holds the slot, the other still waits with its turn.
        assert_eq!(slot.held(Role::Probing), 1);
        assert!(rx.try_recv().is_err());
        let claim = holder.claim(true);
        claim.scope(async { aim(addr("10.0.0.2:5301")) }).await;
        let peer = slot
            .try_serve_from(1, Instant::now(), asker("10.0.0.2:41234", "10.0.0.1:5301"))
            .expect("the holder gives way to its peer");
        assert!(holder.has_given_way());
        assert_eq!(slot.counters().yields(), 1);
        assert_eq!(slot.counters().refused(SlotReason::ProbeWaiting), 0);
        assert_eq!(slot.counters().refused(SlotReason::Probing), 0);
        // A stranger is still kept out by the waiting probe's turn.
        drop(holder);
        assert!(slot.try_serve(2, Instant::now()).is_err());
        // The waiting probe runs once the peer's test is over.
        drop(peer);
        let waited = rx.recv().await.unwrap();
        assert_eq!(slot.held(Role::Probing), 1);
        drop(waited);
    }

    /// The peer's retry reached us while our probe was
    /// reading its results (its data over) and was told busy, costing the
    /// peer a retry each time; now it waits for the slot, within a bound.
    #[tokio::test(start_paused = true)]
    async fn a_prober_waits_for_our_probe_to_let_go_within_a_bound() {
        let slot = HostSlot::new();
        let b = asker("10.0.0.2:41234", "10.0.0.9:5301");
        let probe = slot
            .acquire_probe(1, Duration::from_secs(20), later(1))
            .await
            .unwrap();
        let claim = probe.claim(true);
        // Data moving with 3 s left: told busy at once, with its real end.
        let data = claim
            .clone()
            .scope(async { moving(Duration::from_secs(3)) })
            .await;
        let t0 = tokio::time::Instant::now();
        assert!(!slot.settle(b, SETTLE_GRACE).await);
        assert_eq!(t0.elapsed(), Duration::ZERO);
        // Its data over (std's clock: the planned end is now), it reads its
        // results: the prober waits, and takes the slot once it is let go.
        claim.with_held(|h| h.end = Instant::now());
        let waiter = {
            let slot = slot.clone();
            tokio::spawn(async move {
                let waited = slot.settle(b, SETTLE_GRACE).await;
                (
                    waited,
                    tokio::time::Instant::now(),
                    slot.try_serve_from(1, Instant::now(), b).is_ok(),
                )
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = tokio::time::Instant::now();
        drop(data);
        drop(probe);
        let (waited, at, served) = waiter.await.unwrap();
        assert!(waited && served);
        assert_eq!(at, released);
        assert_eq!(slot.counters().settles(), 1);
        assert_eq!(slot.counters().refused(SlotReason::Probing), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_prober_waits_no_longer_than_the_grace() {
        let slot = HostSlot::new();
        let _probe = slot
            .acquire_probe(1, Duration::from_secs(20), later(1))
            .await
            .unwrap();
        let t0 = tokio::time::Instant::now();
        assert!(slot.settle(None, SETTLE_GRACE).await);
        assert_eq!(t0.elapsed(), SETTLE_GRACE);
        let r = slot.try_serve_from(1, Instant::now(), None).unwrap_err();
        assert_eq!(r.reason, SlotReason::Probing);
        // Nothing held: no wait at all.
        drop(_probe);
        let t1 = tokio::time::Instant::now();
        assert!(!slot.settle(None, SETTLE_GRACE).await);
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn no_way_is_given_outside_the_rule() {
        let slot = HostSlot::new();
        let refused = |slot: &Arc<HostSlot>, a: Option<Asker>| {
            slot.try_serve_from(1, Instant::now(), a)
                .unwrap_err()
                .reason
        };
        let probe = slot
            .acquire_probe(2, Duration::from_secs(20), later(1))
            .await
            .unwrap();
        // Not aimed yet (or never: /probe, loopback): nothing to compare.
        let claim = probe.claim(true);
        let b = asker("10.0.0.2:41234", "10.0.0.1:5301");
        assert_eq!(refused(&slot, b), SlotReason::Probing);
        // Aimed at someone else than the asker.
        claim
            .clone()
            .scope(async { aim(addr("10.0.0.3:5301")) })
            .await;
        assert_eq!(refused(&slot, b), SlotReason::Probing);
        // Aimed at the asker, but this end has the higher address.
        claim
            .clone()
            .scope(async { aim(addr("10.0.0.2:5301")) })
            .await;
        assert_eq!(
            refused(&slot, asker("10.0.0.2:41234", "10.0.0.9:5301")),
            SlotReason::Probing
        );
        // An asker without addresses (the iperf3 port).
        assert_eq!(refused(&slot, None), SlotReason::Probing);
        // Two of our probes hold the slot: giving way would still not free it.
        let second = slot
            .acquire_probe(2, Duration::from_secs(20), later(1))
            .await
            .unwrap();
        assert_eq!(refused(&slot, b), SlotReason::Probing);
        drop(second);
        // Data moves: never called off, and a prober hears of the test's
        // real end, not of the probe's 20 s deadline.
        let data = claim
            .clone()
            .scope(async { moving(Duration::from_secs(3)) })
            .await;
        let r = slot.try_serve_from(1, Instant::now(), b).unwrap_err();
        assert_eq!(r.reason, SlotReason::Probing);
        // 3 s left plus the 1 s margin (std's clock runs on meanwhile).
        assert!(
            r.retry_after > Duration::from_millis(3900) && r.retry_after <= Duration::from_secs(4),
            "{r:?}"
        );
        assert!(!probe.has_given_way());
        assert_eq!(slot.counters().yields(), 0);
        assert_eq!(slot.counters().refused(SlotReason::Probing), 6);
        // Its test over (a `both` run between its two tests), the hold may
        // give way again.
        drop(data);
        assert!(slot.try_serve_from(1, Instant::now(), b).is_ok());
        assert!(probe.has_given_way());
        // Outside any claim the reports are no-ops.
        aim(addr("10.0.0.2:5301"));
        drop(moving(Duration::ZERO));
        assert!(ProbeClaim::current().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn own_probes_queue_without_shutting_probers_out() {
        let slot = HostSlot::new();
        let first = slot
            .acquire_probe(1, Duration::from_secs(5), later(1))
            .await
            .unwrap();
        let second = {
            let slot = slot.clone();
            tokio::spawn(async move {
                slot.acquire_probe(1, Duration::from_secs(5), later(60))
                    .await
                    .map(|_| tokio::time::Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(slot.counters().waits(SlotReason::Probing), 1);
        drop(first);
        second.await.unwrap().unwrap();
        // Two probes at once when allowed, never with a served test.
        let a = slot
            .acquire_probe(2, Duration::from_secs(5), later(1))
            .await
            .unwrap();
        let b = slot
            .acquire_probe(2, Duration::from_secs(5), later(1))
            .await
            .unwrap();
        assert_eq!(slot.held(Role::Probing), 2);
        assert!(slot
            .acquire_probe(2, Duration::from_secs(5), later(1))
            .await
            .is_err());
        drop((a, b));
        // A probe cancelled while waiting leaves no turn behind.
        let served = slot.try_serve(1, Instant::now()).unwrap();
        let waiting = {
            let slot = slot.clone();
            tokio::spawn(async move {
                let _ = slot
                    .acquire_probe(1, Duration::from_secs(5), later(60))
                    .await;
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        waiting.abort();
        let _ = waiting.await;
        drop(served);
        assert!(slot.try_serve(1, Instant::now()).is_ok());
    }
}
