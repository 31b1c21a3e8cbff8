//! Admission: holds a test request to the responder's per-test limits
//! (duration, rate, streams, write or datagram size, socket buffer), and
//! either cuts it down to them, saying what was cut, or refuses it with the
//! limit named, as the operator's `limit_policy` says.

use super::{LimitPolicy, ResponderConfig};
use crate::kinds::kind::Transport;
use crate::protocol::{Direction, TestRequest};
use crate::units::plural;

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
            plural(r.streams, "stream"),
            plural(c.max_streams, "stream"),
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
    // Unauthenticated reverse UDP: the responder's own sending is paced
    // unless the operator proved who may ask for more by setting a secret.
    let cap = c.max_unauthenticated_udp_bitrate;
    let responder_sends = matches!(r.direction, Direction::Receive | Direction::Bidir);
    if c.secret.is_none()
        && cap > 0
        && crate::kinds::of(r.kind).transport() == Transport::Udp
        // A UDP round trip's responder always sends (its replies).
        && (responder_sends || crate::kinds::of(r.kind).request_response())
        && (request.bitrate == 0 || request.bitrate > cap)
    {
        let asked = if request.bitrate == 0 {
            "unlimited rate".to_string()
        } else {
            format!("rate {} bit/s", request.bitrate)
        };
        request.bitrate = cap;
        over(
            "max_unauthenticated_udp_bitrate",
            asked,
            format!("{cap} bit/s for UDP this responder sends without a secret"),
        )?;
    }
    // Socket options the prober asks of this host: only those the host and
    // the operator allow. Dropping one leaves the host's default.
    if let Some(algo) = &r.congestion {
        let allowed = c
            .allowed_congestion
            .clone()
            .or_else(host_allowed_congestion);
        if let Some(allowed) = allowed.filter(|a| !a.iter().any(|x| x == algo)) {
            request.congestion = None;
            over(
                "allowed_congestion",
                format!("congestion control {algo}"),
                format!("the host default (allowed here: {})", allowed.join(" ")),
            )?;
        }
    }
    if let (Some(tos), false) = (r.tos, c.allow_tos) {
        request.tos = None;
        over(
            "allow_tos",
            format!("tos {tos:#04x}"),
            "the host default (allow_tos: false)".into(),
        )?;
    }
    // Pinning to a CPU this host cannot give is tried and comes back as a
    // warning in the results; the operator can refuse pinning outright.
    if let (Some(cpu), false) = (r.affinity, c.allow_affinity) {
        request.affinity = None;
        over(
            "allow_affinity",
            format!("CPU {cpu}"),
            "no pinning (allow_affinity: false)".into(),
        )?;
    }
    let kind = crate::kinds::of(r.kind);
    let bounds = kind.length_bounds();
    let (min_len, ceiling) = (bounds.min, bounds.max);
    let rr = kind.request_response();
    if rr && kind.transport() == Transport::Tcp {
        check_rr(r, c.max_length.clamp(min_len, ceiling))?;
    } else if rr {
        check_udp_rr(r, &request, c.max_length.clamp(min_len, ceiling))?;
    } else if r.rr.is_some() {
        return Err(format!(
            "request/response sizes were given for a {} test",
            r.kind
        ));
    }
    if let Some(a) = &r.adaptive {
        if !kind.adaptive_duration() {
            return Err(format!(
                "a {} test cannot have an adaptive duration",
                r.kind
            ));
        }
        a.check(r.duration_ms)?;
        // A clamped maximum may fall below the asked minimum: the
        // minimum follows it down rather than outlast the test.
        if let Some(a) = request.adaptive.as_mut() {
            a.min_duration_ms = a.min_duration_ms.min(request.duration_ms);
        }
    }
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

