//! Tracing from `pathprobe serve` (`trace:`): after a probe, the path it
//! measured is traced when it has not been yet, when the probe's figure
//! moved by more than `trace.change_ratio` from the figure at the last
//! trace, when the probe turned from success to failure, and otherwise on
//! the bounded schedule `trace.interval`; never more often than
//! `trace.min_interval` per path and per host, nor more than
//! `trace.max_concurrent` at once.
//!
//! A trace runs in a task of its own after the probe has recorded its
//! results: it holds no test slot, delays no probe, and whatever becomes of
//! it (no socket, a panic, a silent path) is counted in
//! `pathprobe_traces_total` and logged, never passed on to the probe.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};

use crate::config::TraceSection;
use crate::metrics::path::{PathTable, TraceResult};
use crate::metrics::ProbeOutcome;
use crate::trace::{Admission, Proto, TraceError, TraceSpec};

/// Why a path is traced now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Never traced since the service started (or the path was added).
    First,
    /// The probe's headline figure moved by more than `change_ratio`.
    FigureChanged,
    /// The probe failed after a success.
    Failed,
    /// `trace.interval` passed since the last trace.
    Schedule,
}

impl Why {
    /// The `why` field of the log lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Why::First => "first",
            Why::FigureChanged => "figure_changed",
            Why::Failed => "failed",
            Why::Schedule => "schedule",
        }
    }
}

/// What the tracer remembers of one path between probes.
#[derive(Debug, Clone, Default)]
pub struct PathState {
    /// When its latest trace started.
    pub last: Option<Instant>,
    /// The probe's figure when the path was last traced.
    pub figure: Option<f64>,
    /// Whether the latest probe succeeded.
    pub ok: bool,
    /// A trace of it is running.
    pub running: bool,
}

/// Whether the path in `state` is to be traced after a probe at `now`
/// whose headline figure is `figure` (`None`: the probe failed).
pub fn due(
    cfg: &TraceSection,
    state: &PathState,
    now: Instant,
    figure: Option<f64>,
) -> Option<Why> {
    if state.running {
        return None;
    }
    let Some(last) = state.last else {
        return Some(Why::First);
    };
    let since = now.saturating_duration_since(last);
    if since < cfg.min_interval {
        return None;
    }
    match (figure, state.figure) {
        (None, _) if state.ok => return Some(Why::Failed),
        (Some(f), Some(g)) if g > 0.0 && ((f / g) - 1.0).abs() > cfg.change_ratio => {
            return Some(Why::FigureChanged)
        }
        _ => {}
    }
    (since >= cfg.interval).then_some(Why::Schedule)
}

/// The tracer of a running service. Its configuration is replaced at each
/// reload; its per-path memory is held to the schedule's paths.
pub struct PathTracer {
    config: RwLock<(TraceSection, Arc<Admission>)>,
    paths: Arc<PathTable>,
    state: Mutex<HashMap<(String, String), PathState>>,
}

impl PathTracer {
    /// A tracer with `config`, recording into `paths`.
    pub fn new(config: &TraceSection, paths: Arc<PathTable>) -> PathTracer {
        PathTracer {
            config: RwLock::new((config.clone(), Arc::new(admission(config)))),
            paths,
            state: Mutex::new(HashMap::new()),
        }
    }

    /// Applies a (re)loaded configuration and the schedule's paths: the
    /// paths no longer probed, or all of them when tracing is off, are
    /// forgotten and their series go.
    pub fn update(&self, config: &TraceSection, keys: &[(String, String)]) {
        {
            let mut c = self.config.write().unwrap_or_else(|p| p.into_inner());
            if c.0 != *config {
                *c = (config.clone(), Arc::new(admission(config)));
            }
        }
        let keep: std::collections::HashSet<&(String, String)> = if config.enabled {
            keys.iter().collect()
        } else {
            Default::default()
        };
        {
            let mut states = self.state.lock().unwrap_or_else(|p| p.into_inner());
            states.retain(|k, _| keep.contains(k));
            for k in &keep {
                states.entry((*k).clone()).or_default();
            }
        }
        self.paths
            .retain(|t, m| keep.contains(&(t.to_string(), m.to_string())));
        if config.enabled {
            self.paths
                .register(keys.iter().map(|(t, m)| (t.as_str(), m.as_str())));
        }
    }

