//! Runs this host's part of a mesh plan ([`MeshPlan`]: a full mesh, or one
//! grouped by a label): in each slot where the plan makes it the prober,
//! one attempt of the job for that target and module.
//!
//! - The slot is read off the wall clock (UTC), the same on every host.
//! - A run starts one guard after its slot starts, so that a peer whose
//!   clock is a little behind has finished the slot before; it waits for
//!   the host's test slot at most one more guard (counted), and is cut at
//!   the slot's end.
//! - A busy peer is not retried: a retry would spill into the next slot,
//!   and the next cycle comes soon. It is counted as busy.
//! - Jobs the plan does not pair (loopback modules, [`LocalJob`]) run at
//!   their interval in a window where this host has no planned test in
//!   either role ([`MeshPlan::next_free`]), a guard clear of its slots, and
//!   are cut at the window's end: they never hold the host slot when a
//!   planned peer test is due. A job no window fits is counted as missed.
//! - A new plan (members changed) takes over at the first of its own cycle
//!   boundaries after the current cycle ends, so that hosts that saw the
//!   change at slightly different times switch together. The first plan
//!   of a fresh service starts at once, in the slot of the moment.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Attempt, Job, JobKey, Runner, Skip};
use crate::mesh::MeshPlan;
use crate::slot::HostSlot;

/// Unix time now; a function so that tests can run on paused tokio time.
pub type WallClock = Arc<dyn Fn() -> Duration + Send + Sync>;

/// The system's wall clock.
pub fn system_clock() -> WallClock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
    })
}

/// A plan and what this host runs in it.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshSchedule<P> {
    /// The plan every member follows.
    pub plan: MeshPlan,
    /// This host's index among the members.
    pub me: usize,
    /// The job for each (target index, module index) this host probes.
    pub jobs: HashMap<(usize, usize), Job<P>>,
    /// Margin for clock skew at each end of a slot.
    pub guard: Duration,
    /// Time kept at the end of a slot for a run that is cut there (the
    /// prober's `End`, the drain and the results of an adaptive run): a run is
    /// told to stop this long before its slot ends ([`Runner::attempt_until`]).
    pub end_reserve: Duration,
    /// Jobs the plan does not pair: loopback modules.
    pub local: Vec<LocalJob<P>>,
}

/// A job of this host alone (a loopback module), run between its planned
/// tests.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalJob<P> {
    /// The job, as the plain scheduler would run it.
    pub job: Job<P>,
    /// Time a run needs, set-up included: the window it must find. A run
    /// is cut when it is over.
    pub need: Duration,
}

/// The local job to run next: when, which, and whether a window fits it
/// at all (when none does, the time is when it is due, to count a miss).
fn next_local<P>(
    s: &MeshSchedule<P>,
    due: &HashMap<JobKey, Duration>,
    now: Duration,
) -> Option<(Duration, usize, bool)> {
    s.local
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let from = due.get(&l.job.key).copied().unwrap_or(now).max(now);
            match s.plan.next_free(s.me, from, l.need, s.guard) {
                Some(t) => (t, i, true),
                None => (from, i, false),
            }
        })
        .min()
}

/// The task that follows the plan; stopped when dropped.
pub struct MeshScheduler<P> {
    tx: watch::Sender<Option<Arc<MeshSchedule<P>>>>,
    task: JoinHandle<()>,
}

