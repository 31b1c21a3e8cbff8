//! Admission: holds a test request to the responder's per-test limits
//! (duration, rate, streams, write or datagram size, socket buffer), and
//! either cuts it down to them, saying what was cut, or refuses it with the
//! limit named, as the operator's `limit_policy` says.

use super::{LimitPolicy, ResponderConfig};
use crate::protocol::{Kind, TestRequest};

/// A request as the responder will run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub request: TestRequest,
    /// One sentence per value cut down to a limit, naming the limit
    /// ("max_duration: duration 120 s clamped to 60 s"); empty if none was.
    pub clamped: Vec<String>,
}

/// Holds a request to the responder's limits: duration, rate, streams,
/// write or datagram size, and socket buffer. A value over a limit is cut
/// down to it and said so under [`LimitPolicy::Clamp`], or refused with the
/// limit named under [`LimitPolicy::Refuse`]. Requests no responder could
/// run (zero duration or streams, an omit that leaves no measured time, a
/// length below the protocol's minimum) are refused under either policy.
pub fn check_limits(r: &TestRequest, c: &ResponderConfig) -> Result<Admission, String> {
    let mut request = r.clone();
    let mut clamped = Vec::new();
    // Under `refuse`, the first value over its limit ends the admission.
    let mut over = |limit: &str, asked: String, allowed: String| -> Result<(), String> {
        match c.limit_policy {
            LimitPolicy::Clamp => {
                clamped.push(format!("{limit}: {asked} clamped to {allowed}"));
                Ok(())
            }
            LimitPolicy::Refuse => Err(format!(
                "{limit}: {asked} exceeds this responder's maximum of {allowed} (limit_policy: refuse)"
            )),
        }
    };
    if r.duration_ms == 0 {
        return Err("duration must be greater than zero".into());
    }
    let max_ms = c.max_duration.as_millis().min(u64::MAX as u128) as u64;
    if r.omit_ms >= max_ms {
        return Err(format!(
            "max_duration: omit {} leaves no measured time within this responder's maximum of {}",
            seconds(r.omit_ms),
            seconds(max_ms)
        ));
    }
    if r.duration_ms.saturating_add(r.omit_ms) > max_ms {
        request.duration_ms = max_ms - r.omit_ms;
        let asked = if r.omit_ms > 0 {
            format!(
                "duration {} (plus {} omit)",
                seconds(r.duration_ms),
                seconds(r.omit_ms)
            )
        } else {
            format!("duration {}", seconds(r.duration_ms))
        };
        over("max_duration", asked, seconds(request.duration_ms))?;
    }
    if r.streams == 0 {
        return Err("0 streams requested; at least 1 is needed".into());
    }
    if r.streams > c.max_streams {
        request.streams = c.max_streams;
        over(
            "max_streams",
            format!("{} streams", r.streams),
            format!("{} streams", c.max_streams),
        )?;
    }
    if c.max_bitrate > 0 && (r.bitrate == 0 || r.bitrate > c.max_bitrate) {
        let asked = if r.bitrate == 0 {
            "unlimited rate".to_string()
        } else {
            format!("rate {} bit/s", r.bitrate)
        };
        request.bitrate = c.max_bitrate;
        over(
            "max_bitrate",
            asked,
            format!("{} bit/s per direction", c.max_bitrate),
        )?;
    }
    let (min_len, ceiling) = match r.kind {
        Kind::Udp => (crate::protocol::udp::HELLO_LEN as u32, 65_000),
        Kind::Tcp => (1, super::TCP_LENGTH_CEILING),
    };
    let max_len = c.max_length.clamp(min_len, ceiling);
    if r.length < min_len {
        return Err(format!(
            "buffer length {} is too small; {} needs at least {min_len} bytes",
            r.length,
            r.kind.as_str()
        ));
    }
    if r.length > max_len {
        request.length = max_len;
        over(
            "max_length",
            format!("buffer length {} bytes", r.length),
            format!("{max_len} bytes"),
        )?;
    }
    if let Some(w) = r.window.filter(|w| *w > c.max_window) {
        request.window = Some(c.max_window);
        over(
            "max_window",
            format!("window {w} bytes"),
            format!("{} bytes", c.max_window),
        )?;
    }
    Ok(Admission { request, clamped })
}