/// A `tcp_rr` or `tcp_crr` request is run as asked or refused, under
/// either policy: other message sizes or another burst would be another
/// test. `length` carries the larger message, held to `max_length` as
/// other kinds' are. A `tcp_crr` test has one transaction in flight: its
/// rate and count are the door's (see `door.rs`), not the request's.
fn check_rr(r: &TestRequest, max_len: u32) -> Result<(), String> {
    use crate::protocol::rr::MAX_BURST;
    let kind = r.kind;
    let Some(rr) = r.rr else {
        return Err(format!("a {kind} test needs request and response sizes"));
    };
    if rr.request_size == 0 || rr.response_size == 0 {
        return Err(format!(
            "{kind} request and response sizes must be at least 1 byte"
        ));
    }
    let largest = rr.request_size.max(rr.response_size);
    if largest > max_len {
        return Err(format!(
            "max_length: a {largest}-byte {kind} message exceeds this responder's maximum of {max_len} bytes"
        ));
    }
    if r.length != largest {
        return Err(format!(
            "a {kind} test's length must be its larger message size"
        ));
    }
    let per_transaction = crate::kinds::of(kind).connection_per_transaction();
    let most = if per_transaction { 1 } else { MAX_BURST };
    if rr.burst == 0 || rr.burst > most {
        return Err(format!(
            "{kind} burst {} is outside 1..={most} transactions in flight",
            rr.burst
        ));
    }
    if rr.interval_us != 0 {
        return Err(format!("a {kind} test has no send interval"));
    }
    let intervals = per_transaction && r.interval_ms.is_some();
    if r.streams != 1 || r.direction != Direction::Send || intervals {
        return Err(format!(
            "a {kind} test runs one transaction stream, in the send direction"
        ));
    }
    Ok(())
}

/// A `udp_rr` request is run as asked or refused, under either policy: a
/// slower schedule or shorter datagrams would be another test. Its rate
/// (length over interval, each way) is held to the rate limits, which
/// `request` carries cut down if it exceeds them; the packets it sends,
/// which both ends keep state for, to the protocol's bound.
fn check_udp_rr(r: &TestRequest, limited: &TestRequest, max_len: u32) -> Result<(), String> {
    use crate::protocol::udp_rr as w;
    let Some(rr) = r.rr else {
        return Err("a udp_rr test needs its send interval".into());
    };
    if rr.request_size != r.length || rr.response_size != r.length || rr.burst != 1 {
        return Err("a udp_rr test's requests and replies are its length, one at a time".into());
    }
    if r.length > max_len {
        return Err(format!(
            "max_length: a {}-byte udp_rr datagram exceeds this responder's maximum of {max_len} bytes",
            r.length
        ));
    }
    if !(w::MIN_INTERVAL_US..=w::MAX_INTERVAL_US).contains(&rr.interval_us) {
        return Err(format!(
            "udp_rr interval {} us is outside {}..={} us",
            rr.interval_us,
            w::MIN_INTERVAL_US,
            w::MAX_INTERVAL_US
        ));
    }
    if w::packet_count(r.omit_ms.saturating_add(r.duration_ms), rr.interval_us).is_none() {
        return Err(format!(
            "a udp_rr test may send at most {} requests",
            w::MAX_PACKETS
        ));
    }
    let rate = w::bitrate(r.length, rr.interval_us);
    if r.bitrate < rate {
        return Err(format!(
            "a udp_rr test's rate is {rate} bit/s, not the {} bit/s it states",
            r.bitrate
        ));
    }
    if limited.bitrate < r.bitrate {
        return Err(format!(
            "max_bitrate: udp_rr at {rate} bit/s each way exceeds this responder's {} bit/s",
            limited.bitrate
        ));
    }
    if r.streams != 1 || r.direction != Direction::Send || r.interval_ms.is_some() {
        return Err("a udp_rr test runs one flow, in the send direction, without intervals".into());
    }
    Ok(())
}

/// The algorithms the host lets any process set, or `None` when the list
/// cannot be read (then the kernel decides, as it would for anyone).
fn host_allowed_congestion() -> Option<Vec<String>> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control").ok()?;
    Some(parse_congestion_list(&text))
}

