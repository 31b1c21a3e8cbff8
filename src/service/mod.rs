//! `pathprobe serve`: the responder, the scheduler with discovery, and the
//! HTTP endpoints, wired together with reload and shutdown.
//!
//! The controller task owns the scheduler and discovery. Reload requests
//! (SIGHUP or `POST /-/reload`) and discovery updates reach it over
//! channels; a bad configuration on reload keeps the old one running.

#![warn(missing_docs)]

mod app;
pub mod budget;
pub mod check;
pub mod history;
pub mod jobs;
pub mod mesh;
mod probe_access;
pub mod runner;
mod step_seed;
pub mod tracer;
pub mod web;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{mpsc, oneshot};

use crate::config::{Config, ConfigError};
use crate::discovery::Discovery;
use crate::metrics::{HostMetrics, ResultStore, ServiceState};
use crate::responder::{Responder, ResponderHandle};
use crate::scheduler::mesh::{system_clock, MeshScheduler};
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::slot::HostSlot;

use self::jobs::{is_local_target, ProbeJob};
use self::runner::ProbeRunner;

/// The default `--web.listen-address`: 9813 is unclaimed on Prometheus'
/// default port allocation list.
pub const DEFAULT_WEB_LISTEN: &str = "[::]:9813";

/// `SCHEME://HOST:PORT` for a person to open: the listener's own address,
/// or for a wildcard listener `localhost`, which it also answers on.
pub fn browsable_base(scheme: &str, addr: std::net::SocketAddr) -> String {
    match addr.ip() {
        ip if ip.is_unspecified() => format!("{scheme}://localhost:{}", addr.port()),
        _ => format!("{scheme}://{addr}"),
    }
}

/// Where the configuration comes from.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    /// The embedded default (no `--config.file`).
    Embedded,
    /// `--config.file`, read again at every reload.
    File(PathBuf),
}

impl ConfigSource {
    /// Reads (for a file) and validates the configuration.
    pub fn load(&self) -> Result<Config, ConfigError> {
        match self {
            ConfigSource::Embedded => Ok(Config::default_embedded()),
            // Every error of the file, as check-config lists them, so that
            // fixing a file takes one run, not one per mistake.
            ConfigSource::File(p) => {
                crate::config::check::load_all(p).map_err(ConfigError::from_all)
            }
        }
    }
}

/// For the startup log: `embedded default` or `file PATH`.
impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::Embedded => f.write_str("embedded default"),
            ConfigSource::File(p) => write!(f, "file {}", p.display()),
        }
    }
}

/// Sockets the service serves on, bound by the caller (port 0 in tests).
pub struct Listeners {
    /// Where `/metrics`, `/probe` and the rest are served.
    pub http: TcpListener,
    /// The responder's TCP listener and UDP socket; `None` to bind them from
    /// the configuration (or not at all when the responder is disabled).
    pub responder: Option<(TcpListener, UdpSocket)>,
}

type ReloadReply = oneshot::Sender<Result<(), String>>;

/// What the controller and the HTTP endpoints share: the configuration in
/// force, the results, readiness, the responder, and the way to ask for a
/// reload. (The service's own counters are [`ServiceState`].)
pub struct ServiceContext {
    /// The configuration in force; replaced whole by a good reload.
    pub config: RwLock<Arc<Config>>,
    /// The latest result of every probe.
    pub store: Arc<ResultStore>,
    /// The service's own counters.
    pub state: Arc<ServiceState>,
    /// The IRQ filter of the host metrics, from the configuration.
    pub host_metrics: RwLock<Arc<HostMetrics>>,
    /// Set once the first schedule is applied, cleared at shutdown.
    pub ready: AtomicBool,
    /// The responder, when this service runs one.
    pub responder: Option<ResponderHandle>,
    reload_tx: mpsc::Sender<ReloadReply>,
    /// The host's test slot, shared with the responder and the scheduler,
    /// so that `/probe` runs overlap no other test either.
    slot: Arc<HostSlot>,
    /// `/probe` requests running now, held to `http.probe_max_concurrent`.
    probes_running: std::sync::atomic::AtomicUsize,
    /// Every job's recent results, for the status page.
    pub history: Arc<history::History>,
    /// The jobs of the schedule in force, as the status page lists them.
    pub web_jobs: RwLock<Arc<Vec<web::JobInfo>>>,
    /// This host's name, for the page.
    pub hostname: String,
    /// `--web.config.file`, read again at every reload.
    pub web_config_path: Option<PathBuf>,
    /// What it set, in force; replaced whole by a good reload.
    pub web_config: RwLock<Arc<crate::web_config::WebConfig>>,
}

