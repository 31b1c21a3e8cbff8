//! Runs a job's probes and records their outcomes in the result store.
//!
//! Each probe runs in its own task, so that a panic in it is caught,
//! counted and logged instead of taking the scheduler down; dropping the
//! attempt (deadline, removal, shutdown) aborts that task, which closes its
//! connections and so tells the responder.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::byte_budget::BudgetRole;
use crate::future::BoxFuture;
use crate::metrics::{ProbeFailure, ProbeKey, ProbeOutcome, ResultStore};
use crate::probe::spec::Direction;
use crate::probe::{self, ProbeError, ProbeResult, ProbeSpec};
use crate::scheduler::budget::{expected_bytes, moved_bytes};
use crate::scheduler::{Attempt, Job, JobKey, Runner, Skip};

use super::jobs::ProbeJob;
use crate::metrics::ServiceState;

/// Aborts a task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs one probe of `spec` in a task of its own. A busy responder's retry
/// hint comes back beside the failure.
pub async fn run_contained(
    endpoint: Option<probe::Target>,
    spec: ProbeSpec,
    ipv6: bool,
) -> Result<ProbeResult, (ProbeFailure, Option<Duration>)> {
    // The scheduler's claim on the host slot follows the probe into its
    // task, so that the client can say whom it aims at and when its data
    // starts (crate::slot::gives_way). Loopback probes aim at nobody.
    let claim = crate::slot::ProbeClaim::current();
    // A target given as an address is aimed at before the probe's task
    // even starts: a peer asking us in the instants before the client
    // resolves and connects would otherwise be told busy, and tell us so
    // in turn. A name is aimed at by the client once resolved.
    if let (Some(target), Some(_)) = (&endpoint, &claim) {
        if let Ok(ip) = target.host.parse::<std::net::IpAddr>() {
            let port = spec.port.unwrap_or(target.port);
            crate::slot::aim(std::net::SocketAddr::new(ip, port));
        }
    }
    let task = AbortOnDrop(tokio::spawn(async move {
        match (endpoint, claim) {
            (Some(target), Some(claim)) => claim.scope(probe::probe(&target, &spec)).await,
            (Some(target), None) => probe::probe(&target, &spec).await,
            (None, _) => crate::loopback::probe_loopback(&spec, ipv6).await,
        }
    }));
    match (&mut { task }.0).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => {
            let hint = match &e {
                ProbeError::Busy { retry_after, .. } => Some(*retry_after),
                _ => None,
            };
            Err((ProbeFailure::from(&e), hint))
        }
        Err(join) if join.is_panic() => Err((
            ProbeFailure {
                reason: "panic",
                message: format!("the probe task panicked: {join}"),
            },
            None,
        )),
        Err(join) => Err((
            ProbeFailure {
                reason: "aborted",
                message: join.to_string(),
            },
            None,
        )),
    }
}

/// What [`run_job`] did.
pub struct JobRun {
    /// One per run that happened, in order.
    pub outcomes: Vec<ProbeOutcome>,
    /// The busy responder's retry hint, when it said busy.
    pub busy: Option<Duration>,
    /// Payload bytes this host's own data sockets wrote and read over
    /// every run, however each ended: what the byte budget charges.
    pub moved: u64,
}

/// Runs every probe of `job` (two for a `both` module) and returns the
/// outcomes, stopping early when the responder is busy. With `cut_at` (a
/// mesh slot's), an adaptive probe still running then is ended and
/// reported cut; the runs of a `both` module share what is left of the
/// time equally, each handing what it does not use to the next.
pub async fn run_job(job: &ProbeJob, cut_at: Option<tokio::time::Instant>) -> JobRun {
    let mut outcomes = Vec::new();
    let moved = crate::engine::datapath::Progress::default();
    let specs = job.module.specs();
    let runs = specs.len() as u32;
    for (i, (direction, mut spec)) in specs.into_iter().enumerate() {
        if spec.adaptive.is_some() {
            spec.cut_at = cut_at.map(|cut| {
                let now = tokio::time::Instant::now();
                now + cut.saturating_duration_since(now) / (runs - i as u32)
            });
        }
        spec.moved = Some(moved.clone());
        let started = SystemTime::now();
        let clock = Instant::now();
        let (result, busy) = match run_contained(job.endpoint.clone(), spec, job.module.ipv6).await
        {
            Ok(r) => (Ok(r), None),
            Err((f, hint)) => (Err(f), hint),
        };
        outcomes.push(ProbeOutcome {
            kind: job.module.kind.as_str().to_string(),
            direction,
            labels: job.labels.clone(),
            started,
            duration: clock.elapsed(),
            slot_wait: None,
            result,
        });
        if busy.is_some() {
            return JobRun {
                outcomes,
                busy,
                moved: moved.get(),
            };
        }
    }
    JobRun {
        outcomes,
        busy: None,
        moved: moved.get(),
    }
}

