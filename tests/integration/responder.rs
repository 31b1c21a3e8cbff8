//! The responder survives garbage, silence and a second prober, and keeps
//! serving real probes afterwards.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use pathprobe::auth::{FrameSealer, Nonce, Secret, Side};
use pathprobe::control::{read_message, write_message, Control};
use pathprobe::probe::{self, ProbeError, ProbeSpec, Target};
use pathprobe::protocol::message::{Hello, HelloAuth};
use pathprobe::protocol::{Message, RejectReason, TestRequest};
use pathprobe::responder::access::AccessList;
use pathprobe::responder::{LimitPolicy, ResponderConfig};

use crate::common::responder;

fn short_probe() -> ProbeSpec {
    ProbeSpec {
        duration: Duration::from_millis(300),
        ..ProbeSpec::default()
    }
}

/// Reads until the responder closes the connection; fails if it does not
/// within `within`.
async fn expect_closed(conn: &mut TcpStream, within: Duration) {
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(within, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "responder kept the connection open for {within:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_control_port_is_closed_and_counted() {
    let (addr, counters, _stop) = responder::start(ResponderConfig::default()).await;
    let garbage: [&[u8]; 4] = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        &[0, 0, 0, 5, b'{', b'x', 0xff, 0xfe, b'}'],
        &[0, 0, 0, 0],
        &[0x7f, 0xff, 0xff, 0xff],
    ];
    for g in garbage {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(g).await.unwrap();
        expect_closed(&mut conn, Duration::from_secs(5)).await;
    }
    assert_eq!(counters.protocol_errors.load(Ordering::Relaxed), 4);
    let r = probe::probe(&Target::from_addr(addr), &short_probe())
        .await
        .unwrap();
    assert!(r.bytes > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_is_dropped_after_the_idle_timeout() {
    let config = ResponderConfig {
        idle_timeout: Duration::from_millis(500),
        ..ResponderConfig::default()
    };
    let (addr, counters, _stop) = responder::start(config).await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    expect_closed(&mut silent, Duration::from_secs(5)).await;
    assert_eq!(counters.timeouts.load(Ordering::Relaxed), 1);
    // A client that says hello and then nothing must not hold the test slot either.
    let mut half = TcpStream::connect(addr).await.unwrap();
    let hello =
        pathprobe::protocol::encode_frame(&pathprobe::protocol::Message::Hello(Default::default()))
            .unwrap();
    half.write_all(&hello).await.unwrap();
    expect_closed(&mut half, Duration::from_secs(5)).await;
    let r = probe::probe(&Target::from_addr(addr), &short_probe())
        .await
        .unwrap();
    assert!(r.bytes > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_prober_is_told_busy_with_a_retry_hint() {
    let (addr, counters, _stop) = responder::start(ResponderConfig::default()).await;
    let target = Target::from_addr(addr);
    let long = ProbeSpec {
        duration: Duration::from_secs(2),
        ..ProbeSpec::default()
    };
    let first = tokio::spawn({
        let target = target.clone();
        async move { probe::probe(&target, &long).await }
    });
    // Wait until the responder has admitted the first test, without sleeping blind.
    tokio::time::timeout(Duration::from_secs(5), async {
        while counters.active_tests.load(Ordering::Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("first test admitted");
    match probe::probe(&target, &short_probe()).await {
        Err(ProbeError::Busy {
            retry_after,
            message,
        }) => {
            assert!(
                retry_after > Duration::from_secs(1) && retry_after < Duration::from_secs(10),
                "{retry_after:?}"
            );
            assert!(message.contains("retry in"), "{message}");
        }
        other => panic!("expected busy, got {other:?}"),
    }
    assert_eq!(counters.rejected_busy.load(Ordering::Relaxed), 1);
    let r = first.await.unwrap().unwrap();
    assert!(r.bytes > 0);
    // The slot is free again.
    probe::probe(&target, &short_probe()).await.unwrap();
    // The responder counts a test once the prober has its results, so the
    // count may trail the prober by a moment.
    tokio::time::timeout(Duration::from_secs(5), async {
        while counters.tests_succeeded.load(Ordering::Relaxed) < 2 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("two tests counted as served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_the_limits_are_refused_with_the_limit_named() {
    let config = ResponderConfig {
        max_duration: Duration::from_secs(2),
        max_streams: 2,
        max_bitrate: 10_000_000,
        limit_policy: LimitPolicy::Refuse,
        ..Default::default()
    };
    let (addr, counters, _stop) = responder::start(config).await;
    let target = Target::from_addr(addr);
    let cases = [
        (
            ProbeSpec {
                duration: Duration::from_secs(5),
                ..short_probe()
            },
            "max_duration: duration 5 s exceeds this responder's maximum of 2 s (limit_policy: refuse)",
        ),
        (
            ProbeSpec {
                streams: 4,
                ..short_probe()
            },
            "max_streams: 4 streams exceeds this responder's maximum of 2 streams (limit_policy: refuse)",
        ),
        (
            ProbeSpec {
                kind: probe::Kind::Udp,
                bitrate: Some(50_000_000),
                ..short_probe()
            },
            "max_bitrate: rate 50000000 bit/s exceeds this responder's maximum of 10000000 bit/s per direction (limit_policy: refuse)",
        ),
    ];
    for (spec, want) in cases {
        match probe::probe(&target, &spec).await {
            Err(ProbeError::Rejected { reason, message }) => {
                assert_eq!(reason, RejectReason::Limit);
                assert_eq!(message, want);
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
    assert_eq!(counters.rejected_limit.load(Ordering::Relaxed), 3);
    assert_eq!(counters.tests_succeeded.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_the_limits_are_clamped_and_the_prober_is_told() {
    let config = ResponderConfig {
        max_duration: Duration::from_millis(500),
        max_streams: 1,
        ..Default::default()
    };
    let (addr, counters, _stop) = responder::start(config).await;
    let spec = ProbeSpec {
        duration: Duration::from_secs(3),
        streams: 2,
        ..short_probe()
    };
    let r = probe::probe(&Target::from_addr(addr), &spec).await.unwrap();
    assert_eq!(
        r.clamped,
        [
            "max_duration: duration 3 s clamped to 0.5 s",
            "max_streams: 2 streams clamped to 1 stream"
        ]
    );
    // What was asked stays beside what ran: the figures describe the
    // test as run (issue 25: `requested_seconds` read 0.5 here).
    assert_eq!(r.requested_seconds, 3.0);
    assert!(
        r.duration_seconds > 0.3 && r.duration_seconds < 1.0,
        "{}",
        r.duration_seconds
    );
    assert_eq!(r.streams.len(), 1);
    assert!(r.bytes > 0);
    let json: serde_json::Value = serde_json::from_str(&pathprobe::report::json(&r)).unwrap();
    assert_eq!(
        json["clamped"],
        serde_json::json!([
            "max_duration: duration 3 s clamped to 0.5 s",
            "max_streams: 2 streams clamped to 1 stream"
        ])
    );
    assert!(pathprobe::report::text(&r, false).contains(
        "note: the responder clamped this test: max_duration: duration 3 s clamped to 0.5 s\n"
    ));
    assert_eq!(counters.tests_clamped.load(Ordering::Relaxed), 1);
    assert_eq!(counters.tests_succeeded.load(Ordering::Relaxed), 1);
    // Within the limits, nothing is said.
    let r = probe::probe(&Target::from_addr(addr), &short_probe())
        .await
        .unwrap();
    assert!(r.clamped.is_empty());
    assert!(!pathprobe::report::json(&r).contains("clamped"));
    assert_eq!(counters.tests_clamped.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_version_mismatch_say_what_happened() {
    // A port with nothing listening.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    match probe::probe(&Target::from_addr(free), &short_probe()).await {
        Err(e @ ProbeError::Refused { .. }) => {
            assert_eq!(e.reason(), "refused");
            assert!(
                e.to_string()
                    .contains("is `pathprobe respond` running there"),
                "{e}"
            );
        }
        other => panic!("expected refused, got {other:?}"),
    }
    let (addr, counters, _stop) = responder::start(ResponderConfig::default()).await;
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let mut hello = pathprobe::protocol::message::Hello::new();
    hello.version = 999;
    let frame =
        pathprobe::protocol::encode_frame(&pathprobe::protocol::Message::Hello(hello)).unwrap();
    conn.write_all(&frame).await.unwrap();
    let reply = pathprobe::control::read_message(&mut conn, Duration::from_secs(5))
        .await
        .unwrap();
    match reply {
        pathprobe::protocol::Message::Rejected { reason, message } => {
            assert_eq!(reason, pathprobe::protocol::RejectReason::VersionMismatch);
            assert!(message.contains("prober speaks 999"), "{message}");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(counters.rejected_version.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_datagrams_from_strangers_are_ignored() {
    let (addr, counters, _stop) = responder::start(ResponderConfig::default()).await;
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // Junk, and a hello for a test that does not exist.
    sock.send_to(b"junk", addr).unwrap();
    sock.send_to(
        &pathprobe::protocol::udp::hello_datagram("00112233445566778899aabbccddeeff", 0),
        addr,
    )
    .unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        while counters.udp_ignored.load(Ordering::Relaxed) < 2 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("both datagrams counted as ignored");
    // The responder never answers a stray datagram.
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(sock.recv_from(&mut buf).is_err());
}

fn secret(s: &str) -> Secret {
    Secret::new(s.as_bytes()).unwrap()
}

fn with_secret(spec: ProbeSpec, s: &str) -> ProbeSpec {
    ProbeSpec {
        secret: Some(secret(s)),
        ..spec
    }
}

const SECRET: &str = "the responders' shared secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_is_required_checked_and_counted() {
    let config = ResponderConfig {
        secret: Some(secret(SECRET)),
        ..Default::default()
    };
    let (addr, counters, _stop) = responder::start(config).await;
    let target = Target::from_addr(addr);

    let e = probe::probe(&target, &short_probe()).await.unwrap_err();
    assert_eq!(e.reason(), "auth_required", "{e}");
    assert!(e.to_string().contains("authentication required"), "{e}");
    let e = probe::probe(&target, &with_secret(short_probe(), "not the right secret"))
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "auth_failed", "{e}");
    assert!(e.to_string().contains("authentication failed"), "{e}");
    assert_eq!(counters.rejected_auth_required.load(Ordering::Relaxed), 1);
    assert_eq!(counters.rejected_auth_failed.load(Ordering::Relaxed), 1);

    // The right secret runs TCP and UDP, both directions: data connections
    // and flows use the derived token, which never crossed the wire.
    for (kind, direction) in [
        (probe::Kind::Tcp, probe::Direction::Send),
        (probe::Kind::Udp, probe::Direction::Receive),
    ] {
        let spec = with_secret(
            ProbeSpec {
                kind,
                direction,
                ..short_probe()
            },
            SECRET,
        );
        let r = probe::probe(&target, &spec).await.unwrap();
        assert!(r.bytes > 0, "{kind:?} {direction:?}");
    }
    assert_eq!(counters.tests_succeeded.load(Ordering::Relaxed), 2);
    assert_eq!(counters.rejected_auth_failed.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prober_with_a_secret_refuses_a_responder_without_one() {
    let (addr, counters, _stop) = responder::start(ResponderConfig::default()).await;
    let e = probe::probe(
        &Target::from_addr(addr),
        &with_secret(short_probe(), SECRET),
    )
    .await
    .unwrap_err();
    assert_eq!(e.reason(), "auth_failed", "{e}");
    assert!(e.to_string().contains("did not authenticate"), "{e}");
    assert_eq!(counters.tests_succeeded.load(Ordering::Relaxed), 0);
}

/// Says hello with `client` as nonce; returns the Welcome's server nonce.
async fn hello_with(conn: &mut TcpStream, client: &Nonce) -> Nonce {
    let t = Duration::from_secs(5);
    let hello = Hello {
        auth: Some(HelloAuth {
            method: pathprobe::auth::METHOD.into(),
            client_nonce: client.to_hex(),
        }),
        ..Hello::new()
    };
    write_message(conn, &Message::Hello(hello), t)
        .await
        .unwrap();
    match read_message(conn, t).await.unwrap() {
        Message::Welcome(w) => {
            let offer = w.auth.expect("challenge");
            Nonce::parse(&offer.server_nonce, "server nonce").unwrap()
        }
        other => panic!("expected welcome, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_handshake_fails() {
    let key = secret(SECRET);
    let config = ResponderConfig {
        secret: Some(key.clone()),
        ..Default::default()
    };
    let (addr, counters, _stop) = responder::start(config).await;
    let t = Duration::from_secs(5);
    // A prober's genuine handshake, recorded by an eavesdropper.
    let client = Nonce::random().unwrap();
    let mut first = TcpStream::connect(addr).await.unwrap();
    let server = hello_with(&mut first, &client).await;
    let proof = pathprobe::auth::hex(&key.prober_proof(&client, &server));
    write_message(
        &mut first,
        &Message::Auth {
            proof: proof.clone(),
        },
        t,
    )
    .await
    .unwrap();
    drop(first);
    // Replayed on a new connection, it meets a fresh server nonce.
    let mut replay = TcpStream::connect(addr).await.unwrap();
    let server2 = hello_with(&mut replay, &client).await;
    assert_ne!(server, server2);
    write_message(&mut replay, &Message::Auth { proof }, t)
        .await
        .unwrap();
    match read_message(&mut replay, t).await.unwrap() {
        Message::Rejected { reason, message } => {
            assert_eq!(reason, RejectReason::AuthFailed);
            assert_eq!(message, "authentication failed: the shared secrets differ");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(counters.rejected_auth_failed.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_connections_need_the_derived_token() {
    let key = secret(SECRET);
    let config = ResponderConfig {
        secret: Some(key.clone()),
        ..Default::default()
    };
    let (addr, counters, _stop) = responder::start(config).await;
    let t = Duration::from_secs(5);
    let client = Nonce::random().unwrap();
    let mut control = TcpStream::connect(addr).await.unwrap();
    let server = hello_with(&mut control, &client).await;
    let proof = pathprobe::auth::hex(&key.prober_proof(&client, &server));
    write_message(&mut control, &Message::Auth { proof }, t)
        .await
        .unwrap();
    // Every frame after the handshake is sealed with the session key.
    let mut control = Control::new(control);
    control.seal(FrameSealer::new(
        key.session_key(&client, &server),
        Side::Prober,
    ));
    let request = TestRequest {
        duration_ms: 500,
        ..short_probe().to_request()
    };
    control.send(&Message::Request(request), t).await.unwrap();
    match control.recv(t).await.unwrap() {
        // The token is derived on both ends, never sent.
        Message::Accepted { token, .. } => assert_eq!(token, ""),
        other => panic!("expected accepted, got {other:?}"),
    }
    // A data connection with any other token is closed and counted...
    for wrong in ["", "00112233445566778899aabbccddeeff"] {
        let mut data = TcpStream::connect(addr).await.unwrap();
        write_message(
            &mut data,
            &Message::DataHello {
                token: wrong.into(),
                stream: 0,
            },
            t,
        )
        .await
        .unwrap();
        expect_closed(&mut data, Duration::from_secs(5)).await;
    }
    assert_eq!(counters.rejected_bad_token.load(Ordering::Relaxed), 2);
    // ...and the test still waits for its stream, which the derived token opens.
    let mut data = TcpStream::connect(addr).await.unwrap();
    write_message(
        &mut data,
        &Message::DataHello {
            token: key.test_token(&client, &server),
            stream: 0,
        },
        t,
    )
    .await
    .unwrap();
    assert_eq!(control.recv(t).await.unwrap(), Message::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_outside_the_allow_list_or_inside_the_deny_list_are_refused() {
    let lists = [
        AccessList {
            allow: vec!["10.0.0.0/8".parse().unwrap()],
            deny: vec![],
        },
        AccessList {
            allow: vec!["127.0.0.0/8".parse().unwrap()],
            deny: vec!["127.0.0.1/32".parse().unwrap()],
        },
    ];
    for access in lists {
        let config = ResponderConfig {
            access,
            ..Default::default()
        };
        let (addr, counters, _stop) = responder::start(config).await;
        match probe::probe(&Target::from_addr(addr), &short_probe()).await {
            Err(e @ ProbeError::Rejected { .. }) => {
                assert_eq!(e.reason(), "denied");
                assert!(
                    e.to_string()
                        .contains("this responder does not accept tests from 127.0.0.1"),
                    "{e}"
                );
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
        assert_eq!(counters.rejected_denied.load(Ordering::Relaxed), 1);
    }
    let config = ResponderConfig {
        access: AccessList {
            allow: vec!["127.0.0.0/8".parse().unwrap()],
            deny: vec!["127.0.0.2/32".parse().unwrap()],
        },
        ..Default::default()
    };
    let (addr, _counters, _stop) = responder::start(config).await;
    assert!(probe::probe(&Target::from_addr(addr), &short_probe())
        .await
        .is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_tests_per_minute_is_refused_with_a_retry_time() {
    let config = ResponderConfig {
        max_tests_per_client_per_minute: 1,
        ..Default::default()
    };
    let (addr, counters, _stop) = responder::start(config).await;
    let target = Target::from_addr(addr);
    probe::probe(&target, &short_probe()).await.unwrap();
    match probe::probe(&target, &short_probe()).await {
        Err(ProbeError::Rejected { reason, message }) => {
            assert_eq!(reason, RejectReason::RateLimited);
            assert!(
                message.starts_with(
                    "127.0.0.1 has run its allowance of 1 test in the last minute; retry in "
                ),
                "{message}"
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(counters.rejected_rate_limited.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hourly_byte_budget_stops_further_tests_once_spent() {
    let config = ResponderConfig {
        max_bytes_per_hour: 1,
        ..Default::default()
    };
    let (addr, counters, _stop) = responder::start(config).await;
    let target = Target::from_addr(addr);
    // The first test starts with the budget untouched, and spends it.
    let r = probe::probe(&target, &short_probe()).await.unwrap();
    assert!(r.bytes > 1);
    match probe::probe(&target, &short_probe()).await {
        Err(ProbeError::Rejected { reason, message }) => {
            assert_eq!(reason, RejectReason::BudgetExhausted);
            assert!(
                message.starts_with(
                    "this responder has moved its allowance of 1 byte for the last hour; retry in "
                ),
                "{message}"
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(counters.rejected_budget.load(Ordering::Relaxed), 1);
    assert_eq!(counters.tests_succeeded.load(Ordering::Relaxed), 1);
}