/// Milliseconds as "60 s" or "2.5 s".
fn seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Direction;
    use std::time::Duration;

    fn limits(policy: LimitPolicy) -> ResponderConfig {
        ResponderConfig {
            max_duration: Duration::from_secs(10),
            max_streams: 2,
            max_bitrate: 100_000_000,
            max_length: 64 * 1024,
            max_window: 1 << 20,
            limit_policy: policy,
            ..ResponderConfig::default()
        }
    }

    fn request() -> TestRequest {
        TestRequest {
            kind: Kind::Tcp,
            direction: Direction::Send,
            duration_ms: 5000,
            omit_ms: 0,
            streams: 1,
            bitrate: 50_000_000,
            length: 32 * 1024,
            window: Some(512 * 1024),
            congestion: None,
            tos: None,
            affinity: None,
            interval_ms: None,
        }
    }

    /// Asks for more than every limit allows.
    fn greedy() -> TestRequest {
        TestRequest {
            duration_ms: 30_000,
            omit_ms: 2000,
            streams: 8,
            bitrate: 0,
            length: 1 << 20,
            window: Some(8 << 20),
            ..request()
        }
    }

    #[test]
    fn within_the_limits_runs_as_asked() {
        for policy in [LimitPolicy::Clamp, LimitPolicy::Refuse] {
            let a = check_limits(&request(), &limits(policy)).unwrap();
            assert_eq!(a.request, request());
            assert!(a.clamped.is_empty());
        }
    }

    #[test]
    fn clamp_cuts_every_limit_and_names_it() {
        let a = check_limits(&greedy(), &limits(LimitPolicy::Clamp)).unwrap();
        assert_eq!(
            a.request,
            TestRequest {
                duration_ms: 8000,
                omit_ms: 2000,
                streams: 2,
                bitrate: 100_000_000,
                length: 64 * 1024,
                window: Some(1 << 20),
                ..request()
            }
        );
        assert_eq!(
            a.clamped,
            [
                "max_duration: duration 30 s (plus 2 s omit) clamped to 8 s",
                "max_streams: 8 streams clamped to 2 streams",
                "max_bitrate: unlimited rate clamped to 100000000 bit/s per direction",
                "max_length: buffer length 1048576 bytes clamped to 65536 bytes",
                "max_window: window 8388608 bytes clamped to 1048576 bytes",
            ]
        );
    }

    #[test]
    fn refuse_names_the_first_limit_exceeded() {
        let c = limits(LimitPolicy::Refuse);
        assert_eq!(
            check_limits(&greedy(), &c).unwrap_err(),
            "max_duration: duration 30 s (plus 2 s omit) exceeds this responder's maximum of 8 s (limit_policy: refuse)"
        );
        let cases = [
            (
                TestRequest {
                    streams: 3,
                    ..request()
                },
                "max_streams: 3 streams exceeds this responder's maximum of 2 streams (limit_policy: refuse)",
            ),
            (
                TestRequest {
                    window: Some(2 << 20),
                    ..request()
                },
                "max_window: window 2097152 bytes exceeds this responder's maximum of 1048576 bytes (limit_policy: refuse)",
            ),
            (
                TestRequest {
                    length: 65 * 1024,
                    ..request()
                },
                "max_length: buffer length 66560 bytes exceeds this responder's maximum of 65536 bytes (limit_policy: refuse)",
            ),
        ];
        for (r, want) in cases {
            assert_eq!(check_limits(&r, &c).unwrap_err(), want);
        }
    }

    #[test]
    fn impossible_requests_are_refused_under_either_policy() {
        for policy in [LimitPolicy::Clamp, LimitPolicy::Refuse] {
            let c = limits(policy);
            for (r, want) in [
                (
                    TestRequest {
                        duration_ms: 0,
                        ..request()
                    },
                    "duration must be greater than zero",
                ),
                (
                    TestRequest {
                        omit_ms: 10_000,
                        ..request()
                    },
                    "max_duration: omit 10 s leaves no measured time within this responder's maximum of 10 s",
                ),
                (
                    TestRequest {
                        streams: 0,
                        ..request()
                    },
                    "0 streams requested; at least 1 is needed",
                ),
                (
                    TestRequest {
                        kind: Kind::Udp,
                        length: 4,
                        ..request()
                    },
                    "buffer length 4 is too small; udp needs at least 44 bytes",
                ),
            ] {
                assert_eq!(check_limits(&r, &c).unwrap_err(), want, "{policy:?}");
            }
        }
    }
}