    /// After a probe of (target, module): starts a trace of its path when
    /// one is due (see [`due`]), and returns why, or `None`.
    /// `fallback_destination` is where the probe went when it failed
    /// before it knew its addresses.
    pub fn after_probe(
        self: &Arc<Self>,
        target: &str,
        module: &str,
        outcome: &ProbeOutcome,
        fallback_destination: Option<SocketAddr>,
    ) -> Option<Why> {
        let (cfg, admission) = self
            .config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if !cfg.enabled {
            return None;
        }
        let (figure, source, destination) = match &outcome.result {
            Ok(r) => (
                Some(r.throughput_bits_per_second),
                // The data stream's own address and port when the probe
                // had a TCP one: the trace then takes the flow the data
                // took, and under ECMP the same member. Otherwise the
                // control connection's address, on a port of the kernel's.
                r.data_source.or_else(|| {
                    r.local_address
                        .parse::<SocketAddr>()
                        .ok()
                        .map(|s| SocketAddr::new(s.ip(), 0))
                }),
                r.remote_address.parse::<SocketAddr>().ok(),
            ),
            Err(_) => (None, None, fallback_destination),
        };
        let destination = destination?;
        let key = (target.to_string(), module.to_string());
        let now = Instant::now();
        let why = {
            let mut states = self.state.lock().unwrap_or_else(|p| p.into_inner());
            // Only the schedule's paths (see `update`) are remembered.
            let state = states.get_mut(&key)?;
            let why = due(&cfg, state, now, figure);
            if why.is_some() {
                state.last = Some(now);
                state.figure = figure.or(state.figure);
                state.running = true;
            }
            state.ok = figure.is_some();
            why
        }?;
        let spec = TraceSpec {
            // TCP whatever the probe's kind: a responder answers a SYN on
            // its port, and so ends the trace, where a UDP trace to its
            // open UDP port would go unanswered until the gap.
            proto: Proto::Tcp,
            destination,
            // The data stream's 4-tuple (its connection is in TIME_WAIT
            // by now, which the trace takes over: see `trace::errqueue`),
            // or the probe's source address on a port of the kernel's.
            // A port still busy falls back and says so (`flow_matched`).
            source: source.filter(|s| s.is_ipv4() == destination.is_ipv4()),
            limits: cfg.limits(),
        };
        let me = self.clone();
        tokio::spawn(async move {
            me.run(key, spec, why, admission).await;
        });
        Some(why)
    }

    async fn run(
        &self,
        key: (String, String),
        spec: TraceSpec,
        why: Why,
        admission: Arc<Admission>,
    ) {
        // The path may be traced again once this one is over, however it
        // ends (a panic in the trace included).
        struct Done<'a>(&'a PathTracer, &'a (String, String));
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                if let Some(s) = self
                    .0
                    .state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_mut(self.1)
                {
                    s.running = false;
                }
            }
        }
        let _done = Done(self, &key);
        let (target, module) = (&key.0, &key.1);
        let outcome = match admission.admit(spec.destination.ip(), Instant::now()) {
            Ok(_ticket) => {
                // The ticket is held until the trace ends.
                let r = crate::trace::trace(spec.clone()).await;
                drop(_ticket);
                r
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(trace) => {
                let changed = self.paths.record(target, module, &trace, SystemTime::now());
                if changed {
                    tracing::info!(%target, %module, why = why.as_str(), hops = ?trace.hop_count(), "the path changed:\n{}", trace.text());
                } else {
                    tracing::debug!(%target, %module, why = why.as_str(), reached = trace.reached(), packets = trace.packets, "path traced");
                }
            }
            Err(e) => {
                let result = match &e {
                    TraceError::RateLimited { .. } => TraceResult::RateLimited,
                    TraceError::Busy(_) => TraceResult::Busy,
                    _ => TraceResult::Failed,
                };
                self.paths.count(result);
                tracing::debug!(%target, %module, why = why.as_str(), result = result.as_str(), error = %e, "no trace");
            }
        }
    }

    /// Paths remembered (those of the schedule, while tracing is on).
    pub fn remembered(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

fn admission(c: &TraceSection) -> Admission {
    Admission::new(c.min_interval, c.max_concurrent)
}

#[cfg(test)]
mod tests;