/// The longest step sentence logged and kept.
const MAX_SUMMARY: usize = 1024;

/// Records one finished probe: in the store (which feeds the path's step
/// detector), then in the history with the path's stable verdict; a step
/// it completes is logged and kept in the history.
pub(crate) fn record(
    store: &ResultStore,
    history: &super::history::History,
    key: &ProbeKey,
    store_key: &ProbeKey,
    o: ProbeOutcome,
) {
    let mut point = super::history::Point::from_outcome(&o);
    let (kind, direction) = (o.kind.clone(), o.direction);
    let steps = store.record(store_key.clone(), o);
    // A peer that makes up a release each probe would split a bucket at
    // every probe: its churn is kept as one value.
    if point.remote_kernel.is_some() && store.remote_unstable(store_key, direction) {
        point.remote_kernel = Some(Arc::from(crate::metrics::UNSTABLE_RELEASE));
    }
    point.verdict = store
        .stable_verdict(store_key, direction)
        .map(|(verdict, advice)| Arc::new(super::history::Verdict { verdict, advice }));
    history.record_point(key, &kind, point, SystemTime::now());
    for step in steps {
        // Bounded: the changed settings come from the peer (checked, but
        // up to 32 of them).
        let mut summary = step.describe("this host", &key.target);
        if summary.len() > MAX_SUMMARY {
            let mut end = MAX_SUMMARY;
            while !summary.is_char_boundary(end) {
                end -= 1;
            }
            summary.truncate(end);
            summary.push('…');
        }
        // Warn: a step is what an operator wants to hear of without -v.
        tracing::warn!(
            target = %key.target,
            module = %key.module,
            direction = %direction,
            figure = step.figure.as_str(),
            ratio = step.ratio,
            since = step.since_seconds,
            from_release = step.release_before.as_deref().unwrap_or(""),
            to_release = step.release_after.as_deref().unwrap_or(""),
            verdict = step.verdict.as_deref().unwrap_or(""),
            "step detected: {summary}"
        );
        history.record_step(
            key,
            super::history::StepRecord {
                direction,
                step,
                summary,
            },
        );
    }
}

/// The scheduler's runner for `pathprobe serve`.
pub struct ProbeRunner {
    /// Where results go.
    pub store: Arc<ResultStore>,
    /// Counts skipped runs and scheduling lag.
    pub state: Arc<ServiceState>,
    /// Every job's recent results, for the status page.
    pub history: Arc<super::history::History>,
    /// Traces the probed paths after their probes (`trace:`).
    pub tracer: Arc<super::tracer::PathTracer>,
    /// What the byte budget's estimate knows of each job: the bytes per
    /// second its last finished run of each direction moved, and the
    /// link-rate guess for the runs that have none.
    pub rates: Arc<LastRates>,
}

/// The bytes per second each job's last finished run of each direction
/// moved, for the byte budget's estimate of the next
/// ([`crate::scheduler::budget`]); one entry per job and direction of the
/// schedule in force.
#[derive(Debug, Default)]
pub struct LastRates {
    rates: std::sync::Mutex<std::collections::HashMap<(JobKey, Direction), f64>>,
    link_rate_guess: std::sync::atomic::AtomicU64,
}