fn parse_congestion_list(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
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
    use crate::protocol::Kind;
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
            no_offload: false,
            rr: None,
            adaptive: None,
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
    fn socket_options_are_only_those_the_host_and_operator_allow() {
        let c = ResponderConfig {
            allowed_congestion: Some(vec!["reno".into(), "bbr".into()]),
            allow_tos: false,
            allow_affinity: false,
            ..limits(LimitPolicy::Clamp)
        };
        let asked = TestRequest {
            congestion: Some("cubic".into()),
            tos: Some(0x10),
            affinity: Some(0),
            ..request()
        };
        let a = check_limits(&asked, &c).unwrap();
        assert_eq!(a.request.congestion, None);
        assert_eq!(a.request.tos, None);
        assert_eq!(a.request.affinity, None);
        assert_eq!(
            a.clamped,
            [
                "allowed_congestion: congestion control cubic clamped to the host default (allowed here: reno bbr)",
                "allow_tos: tos 0x10 clamped to the host default (allow_tos: false)",
                "allow_affinity: CPU 0 clamped to no pinning (allow_affinity: false)",
            ]
        );
        // An allowed algorithm is kept; under refuse, a disallowed one is refused.
        let bbr = TestRequest {
            congestion: Some("bbr".into()),
            ..request()
        };
        assert_eq!(check_limits(&bbr, &c).unwrap().request, bbr);
        let refuse = ResponderConfig {
            limit_policy: LimitPolicy::Refuse,
            ..c.clone()
        };
        let e = check_limits(&asked, &refuse).unwrap_err();
        assert!(
            e.starts_with("allowed_congestion: congestion control cubic exceeds"),
            "{e}"
        );
        assert_eq!(
            parse_congestion_list("reno cubic\n"),
            ["reno".to_string(), "cubic".to_string()]
        );
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

    /// A limit of one stream reads "1 stream", in the
    /// clamp note and in the refusal alike.
    #[test]
    fn a_limit_of_one_stream_is_said_in_the_singular() {
        let two = TestRequest {
            streams: 2,
            ..request()
        };
        let one = |policy| ResponderConfig {
            max_streams: 1,
            ..limits(policy)
        };
        let a = check_limits(&two, &one(LimitPolicy::Clamp)).unwrap();
        assert_eq!(a.clamped, ["max_streams: 2 streams clamped to 1 stream"]);
        assert_eq!(
            check_limits(&two, &one(LimitPolicy::Refuse)).unwrap_err(),
            "max_streams: 2 streams exceeds this responder's maximum of 1 stream (limit_policy: refuse)"
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

    #[test]
    fn unauthenticated_reverse_udp_is_capped() {
        let c = ResponderConfig {
            max_unauthenticated_udp_bitrate: 1_000_000_000,
            ..limits(LimitPolicy::Clamp)
        };
        let c = ResponderConfig {
            max_bitrate: 0,
            ..c
        };
        let udp = |direction, bitrate| TestRequest {
            kind: Kind::Udp,
            direction,
            bitrate,
            length: 1400,
            ..request()
        };
        for d in [Direction::Receive, Direction::Bidir] {
            let a = check_limits(&udp(d, 0), &c).unwrap();
            assert_eq!(a.request.bitrate, 1_000_000_000);
            assert_eq!(
                a.clamped,
                ["max_unauthenticated_udp_bitrate: unlimited rate clamped to 1000000000 bit/s for UDP this responder sends without a secret"]
            );
            let a = check_limits(&udp(d, 5_000_000_000), &c).unwrap();
            assert_eq!(a.request.bitrate, 1_000_000_000);
        }
        // Not the responder sending, within the cap, TCP, or a secret set:
        // untouched.
        for r in [
            udp(Direction::Send, 0),
            udp(Direction::Receive, 500_000_000),
        ] {
            assert_eq!(check_limits(&r, &c).unwrap().request, r);
        }
        let tcp = TestRequest {
            direction: Direction::Receive,
            bitrate: 0,
            ..request()
        };
        assert_eq!(check_limits(&tcp, &c).unwrap().request, tcp);
        let with_secret = ResponderConfig {
            secret: Some(crate::auth::Secret::new(b"0123456789abcdef0123456789abcdef").unwrap()),
            ..c.clone()
        };
        let r = udp(Direction::Receive, 0);
        assert_eq!(check_limits(&r, &with_secret).unwrap().request, r);
        let off = ResponderConfig {
            max_unauthenticated_udp_bitrate: 0,
            ..c
        };
        assert_eq!(check_limits(&r, &off).unwrap().request, r);
    }

    fn udp_rr(length: u32, interval_us: u64) -> TestRequest {
        TestRequest {
            kind: Kind::UdpRr,
            length,
            window: None,
            bitrate: crate::protocol::udp_rr::bitrate(length, interval_us),
            rr: Some(crate::protocol::rr::RrParams {
                request_size: length,
                response_size: length,
                burst: 1,
                nodelay: false,
                interval_us,
            }),
            ..request()
        }
    }

    #[test]
    fn udp_rr_runs_as_asked_or_is_refused_under_either_policy() {
        for policy in [LimitPolicy::Clamp, LimitPolicy::Refuse] {
            let c = limits(policy);
            let ok = udp_rr(64, 10_000);
            assert_eq!(check_limits(&ok, &c).unwrap().request, ok);
            // Below the shortest interval; 2000 bytes every 100 us is
            // 160 Mbit/s, over 100 Mbit/s.
            assert!(check_limits(&udp_rr(64, 50), &c).is_err());
            let fast = udp_rr(2000, 100);
            let e = check_limits(&fast, &c).unwrap_err();
            assert!(e.contains("max_bitrate"), "{e}");
            // Stating a lower rate than the schedule's does not get it in.
            let lying = TestRequest {
                bitrate: 1,
                ..udp_rr(64, 10_000)
            };
            assert!(check_limits(&lying, &c).is_err());
            // Shorter than the reply header, longer than max_length, or
            // with sizes that are not its length.
            assert!(check_limits(&udp_rr(39, 10_000), &c).is_err());
            assert!(check_limits(&udp_rr(65_001, 10_000_000), &c).is_err());
            let odd = TestRequest {
                length: 100,
                ..udp_rr(64, 10_000)
            };
            assert!(check_limits(&odd, &c).is_err());
            // More requests than both ends keep state for.
            let long = TestRequest {
                duration_ms: 10_000,
                ..udp_rr(64, 100)
            };
            assert!(check_limits(&long, &c).is_ok());
            let c_long = ResponderConfig {
                max_duration: Duration::from_secs(3600),
                ..limits(policy)
            };
            let too_many = TestRequest {
                duration_ms: 3_000_000,
                ..udp_rr(64, 100)
            };
            assert!(check_limits(&too_many, &c_long).is_err());
        }
    }

    #[test]
    fn tcp_crr_runs_as_asked_one_transaction_at_a_time_or_is_refused() {
        let crr = |request_size: u32, response_size: u32, burst: u32| TestRequest {
            kind: Kind::TcpCrr,
            length: request_size.max(response_size),
            bitrate: 0,
            window: None,
            rr: Some(crate::protocol::rr::RrParams {
                request_size,
                response_size,
                burst,
                nodelay: true,
                interval_us: 0,
            }),
            ..request()
        };
        for policy in [LimitPolicy::Clamp, LimitPolicy::Refuse] {
            let c = ResponderConfig {
                max_bitrate: 0,
                ..limits(policy)
            };
            let ok = crr(1, 1, 1);
            assert_eq!(check_limits(&ok, &c).unwrap().request, ok);
            let e = check_limits(&crr(1, 1, 2), &c).unwrap_err();
            assert!(e.contains("tcp_crr burst 2 is outside 1..=1"), "{e}");
            let e = check_limits(&crr(1, 1 << 20, 1), &c).unwrap_err();
            assert!(e.contains("max_length") && e.contains("tcp_crr"), "{e}");
            assert!(check_limits(&crr(0, 1, 1), &c).is_err());
            let paced = TestRequest {
                rr: Some(crate::protocol::rr::RrParams {
                    interval_us: 10,
                    ..ok.rr.unwrap()
                }),
                ..ok.clone()
            };
            assert!(check_limits(&paced, &c)
                .unwrap_err()
                .contains("no send interval"));
            for bad in [
                TestRequest {
                    streams: 2,
                    ..ok.clone()
                },
                TestRequest {
                    direction: Direction::Bidir,
                    ..ok.clone()
                },
                TestRequest {
                    interval_ms: Some(1000),
                    ..ok.clone()
                },
            ] {
                let e = check_limits(&bad, &c).unwrap_err();
                assert!(e.contains("one transaction stream"), "{e}");
            }
        }
    }
}
