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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

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
}

struct Held {
    id: u64,
    role: Role,
    /// When the holder is expected to let go: the basis of retry hints.
    end: Instant,
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

    fn take(&mut self, role: Role, end: Instant) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.held.push(Held { id, role, end });
        id
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
        let now = Instant::now();
        let mut inner = self.lock();
        let reason = if inner.count(Role::Probing) > 0 {
            Some(SlotReason::Probing)
        } else if !inner.probes_waiting.is_empty() {
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
        let id = inner.take(Role::Serving, planned_end);
        Ok(SlotPermit {
            slot: self.clone(),
            id,
        })
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
                    let id = inner.take(Role::Probing, end);
                    if let Some(w) = ticket.id.take() {
                        inner.probes_waiting.retain(|(x, _)| *x != w);
                    }
                    break Ok(SlotPermit {
                        slot: self.clone(),
                        id,
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
