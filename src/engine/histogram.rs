//! Latency histograms, allocated once before a test and recorded into
//! without allocating, and their summary as it travels ([`LatencyStats`]),
//! for every latency kind.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::protocol::latency::{LatencyStats, LATENCY_BUCKETS};

/// Longest latency the histogram holds; longer ones count as this. A
/// transaction that takes a minute has stalled, and the stall watchdogs of
/// both ends end such a test well before.
const MAX_LATENCY: Duration = Duration::from_secs(60);

/// A latency histogram for one test: nanoseconds from 1 ns to
/// [`MAX_LATENCY`] at three significant digits, allocated once here.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY.as_nanos() as u64, 3)
        .expect("constant histogram bounds are valid")
}

/// Records one latency; never allocates (values above the range count as
/// its top).
#[inline]
pub fn record(hist: &mut Histogram<u64>, latency: Duration) {
    let ns = (latency.as_nanos() as u64).clamp(1, hist.high());
    hist.saturating_record(ns);
}

/// The summary and fixed buckets of a histogram of nanoseconds.
pub fn summarize(hist: &Histogram<u64>) -> Option<LatencyStats> {
    if hist.is_empty() {
        return None;
    }
    let s = |ns: u64| ns as f64 / 1e9;
    let mut buckets = vec![0u64; LATENCY_BUCKETS.len() + 1];
    let mut sum = 0.0;
    for v in hist.iter_recorded() {
        // A sub-bucket goes by its lowest value, so that a bound such as
        // 10 µs holds what was recorded as 10 µs (the error is under 0.1%).
        let seconds = s(hist.lowest_equivalent(v.value_iterated_to()));
        sum += s(hist.median_equivalent(v.value_iterated_to())) * v.count_at_value() as f64;
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(LATENCY_BUCKETS.len());
        buckets[i] += v.count_at_value();
    }
    Some(LatencyStats {
        min: s(hist.min()),
        mean: hist.mean() / 1e9,
        p50: s(hist.value_at_quantile(0.5)),
        p90: s(hist.value_at_quantile(0.9)),
        p99: s(hist.value_at_quantile(0.99)),
        p999: s(hist.value_at_quantile(0.999)),
        max: s(hist.max()),
        sum,
        buckets,
    })
}
