//! The responder survives garbage, silence and a second prober, and keeps
//! serving real probes afterwards.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use pathprobe::probe::{self, ProbeError, ProbeSpec, Target};
use pathprobe::responder::{bind, Responder, ResponderConfig, ResponderCounters};

async fn responder(
    config: ResponderConfig,
) -> (
    SocketAddr,
    Arc<ResponderCounters>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (tcp, udp) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let r = Responder::new(tcp, udp, config).unwrap();
    let addr = r.local_addr().unwrap();
    let counters = r.counters();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(r.serve(async {
        let _ = rx.await;
    }));
    (addr, counters, tx)
}

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
    let (addr, counters, _stop) = responder(ResponderConfig::default()).await;
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
    let (addr, counters, _stop) = responder(config).await;
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
    let (addr, counters, _stop) = responder(ResponderConfig::default()).await;
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
async fn requests_over_the_limits_are_refused_with_the_reason() {
    let config = ResponderConfig {
        max_duration: Duration::from_secs(2),
        max_streams: 2,
        max_bitrate: 10_000_000,
        ..Default::default()
    };
    let (addr, counters, _stop) = responder(config).await;
    let target = Target::from_addr(addr);
    let cases = [
        (
            ProbeSpec {
                duration: Duration::from_secs(5),
                ..short_probe()
            },
            "exceeds this responder's maximum of 2 s",
        ),
        (
            ProbeSpec {
                streams: 4,
                ..short_probe()
            },
            "4 streams requested; this responder allows 1 to 2",
        ),
        (
            ProbeSpec {
                kind: probe::Kind::Udp,
                bitrate: Some(50_000_000),
                ..short_probe()
            },
            "at most 10000000 bit/s",
        ),
    ];
    for (spec, want) in cases {
        match probe::probe(&target, &spec).await {
            Err(e @ ProbeError::Rejected { .. }) => assert!(e.to_string().contains(want), "{e}"),
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
    assert_eq!(counters.rejected_limit.load(Ordering::Relaxed), 3);
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
    let (addr, counters, _stop) = responder(ResponderConfig::default()).await;
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
    let (addr, counters, _stop) = responder(ResponderConfig::default()).await;
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
