//! Property tests of the wire protocol: every control message survives a
//! frame round trip whatever its strings and numbers hold, decoding bytes
//! from a peer never panics, and a frame that has not fully arrived is
//! "need more bytes", never an error or a misread. The cargo-fuzz targets
//! in `fuzz/` explore the same decoders for longer; these keep the
//! properties checked on every `cargo test`.

use proptest::prelude::*;
use proptest::sample::Index;

use super::crr::{CrrFailures, CrrStats};
use super::frame::{decode_frame, decode_payload, encode_frame, frame_len, MAX_FRAME_LEN};
use super::latency::LatencyStats;
use super::message::{
    Hello, HelloAuth, Limits, Message, RejectReason, TestRequest, Welcome, WelcomeAuth,
};
use super::model::{
    CpuLoad, Direction, FlowDirection, HostDelta, IntervalStats, Kind, Role, SideStats,
    StreamStats, TcpLimits, TcpStats, ThreadSched, UdpReceiveStats, UdpSendStats,
};
use super::rr::RrStats;
use super::udp::{hello_datagram, parse_hello, UdpHeader, HEADER_LEN, HELLO_LEN};

/// Any Unicode text, control characters, quotes and backslashes included:
/// the default `String` strategy leaves out newlines, which JSON must escape.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter)
}

/// Finite floats of every magnitude. NaN and infinities are left out on
/// purpose: JSON cannot carry them (see `non_finite_floats_do_not_cross`).
fn float() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("finite", |f| f.is_finite())
}

fn hello_auth() -> impl Strategy<Value = Option<HelloAuth>> {
    proptest::option::of(
        (text(), text()).prop_map(|(method, client_nonce)| HelloAuth {
            method,
            client_nonce,
        }),
    )
}

fn welcome_auth() -> impl Strategy<Value = Option<WelcomeAuth>> {
    proptest::option::of((text(), text(), text()).prop_map(
        |(method, server_nonce, server_proof)| WelcomeAuth {
            method,
            server_nonce,
            server_proof,
        },
    ))
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        any::<(u64, u32, u64, u32, u32)>(),
        any::<(u32, u32, u64, u32)>(),
        prop_oneof![
            Just(String::new()),
            Just("clamp".to_string()),
            Just("refuse".to_string())
        ],
    )
        .prop_map(|(a, b, limit_policy)| Limits {
            max_duration_ms: a.0,
            max_streams: a.1,
            max_bitrate: a.2,
            max_length: a.3,
            max_window: a.4,
            max_concurrent_tests: b.0,
            max_tests_per_client_per_minute: b.1,
            max_bytes_per_hour: b.2,
            limit_policy,
            max_connections_per_second: b.3,
        })
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Tcp),
        Just(Kind::Udp),
        Just(Kind::TcpRr),
        Just(Kind::UdpRr),
        Just(Kind::TcpCrr)
    ]
}

fn latency() -> impl Strategy<Value = LatencyStats> {
    (
        (float(), float(), float(), float()),
        (float(), float(), float(), float()),
        prop::collection::vec(any::<u64>(), 0..4),
    )
        .prop_map(
            |((min, mean, p50, p90), (p99, p999, max, sum), buckets)| LatencyStats {
                min,
                mean,
                p50,
                p90,
                p99,
                p999,
                max,
                sum,
                buckets,
            },
        )
}

/// A request/response stream's figures, those of `tcp_crr` included.
fn rr_stats() -> impl Strategy<Value = RrStats> {
    (
        any::<(u64, u64, u64)>(),
        proptest::option::of(latency()),
        proptest::option::of((
            any::<(u64, u64, u64, u32)>(),
            any::<[u64; 8]>(),
            proptest::option::of(latency()),
        )),
    )
        .prop_map(
            |((transactions, request_bytes, response_bytes), latency, crr)| RrStats {
                transactions,
                request_bytes,
                response_bytes,
                latency,
                udp: None,
                crr: crr.map(
                    |((connections, established, over_limit, rate_limit), f, connect)| CrrStats {
                        connections,
                        established,
                        failures: CrrFailures {
                            refused: f[0],
                            timeout: f[1],
                            reset: f[2],
                            closed: f[3],
                            no_local_port: f[4],
                            unreachable: f[5],
                            invalid: f[6],
                            other: f[7],
                        },
                        connect,
                        over_limit,
                        rate_limit,
                    },
                ),
            },
        )
}

fn direction() -> impl Strategy<Value = Direction> {
    prop_oneof![
        Just(Direction::Send),
        Just(Direction::Receive),
        Just(Direction::Bidir)
    ]
}