impl LastRates {
    fn rates(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<(JobKey, Direction), f64>> {
        self.rates.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The guess for runs that have none (`scheduler.link_rate_guess`).
    pub fn set_link_rate_guess(&self, bits_per_second: u64) {
        self.link_rate_guess
            .store(bits_per_second, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forgets the jobs no longer scheduled.
    pub fn retain(&self, keep: impl Fn(&JobKey) -> bool) {
        self.rates().retain(|(k, _), _| keep(k));
    }

    fn note(&self, key: &JobKey, direction: Direction, bytes_per_second: f64) {
        self.rates()
            .insert((key.clone(), direction), bytes_per_second);
    }

    /// The bytes `job`'s next run is expected to move.
    pub fn expected(&self, job: &Job<ProbeJob>) -> u64 {
        let rates = self.rates();
        let last = |d: Direction| rates.get(&(job.key.clone(), d)).copied();
        let guess = match self
            .link_rate_guess
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => crate::scheduler::budget::DEFAULT_LINK_RATE_GUESS,
            g => g,
        };
        expected_bytes(&job.payload.module, &last, guess)
    }
}

/// A run's expected bytes, charged to the budget if the run is dropped
/// before it settles (cut at its deadline, or stopped): what it moved by
/// then is not known, and the expectation bounds it.
struct Reserved {
    budget: Arc<crate::byte_budget::HostBudget>,
    expected: u64,
    settled: bool,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if !self.settled {
            self.budget.charge(BudgetRole::Probing, self.expected);
        }
    }
}

impl Runner<ProbeJob> for ProbeRunner {
    fn attempt(&self, job: &Job<ProbeJob>) -> BoxFuture<Attempt> {
        self.attempt_cut(job, None)
    }

    fn attempt_until(
        &self,
        job: &Job<ProbeJob>,
        cut_at: tokio::time::Instant,
    ) -> BoxFuture<Attempt> {
        self.attempt_cut(job, Some(cut_at))
    }

    fn skipped(&self, job: &Job<ProbeJob>, why: Skip) {
        self.skip(job, why)
    }

    fn lag(&self, _job: &Job<ProbeJob>, lag: Duration) {
        self.state.observe_scheduler_lag(lag);
    }
}

impl ProbeRunner {
    fn attempt_cut(
        &self,
        job: &Job<ProbeJob>,
        cut_at: Option<tokio::time::Instant>,
    ) -> BoxFuture<Attempt> {
        let store = self.store.clone();
        let history = self.history.clone();
        let key = ProbeKey::new(job.key.target.clone(), job.key.module.clone());
        let store_key = job.payload.store_key(&job.key);
        let payload = job.payload.clone();
        let tracer = self.tracer.clone();
        // The byte budget, asked with the slot held, just before the run:
        // loopback modules cost the links nothing.
        let budget = self.state.host_budget();
        let counted = !payload.module.is_loopback();
        let expected = if counted { self.rates.expected(job) } else { 0 };
        if counted {
            if let Err(over) = budget.admit(BudgetRole::Probing, expected) {
                tracing::debug!(
                    target = %key.target,
                    module = %key.module,
                    expected_bytes = expected,
                    spent_bytes = over.spent,
                    max_bytes_per_hour = over.limit,
                    retry_after_seconds = over.retry_after.map(|d| d.as_secs()),
                    "run over the byte budget"
                );
                self.skip(job, Skip::Budget);
                return Box::pin(async { Attempt::Done });
            }
        }
        let job_key = job.key.clone();
        let last_rates = self.rates.clone();
        Box::pin(async move {
            let mut reserved = Reserved {
                budget: budget.clone(),
                expected,
                settled: !counted,
            };
            let JobRun {
                outcomes,
                busy,
                moved,
            } = run_job(&payload, cut_at).await;
            if counted {
                // What really moved replaces the reservation: every byte
                // this host's own sockets wrote or read, warm-up, tail and
                // failed runs included (a run that fails at its end, or an
                // adaptive one whose figure covers part of it, still
                // crossed the link), counted here rather than taken from
                // the responder's figures.
                reserved.settled = true;
                for o in &outcomes {
                    if let Ok(r) = &o.result {
                        let bytes = moved_bytes(r);
                        let seconds = r.omit_seconds + r.requested_seconds;
                        if seconds > 0.0 {
                            last_rates.note(&job_key, o.direction, bytes as f64 / seconds);
                        }
                    }
                }
                budget.charge(BudgetRole::Probing, moved);
            }
            for o in outcomes {
                // A busy answer is not yet a failed probe: the scheduler
                // retries it within the interval after the responder's
                // hint, and records a busy failure only when it gives up
                // (`skipped` with Skip::Busy). Counting each busy try as a
                // failure made two hosts probing each other look half
                // broken.
                if o.result.as_ref().is_err_and(|f| f.reason == "busy") && busy.is_some() {
                    tracing::debug!(target = %key.target, module = %key.module, direction = %o.direction, "responder busy; the scheduler will retry");
                    store.record_busy_retry(&store_key);
                    continue;
                }
                match &o.result {
                    Ok(r) => {
                        tracing::debug!(target = %key.target, module = %key.module, direction = %o.direction, bits_per_second = r.throughput_bits_per_second, "probe succeeded")
                    }
                    Err(f) => {
                        tracing::warn!(target = %key.target, module = %key.module, direction = %o.direction, reason = f.reason, error = %f.message, "probe failed")
                    }
                }
                // A between-group result stands for a whole group: no
                // one path to trace.
                if payload.metrics_as.is_none() {
                    let fallback = payload.endpoint.as_ref().and_then(|e| {
                        let ip = e.host.parse::<std::net::IpAddr>().ok()?;
                        Some(std::net::SocketAddr::new(ip, e.port))
                    });
                    tracer.after_probe(&key.target, &key.module, &o, fallback);
                }
                record(&store, &history, &key, &store_key, payload.for_store(o));
            }
            match busy {
                Some(hint) => Attempt::Busy(hint),
                None => Attempt::Done,
            }
        })
    }

    fn skip(&self, job: &Job<ProbeJob>, why: Skip) {
        let key = ProbeKey::new(job.key.target.clone(), job.key.module.clone());
        let store_key = job.payload.store_key(&job.key);
        match why {
            // It ran, and measured nothing usable before its deadline: a
            // failure an operator looks for at warn, not a skipped run.
            Skip::Timeout => {
                tracing::warn!(target = %key.target, module = %key.module, reason = why.as_str(), "probe run cut at its deadline, nothing recorded")
            }
            _ => {
                tracing::info!(target = %key.target, module = %key.module, reason = why.as_str(), "probe run skipped")
            }
        }
        self.store.record_skipped(&store_key, why.as_str());
        // A run cut at its deadline recorded nothing: it is a failed probe,
        // and its old figures must not stay looking current. So is a run
        // whose responder stayed busy through every retry (its busy tries
        // were counted as retries, not failures).
        let failure = match why {
            Skip::Timeout => Some(("timeout", format!("run {}", why.as_str()))),
            Skip::Busy => Some((
                "busy",
                "the responder was still busy after the retries the interval allowed".to_string(),
            )),
            Skip::Missed | Skip::Budget => None,
        };
        if let Some((reason, message)) = failure {
            for (direction, _) in job.payload.module.specs() {
                let outcome = ProbeOutcome {
                    kind: job.payload.module.kind.as_str().to_string(),
                    direction,
                    labels: job.payload.labels.clone(),
                    started: SystemTime::now(),
                    duration: Duration::ZERO,
                    slot_wait: None,
                    result: Err(ProbeFailure {
                        reason,
                        message: message.clone(),
                    }),
                };
                record(
                    &self.store,
                    &self.history,
                    &key,
                    &store_key,
                    job.payload.for_store(outcome),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::responder::{Responder, ResponderConfig};
    use crate::scheduler::{Scheduler, SchedulerConfig};
    use crate::slot::{Asker, HostSlot};

    /// A runner as `serve` builds it, with its store and service state.
    fn runner() -> (Arc<ProbeRunner>, Arc<ResultStore>, Arc<ServiceState>) {
        let state = Arc::new(ServiceState::new(SystemTime::now()));
        let store = Arc::new(ResultStore::new());
        let runner = Arc::new(ProbeRunner {
            store: store.clone(),
            state: state.clone(),
            history: Arc::new(super::super::history::History::new(Default::default())),
            tracer: Arc::new(super::super::tracer::PathTracer::new(
                &Default::default(),
                state.paths(),
            )),
            rates: Default::default(),
        });
        (runner, store, state)
    }

    /// The one job of a config probing `target` with module `t`.
    fn job(target: std::net::SocketAddr, interval: &str) -> Job<ProbeJob> {
        let yaml = format!(
            "modules:\n  t: {{kind: tcp, duration: 500ms}}\n\
             targets:\n  - {{address: '{target}', modules: [t], interval: {interval}}}\n"
        );
        let config = Config::from_yaml(&yaml, "runner.yml").unwrap();
        let mut jobs = super::super::jobs::build(&config, &[], |_| false);
        assert_eq!(jobs.len(), 1);
        jobs.remove(0)
    }

    /// The value of the scrape's sample of `name` whose labels include
    /// every one of `labels` (`key="value"`); None if there is none.
    fn sample(scrape: &str, name: &str, labels: &[&str]) -> Option<f64> {
        scrape
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .find(|l| labels.iter().all(|want| l.contains(want)))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    fn scrape(store: &ResultStore, state: &ServiceState) -> String {
        crate::metrics::render(store, &Default::default(), None, state).unwrap()
    }

    /// A run its responder first answers busy, and that
    /// the scheduler retries after the hint to success, is one busy retry
    /// and one success; no probe failed busy.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_busy_answer_retried_to_success_is_a_retry_not_a_failure() {
        // The responder's own slot, held by a test it serves for 300 ms.
        let responder_slot = HostSlot::new();
        let held = responder_slot
            .try_serve(1, std::time::Instant::now() + Duration::from_millis(300))
            .unwrap();
        let (tcp, udp) = crate::responder::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let responder =
            Responder::with_slot(tcp, udp, ResponderConfig::default(), responder_slot).unwrap();
        let addr = responder.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(responder.serve(async {
            let _ = stopped.await;
        }));

        let (runner, store, state) = runner();
        let config = SchedulerConfig {
            jitter: 0.0,
            busy_backoff: Duration::from_millis(100),
            ..Default::default()
        };
        let mut scheduler = Scheduler::new(runner, config, state.host_slot());
        let job = job(addr, "60s");
        let key = job.payload.store_key(&job.key);
        scheduler.update(vec![job]);
        // Busy first: the served test holds the responder's slot.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut held = Some(held);
        while store.latest_of(&key).is_empty() {
            let retried = sample(
                &scrape(&store, &state),
                "pathprobe_scheduler_busy_retries_total",
                &[],
            );
            if held.is_some() && retried == Some(1.0) {
                // The served test ends: the retry finds the responder free.
                held = None;
            }
            assert!(tokio::time::Instant::now() < deadline, "no result in 20 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        scheduler.shutdown().await;
        let _ = stop.send(());
        let _ = serving.await;
        assert!(held.is_none(), "the run was never told busy");

        let outcomes = store.latest_of(&key);
        assert!(outcomes[0].result.is_ok(), "{outcomes:?}");
        let s = scrape(&store, &state);
        let retries = sample(&s, "pathprobe_scheduler_busy_retries_total", &[]);
        assert_eq!(retries, Some(1.0), "{s}");
        let probes = |result: &str| {
            let label = format!("result=\"{result}\"");
            sample(&s, "pathprobe_probes_total", &[&label]).unwrap_or(0.0)
        };
        assert_eq!(probes("success"), 1.0, "{s}");
        assert_eq!(probes("busy"), 0.0, "{s}");
        let skipped = sample(
            &s,
            "pathprobe_scheduler_runs_skipped_total",
            &["reason=\"busy\""],
        );
        assert_eq!(skipped.unwrap_or(0.0), 0.0, "{s}");
    }

    /// A run that gave way to the peer it probes, and
    /// then found the slot taken until its next run, was crowded out:
    /// missed, not busy (no responder said busy), and no failed probe.
    #[tokio::test(start_paused = true)]
    async fn a_run_that_gave_way_and_lost_its_turn_is_missed_not_busy() {
        // A peer that takes the connection and never answers: the probe
        // is still setting up, moving no data, when the peer asks.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = listener.local_addr().unwrap();
        let (runner, store, state) = runner();
        let interval = Duration::from_secs(10);
        let job = job(target, "10s");
        // A seed whose phase starts the first run within a second: a
        // planned run, not the opportunistic one after start that is not
        // counted when crowded out.
        let seed = (0..10_000)
            .map(|i| format!("seed{i}"))
            .find(|s| crate::scheduler::phase(&job.key, s, interval) < Duration::from_millis(500))
            .unwrap();
        let offset = crate::scheduler::phase(&job.key, &seed, interval);
        let config = SchedulerConfig {
            jitter: 0.0,
            phase_seed: seed,
            ..Default::default()
        };
        let slot = state.host_slot();
        let mut scheduler = Scheduler::new(runner, config, slot.clone());
        scheduler.update(vec![job]);
        tokio::time::sleep(offset + Duration::from_millis(100)).await;
        // The peer (a port above ours on the same address) asks for a test
        // and holds the slot past our next run.
        let asker = Asker {
            peer: std::net::SocketAddr::new(target.ip(), 40000),
            local: std::net::SocketAddr::new(target.ip(), 1),
        };
        let served = slot
            .try_serve_from(
                1,
                std::time::Instant::now() + Duration::from_secs(60),
                Some(asker),
            )
            .expect("the run gives way");
        assert_eq!(slot.counters().yields(), 1);
        tokio::time::sleep(interval).await;
        let s = scrape(&store, &state);
        scheduler.shutdown().await;
        drop(served);
        let skipped = |reason: &str| {
            let label = format!("reason=\"{reason}\"");
            sample(&s, "pathprobe_scheduler_runs_skipped_total", &[&label]).unwrap_or(0.0)
        };
        assert_eq!(skipped("missed"), 1.0, "{s}");
        assert_eq!(skipped("busy"), 0.0, "{s}");
        assert_eq!(
            sample(&s, "pathprobe_probes_total", &["result=\"busy\""]).unwrap_or(0.0),
            0.0,
            "{s}"
        );
        assert!(store.latest().is_empty(), "{:?}", store.latest());
    }
}
