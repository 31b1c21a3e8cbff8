//! The service behind the HTTP endpoints: renders metrics from the store,
//! runs `/probe` requests, forwards reloads, and draws the landing page.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::future::BoxFuture;
use crate::http::{App, ProbeRequestError, ProbeResponse};
use crate::metrics::{HttpRefusal, ProbeFailure, ProbeOutcome};
use crate::probe::{ProbeSpec, Target};
use crate::protocol::DEFAULT_PORT;

use super::probe_access;
use super::runner::run_contained;
use super::ServiceContext;

pub struct ServiceApp(pub Arc<ServiceContext>);

/// A probe's parameters for `/probe?debug=true`, as the configuration's
/// keys and units write them (`duration: 10s, bitrate: 1G`), not as Rust
/// writes the struct. The secret is said to be there, never shown.
fn spec_words(spec: &ProbeSpec) -> String {
    use crate::units::{format_duration, format_rate, format_size};
    let mut out = vec![
        format!("kind: {}", spec.kind.as_str()),
        format!("protocol: {}", spec.wire.as_str()),
        format!("duration: {}", format_duration(spec.duration)),
    ];
    if !spec.omit.is_zero() {
        out.push(format!("omit: {}", format_duration(spec.omit)));
    }
    if spec.streams != 1 {
        out.push(format!("streams: {}", spec.streams));
    }
    out.push(match spec.effective_bitrate() {
        0 => "bitrate: unpaced".to_string(),
        b => format!("bitrate: {}", format_rate(b)),
    });
    out.push(format!(
        "length: {}",
        format_size(u64::from(spec.effective_length()))
    ));
    if crate::kinds::of(spec.kind).request_response() {
        let rr = spec.effective_rr();
        out.push(format!(
            "request_size: {}, response_size: {}, burst: {}, nodelay: {}",
            rr.request_size, rr.response_size, rr.burst, rr.nodelay
        ));
    }
    if let Some(w) = spec.window {
        out.push(format!("window: {}", format_size(u64::from(w))));
    }
    if let Some(c) = &spec.congestion {
        out.push(format!("congestion: {c}"));
    }
    if let Some(t) = spec.tos {
        out.push(format!("tos: {t:#04x}"));
    }
    if let Some(b) = spec.bind {
        out.push(format!("bind: {b}"));
    }
    if let Some(f) = spec.family {
        out.push(format!("family: {}", f.as_str()));
    }
    if let Some(p) = spec.port {
        out.push(format!("port: {p}"));
    }
    out.push(format!(
        "connect_timeout: {}",
        format_duration(spec.connect_timeout)
    ));
    out.push(format!(
        "auth: {}",
        if spec.secret.is_some() {
            "shared secret"
        } else {
            "none"
        }
    ));
    out.join(", ")
}

/// `/probe?target=`: a configured target's name stands for its address
/// (and keeps its name as the `target` label); anything else is an
/// address.
fn resolve_target(
    targets: &[crate::config::TargetConfig],
    t: &str,
) -> Result<Target, ProbeRequestError> {
    if let Some(c) = targets.iter().find(|c| c.name.as_deref() == Some(t)) {
        if let Some(e) = c.endpoint() {
            return e.map_err(|e| ProbeRequestError::BadRequest(e.to_string()));
        }
    }
    Target::parse(t, DEFAULT_PORT).map_err(|e| ProbeRequestError::BadRequest(e.to_string()))
}

impl App for ServiceApp {
    fn metrics(&self) -> String {
        let s = &self.0;
        let host = s
            .host_metrics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let counters = s.responder.as_ref().map(|r| r.counters());
        match crate::metrics::render(&s.store, &host, counters.as_deref(), &s.state) {
            Ok(text) => text,
            Err(e) => {
                tracing::error!(error = %e, "rendering metrics failed");
                format!("# rendering metrics failed: {e}\n")
            }
        }
    }

