//! Adaptive duration on the wire: what a prober asks when a
//! throughput test is to stop once its figure is known
//! ([`AdaptiveRequest`], the last field of a `TestRequest`), and how it
//! tells the responder that the test ended and which span the figures
//! cover ([`TestEnd`], the `end` message).
//!
//! Both are additions an older peer does without: a responder that does
//! not know [`AdaptiveRequest`] drops it from the request it echoes in
//! `Accepted`, which is how the prober learns not to send `end` (see
//! `probe::client`).

use serde::{Deserialize, Serialize};

/// Most precision a prober may ask: a relative half-width of 50%.
pub const MAX_PRECISION_PPM: u32 = 500_000;

/// An adaptive test: it runs at most the request's `duration_ms`, at
/// least `min_duration_ms`, and the prober ends it once its estimate's
/// 95% interval is within `precision_ppm` of the estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptiveRequest {
    pub min_duration_ms: u64,
    /// Relative half-width of the 95% interval, parts per million (an
    /// integer, so that a request stays comparable field for field).
    pub precision_ppm: u32,
    /// The prober asks the responder for its received counts during the
    /// test ([`Progress`], every ~100 ms): set when the prober sends
    /// datagrams, whose arrival its own counts cannot see. A responder
    /// that does not know it drops it from its echo; the prober then
    /// judges only the receiver's figures at the end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub receiver_progress: bool,
}

impl AdaptiveRequest {
    /// The precision as a fraction (0.01 for 1%).
    pub fn precision(&self) -> f64 {
        f64::from(self.precision_ppm) / 1e6
    }

    /// Whether a responder can run it within a test of `duration_ms`: the
    /// checks a hostile request must pass.
    pub fn check(&self, duration_ms: u64) -> Result<(), String> {
        if self.precision_ppm == 0 || self.precision_ppm > MAX_PRECISION_PPM {
            return Err(format!(
                "adaptive precision must be between 1 ppm and {MAX_PRECISION_PPM} ppm, got {}",
                self.precision_ppm
            ));
        }
        if self.min_duration_ms > duration_ms {
            return Err(format!(
                "adaptive min duration {} ms exceeds the test's {duration_ms} ms",
                self.min_duration_ms
            ));
        }
        Ok(())
    }
}

/// Why an adaptive probe stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The estimate is known to the asked precision.
    Converged,
    /// The maximum duration came first: the estimate is not precise.
    MaxDuration,
    /// A byte budget ended it.
    Budget,
    /// Something else ended it first (the peer, a slot's end).
    Cut,
    /// Not converged, and stopped early: even if the interval narrowed
    /// as fast as independent samples allow, it could not have come
    /// within three times the precision by the maximum, so running on
    /// would only have cost bytes (engine/adaptive.rs). Added after the
    /// first adaptive release, which reads it as [`StopReason::Other`]
    /// and still ends the test and cuts its figures: a responder acts on
    /// `End` whatever its reason.
    OutOfReach,
    /// A reason a later release added.
    #[serde(other)]
    Other,
}

impl StopReason {
    /// Every reason a metric's `reason` label takes, in order.
    pub const ALL: [StopReason; 5] = [
        StopReason::Converged,
        StopReason::MaxDuration,
        StopReason::Budget,
        StopReason::Cut,
        StopReason::OutOfReach,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Converged => "converged",
            StopReason::MaxDuration => "max_duration",
            StopReason::Budget => "budget",
            StopReason::Cut => "cut",
            StopReason::OutOfReach => "out_of_reach",
            StopReason::Other => "other",
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The prober's word that an adaptive test ended: each end stops its
/// senders, and cuts its figures to the span the estimate covers, from
/// `span_start_us` (after its start gate) to `span_end_us`, or to its
/// stream's last byte when the end is not given (no estimate, or a
/// prober of an earlier release). The bytes that cross after the end was
/// decided (what the senders' sockets held, what the bottleneck queued)
/// are not the estimate's: over a span stretched to the last byte they
/// are a fixed amount over a short time, and the figure read above the
/// bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestEnd {
    pub span_start_us: u64,
    pub reason: StopReason,
    /// Added after the first adaptive release: an older responder ignores
    /// it and cuts to the last byte, and the prober's agreement check
    /// then says whether its figure still confirms the estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_end_us: Option<u64>,
}

/// Fewest microseconds between two [`Progress`] messages a responder
/// sends: one per sample interval, so that a long test's messages stay
/// bounded (at most one per 100 ms of the test's maximum).
pub const PROGRESS_INTERVAL_US: u64 = 100_000;

/// The responder's count of bytes received so far in an adaptive test,
/// sent only to a prober that asked with
/// [`AdaptiveRequest::receiver_progress`]: the stopping rule then judges
/// what arrived, not what was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// When the count was read, after the responder's start gate.
    pub at_us: u64,
    /// Bytes its streams had received by then.
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_adaptive_request_is_refused() {
        let ok = AdaptiveRequest {
            min_duration_ms: 500,
            precision_ppm: 10_000,
            receiver_progress: false,
        };
        assert!(ok.check(5000).is_ok());
        assert!((ok.precision() - 0.01).abs() < 1e-12);
        assert!(ok.check(400).is_err());
        for ppm in [0, MAX_PRECISION_PPM + 1, u32::MAX] {
            let bad = AdaptiveRequest {
                precision_ppm: ppm,
                ..ok
            };
            assert!(bad.check(5000).is_err(), "{ppm}");
        }
    }

    #[test]
    fn an_unknown_reason_reads_as_other() {
        let r: StopReason = serde_json::from_str("\"meteor\"").unwrap();
        assert_eq!(r, StopReason::Other);
        assert_eq!(
            serde_json::to_string(&StopReason::MaxDuration).unwrap(),
            "\"max_duration\""
        );
    }

    #[test]
    fn a_request_without_progress_reads_and_writes_as_before() {
        // The field is new: a request of the first adaptive release reads
        // as not asking, and one not asking writes no field.
        let old: AdaptiveRequest =
            serde_json::from_str(r#"{"min_duration_ms":500,"precision_ppm":10000}"#).unwrap();
        assert!(!old.receiver_progress);
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            r#"{"min_duration_ms":500,"precision_ppm":10000}"#
        );
        let asked = AdaptiveRequest {
            receiver_progress: true,
            ..old
        };
        let back: AdaptiveRequest =
            serde_json::from_str(&serde_json::to_string(&asked).unwrap()).unwrap();
        assert_eq!(back, asked);
    }
}
