//! Prometheus metrics of `pathprobe serve`.
//!
//! - [`names`]: every metric's name, help, type and labels, in one table
//!   from which docs/METRICS.md's reference is generated.
//! - [`store`]: [`ResultStore`], where the scheduler records finished
//!   probes and skipped runs, and from which scrapes read.
//! - [`host`]: host metrics read from /proc at scrape time.
//! - [`path`]: the paths serve traced (`trace:`) and the tracer's counters.
//! - [`service`]: reload, scheduler-lag and build metrics, and the
//!   responder's counters.
//!
//! A scrape builds every series from this state when it happens
//! ([`render`]), so nothing is registered or unregistered as targets come
//! and go: a key removed from the store is simply absent next time. The
//! `/probe` endpoint uses [`render_single`] on the outcome of the run it
//! just made.

pub mod budget;
pub mod host;
pub mod names;
pub mod path;
pub mod service;
pub mod store;

mod expo;
mod probe;
mod steps;

use prometheus::proto::MetricFamily;

use crate::responder::ResponderCounters;

pub use host::{HostMetrics, DEFAULT_IRQ_PATTERN};
pub use service::{HttpRefusal, MeshFigures, ServiceState};
/// The one value a peer that churns its release is exported and kept under.
pub use steps::UNSTABLE as UNSTABLE_RELEASE;
pub use store::{check_user_label, ProbeFailure, ProbeKey, ProbeOutcome, ResultStore, SeriesPlan};

/// The Content-Type of [`render`]'s output, as `/metrics` and `/probe`
/// send it: the text exposition format 0.0.4 (`prometheus::TEXT_FORMAT`),
/// with the charset spelled out, as Prometheus' own exporters send it.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Why metrics could not be set up or rendered.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("invalid IRQ pattern {pattern:?}: {source}")]
    InvalidIrqPattern {
        pattern: String,
        source: regex::Error,
    },
    #[error("invalid target label name {name:?}: {why}")]
    InvalidLabelName { name: String, why: &'static str },
    #[error("encoding metrics: {0}")]
    Encode(prometheus::Error),
}

/// Adds every series of a /metrics scrape to `out`.
fn collect(
    out: &mut expo::Exposition,
    store: &ResultStore,
    host: &HostMetrics,
    readings: &host::HostReadings,
    responder: Option<&ResponderCounters>,
    service: &ServiceState,
) {
    probe::render_store(out, store);
    host::render_host(out, host, readings);
    if let Some(counters) = responder {
        service::render_responder(out, counters);
    }
    service::render_service(out, service);
    path::render_paths(out, &service.paths(), service.tracing());
}

/// The body of a /metrics response, in text format 0.0.4 ([`CONTENT_TYPE`]):
/// per-probe results from `store`, host metrics read now, the responder's
/// counters (if this process runs a responder), and service metrics.
pub fn render(
    store: &ResultStore,
    host: &HostMetrics,
    responder: Option<&ResponderCounters>,
    service: &ServiceState,
) -> Result<String, MetricsError> {
    let mut out = expo::Exposition::default();
    let readings = host::HostReadings::read();
    collect(&mut out, store, host, &readings, responder, service);
    out.encode()
}

/// The same metrics as [`render`], as the prometheus crate's protos, for
/// use with its encoders or a custom `Collector`. Slower than [`render`].
pub fn gather(
    store: &ResultStore,
    host: &HostMetrics,
    responder: Option<&ResponderCounters>,
    service: &ServiceState,
) -> Vec<MetricFamily> {
    let mut out = expo::Exposition::proto();
    let readings = host::HostReadings::read();
    collect(&mut out, store, host, &readings, responder, service);
    out.into_families()
}

/// The body of a `/probe` response: the per-probe gauges of the run just
/// made (two outcomes for a `both` module), without `target` and `module`
/// labels, which Prometheus attaches from the scrape's URL parameters, and
/// without counters, which mean nothing for one run. A failed run is
/// `pathprobe_probe_success 0`, not an error.
pub fn render_single(outcomes: &[ProbeOutcome]) -> Result<String, MetricsError> {
    let mut target = store::TargetState::default();
    for outcome in outcomes {
        target.record(outcome.clone(), None);
    }
    let mut out = expo::Exposition::default();
    probe::render_target(&mut out, None, &target, probe::Counters::Omit);
    out.encode()
}

#[cfg(test)]
mod tests;