    fn probe(
        &self,
        target: Option<String>,
        module: String,
        timeout: Option<Duration>,
    ) -> BoxFuture<Result<ProbeResponse, ProbeRequestError>> {
        let shared = self.0.clone();
        Box::pin(async move {
            let config = shared.config();
            let Some(m) = config.module(&module).cloned() else {
                let known: Vec<&str> = config.modules.keys().map(String::as_str).collect();
                return Err(ProbeRequestError::BadRequest(format!(
                    "unknown module {module:?}; this configuration has: {}",
                    known.join(", ")
                )));
            };
            // As the configuration check refuses an address on a loopback
            // target: a probe of this host must not pass for one of `target`.
            let endpoint = match (m.is_loopback(), &target) {
                (true, None) => None,
                (true, Some(t)) => {
                    return Err(ProbeRequestError::BadRequest(format!(
                        "module {module:?} is a loopback module, which probes this host itself; \
                         it takes no target (got target={t:?}): use /probe?module={module}"
                    )))
                }
                (false, Some(t)) => Some(resolve_target(&config.targets, t)?),
                (false, None) => {
                    return Err(ProbeRequestError::BadRequest(format!(
                        "module {module:?} probes a remote responder: \
                         expected /probe?target=HOST[:PORT]&module={module}"
                    )))
                }
            };
            let target = target.unwrap_or_else(|| crate::config::LOOPBACK_TARGET_NAME.to_string());
            let forbidden = |why: String| {
                shared.state.http_refused(HttpRefusal::ProbeForbidden);
                tracing::info!(%target, %module, reason = %why, "/probe refused");
                ProbeRequestError::Forbidden(why)
            };
            if let Some(e) = &endpoint {
                let h = &config.http;
                let resolved = if h.probe_allow.is_empty() {
                    Vec::new()
                } else {
                    probe_access::resolve(e).await
                };
                probe_access::check_target(h, &config.targets, e, &resolved).map_err(forbidden)?;
            }
            let max = config.http.probe_max_concurrent;
            let Some(_running) = probe_access::try_acquire(&shared.probes_running, max) else {
                shared.state.http_refused(HttpRefusal::ProbeBusy);
                return Err(ProbeRequestError::Busy(format!(
                    "{max} /probe requests are already running (http.probe_max_concurrent); retry later"
                )));
            };
            let budget = timeout
                .unwrap_or(m.effective_timeout())
                .min(m.effective_timeout() * 2);
            let mut deadline = Instant::now() + budget;
            // In mesh mode this host's slot is kept for its planned tests:
            // a probe on demand runs only in a gap the plan leaves it, and
            // ends where the gap does.
            let need = m
                .specs()
                .iter()
                .map(|(_, s)| s.omit + s.duration + crate::responder::turns::HAND_SETUP)
                .sum();
            let gap = match shared.responder.as_ref().map(|r| r.mesh_gap(need)) {
                Some(Err(refusal)) => {
                    shared.state.http_refused(HttpRefusal::ProbeBusy);
                    tracing::info!(%target, %module, reason = %refusal.message, "/probe refused");
                    return Err(ProbeRequestError::Busy(refusal.message));
                }
                Some(Ok(gap)) => gap,
                None => None,
            };
            if let Some(left) = gap {
                deadline = deadline.min(Instant::now() + left);
            }
            let mut debug = format!(
                "Probing {target} with module {module} ({}), within {budget:?}\n",
                m.kind.as_str()
            );
            let slot = shared.slot.clone();
            let max_probing = config.scheduler.max_concurrent_probes;
            let mut outcomes = Vec::new();
            for (direction, mut spec) in m.specs() {
                let _ = writeln!(debug, "- {direction} probe: {}", spec_words(&spec));
                // Asked for by a person, so run whatever the byte budget
                // holds, but count every byte its sockets move against it,
                // however it ends.
                let moved = crate::engine::datapath::Progress::default();
                spec.moved = Some(moved.clone());
                let queued = Instant::now();
                // When the probe itself began, after the wait for the slot.
                let mut began: Option<(Instant, SystemTime)> = None;
                let run = tokio::time::timeout_at(deadline.into(), async {
                    // Wait for the host's test slot (a scheduled probe, or a
                    // test this host serves): concurrent tests share the NIC
                    // and spoil each other's figures. The wait is bounded
                    // by the outer deadline too.
                    let _permit = slot
                        .acquire_probe(max_probing, budget, deadline.into())
                        .await
                        .ok()?;
                    began = Some((Instant::now(), SystemTime::now()));
                    Some(run_contained(endpoint.clone(), spec, m.ipv6).await)
                })
                .await;
                let (run_start, started) = began.unwrap_or((Instant::now(), SystemTime::now()));
                let slot_wait = run_start.saturating_duration_since(queued);
                if !m.is_loopback() {
                    shared
                        .state
                        .host_budget()
                        .charge(crate::byte_budget::BudgetRole::Probing, moved.get());
                }
                let result = match run {
                    Ok(Some(Ok(r))) => {
                        debug.push_str(&crate::report::text(&r, true));
                        Ok(r)
                    }
                    Ok(Some(Err((f, _)))) => {
                        let _ = writeln!(debug, "  failed ({}): {}", f.reason, f.message);
                        Err(f)
                    }
                    Ok(None) | Err(_) => {
                        let message = if deadline < queued + budget {
                            "cut where this mesh member's free gap ends: a planned test is due"
                                .to_string()
                        } else {
                            format!("no result within {budget:?}")
                        };
                        let _ = writeln!(debug, "  failed (timeout): {message}");
                        Err(ProbeFailure {
                            reason: "timeout",
                            message,
                        })
                    }
                };
                if !slot_wait.is_zero() {
                    let _ = writeln!(debug, "  waited {slot_wait:?} for the host's test slot");
                }
                outcomes.push(ProbeOutcome {
                    kind: m.kind.as_str().to_string(),
                    direction,
                    labels: Default::default(),
                    started,
                    duration: run_start.elapsed(),
                    slot_wait: Some(slot_wait),
                    result,
                });
            }
            let metrics = crate::metrics::render_single(&outcomes)
                .unwrap_or_else(|e| format!("# rendering failed: {e}\n"));
            Ok(ProbeResponse { metrics, debug })
        })
    }