impl ServiceContext {
    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The web configuration in force.
    pub fn web_config(&self) -> Arc<crate::web_config::WebConfig> {
        self.web_config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Asks the controller to reload and waits for the verdict.
    pub async fn reload(&self) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.reload_tx
            .send(tx)
            .await
            .map_err(|_| "the service is shutting down".to_string())?;
        rx.await
            .map_err(|_| "the service is shutting down".to_string())?
    }
}

/// What the status page lists of `jobs`: their first probe is due at the
/// scheduler's phase for them, counted from the service's start.
fn web_jobs(
    jobs: &[crate::scheduler::Job<ProbeJob>],
    started: SystemTime,
    seed: &str,
) -> Vec<web::JobInfo> {
    let now = SystemTime::now();
    jobs.iter()
        .map(|j| {
            let interval = j.interval.max(Duration::from_millis(100));
            let mut due = started + crate::scheduler::phase(&j.key, seed, interval);
            while due < now {
                due += interval;
            }
            web::JobInfo {
                key: crate::metrics::ProbeKey::new(j.key.target.clone(), j.key.module.clone()),
                kind: j.payload.module.kind.as_str(),
                interval: j.interval,
                host: j.payload.endpoint.as_ref().map(|e| e.host.clone()),
                first_due: due,
            }
        })
        .collect()
}

fn scheduler_config(c: &Config) -> SchedulerConfig {
    SchedulerConfig {
        max_concurrent: c.scheduler.max_concurrent_probes,
        jitter: c.scheduler.jitter,
        busy_backoff: c.scheduler.busy_backoff,
        busy_backoff_max: c.scheduler.busy_backoff_max,
        busy_retries: c.scheduler.busy_retries,
        phase_seed: crate::host::hostname(),
    }
}

/// Runs the service until `shutdown` completes. `reloads` yields on SIGHUP.
pub async fn run(
    source: ConfigSource,
    listeners: Listeners,
    reloads: mpsc::Receiver<()>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    run_with_web_config(source, None, listeners, reloads, shutdown).await
}