fn reject_reason() -> impl Strategy<Value = RejectReason> {
    prop_oneof![
        Just(RejectReason::VersionMismatch),
        Just(RejectReason::Limit),
        Just(RejectReason::BadRequest),
        Just(RejectReason::AuthRequired),
        Just(RejectReason::AuthFailed),
        Just(RejectReason::Denied),
        Just(RejectReason::RateLimited),
        Just(RejectReason::BudgetExhausted),
        Just(RejectReason::Other),
    ]
}

prop_compose! {
    fn test_request()(
        kind in kind(),
        direction in direction(),
        (duration_ms, omit_ms, bitrate) in any::<(u64, u64, u64)>(),
        (streams, length) in any::<(u32, u32)>(),
        window in any::<Option<u32>>(),
        congestion in proptest::option::of(text()),
        tos in any::<Option<u8>>(),
        (affinity, interval_ms) in any::<(Option<usize>, Option<u64>)>(),
        adaptive in any::<Option<(u64, u32, bool)>>(),
    ) -> TestRequest {
        TestRequest {
            kind, direction, duration_ms, omit_ms, streams, bitrate, length,
            window, congestion, tos, affinity, interval_ms, no_offload: false, rr: None,
            adaptive: adaptive.map(|(min_duration_ms, precision_ppm, receiver_progress)| {
                crate::protocol::adaptive::AdaptiveRequest {
                    min_duration_ms, precision_ppm, receiver_progress,
                }
            }),
        }
    }
}

prop_compose! {
    fn stream_stats()(
        (id, bytes, syscalls, context_switches) in any::<(u32, u64, u64, u64)>(),
        (send_buffer_bytes, receive_buffer_bytes) in any::<(u64, u64)>(),
        direction in proptest::option::of(prop_oneof![
            Just(FlowDirection::Send),
            Just(FlowDirection::Receive)
        ]),
        role in proptest::option::of(prop_oneof![Just(Role::Sender), Just(Role::Receiver)]),
        (seconds, cpu_user_seconds, cpu_system_seconds) in (float(), float(), float()),
        congestion in proptest::option::of(text()),
        tcp in proptest::option::of(
            (any::<(u64, u32, u64)>(), float(), float(), float()).prop_map(
                |((retransmits, mss_bytes, cwnd_bytes), rtt, rttvar, min_rtt)| TcpStats {
                    retransmits,
                    rtt_seconds: rtt,
                    rttvar_seconds: rttvar,
                    min_rtt_seconds: min_rtt,
                    mss_bytes,
                    cwnd_bytes,
                }
            )
        ),
        udp_sent in proptest::option::of(any::<u64>().prop_map(|packets| UdpSendStats { packets, mode: None })),
        udp_received in proptest::option::of(
            (any::<(u64, Option<u64>, u64, u64, u64)>(), float()).prop_map(
                |((packets, sender_packets, lost, out_of_order, duplicates), jitter_seconds)| {
                    UdpReceiveStats {
                        packets, sender_packets, lost, out_of_order, duplicates, jitter_seconds,
                        ..UdpReceiveStats::default()
                    }
                }
            )
        ),
        intervals in prop::collection::vec(
            (float(), float(), any::<(u64, Option<u64>, Option<u64>, Option<u64>)>()).prop_map(
                |(start, end, (bytes, packets, lost, retransmits))| IntervalStats {
                    start, end, bytes, packets, lost, retransmits,
                }
            ),
            0..3,
        ),
        sched in proptest::option::of(
            (float(), float(), any::<u64>(), prop::collection::vec(any::<u32>(), 0..3)).prop_map(
                |(run_seconds, wait_seconds, involuntary_switches, cpus)| ThreadSched {
                    run_seconds, wait_seconds, involuntary_switches, cpus,
                }
            )
        ),
        (tcp_limits, rr, tcp_io) in (proptest::option::of(
            (
                proptest::option::of(float()),
                proptest::option::of(float()),
                proptest::option::of(any::<bool>()),
                proptest::option::of(any::<u64>()),
            ).prop_map(|(busy_seconds, rwnd_limited_seconds, delivery_rate_app_limited, bytes_retrans)| TcpLimits {
                busy_seconds, rwnd_limited_seconds, delivery_rate_app_limited, bytes_retrans,
                ..TcpLimits::default()
            })
        ), proptest::option::of(rr_stats()), proptest::option::of(prop_oneof![
            Just(super::model::TcpIoMode::Write),
            Just(super::model::TcpIoMode::Sendfile),
            Just(super::model::TcpIoMode::Read),
            Just(super::model::TcpIoMode::Discard),
        ])),
    ) -> StreamStats {
        StreamStats {
            id, direction, role, bytes, seconds, syscalls, cpu_user_seconds,
            cpu_system_seconds, context_switches, send_buffer_bytes,
            receive_buffer_bytes, congestion, tcp, udp_sent, udp_received, intervals,
            sched, tcp_limits, rr, tcp_io,
        }
    }
}