    fn reload(&self) -> BoxFuture<Result<(), String>> {
        let shared = self.0.clone();
        Box::pin(async move { shared.reload().await })
    }

    fn max_connections(&self) -> usize {
        self.0.config().http.max_connections
    }

    fn connection_refused(&self) {
        self.0.state.http_refused(HttpRefusal::Connections);
    }

    fn web_config(&self) -> Arc<crate::web_config::WebConfig> {
        self.0.web_config()
    }

    fn refused(&self, reason: HttpRefusal) {
        self.0.state.http_refused(reason);
    }

    fn ready(&self) -> bool {
        self.0.ready.load(Ordering::Relaxed)
    }

    fn web(&self, path: &str, query: Option<&str>) -> Option<(u16, &'static str, String)> {
        let s = &self.0;
        if !super::web::ROUTES.contains(&path) {
            return None;
        }
        // Until the first schedule is in force the page knows no jobs, and
        // a 404 for a configured job would be a false answer: say "not yet".
        if !self.ready() {
            return Some((
                503,
                "text/plain; charset=utf-8",
                "Starting: the probe schedule is not in force yet; retry.\n".to_string(),
            ));
        }
        let config = s.config();
        let jobs = s.web_jobs.read().unwrap_or_else(|p| p.into_inner()).clone();
        let paths = s.state.paths();
        let view = super::web::View {
            config: &config,
            history: &s.history,
            store: &s.store,
            jobs: &jobs,
            host: &s.hostname,
            now: SystemTime::now(),
            paths: Some(&paths),
        };
        super::web::handle(&view, path, query).map(|r| (r.status, r.content_type, r.body))
    }

    fn landing_page(&self) -> String {
        let now = SystemTime::now();
        let latest = self.0.store.latest();
        let rows = latest.iter().map(|(key, o)| {
            let age = now.duration_since(o.ended()).unwrap_or_default().as_secs();
            let (status, figure) = match &o.result {
                Ok(r) => {
                    let mut f = format!("{:.1} Mbit/s", r.throughput_bits_per_second / 1e6);
                    if let Some(t) = &r.tcp {
                        let _ = write!(f, ", {} retrans", t.retransmits);
                        if let Some(rtt) = t.rtt_seconds {
                            let _ = write!(f, ", {:.2} ms RTT", rtt * 1e3);
                        }
                    }
                    if let Some(u) = &r.udp {
                        let _ = write!(
                            f,
                            ", {:.3} % loss, {:.3} ms jitter",
                            u.loss_ratio * 100.0,
                            u.jitter_seconds * 1e3
                        );
                    }
                    // A cut-down test must not look like the one asked for.
                    if r.clamped.is_empty() {
                        ("ok".to_string(), f)
                    } else {
                        let _ = write!(f, "; clamped: {}", r.clamped.join("; "));
                        ("ok, clamped".to_string(), f)
                    }
                }
                Err(f) => (format!("failed: {}", f.reason), f.message.clone()),
            };
            (key, o.direction.to_string(), status, figure, age)
        });
        let since = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let doc = maud::html! {
            (maud::DOCTYPE)
            html {
                head { meta charset="utf-8"; title { "pathprobe" } }
                body {
                    h1 { "pathprobe " (env!("CARGO_PKG_VERSION")) }
                    ul {
                        li { a href="/metrics" { "/metrics" } ": latest results, host and self metrics" }
                        li { "/probe?target=NAME|HOST[:PORT]&module=NAME[&debug=true]: run one probe now" }
                        li {
                            a href="/-/healthy" { "/-/healthy" } ", "
                            a href="/-/ready" { "/-/ready" } ", POST /-/reload"
                        }
                    }
                    h2 { "Latest result per target" }
                    table border="1" {
                        tr {
                            th { "target" } th { "module" } th { "direction" }
                            th { "status" } th { "result" } th { "age" }
                        }
                        @for (key, direction, status, figure, age) in rows {
                            tr {
                                td { (key.target) } td { (key.module) } td { (direction) }
                                td { (status) } td { (figure) } td { (age) " s ago" }
                            }
                        }
                    }
                    p { small { "rendered at " (since) } }
                }
            }
        };
        let mut out = doc.into_string();
        out.push('\n');
        out
    }
}