/// [`run`], with the HTTP side under `web_config` (`--web.config.file`:
/// TLS, basic auth, headers), read at start and at every reload.
pub async fn run_with_web_config(
    source: ConfigSource,
    web_config_path: Option<PathBuf>,
    listeners: Listeners,
    mut reloads: mpsc::Receiver<()>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let config = Arc::new(source.load()?);
    let web_config = match &web_config_path {
        Some(p) => crate::web_config::WebConfig::load(p)?,
        None => Default::default(),
    };
    // After the load: a file that fails is named once, in the error.
    tracing::info!(
        version = crate::build_info::VERSION,
        commit = crate::build_info::COMMIT,
        config = %source,
        "starting pathprobe serve"
    );
    let store = Arc::new(ResultStore::new());
    let state = Arc::new(ServiceState::new(SystemTime::now()));
    let host_metrics = Arc::new(HostMetrics::new(config.host_metrics.irq_pattern.as_str())?);
    let started = SystemTime::now();
    let history = Arc::new(history::History::new(history::Retention::from(&config.web)));
    // A history file that is not ours is refused, and not written over:
    // it may be something else the path was mistyped for.
    let state_dir = std::env::var_os("STATE_DIRECTORY");
    let history_path = config
        .web
        .history_path(&config.base_dir, state_dir.as_deref())
        .and_then(|path| {
        let existed = path.exists();
        match history.load(&path, started) {
            Ok(n) if existed => {
                tracing::info!(path = %path.display(), entries = n, "history read back; saved there and at shutdown");
                Some(path)
            }
            Ok(_) => {
                tracing::info!(path = %path.display(), "no history file yet: starting an empty history, saved there periodically and at shutdown");
                Some(path)
            }
            Err(e) => {
                tracing::error!(error = %e, "history file refused: starting with an empty history, and not saving it there (move the file away, or set web.history_file elsewhere)");
                None
            }
        }
    });

    let seeded = step_seed::seed_steps(&history, &store);
    if seeded > 0 {
        tracing::info!(
            paths = seeded,
            "step detectors seeded from the history: a step across the restart is found at the 5th probe after it"
        );
    }

    if history_path.is_none() && config.web.history_file.is_none() {
        tracing::info!("history kept in memory only: a restart blanks the status page (set web.history_file, or run with a state directory: $STATE_DIRECTORY, as systemd's StateDirectory= sets it)");
    }

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    // The responder.
    let mut responder_task = None;
    let mut responder_handle = None;
    if config.responder.enabled {
        let (tcp, udp) = match listeners.responder {
            Some(s) => s,
            None => crate::responder::bind(config.responder.listen)
                .await
                .with_context(|| {
                    format!(
                        "cannot listen on {} for the responder (TCP and UDP)",
                        config.responder.listen
                    )
                })?,
        };
        // The responder's tests and this host's own probes take one slot:
        // a host is never in two tests at once, in either role.
        // So do the bytes they move: one budget for both roles.
        state
            .host_budget()
            .set_limit(config.scheduler.max_bytes_per_hour);
        let r = Responder::with_slot_and_budget(
            tcp,
            udp,
            config.responder.to_responder_config(),
            state.host_slot(),
            state.host_budget(),
        )?;
        tracing::info!(addr = %r.local_addr()?, "responder listening");
        if let Some(port) = config.responder.iperf3_port {
            let at = std::net::SocketAddr::new(config.responder.listen.ip(), port);
            let tcp = crate::responder::bind_tcp(at)
                .with_context(|| format!("cannot listen on {at} for iperf3 clients"))?;
            let server = r.iperf3(tcp);
            tracing::info!(addr = %at, "answering iperf3 clients");
            tokio::spawn(server.serve(stopped(stop_rx.clone())));
        }
        responder_handle = Some(r.handle());
        responder_task = Some(tokio::spawn(r.serve(stopped(stop_rx.clone()))));
    }

    let (reload_tx, mut reload_rx) = mpsc::channel::<ReloadReply>(4);
    let sched_cfg = scheduler_config(&config);
    let tracer = Arc::new(tracer::PathTracer::new(&config.trace, state.paths()));
    let runner = Arc::new(ProbeRunner {
        store: store.clone(),
        state: state.clone(),
        history: history.clone(),
        tracer: tracer.clone(),
        rates: Default::default(),
    });
    let mut scheduler: Scheduler<ProbeJob, ProbeRunner> =
        Scheduler::new(runner.clone(), sched_cfg.clone(), state.host_slot());
    // In mesh mode the plan runs the peers; the plain scheduler keeps the
    // rest (loopback modules). Both take the host's one test slot.
    let mesh = MeshScheduler::start(runner.clone(), state.host_slot(), system_clock(), None);
    let shared = Arc::new(ServiceContext {
        config: RwLock::new(config.clone()),
        store: store.clone(),
        state: state.clone(),
        host_metrics: RwLock::new(host_metrics),
        ready: AtomicBool::new(false),
        responder: responder_handle,
        reload_tx,
        slot: state.host_slot(),
        probes_running: Default::default(),
        history: history.clone(),
        web_jobs: RwLock::new(Arc::new(Vec::new())),
        hostname: crate::host::hostname(),
        web_config_path: web_config_path.clone(),
        web_config: RwLock::new(Arc::new(web_config)),
    });
    let saver = history_path.map(|path| {
        tokio::spawn(history::save_periodically(
            history.clone(),
            path,
            config.web.history_save_interval,
            {
                let state = state.clone();
                move |ok| state.history_saved(ok)
            },
            stopped(stop_rx.clone()),
        ))
    });

    let http_addr = listeners.http.local_addr()?;
    let scheme = if shared.web_config().tls().is_some() {
        "https"
    } else {
        "http"
    };
    if let Some(p) = &web_config_path {
        tracing::info!(file = %p.display(), "web config: {}", shared.web_config().summary());
    }
    // The status page is where a person starts; Prometheus needs /metrics.
    // A wildcard listener ([::], 0.0.0.0) is no address to browse to: the
    // links name this host instead.
    let base = browsable_base(scheme, http_addr);
    tracing::info!(
        addr = %http_addr,
        status_page = %format!("{base}/"),
        version = crate::build_info::VERSION,
        config = %source,
        "serving metrics on {base}/metrics and the status page on {base}/"
    );
    let http_task = tokio::spawn(crate::http::serve(
        listeners.http,
        Arc::new(app::ServiceApp(shared.clone())),
        stopped(stop_rx.clone()),
    ));

    let mut current = config;
    let mut sched_cfg = sched_cfg;
    let mut discovery = Discovery::start(
        &current.discovery.file_sd,
        &current.discovery.dns,
        &current.base_dir,
    );
    let mut last_notes = Vec::new();
    let mut last_trace_note = String::new();
    let mut last_series = None;
    // How long a key no longer probed keeps its series; set by `apply`.
    let expire = std::sync::atomic::AtomicU64::new(current.metrics.expire_after.as_secs());
    let sched_cfg_seed = crate::host::hostname();
    let mut apply = |scheduler: &mut Scheduler<ProbeJob, ProbeRunner>,
                     cfg: &Config,
                     discovery: &mut Discovery| {
        let discovered = discovery.targets.borrow_and_update().clone();
        let jobs = jobs::build(cfg, &discovered, is_local_target);
        // The byte budget follows the configuration in force; what the
        // last hour holds stays.
        state
            .host_budget()
            .set_limit(cfg.scheduler.max_bytes_per_hour);
        runner
            .rates
            .set_link_rate_guess(cfg.scheduler.link_rate_guess);
        {
            let keys: std::collections::HashSet<&crate::scheduler::JobKey> =
                jobs.iter().map(|j| &j.key).collect();
            runner.rates.retain(|k| keys.contains(k));
        }
        // The peers this host names (static targets, discovered members)
        // have capacity of their own at its responder: a flood from
        // unknown addresses cannot starve the mesh's own tests.
        if let Some(r) = &shared.responder {
            r.set_known_peers(mesh::known_networks(cfg, &discovered));
        }
        // The cost of the schedule, said once per change of it.
        let mut notes = mesh::notes(cfg, &discovered, is_local_target);
        // Its bytes beside its time shares.
        notes.push(budget::note(cfg, &discovered, is_local_target));
        if notes != last_notes {
            for n in &notes {
                if n.starts_with("warning") {
                    tracing::warn!("{n}");
                } else {
                    tracing::info!("{n}");
                }
            }
            last_notes = notes;
        }
        let mesh_schedule = (cfg.discovery.mesh && cfg.scheduler.mesh.planned)
            .then(|| mesh::schedule(cfg, &discovered, is_local_target))
            .flatten();
        if let Some(r) = &shared.responder {
            r.set_turns(
                mesh_schedule
                    .as_ref()
                    .and_then(|(s, _)| mesh::turns(cfg, &discovered, s)),
            );
        }
        let plain = match mesh_schedule {
            Some((schedule, rest)) => {
                state.set_mesh(Some(crate::metrics::MeshFigures {
                    cycle: schedule.plan.cycle(),
                    slot: schedule.plan.slot(),
                    guard: schedule.guard,
                    members: schedule.plan.members().len(),
                    group: jobs::host_group(cfg, &discovered, &is_local_target),
                }));
                mesh.update(Some(schedule));
                rest
            }
            None => {
                state.set_mesh(None);
                mesh.update(None);
                jobs.clone()
            }
        };
        let keys: std::collections::HashSet<(&str, &str)> = jobs
            .iter()
            .map(|j| (j.key.target.as_str(), j.key.module.as_str()))
            .collect();
        let store_keys: std::collections::HashSet<crate::metrics::ProbeKey> =
            jobs.iter().map(|j| j.payload.store_key(&j.key)).collect();
        // Removed targets stop, and their series go with them.
        store.set_detail(cfg.metrics.detail);
        store.retain(|k| store_keys.contains(k));
        history.retain(|k| keys.contains(&(k.target.as_str(), k.module.as_str())));
        expire.store(
            jobs::expire_after(cfg, &jobs, state.mesh_cycle()).as_secs(),
            Ordering::Relaxed,
        );
        let series = jobs::host_series(cfg, &jobs);
        if Some(series) != last_series {
            tracing::info!(
                detail = cfg.metrics.detail.as_str(),
                series = series.total(),
                paths = series.paths,
                expire_after_seconds = expire.load(Ordering::Relaxed),
                "{}",
                series.sentence()
            );
            last_series = Some(series);
        }
        // Tracing: the paths to remote targets this host's own series
        // name (a grouped plan's between-group results stand for many
        // hosts, whose hops would mix), and the cost, said once per change.
        let traced: Vec<(String, String)> = jobs
            .iter()
            .filter(|j| j.payload.endpoint.is_some() && j.payload.metrics_as.is_none())
            .map(|j| (j.key.target.clone(), j.key.module.clone()))
            .collect();
        tracer.update(&cfg.trace, &traced);
        state.set_tracing(cfg.trace.enabled);
        let note = cfg.trace.cost_sentence(traced.len());
        if note != last_trace_note {
            tracing::info!(enabled = cfg.trace.enabled, paths = traced.len(), "{note}");
            last_trace_note = note;
        }
        history.set_retention(history::Retention::from(&cfg.web), SystemTime::now());
        *shared.web_jobs.write().unwrap_or_else(|p| p.into_inner()) =
            Arc::new(web_jobs(&jobs, started, &sched_cfg_seed));
        jobs::register(&store, &jobs);
        tracing::info!(
            jobs = jobs.len(),
            discovered = discovered.len(),
            "probe schedule updated"
        );
        scheduler.update(plain);
    };
    apply(&mut scheduler, &current, &mut discovery);
    shared.ready.store(true, Ordering::Relaxed);

    enum Event {
        Shutdown,
        Reload(Option<ReloadReply>),
        Discovered,
        Expire,
    }
    tokio::pin!(shutdown);
    // Series expire within a minute of their time; expiry is a walk of
    // the store, cheap at this pace.
    let mut expiry = tokio::time::interval(Duration::from_secs(60));
    expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // The select only picks the event; acting on it needs the borrows
        // its branches hold.
        let event = tokio::select! {
            _ = &mut shutdown => Event::Shutdown,
            Some(()) = reloads.recv() => Event::Reload(None),
            Some(reply) = reload_rx.recv() => Event::Reload(Some(reply)),
            Ok(()) = discovery.targets.changed() => Event::Discovered,
            _ = expiry.tick() => Event::Expire,
        };
        match event {
            Event::Shutdown => break,
            Event::Reload(reply) => {
                let result = reload(&source, &shared, &mut current);
                restart_if_needed(
                    &mut scheduler,
                    &mut sched_cfg,
                    &runner,
                    &shared,
                    &current,
                    &mut discovery,
                )
                .await;
                apply(&mut scheduler, &current, &mut discovery);
                if let Some(reply) = reply {
                    let _ = reply.send(result.map(|_| ()));
                }
            }
            Event::Discovered => apply(&mut scheduler, &current, &mut discovery),
            Event::Expire => {
                let after = expire.load(Ordering::Relaxed);
                let gone = store.expire(Duration::from_secs(after));
                if gone > 0 {
                    tracing::info!(
                        keys = gone,
                        after_seconds = after,
                        "series of targets no longer probed expired"
                    );
                }
            }
        }
    }

    tracing::info!("shutting down: stopping probes and listeners");
    shared.ready.store(false, Ordering::Relaxed);
    scheduler.shutdown().await;
    mesh.shutdown().await;
    discovery.stop().await;
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), http_task).await;
    if let Some(t) = saver {
        // The last save, at shutdown.
        let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
    }
    if let Some(t) = responder_task {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Loads the configuration again; on success swaps it in and applies the
/// responder's new limits, on failure keeps the old one.
fn reload(
    source: &ConfigSource,
    shared: &ServiceContext,
    current: &mut Arc<Config>,
) -> Result<bool, String> {
    let loaded = source.load().map_err(|e| e.to_string()).and_then(|new| {
        let host =
            HostMetrics::new(new.host_metrics.irq_pattern.as_str()).map_err(|e| e.to_string())?;
        // Both files or neither: a bad web config keeps the old one, and
        // the old configuration with it.
        let web = match &shared.web_config_path {
            Some(p) => Some(crate::web_config::WebConfig::load(p).map_err(|e| e.to_string())?),
            None => None,
        };
        Ok((new, host, web))
    });
    match loaded {
        Ok((new, host_metrics, web)) => {
            if let Some(web) = web {
                tracing::info!("web config: {}", web.summary());
                *shared.web_config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(web);
            }
            if new.responder.listen != current.responder.listen
                || new.responder.enabled != current.responder.enabled
            {
                tracing::warn!(
                    "the responder's listen address or enabled flag changed; that takes a restart"
                );
            }
            if let Some(r) = &shared.responder {
                r.set_config(new.responder.to_responder_config());
            }
            *shared
                .host_metrics
                .write()
                .unwrap_or_else(|p| p.into_inner()) = Arc::new(host_metrics);
            let changed = new != **current;
            let new = Arc::new(new);
            *shared.config.write().unwrap_or_else(|p| p.into_inner()) = new.clone();
            *current = new;
            shared.state.reload_succeeded(SystemTime::now());
            tracing::info!(changed, "configuration reloaded");
            Ok(changed)
        }
        Err(e) => {
            shared.state.reload_failed();
            tracing::error!(error = %e, "reload failed; keeping the previous configuration");
            Err(e)
        }
    }
}

/// A changed scheduler section needs a new scheduler; changed discovery
/// sources need new discovery tasks.
async fn restart_if_needed(
    scheduler: &mut Scheduler<ProbeJob, ProbeRunner>,
    sched_cfg: &mut SchedulerConfig,
    runner: &Arc<ProbeRunner>,
    shared: &ServiceContext,
    current: &Config,
    discovery: &mut Discovery,
) {
    let wanted = scheduler_config(current);
    if wanted != *sched_cfg {
        scheduler.shutdown().await;
        *scheduler = Scheduler::new(runner.clone(), wanted.clone(), shared.slot.clone());
        *sched_cfg = wanted;
    }
    if !discovery.same_sources(
        &current.discovery.file_sd,
        &current.discovery.dns,
        &current.base_dir,
    ) {
        let old = std::mem::replace(
            discovery,
            Discovery::start(
                &current.discovery.file_sd,
                &current.discovery.dns,
                &current.base_dir,
            ),
        );
        old.stop().await;
    }
}
