//! Runs every (target, module) job once per interval, forever.
//!
//! - Start times are spread over the interval: a stable phase derived from
//!   the job's name and this host's name, plus a little random jitter, so a
//!   thousand targets do not start at once and two hosts probing each other
//!   do not collide on every run.
//! - Every run takes the host's test slot ([`HostSlot`]), which also
//!   bounds how many probes run at once (one by default) and keeps them
//!   from overlapping tests the host serves: concurrent tests share the
//!   NIC and spoil each other's figures.
//! - A busy responder is retried with backoff inside the interval.
//! - A run whose peer asks this host for a test at the same moment may
//!   give way to it (see [`crate::slot::gives_way`]): the served test goes
//!   first and the run takes the slot right after it, at most
//!   [`YIELDS_PER_RUN`] times per run.
//! - Every run has a hard deadline.
//! - A run that cannot start before its next one is due is skipped and
//!   counted, rather than piling up; so is a run whose expected bytes do
//!   not fit the host's byte budget (the runner decides: [`budget`]).
//! - [`Scheduler::update`] applies a new job set: removed jobs stop, changed
//!   ones restart, unchanged ones keep their rhythm.

#![warn(missing_docs)]

pub mod budget;
pub mod mesh;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::future::BoxFuture;
use crate::slot::HostSlot;

/// Identifies a job: one module run against one target.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey {
    /// The `target` label.
    pub target: String,
    /// The module's name.
    pub module: String,
}

impl std::fmt::Display for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.target, self.module)
    }
}

/// A job as the scheduler sees it; `payload` is what the runner needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Job<P> {
    /// Which job this is; one task per key.
    pub key: JobKey,
    /// Time between the starts of two runs.
    pub interval: Duration,
    /// Hard deadline of one run (retries on busy included).
    pub timeout: Duration,
    /// What the runner needs to run it.
    pub payload: P,
}

/// How one attempt ended, as far as scheduling cares.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// Finished, well or badly; the runner has recorded the result.
    Done,
    /// The responder was busy; try again after this long if time allows.
    Busy(Duration),
}

/// Why a run did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// It could not start before its next run was due (others held the slot).
    Missed,
    /// The responder stayed busy for the whole interval.
    Busy,
    /// The run passed its hard deadline.
    Timeout,
    /// Its expected bytes did not fit the host's byte budget
    /// (`scheduler.max_bytes_per_hour`).
    Budget,
}

impl Skip {
    /// Every reason, so that the skip counters can exist at 0 from the start.
    pub const ALL: [Skip; 4] = [Skip::Missed, Skip::Busy, Skip::Timeout, Skip::Budget];

    /// The `reason` label of the skip counter.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::Missed => "missed",
            Skip::Busy => "busy",
            Skip::Timeout => "timeout",
            Skip::Budget => "byte_budget",
        }
    }
}

/// Runs jobs and records their results; the scheduler only times them.
pub trait Runner<P>: Send + Sync + 'static {
    /// One attempt of `job`.
    fn attempt(&self, job: &Job<P>) -> BoxFuture<Attempt>;
    /// One attempt of `job` that should be over by `cut_at` (the mesh
    /// slot's end, less what the end of a test takes): a probe that can
    /// stop early (an adaptive one) stops then and reports itself cut.
    /// By default a plain attempt, which the caller's deadline bounds.
    fn attempt_until(&self, job: &Job<P>, cut_at: tokio::time::Instant) -> BoxFuture<Attempt> {
        let _ = cut_at;
        self.attempt(job)
    }
    /// A run that did not happen or did not finish.
    fn skipped(&self, job: &Job<P>, why: Skip);
    /// How late a run started against its planned time.
    fn lag(&self, _job: &Job<P>, _lag: Duration) {}
}

/// Scheduling knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    /// Runs at once (at least 1).
    pub max_concurrent: usize,
    /// Random jitter added to each start, as a fraction of the interval.
    pub jitter: f64,
    /// First wait after a busy reply when the responder gives no hint;
    /// doubled on each further busy reply up to `busy_backoff_max`.
    pub busy_backoff: Duration,
    /// Cap of the doubled wait.
    pub busy_backoff_max: Duration,
    /// Retries after busy replies before the run is given up as busy.
    pub busy_retries: u32,
    /// Seed of the phase hash; this host's name, so that two hosts probing
    /// each other get different phases for the same pair.
    pub phase_seed: String,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_concurrent: 1,
            jitter: 0.1,
            busy_backoff: Duration::from_secs(2),
            busy_backoff_max: Duration::from_secs(30),
            busy_retries: 3,
            phase_seed: String::new(),
        }
    }
}