prop_compose! {
    fn side_stats()(
        streams in prop::collection::vec(stream_stats(), 0..4),
        (cpu_utilization, cpu_user, cpu_system) in (float(), float(), float()),
        counters in any::<(u64, u64, u64, u64)>(),
        kernel_release in text(),
        interface in proptest::option::of(text()),
        warnings in prop::collection::vec(text(), 0..3),
        cpus in prop::collection::vec(
            (any::<u32>(), float(), float(), any::<u64>()).prop_map(|(cpu, busy, softirq, interface_interrupts)| CpuLoad {
                cpu, busy, irq: 0.0, softirq, interface_interrupts, steal: 0.0,
            }),
            0..3,
        ),
    ) -> SideStats {
        let (interrupts, interface_interrupts, softirq_net_rx, softirq_net_tx) = counters;
        SideStats {
            streams,
            host: HostDelta {
                cpu_utilization, cpu_user, cpu_system, interrupts,
                interface_interrupts, softirq_net_rx, softirq_net_tx, cpus,
                interface_bytes: None,
                udp_buffer_errors: None,
                tcp_rmem_max: None,
                tcp_wmem_max: None,
                cpu_throttle: None,
            },
            fingerprint: interface.as_ref().map(|i| crate::protocol::fingerprint::HostFingerprint {
                settings: [("interface".to_string(), i.clone()), ("kernel".to_string(), kernel_release.clone())].into(),
            }),
            kernel_release,
            interface,
            warnings,
        }
    }
}

/// Every variant of [`Message`]; adding one without listing it here leaves
/// it untested, so the match in `every_variant_is_generated` must list it.
fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (
            text(),
            any::<u32>(),
            text(),
            any::<Option<u32>>(),
            any::<Option<u64>>(),
            hello_auth()
        )
            .prop_map(
                |(protocol, version, software, max_version, time_us, auth)| {
                    Message::Hello(Hello {
                        protocol,
                        version,
                        software,
                        max_version,
                        time_us,
                        auth,
                        fingerprint: None,
                    })
                }
            ),
        (
            any::<u32>(),
            text(),
            any::<Option<u64>>(),
            limits(),
            welcome_auth()
        )
            .prop_map(|(version, software, time_us, limits, auth)| {
                Message::Welcome(Welcome {
                    version,
                    software,
                    time_us,
                    limits,
                    auth,
                })
            }),
        text().prop_map(|proof| Message::Auth { proof }),
        test_request().prop_map(Message::Request),
        (text(), test_request(), prop::collection::vec(text(), 0..3)).prop_map(
            |(token, request, clamped)| Message::Accepted {
                token,
                request,
                clamped
            }
        ),
        (any::<u64>(), text()).prop_map(|(retry_after_ms, message)| Message::Busy {
            retry_after_ms,
            message
        }),
        (reject_reason(), text())
            .prop_map(|(reason, message)| Message::Rejected { reason, message }),
        (text(), any::<u32>()).prop_map(|(token, stream)| Message::DataHello { token, stream }),
        Just(Message::Ready),
        Just(Message::Start),
        side_stats().prop_map(|s| Message::Results(Box::new(s))),
        text().prop_map(|message| Message::Error { message }),
        (
            any::<u64>(),
            0..crate::protocol::adaptive::StopReason::ALL.len(),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(|(span_start_us, r, span_end_us)| Message::End(
                crate::protocol::adaptive::TestEnd {
                    span_start_us,
                    reason: crate::protocol::adaptive::StopReason::ALL[r],
                    span_end_us,
                }
            )),
        any::<(u64, u64)>().prop_map(|(at_us, bytes)| Message::Progress(
            crate::protocol::adaptive::Progress { at_us, bytes }
        )),
    ]
}

/// A compile-time reminder: a new variant fails to build here until
/// [`message`] generates it too.
#[allow(dead_code)]
fn every_variant_is_generated(m: &Message) {
    match m {
        Message::Hello(_)
        | Message::Welcome(_)
        | Message::Request(_)
        | Message::Auth { .. }
        | Message::Accepted { .. }
        | Message::Busy { .. }
        | Message::Rejected { .. }
        | Message::DataHello { .. }
        | Message::Ready
        | Message::Start
        | Message::Results(_)
        | Message::Error { .. }
        | Message::End(_)
        | Message::Progress(_) => {}
    }
}