impl<P> MeshScheduler<P>
where
    P: Clone + Send + Sync + 'static,
{
    /// Starts following `schedule` (or nothing yet).
    pub fn start<R: Runner<P>>(
        runner: Arc<R>,
        slot: Arc<HostSlot>,
        clock: WallClock,
        schedule: Option<MeshSchedule<P>>,
    ) -> Self {
        let (tx, rx) = watch::channel(schedule.map(Arc::new));
        let task = tokio::spawn(run(rx, runner, slot, clock));
        MeshScheduler { tx, task }
    }

    /// A new plan, taken over at the next cycle boundary; the same one
    /// again changes nothing.
    pub fn update(&self, schedule: Option<MeshSchedule<P>>)
    where
        P: PartialEq,
    {
        self.tx.send_if_modified(|cur| {
            if cur.as_deref() == schedule.as_ref() {
                return false;
            }
            *cur = schedule.map(Arc::new);
            true
        });
    }

    /// Stops; a run in progress is dropped.
    pub async fn shutdown(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl<P> Drop for MeshScheduler<P> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The next slot of `s` where this host probes, starting at or after
/// `now - guard` (a slot whose start passed less than a guard ago still
/// runs): its start (Unix time) and test.
fn next_run<P>(s: &MeshSchedule<P>, now: Duration) -> Option<(Duration, (usize, usize))> {
    let plan = &s.plan;
    if plan.slots() == 0 {
        return None;
    }
    let at = plan.slot_at(now.saturating_sub(s.guard));
    let (mut cycle, mut index) = (at.cycle, at.index);
    if plan.cycle_start(cycle) + plan.period() * index as u32 + s.guard < now {
        index += 1;
    }
    // At most one full cycle ahead: a host with no test as prober in a
    // whole cycle has none at all. (In a grouped plan every host probes in
    // its group's tournament each cycle, or, alone in its group,
    // represents it each cycle.)
    for _ in 0..=plan.slots() {
        if index >= plan.slots() {
            index = 0;
            cycle += 1;
        }
        if let Some(t) = plan
            .test_of(s.me, cycle, index)
            .filter(|t| t.prober == s.me)
        {
            let start = plan.cycle_start(cycle) + plan.period() * index as u32;
            return Some((start, (t.target, t.module)));
        }
        index += 1;
    }
    None
}

async fn run<P, R: Runner<P>>(
    mut rx: watch::Receiver<Option<Arc<MeshSchedule<P>>>>,
    runner: Arc<R>,
    slot: Arc<HostSlot>,
    clock: WallClock,
) {
    let mut current = rx.borrow_and_update().clone();
    // A plan waiting for its first cycle: it and when that cycle starts.
    let mut pending: Option<(Option<Arc<MeshSchedule<P>>>, Duration)> = None;
    // When each local job is next due (absent: now).
    let mut due: HashMap<JobKey, Duration> = HashMap::new();
    loop {
        let now = clock();
        if pending.as_ref().is_some_and(|(_, at)| *at <= now) {
            current = pending.take().and_then(|(s, _)| s);
        }
        let next = current.as_ref().and_then(|s| next_run(s, now));
        // Sleep until the next run, the switch to a new plan, or news.
        let switch_at = pending.as_ref().map(|(_, at)| *at);
        let planned_at = next.map(|(start, _)| start + current_guard(&current));
        let local = current.as_ref().and_then(|s| next_local(s, &due, now));
        let wake = [switch_at, planned_at, local.map(|l| l.0)]
            .into_iter()
            .flatten()
            .min();
        let sleep = async {
            match wake {
                Some(at) => tokio::time::sleep(at.saturating_sub(clock())).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
                let new = rx.borrow_and_update().clone();
                let now = clock();
                pending = Some(match (&current, &new) {
                    (Some(old), Some(n)) => {
                        // After the cycle in progress, at the new plan's
                        // first boundary.
                        (new.clone(), n.plan.takes_over_at(&old.plan, now))
                    }
                    // Nothing to switch from (a fresh service): the slot
                    // of the moment is the same on every host, so start now.
                    (None, Some(_)) => (new.clone(), now),
                    // No plan any more: stop at once.
                    (_, None) => (None, now),
                });
                continue;
            }
        }
        if switch_at.is_some_and(|sw| sw <= clock()) {
            continue;
        }
        let Some(s) = current.clone() else {
            continue;
        };
        // A local job whose window comes before the next planned run (it
        // ends a guard before that run's slot starts).
        if let Some((t, i, fits)) = local.filter(|l| planned_at.is_none_or(|p| l.0 < p)) {
            if t > clock() {
                continue;
            }
            let l = &s.local[i];
            if fits {
                run_local(&s, l, t, &*runner, &slot, &clock).await;
            } else {
                runner.skipped(&l.job, Skip::Missed);
            }
            due.insert(l.job.key.clone(), t + l.job.interval);
            continue;
        }
        let Some((start, key)) = next else {
            continue;
        };
        let Some(job) = s.jobs.get(&key) else {
            // A module this target does not run: the slot stays empty.
            continue;
        };
        run_slot(&s, job, start, &*runner, &slot, &clock).await;
        // Never run one slot twice.
        let after = start + s.guard + Duration::from_millis(1);
        let now = clock();
        if now < after {
            tokio::time::sleep(after - now).await;
        }
    }
}

/// One run of a local job in the window from `t`, cut at its end.
async fn run_local<P, R: Runner<P>>(
    s: &MeshSchedule<P>,
    l: &LocalJob<P>,
    t: Duration,
    runner: &R,
    slot: &Arc<HostSlot>,
    clock: &WallClock,
) {
    let end = t + l.need;
    let until = |x: Duration| tokio::time::Instant::now() + x.saturating_sub(clock());
    // A peer with another view of the plan may be testing with this host.
    let Ok(permit) = slot
        .acquire_probe(1, end.saturating_sub(clock()), until(t + s.guard))
        .await
    else {
        runner.skipped(&l.job, Skip::Missed);
        return;
    };
    runner.lag(&l.job, clock().saturating_sub(t));
    let outcome = tokio::time::timeout_at(until(end), runner.attempt(&l.job)).await;
    drop(permit);
    match outcome {
        Err(_) => runner.skipped(&l.job, Skip::Timeout),
        Ok(Attempt::Done) => {}
        Ok(Attempt::Busy(_)) => runner.skipped(&l.job, Skip::Busy),
    }
}

fn current_guard<P>(s: &Option<Arc<MeshSchedule<P>>>) -> Duration {
    s.as_ref().map_or(Duration::ZERO, |s| s.guard)
}

async fn run_slot<P, R: Runner<P>>(
    s: &MeshSchedule<P>,
    job: &Job<P>,
    start: Duration,
    runner: &R,
    slot: &Arc<HostSlot>,
    clock: &WallClock,
) {
    let begin = start + s.guard;
    let end = start + s.plan.slot();
    let now = clock();
    let until = |t: Duration| tokio::time::Instant::now() + t.saturating_sub(clock());
    // A test this host serves (a peer that sees another plan) may hold the
    // slot; wait a guard for it, no more.
    let Ok(permit) = slot
        .acquire_probe(1, end.saturating_sub(now), until(begin + s.guard))
        .await
    else {
        runner.skipped(job, Skip::Missed);
        return;
    };
    runner.lag(job, clock().saturating_sub(begin));
    // The run is told to end before the slot does (an adaptive probe then
    // ends with `End` and reports itself cut); the slot's end is the hard
    // deadline of one that does not, so that no test overlaps the next slot.
    let cut_at = until(end.saturating_sub(s.end_reserve));
    let outcome = tokio::time::timeout_at(until(end), runner.attempt_until(job, cut_at)).await;
    drop(permit);
    match outcome {
        Err(_) => runner.skipped(job, Skip::Timeout),
        Ok(Attempt::Done) => {}
        Ok(Attempt::Busy(_)) => runner.skipped(job, Skip::Busy),
    }
}

#[cfg(test)]
mod tests {
    use super::super::JobKey;
    use super::*;
    use crate::future::BoxFuture;
    use crate::mesh::{MeshParams, Plan};
    use crate::slot::SlotReason;
    use std::sync::Mutex;

    /// Unix time that follows paused tokio time from `base`.
    fn paused_clock(base: Duration) -> WallClock {
        let t0 = tokio::time::Instant::now();
        Arc::new(move || base + t0.elapsed())
    }

    #[derive(Default)]
    struct Recorder {
        work: Duration,
        runs: Mutex<Vec<(String, String, Duration)>>,
        skips: Mutex<Vec<(String, Skip)>>,
        clock: Mutex<Option<WallClock>>,
        /// Each run's start and the wall time it was told to end by.
        cuts: Mutex<Vec<(Duration, Duration)>>,
    }

    impl Runner<()> for Recorder {
        fn attempt_until(&self, job: &Job<()>, cut_at: tokio::time::Instant) -> BoxFuture<Attempt> {
            let now = (self.clock.lock().unwrap().as_ref().unwrap())();
            let cut = now + cut_at.saturating_duration_since(tokio::time::Instant::now());
            self.cuts.lock().unwrap().push((now, cut));
            self.attempt(job)
        }
        fn attempt(&self, job: &Job<()>) -> BoxFuture<Attempt> {
            let now = (self.clock.lock().unwrap().as_ref().unwrap())();
            self.runs
                .lock()
                .unwrap()
                .push((job.key.target.clone(), job.key.module.clone(), now));
            let work = self.work;
            Box::pin(async move {
                tokio::time::sleep(work).await;
                Attempt::Done
            })
        }
        fn skipped(&self, job: &Job<()>, why: Skip) {
            self.skips
                .lock()
                .unwrap()
                .push((job.key.target.clone(), why));
        }
    }

    fn schedule(members: &[&str], me: &str, modules: &[&str]) -> MeshSchedule<()> {
        let plan = Plan::new(
            members.iter().map(|s| s.to_string()).collect(),
            MeshParams {
                slot: Duration::from_secs(10),
                modules: modules.len(),
                budget: 0.5,
                min_cycle: Duration::ZERO,
            },
        );
        let me = plan.index_of(me).unwrap();
        let mut jobs = HashMap::new();
        for (t, name) in plan.members().iter().enumerate() {
            for (m, module) in modules.iter().enumerate() {
                if t != me {
                    jobs.insert(
                        (t, m),
                        Job {
                            key: JobKey {
                                target: name.clone(),
                                module: module.to_string(),
                            },
                            interval: Duration::from_secs(60),
                            timeout: Duration::from_secs(30),
                            payload: (),
                        },
                    );
                }
            }
        }
        MeshSchedule {
            plan: plan.into(),
            me,
            jobs,
            guard: Duration::from_millis(500),
            end_reserve: Duration::from_secs(1),
            local: Vec::new(),
        }
    }

    // A cycle boundary: 2 × 3 × 1 slots of 10 s at half budget = 120 s.
    const BASE: Duration = Duration::from_secs(1_800_000_000);

    #[tokio::test(start_paused = true)]
    async fn each_host_probes_each_peer_once_per_cycle_in_its_slots() {
        let members = ["a", "b", "c", "d"];
        let clock = paused_clock(BASE);
        let s = schedule(&members, "b", &["tcp"]);
        assert_eq!(s.plan.cycle(), Duration::from_secs(120));
        let expected: Vec<(Duration, String)> = (0..s.plan.slots())
            .filter_map(|k| {
                let t = s.plan.test_of(s.me, 0, k)?;
                (t.prober == s.me).then(|| {
                    (
                        BASE + s.plan.period() * k as u32 + s.guard,
                        s.plan.members()[t.target].clone(),
                    )
                })
            })
            .collect();
        let runner = Arc::new(Recorder {
            work: Duration::from_secs(5),
            clock: Mutex::new(Some(clock.clone())),
            ..Default::default()
        });
        let slot = HostSlot::new();
        let m = MeshScheduler::start(runner.clone(), slot, clock, Some(s));
        tokio::time::sleep(Duration::from_secs(120)).await;
        let runs = runner.runs.lock().unwrap().clone();
        let got: Vec<(Duration, String)> = runs.iter().map(|(t, _, at)| (*at, t.clone())).collect();
        assert_eq!(got, expected);
        // Each run is told to end the reserve before its slot does (a
        // guard into the slot, so slot - guard - reserve after its start).
        let cuts = runner.cuts.lock().unwrap().clone();
        assert_eq!(cuts.len(), expected.len());
        for (start, cut) in cuts {
            assert_eq!(
                cut,
                start + Duration::from_secs(10)
                    - Duration::from_millis(500)
                    - Duration::from_secs(1)
            );
        }
        // Three peers, each once as target.
        let mut targets: Vec<_> = got.iter().map(|(_, t)| t.clone()).collect();
        targets.sort();
        assert_eq!(targets, vec!["a", "c", "d"]);
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(runner.runs.lock().unwrap().len(), 6);
        assert!(runner.skips.lock().unwrap().is_empty());
        m.shutdown().await;

        // A fresh service's first plan starts mid-cycle, not a cycle later.
        let late = paused_clock(BASE + Duration::from_secs(60));
        let runner = Arc::new(Recorder {
            clock: Mutex::new(Some(late.clone())),
            ..Default::default()
        });
        let m = MeshScheduler::start(runner.clone(), HostSlot::new(), late, None);
        tokio::time::sleep(Duration::from_secs(1)).await;
        m.update(Some(schedule(&members, "b", &["tcp"])));
        tokio::time::sleep(Duration::from_secs(59)).await;
        let runs = runner.runs.lock().unwrap().clone();
        let want: Vec<_> = expected
            .iter()
            .filter(|(at, _)| *at > BASE + Duration::from_secs(61))
            .map(|(_, t)| t.clone())
            .collect();
        assert!(!want.is_empty());
        assert_eq!(
            runs.iter().map(|(t, _, _)| t.clone()).collect::<Vec<_>>(),
            want
        );
        m.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_slot_is_waited_for_a_guard_then_missed() {
        let clock = paused_clock(BASE);
        let s = schedule(&["a", "b"], "a", &["tcp"]);
        let runner = Arc::new(Recorder {
            clock: Mutex::new(Some(clock.clone())),
            ..Default::default()
        });
        let slot = HostSlot::new();
        // A peer with another view keeps this host serving.
        let served = slot.try_serve(1, std::time::Instant::now()).unwrap();
        let m = MeshScheduler::start(runner.clone(), slot.clone(), clock, Some(s));
        tokio::time::sleep(Duration::from_secs(40)).await;
        assert!(runner.runs.lock().unwrap().is_empty());
        assert_eq!(runner.skips.lock().unwrap()[0].1, Skip::Missed);
        assert_eq!(slot.counters().wait_timeouts(SlotReason::Serving), 1);
        assert_eq!(slot.counters().wait_time(), Duration::from_millis(500));
        drop(served);
        tokio::time::sleep(Duration::from_secs(40)).await;
        assert_eq!(runner.runs.lock().unwrap().len(), 1);
        m.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn new_members_take_over_at_the_next_cycle_boundary() {
        let clock = paused_clock(BASE);
        let runner = Arc::new(Recorder {
            clock: Mutex::new(Some(clock.clone())),
            ..Default::default()
        });
        let m = MeshScheduler::start(
            runner.clone(),
            HostSlot::new(),
            clock,
            Some(schedule(&["a", "b", "c", "d"], "a", &["tcp"])),
        );
        tokio::time::sleep(Duration::from_secs(30)).await;
        // "e" joins mid-cycle: the old plan finishes its cycle.
        let five = schedule(&["a", "b", "c", "d", "e"], "a", &["tcp"]);
        let switch = five
            .plan
            .cycle_start(five.plan.first_cycle_from(BASE + Duration::from_secs(120)));
        m.update(Some(five));
        tokio::time::sleep(Duration::from_secs(600)).await;
        let runs = runner.runs.lock().unwrap().clone();
        assert!(runs.iter().all(|(t, _, at)| t != "e" || *at >= switch));
        assert!(runs.iter().any(|(t, _, at)| t == "e" && *at >= switch));
        // The old plan's cycle was run to its end: a→b, c, d all ran.
        let before: Vec<_> = runs
            .iter()
            .filter(|(_, _, at)| *at < BASE + Duration::from_secs(120))
            .map(|(t, _, _)| t.as_str())
            .collect();
        assert_eq!(before.len(), 3, "{runs:?}");
        m.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn loopback_runs_only_where_this_host_has_no_planned_test() {
        let clock = paused_clock(BASE);
        let mut s = schedule(&["a", "b", "c", "d"], "b", &["tcp"]);
        s.guard = Duration::from_secs(1);
        // Four hosts: "b" is in a test in every slot (10 s every 20 s), so
        // its windows are the 8 s between, a guard clear of each side.
        let need = Duration::from_secs(8);
        s.local.push(LocalJob {
            job: Job {
                key: JobKey {
                    target: "loopback".into(),
                    module: "lo".into(),
                },
                interval: Duration::from_secs(30),
                timeout: Duration::from_secs(30),
                payload: (),
            },
            need,
        });
        let (plan, me, guard) = (s.plan.clone(), s.me, s.guard);
        let runner = Arc::new(Recorder {
            work: Duration::from_secs(5),
            clock: Mutex::new(Some(clock.clone())),
            ..Default::default()
        });
        let m = MeshScheduler::start(runner.clone(), HostSlot::new(), clock, Some(s));
        tokio::time::sleep(Duration::from_secs(240)).await;
        m.shutdown().await;
        let runs = runner.runs.lock().unwrap().clone();
        let (lo, peers): (Vec<_>, Vec<_>) = runs.iter().partition(|(t, _, _)| t == "loopback");
        // The peers keep their slots: three per cycle, a guard into each.
        assert_eq!(peers.len(), 6, "{runs:?}");
        for (_, _, at) in &peers {
            let slot = plan.slot_at(*at);
            assert_eq!(*at, slot.start + guard);
        }
        // Loopback only in windows clear of every slot of this host.
        for (_, _, at) in &lo {
            for c in 0..3u64 {
                let cycle = plan.slot_at(BASE).cycle + c;
                for k in 0..plan.slots() {
                    let start = plan.cycle_start(cycle) + plan.period() * k as u32;
                    assert!(plan.test_of(me, cycle, k).is_some());
                    assert!(
                        *at + need + guard <= start || start + plan.slot() + guard <= *at,
                        "loopback at {at:?} against the slot at {start:?}"
                    );
                }
            }
        }
        // Due every 30 s, run at the next window (11 s into every 20 s):
        // every 40 s.
        let at: Vec<Duration> = lo.iter().map(|(_, _, at)| *at - BASE).collect();
        assert_eq!(
            at,
            [11, 51, 91, 131, 171, 211].map(Duration::from_secs),
            "{runs:?}"
        );
        assert!(runner.skips.lock().unwrap().is_empty());

        // A job no window fits is counted as missed, and the peers still
        // run.
        let clock = paused_clock(BASE);
        let mut s = schedule(&["a", "b", "c", "d"], "b", &["tcp"]);
        s.guard = Duration::from_secs(1);
        s.local.push(LocalJob {
            job: Job {
                key: JobKey {
                    target: "loopback".into(),
                    module: "long".into(),
                },
                interval: Duration::from_secs(60),
                timeout: Duration::from_secs(30),
                payload: (),
            },
            need: Duration::from_secs(9),
        });
        let runner = Arc::new(Recorder {
            clock: Mutex::new(Some(clock.clone())),
            ..Default::default()
        });
        let m = MeshScheduler::start(runner.clone(), HostSlot::new(), clock, Some(s));
        tokio::time::sleep(Duration::from_secs(110)).await;
        m.shutdown().await;
        let runs = runner.runs.lock().unwrap().clone();
        assert!(runs.iter().all(|(t, _, _)| t != "loopback"), "{runs:?}");
        assert_eq!(runs.len(), 3);
        let skips = runner.skips.lock().unwrap().clone();
        assert_eq!(skips, vec![("loopback".to_string(), Skip::Missed); 2]);
    }
}
