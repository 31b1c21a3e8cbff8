//! A latency distribution as it travels, shared by every latency kind
//! (`tcp_rr`, `udp_rr`, `tcp_crr`). It travels as fixed buckets
//! ([`LATENCY_BUCKETS`]), so that the exporter can add runs into one
//! Prometheus histogram. It sits below the kinds' wire structs so that none
//! of them imports another for it.

use serde::{Deserialize, Serialize};

/// Upper bounds, in seconds, of the latency buckets carried in
/// [`LatencyStats::buckets`] and exported as a Prometheus histogram: 1-2.5-5
/// steps from 10 µs to 10 s, so that loopback and intercontinental paths
/// both land in the middle of the range.
pub const LATENCY_BUCKETS: [f64; 19] = [
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
    250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0,
];

/// A latency distribution's summary, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    /// Sum of every latency, for a histogram's `_sum`.
    pub sum: f64,
    /// Counts per bucket of [`LATENCY_BUCKETS`] (not cumulative), then one
    /// for above the last bound.
    #[serde(default)]
    pub buckets: Vec<u64>,
}