proptest! {
    #[test]
    fn messages_round_trip_through_frames(msg in message()) {
        let frame = encode_frame(&msg).unwrap();
        let (back, used) = decode_frame(&frame).unwrap().expect("a whole frame");
        prop_assert_eq!(used, frame.len());
        prop_assert_eq!(back, msg);
    }

    #[test]
    fn truncated_frames_ask_for_more(msg in message(), cut in any::<Index>()) {
        let frame = encode_frame(&msg).unwrap();
        let cut = cut.index(frame.len());
        prop_assert!(matches!(decode_frame(&frame[..cut]), Ok(None)));
    }

    #[test]
    fn trailing_bytes_are_left_for_the_next_frame(
        msg in message(),
        rest in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut buf = encode_frame(&msg).unwrap();
        let len = buf.len();
        buf.extend(&rest);
        let (back, used) = decode_frame(&buf).unwrap().expect("a whole frame");
        prop_assert_eq!(used, len);
        prop_assert_eq!(back, msg);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(Some((_, used))) = decode_frame(&bytes) {
            prop_assert!(used <= bytes.len());
        }
        let _ = decode_payload(&bytes);
    }

    /// Random bytes almost never pass the length check, so this gives the
    /// JSON decoder a plausible header in front of junk.
    #[test]
    fn junk_behind_a_valid_header_never_panics(
        payload in prop::collection::vec(any::<u8>(), 1..512),
    ) {
        let mut buf = (payload.len() as u32).to_be_bytes().to_vec();
        buf.extend(&payload);
        if let Ok(Some((msg, used))) = decode_frame(&buf) {
            prop_assert_eq!(used, buf.len());
            let again = encode_frame(&msg).unwrap();
            prop_assert_eq!(decode_frame(&again).unwrap().map(|(m, _)| m), Some(msg));
        }
    }

    #[test]
    fn frame_length_is_checked_before_anything_is_buffered(header in any::<[u8; 4]>()) {
        let len = u32::from_be_bytes(header) as usize;
        prop_assert_eq!(frame_len(header).is_ok(), (1..=MAX_FRAME_LEN).contains(&len));
    }

    #[test]
    fn udp_headers_round_trip(
        flags in any::<u8>(),
        test_id in any::<u32>(),
        seq in any::<u64>(),
        send_ns in any::<u64>(),
        payload in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let header = UdpHeader { flags, test_id, seq, send_ns };
        let mut buf = vec![0u8; HEADER_LEN];
        header.write(&mut buf);
        buf.extend(&payload);
        prop_assert_eq!(UdpHeader::parse(&buf), Ok(header));
    }

    #[test]
    fn udp_parsers_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(header) = UdpHeader::parse(&bytes) {
            let mut buf = [0u8; HEADER_LEN];
            header.write(&mut buf);
            prop_assert_eq!(&buf[..], &bytes[..HEADER_LEN]);
        }
        if parse_hello(&bytes).is_some() {
            prop_assert!(bytes.len() >= HELLO_LEN);
        }
    }

    #[test]
    fn udp_hellos_round_trip(raw in any::<[u8; 16]>(), stream in any::<u32>()) {
        let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let dgram = hello_datagram(&token, stream);
        prop_assert_eq!(parse_hello(&dgram), Some((token, stream)));
    }
}

/// Stats computed as 0/0 would serialise as JSON `null`, which the other
/// side cannot read back as a number: the whole Results message would be
/// lost. This pins that behaviour down so that a change to it is noticed.
#[test]
fn non_finite_floats_do_not_cross() {
    let mut stats = SideStats::default();
    stats.host.cpu_utilization = f64::NAN;
    let frame = encode_frame(&Message::Results(Box::new(stats))).unwrap();
    assert!(decode_frame(&frame).is_err());
}

/// Found by `messages_round_trip_through_frames`: without serde_json's
/// `float_roundtrip` feature these read back one ulp off, so the prober's
/// figures differed from the responder's.
#[test]
fn floats_cross_exactly() {
    for x in [1.8121390570193607e297, -2.327745806638702e-150, 0.1 + 0.2] {
        let mut stats = SideStats::default();
        stats.host.cpu_user = x;
        let msg = Message::Results(Box::new(stats));
        let frame = encode_frame(&msg).unwrap();
        assert_eq!(decode_frame(&frame).unwrap().unwrap().0, msg, "{x:e}");
    }
}