/// How many times one run may give way to the peer it probes before it
/// holds the slot against it: enough for the peer's own runs for us that
/// come back to back (a few modules, two tests each for `both`: two
/// allowed too few, and the clashes left ended busy); bounded, so that a
/// peer asking again and again cannot keep our probe out
/// (docs/SECURITY.md), and the run's interval bounds it as well.
pub const YIELDS_PER_RUN: u32 = 8;

/// FNV-1a: stable across runs and releases, unlike std's hasher.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The job's stable offset within its interval.
pub fn phase(key: &JobKey, seed: &str, interval: Duration) -> Duration {
    let ms = interval.as_millis().max(1) as u64;
    Duration::from_millis(fnv1a(&[seed, &key.target, &key.module]) % ms)
}

fn random_unit() -> f64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

/// One task per job, started and stopped by [`Scheduler::update`].
pub struct Scheduler<P, R> {
    runner: Arc<R>,
    config: SchedulerConfig,
    slot: Arc<HostSlot>,
    tasks: HashMap<JobKey, (Job<P>, JoinHandle<()>)>,
    /// Reference point for phases, so that the first runs come soon after start.
    epoch: Instant,
}

impl<P, R> Scheduler<P, R>
where
    P: Clone + PartialEq + Send + Sync + 'static,
    R: Runner<P>,
{
    /// A scheduler with no jobs yet, whose runs take `slot`.
    pub fn new(runner: Arc<R>, config: SchedulerConfig, slot: Arc<HostSlot>) -> Self {
        Scheduler {
            runner,
            config,
            slot,
            tasks: HashMap::new(),
            epoch: Instant::now(),
        }
    }

    /// Applies a new set of jobs.
    pub fn update(&mut self, jobs: Vec<Job<P>>) {
        let mut next: HashMap<JobKey, Job<P>> =
            jobs.into_iter().map(|j| (j.key.clone(), j)).collect();
        self.tasks.retain(|key, (job, handle)| match next.get(key) {
            Some(new) if new == job => {
                next.remove(key);
                true
            }
            _ => {
                handle.abort();
                false
            }
        });
        for (key, job) in next {
            let handle = tokio::spawn(run_job(
                job.clone(),
                self.runner.clone(),
                self.slot.clone(),
                self.config.clone(),
                self.epoch,
            ));
            self.tasks.insert(key, (job, handle));
        }
    }

    /// The jobs scheduled now, sorted.
    pub fn keys(&self) -> Vec<JobKey> {
        let mut k: Vec<_> = self.tasks.keys().cloned().collect();
        k.sort();
        k
    }

    /// Stops scheduling; runs in progress are dropped, which closes their
    /// connections and so tells their peers.
    pub async fn shutdown(&mut self) {
        for (_, (_, handle)) in self.tasks.drain() {
            handle.abort();
            let _ = handle.await;
        }
    }
}

impl<P, R> Drop for Scheduler<P, R> {
    fn drop(&mut self) {
        for (_, (_, handle)) in self.tasks.drain() {
            handle.abort();
        }
    }
}

async fn run_job<P, R: Runner<P>>(
    job: Job<P>,
    runner: Arc<R>,
    slot: Arc<HostSlot>,
    config: SchedulerConfig,
    epoch: Instant,
) {
    let interval = job.interval.max(Duration::from_millis(100));
    let offset = phase(&job.key, &config.phase_seed, interval);
    // The first run is at the job's phase within the first interval after
    // the epoch; later runs follow every interval.
    let mut planned = epoch + offset;
    let now = Instant::now();
    while planned < now {
        planned += interval;
    }
    // A first run right away, so that a fresh service or a new target shows
    // figures within seconds rather than up to an interval later. It only
    // takes a free slot before the job's phased run is due, and is not
    // counted as missed otherwise: on a large fleet it simply does not happen.
    if planned > now + Duration::from_secs(1) {
        run_once(&job, &*runner, &slot, &config, now, planned, true).await;
    }
    loop {
        let jitter = interval.mul_f64((config.jitter * random_unit()).clamp(0.0, 0.5));
        let start_at = planned + jitter;
        tokio::time::sleep_until(start_at).await;
        let next_due = planned + interval;
        run_once(&job, &*runner, &slot, &config, start_at, next_due, false).await;
        planned = next_due;
        // After a long stall, skip the runs that are already in the past.
        let now = Instant::now();
        while planned + interval <= now {
            runner.skipped(&job, Skip::Missed);
            planned += interval;
        }
    }
}

/// One run: takes a slot (waiting at most until `next_due`), then attempts,
/// retrying a busy responder with backoff. An `opportunistic` run (the first
/// after start) that finds no slot in time is dropped without counting.
#[allow(clippy::too_many_arguments)]
async fn run_once<P, R: Runner<P>>(
    job: &Job<P>,
    runner: &R,
    slot: &Arc<HostSlot>,
    config: &SchedulerConfig,
    start_at: Instant,
    next_due: Instant,
    opportunistic: bool,
) {
    let mut backoff = config.busy_backoff;
    let mut first = true;
    let mut retries = 0;
    let mut yields_left = YIELDS_PER_RUN;
    loop {
        // The job's deadline stands for how long it holds the slot: a
        // prober refused meanwhile is told to come back after it.
        let permit = match slot
            .acquire_probe(config.max_concurrent, job.timeout, next_due)
            .await
        {
            Ok(p) => p,
            Err(_) => {
                // Only a run that a responder told busy ends busy. One that
                // only gave way to its peer and then found the slot taken
                // until its next run (served tests, our other probes) was
                // crowded out like one that never got the slot: missed.
                if retries > 0 {
                    runner.skipped(job, Skip::Busy);
                } else if !opportunistic {
                    runner.skipped(job, Skip::Missed);
                }
                return;
            }
        };
        if first {
            runner.lag(job, Instant::now().saturating_duration_since(start_at));
            first = false;
        }
        // The probe reports whom it aims at and when its data starts
        // through the claim; until then its peer, asking us at the same
        // moment, may be served first.
        let claim = permit.claim(yields_left > 0);
        let attempt = claim.scope(tokio::time::timeout(job.timeout, runner.attempt(job)));
        let outcome = tokio::select! {
            // A run that finished as the way was given keeps its result.
            biased;
            o = attempt => Some(o),
            () = permit.given_way() => None,
        };
        // Gave way: the attempt is dropped (which closes its connections;
        // no data had moved) and nothing is recorded; the slot now serves
        // the peer's test, and taking it again waits for that test and
        // has the next turn after it. A busy answer that raced the yield
        // is the peer's side of the same clash, and ends the same way.
        let gave_way =
            permit.has_given_way() && matches!(outcome, None | Some(Ok(Attempt::Busy(_))));
        // Others may use the slot while this job waits for a busy responder.
        drop(permit);
        if gave_way {
            yields_left = yields_left.saturating_sub(1);
            continue;
        }
        let Some(outcome) = outcome else { continue };
        match outcome {
            Err(_) => {
                runner.skipped(job, Skip::Timeout);
                return;
            }
            Ok(Attempt::Done) => return,
            Ok(Attempt::Busy(hint)) => {
                // Two hosts probing each other get each other's busy at
                // the same moment with like hints: a random share of the
                // wait on top keeps them from retrying in lockstep.
                let spread = |base: Duration| base + base.mul_f64(0.5 * random_unit());
                let mut wait = spread(hint.max(backoff));
                // The hint is the holder's deadline, and tests mostly end
                // before theirs: when it would pass the next run, the
                // backoff alone is tried instead, so that two hosts with a
                // short interval still meet between each other's tests.
                if Instant::now() + wait >= next_due {
                    wait = spread(backoff);
                }
                backoff = (backoff * 2).min(config.busy_backoff_max);
                retries += 1;
                if retries > config.busy_retries || Instant::now() + wait >= next_due {
                    runner.skipped(job, Skip::Busy);
                    return;
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records every attempt; `busy_first` attempts per job answer busy, and
    /// each attempt takes `work` of (paused) time.
    #[derive(Default)]
    struct FakeRunner {
        work: Duration,
        busy_first: usize,
        attempts: Mutex<Vec<(JobKey, Instant)>>,
        skips: Mutex<Vec<(JobKey, Skip)>>,
        running: Arc<std::sync::atomic::AtomicUsize>,
        max_running: std::sync::atomic::AtomicUsize,
    }

    impl Runner<()> for FakeRunner {
        fn attempt(&self, job: &Job<()>) -> BoxFuture<Attempt> {
            use std::sync::atomic::Ordering::SeqCst;
            let n = {
                let mut a = self.attempts.lock().unwrap();
                a.push((job.key.clone(), Instant::now()));
                a.iter().filter(|(k, _)| *k == job.key).count()
            };
            let busy = n <= self.busy_first;
            let work = self.work;
            let now = self.running.fetch_add(1, SeqCst) + 1;
            self.max_running.fetch_max(now, SeqCst);
            let running = self.running.clone();
            Box::pin(async move {
                tokio::time::sleep(work).await;
                running.fetch_sub(1, SeqCst);
                if busy {
                    Attempt::Busy(Duration::ZERO)
                } else {
                    Attempt::Done
                }
            })
        }
        fn skipped(&self, job: &Job<()>, why: Skip) {
            self.skips.lock().unwrap().push((job.key.clone(), why));
        }
    }

    fn job(target: &str, interval: Duration) -> Job<()> {
        Job {
            key: JobKey {
                target: target.into(),
                module: "tcp".into(),
            },
            interval,
            timeout: Duration::from_secs(30),
            payload: (),
        }
    }

    fn config(max_concurrent: usize) -> SchedulerConfig {
        SchedulerConfig {
            max_concurrent,
            jitter: 0.0,
            busy_backoff: Duration::from_secs(1),
            busy_backoff_max: Duration::from_secs(30),
            busy_retries: 10,
            phase_seed: "host-a".into(),
        }
    }

    #[test]
    fn phases_are_stable_and_spread_over_the_interval() {
        let interval = Duration::from_secs(60);
        let mut phases: Vec<Duration> = (0..1000)
            .map(|i| {
                phase(
                    &JobKey {
                        target: format!("peer{i}"),
                        module: "tcp".into(),
                    },
                    "host-a",
                    interval,
                )
            })
            .collect();
        let k = JobKey {
            target: "peer1".into(),
            module: "tcp".into(),
        };
        assert_eq!(phase(&k, "host-a", interval), phase(&k, "host-a", interval));
        // The same pair seen from another host lands elsewhere.
        assert_ne!(phase(&k, "host-a", interval), phase(&k, "host-b", interval));
        phases.sort();
        assert!(phases[0] < Duration::from_secs(1) && phases[999] > Duration::from_secs(59));
        // No second of the minute holds more than 3x its fair share.
        let mut per_second = [0u32; 60];
        for p in &phases {
            per_second[p.as_secs() as usize] += 1;
        }
        assert!(per_second.iter().all(|&n| n < 50), "{per_second:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn jobs_run_every_interval_at_their_phase() {
        let runner = Arc::new(FakeRunner {
            work: Duration::from_millis(10),
            ..Default::default()
        });
        let mut s = Scheduler::new(runner.clone(), config(1), HostSlot::new());
        let start = Instant::now();
        let j = job("a", Duration::from_secs(10));
        let offset = phase(&j.key, "host-a", j.interval);
        s.update(vec![j]);
        tokio::time::sleep(Duration::from_secs(35)).await;
        let times: Vec<Duration> = runner
            .attempts
            .lock()
            .unwrap()
            .iter()
            .map(|(_, t)| *t - start)
            .collect();
        // A first run right away, then one at the phase of every interval.
        let mut want = vec![Duration::ZERO];
        want.extend(
            (0..4)
                .map(|i| offset + Duration::from_secs(10 * i))
                .filter(|t| *t < Duration::from_secs(35)),
        );
        assert!(
            offset > Duration::from_secs(1),
            "this key's phase is {offset:?}"
        );
        assert_eq!(times.len(), want.len(), "{times:?}");
        for (t, w) in times.iter().zip(&want) {
            assert!(
                t.abs_diff(*w) < Duration::from_millis(5),
                "{times:?} vs {want:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_one_probe_runs_at_a_time() {
        let runner = Arc::new(FakeRunner {
            work: Duration::from_secs(5),
            ..Default::default()
        });
        let mut s = Scheduler::new(runner.clone(), config(1), HostSlot::new());
        s.update(
            (0..10)
                .map(|i| job(&format!("t{i}"), Duration::from_secs(60)))
                .collect(),
        );
        // 50 s of work per 60 s interval, plus the opportunistic first runs:
        // which job waits longest depends on the order the jobs were spawned
        // in (a HashMap's), but a phased run has at most nine others ahead
        // of it in the slot's queue, so each job has run within 50 s of its
        // phase, that is within two intervals.
        tokio::time::sleep(Duration::from_secs(120)).await;
        use std::sync::atomic::Ordering::SeqCst;
        assert_eq!(runner.max_running.load(SeqCst), 1);
        let ran: std::collections::BTreeSet<_> = runner
            .attempts
            .lock()
            .unwrap()
            .iter()
            .map(|(k, _)| k.target.clone())
            .collect();
        assert_eq!(ran.len(), 10);

        // Ten runs of 1 s, plus their first runs at start, fit in a minute: none is skipped.
        let light = Arc::new(FakeRunner {
            work: Duration::from_secs(1),
            ..Default::default()
        });
        let mut s3 = Scheduler::new(light.clone(), config(1), HostSlot::new());
        s3.update(
            (0..10)
                .map(|i| job(&format!("t{i}"), Duration::from_secs(60)))
                .collect(),
        );
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(
            light.skips.lock().unwrap().is_empty(),
            "{:?}",
            light.skips.lock().unwrap()
        );
        assert_eq!(light.max_running.load(SeqCst), 1);

        // Two slots allow two at once.
        let runner2 = Arc::new(FakeRunner {
            work: Duration::from_secs(5),
            ..Default::default()
        });
        let mut s2 = Scheduler::new(runner2.clone(), config(2), HostSlot::new());
        s2.update(
            (0..10)
                .map(|i| job(&format!("t{i}"), Duration::from_secs(10)))
                .collect(),
        );
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(runner2.max_running.load(SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_served_test_holds_the_scheduled_probe_back() {
        use crate::slot::{Role, SlotReason};
        let runner = Arc::new(FakeRunner {
            work: Duration::from_secs(5),
            ..Default::default()
        });
        let slot = HostSlot::new();
        // The host serves a test for the first 3 s.
        let served = slot
            .try_serve(1, std::time::Instant::now() + Duration::from_secs(3))
            .unwrap();
        let mut s = Scheduler::new(runner.clone(), config(1), slot.clone());
        let start = Instant::now();
        s.update(vec![job("a", Duration::from_secs(60))]);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(runner.attempts.lock().unwrap().is_empty());
        // The waiting probe has the next turn: a new prober is told busy.
        assert_eq!(
            slot.try_serve(1, std::time::Instant::now())
                .unwrap_err()
                .reason,
            SlotReason::ProbeWaiting
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(served);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let first = runner.attempts.lock().unwrap()[0].1;
        assert_eq!(first - start, Duration::from_secs(3));
        // While it probes out, the host refuses probers.
        assert_eq!(slot.held(Role::Probing), 1);
        assert_eq!(
            slot.try_serve(1, std::time::Instant::now())
                .unwrap_err()
                .reason,
            SlotReason::Probing
        );
        assert_eq!(slot.counters().waits(SlotReason::Serving), 1);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(slot.held(Role::Probing), 0);

        // A served test that outlasts the interval: the run is missed, and
        // counted so.
        let runner = Arc::new(FakeRunner::default());
        let slot = HostSlot::new();
        let _served = slot.try_serve(1, std::time::Instant::now()).unwrap();
        let mut s = Scheduler::new(runner.clone(), config(1), slot.clone());
        s.update(vec![job("a", Duration::from_secs(10))]);
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert!(runner.attempts.lock().unwrap().is_empty());
        let skips = runner.skips.lock().unwrap();
        assert!(
            !skips.is_empty() && skips.iter().all(|(_, w)| *w == Skip::Missed),
            "{skips:?}"
        );
        assert!(slot.counters().wait_timeouts(SlotReason::Serving) >= 2);
    }

    /// A probe that aims at 10.0.0.2:5301 as soon as it starts, then
    /// takes `work`; records when each attempt started and finished.
    struct AimingRunner {
        work: Duration,
        started: Mutex<Vec<Instant>>,
        finished: Arc<Mutex<Vec<Instant>>>,
    }

    impl Runner<()> for AimingRunner {
        fn attempt(&self, _job: &Job<()>) -> BoxFuture<Attempt> {
            self.started.lock().unwrap().push(Instant::now());
            let (work, finished) = (self.work, self.finished.clone());
            Box::pin(async move {
                crate::slot::aim("10.0.0.2:5301".parse().unwrap());
                tokio::time::sleep(work).await;
                finished.lock().unwrap().push(Instant::now());
                Attempt::Done
            })
        }
        fn skipped(&self, _job: &Job<()>, why: Skip) {
            panic!("skipped: {why:?}");
        }
    }

    /// Our run, aimed at 10.0.0.2, is asked for a test
    /// by 10.0.0.2 before it moves data; this end (10.0.0.1) has the lower
    /// address, so it serves the peer and runs right after, at most
    /// YIELDS_PER_RUN times, and then holds firm.
    #[tokio::test(start_paused = true)]
    async fn a_run_gives_way_to_its_peer_and_runs_right_after() {
        use crate::slot::{Asker, Role, SlotReason};
        let runner = Arc::new(AimingRunner {
            work: Duration::from_secs(5),
            started: Mutex::new(Vec::new()),
            finished: Arc::new(Mutex::new(Vec::new())),
        });
        let slot = HostSlot::new();
        let mut s = Scheduler::new(runner.clone(), config(1), slot.clone());
        s.update(vec![job("b", Duration::from_secs(60))]);
        while runner.started.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let asker = Some(Asker {
            peer: "10.0.0.2:40000".parse().unwrap(),
            local: "10.0.0.1:5301".parse().unwrap(),
        });
        let serve =
            || slot.try_serve_from(1, std::time::Instant::now() + Duration::from_secs(2), asker);
        for n in 1..=YIELDS_PER_RUN as usize {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let served = serve().expect("the run gives way");
            assert_eq!(slot.counters().yields(), n as u64);
            tokio::time::sleep(Duration::from_secs(2)).await;
            // The called-off attempt recorded nothing, and the run waits.
            assert!(runner.finished.lock().unwrap().is_empty());
            assert_eq!(runner.started.lock().unwrap().len(), n);
            assert_eq!(slot.held(Role::Probing), 0);
            let freed = Instant::now();
            drop(served);
            tokio::time::sleep(Duration::from_millis(1)).await;
            // Taken again the moment the served test ended.
            assert_eq!(runner.started.lock().unwrap()[n], freed);
        }
        // The allowance is spent: the peer is told busy this time.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(serve().unwrap_err().reason, SlotReason::Probing);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(runner.finished.lock().unwrap().len(), 1);
        assert_eq!(
            runner.started.lock().unwrap().len(),
            YIELDS_PER_RUN as usize + 1
        );
        assert_eq!(slot.counters().yields(), YIELDS_PER_RUN as u64);
    }

    #[tokio::test(start_paused = true)]
    async fn runs_that_cannot_start_in_their_interval_are_skipped() {
        // Three jobs of 8 s each every 10 s cannot all run with one slot.
        let runner = Arc::new(FakeRunner {
            work: Duration::from_secs(8),
            ..Default::default()
        });
        let mut s = Scheduler::new(runner.clone(), config(1), HostSlot::new());
        s.update(
            (0..3)
                .map(|i| job(&format!("t{i}"), Duration::from_secs(10)))
                .collect(),
        );
        tokio::time::sleep(Duration::from_secs(60)).await;
        let skips = runner.skips.lock().unwrap();
        assert!(skips.iter().any(|(_, w)| *w == Skip::Missed), "{skips:?}");
        use std::sync::atomic::Ordering::SeqCst;
        assert_eq!(runner.max_running.load(SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn busy_is_retried_with_backoff_inside_the_interval() {
        let runner = Arc::new(FakeRunner {
            work: Duration::ZERO,
            busy_first: 3,
            ..Default::default()
        });
        let mut s = Scheduler::new(runner.clone(), config(1), HostSlot::new());
        s.update(vec![job("a", Duration::from_secs(60))]);
        tokio::time::sleep(Duration::from_secs(60)).await;
        let times: Vec<Instant> = runner
            .attempts
            .lock()
            .unwrap()
            .iter()
            .map(|(_, t)| *t)
            .collect();
        assert!(times.len() >= 4, "{times:?}");
        let gaps: Vec<Duration> = times.windows(2).take(3).map(|w| w[1] - w[0]).collect();
        // The backoff doubles; each wait has up to half again on top, at
        // random, so that two hosts busy with each other do not retry in
        // lockstep.
        for (gap, base) in gaps.iter().zip([1, 2, 4]) {
            let base = Duration::from_secs(base);
            assert!(*gap >= base && *gap <= base.mul_f64(1.5), "{gaps:?}");
        }
        assert!(runner.skips.lock().unwrap().is_empty());

        // Busy for ever: given up before the next run is due, counted as busy.
        let stubborn = Arc::new(FakeRunner {
            work: Duration::ZERO,
            busy_first: usize::MAX,
            ..Default::default()
        });
        let mut s2 = Scheduler::new(stubborn.clone(), config(1), HostSlot::new());
        s2.update(vec![job("b", Duration::from_secs(20))]);
        tokio::time::sleep(Duration::from_secs(40)).await;
        let skips = stubborn.skips.lock().unwrap();
        assert!(
            !skips.is_empty() && skips.iter().all(|(_, w)| *w == Skip::Busy),
            "{skips:?}"
        );
        // 1+2+4 s of backoff (and up to half again) fits a 20 s interval;
        // the wait that would pass the next run is not taken.
        let first_run: Vec<_> = stubborn
            .attempts
            .lock()
            .unwrap()
            .iter()
            .map(|(_, t)| *t)
            .collect();
        let start = first_run[0];
        let first_run: Vec<Instant> = first_run
            .into_iter()
            .take_while(|t| t.duration_since(start) < Duration::from_secs(20))
            .collect();
        let gaps: Vec<Duration> = first_run.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.len() >= 3, "{gaps:?}");
        for (gap, base) in gaps.iter().zip([1, 2, 4]) {
            let base = Duration::from_secs(base);
            assert!(*gap >= base && *gap <= base.mul_f64(1.5), "{gaps:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_past_its_deadline_is_cut_and_counted() {
        let runner = Arc::new(FakeRunner {
            work: Duration::from_secs(100),
            ..Default::default()
        });
        let mut s = Scheduler::new(runner.clone(), config(1), HostSlot::new());
        let mut j = job("slow", Duration::from_secs(60));
        j.timeout = Duration::from_secs(10);
        s.update(vec![j]);
        tokio::time::sleep(Duration::from_secs(60)).await;
        let skips = runner.skips.lock().unwrap();
        // The first run at start and the phased one were both cut at 10 s.
        assert!(
            !skips.is_empty() && skips.iter().all(|(_, w)| *w == Skip::Timeout),
            "{skips:?}"
        );
        assert_eq!(runner.attempts.lock().unwrap().len(), skips.len());
    }

    #[tokio::test(start_paused = true)]
    async fn removed_jobs_stop_and_unchanged_ones_keep_running() {
        let runner = Arc::new(FakeRunner {
            work: Duration::from_millis(1),
            ..Default::default()
        });
        let mut s = Scheduler::new(runner.clone(), config(1), HostSlot::new());
        s.update(vec![
            job("keep", Duration::from_secs(10)),
            job("drop", Duration::from_secs(10)),
        ]);
        tokio::time::sleep(Duration::from_secs(20)).await;
        s.update(vec![job("keep", Duration::from_secs(10))]);
        assert_eq!(
            s.keys(),
            vec![JobKey {
                target: "keep".into(),
                module: "tcp".into()
            }]
        );
        let cut = Instant::now();
        tokio::time::sleep(Duration::from_secs(30)).await;
        {
            // Scoped, so that the lock is not held across the awaits below.
            let attempts = runner.attempts.lock().unwrap();
            assert!(
                attempts.iter().all(|(k, t)| k.target == "keep" || *t < cut),
                "a removed job ran again"
            );
            assert!(
                attempts
                    .iter()
                    .filter(|(k, t)| k.target == "keep" && *t >= cut)
                    .count()
                    >= 3
            );
        }
        s.shutdown().await;
        let n = runner.attempts.lock().unwrap().len();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(
            runner.attempts.lock().unwrap().len(),
            n,
            "nothing runs after shutdown"
        );
    }
}
