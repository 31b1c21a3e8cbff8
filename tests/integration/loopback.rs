//! Every probe kind and direction against an in-process responder on
//! loopback, bound to port 0. The figures must be consistent with each other
//! and with what was asked.

use std::time::Duration;

use pathprobe::probe::{self, Direction, Kind, ProbeResult, ProbeSpec, Target};
use pathprobe::responder::ResponderConfig;

use crate::common::{responder, turn};

async fn run(kind: Kind, direction: Direction, streams: u32) -> ProbeResult {
    let (addr, _, _stop) = responder::start(ResponderConfig::default()).await;
    let spec = ProbeSpec {
        kind,
        direction,
        streams,
        duration: Duration::from_secs(1),
        bitrate: (kind == Kind::Udp).then_some(200_000_000),
        ..ProbeSpec::default()
    };
    tokio::time::timeout(
        Duration::from_secs(20),
        probe::probe(&Target::from_addr(addr), &spec),
    )
    .await
    .expect("probe finished in time")
    .expect("probe succeeded")
}

fn check_common(r: &ProbeResult, kind: Kind, direction: Direction, streams: u32) {
    assert_eq!(r.kind, kind);
    assert_eq!(r.direction, direction);
    let flows = direction.flows().len();
    assert_eq!(r.directions.len(), flows);
    assert_eq!(r.streams.len(), flows * streams as usize);
    for d in &r.directions {
        assert!(d.bytes > 0, "{d:?}");
        assert!(
            (d.duration_seconds - 1.0).abs() < 0.05,
            "receiver window {} s for a 1 s probe",
            d.duration_seconds
        );
        assert!(d.throughput_bits_per_second > 0.0);
        assert!(
            d.sender_bytes >= d.bytes,
            "receiver got more than was sent: {d:?}"
        );
        assert!(
            d.sender_cpu_utilization > 0.0 && d.receiver_cpu_utilization > 0.0,
            "{d:?}"
        );
    }
    for s in &r.streams {
        assert!(s.bytes > 0, "stream {s:?}");
    }
    for side in [&r.local, &r.remote] {
        assert!(!side.kernel_release.is_empty());
        assert!(side.cpu_utilization > 0.0, "{side:?}");
        assert!(side.syscalls > 0);
        assert_eq!(side.interface.as_deref(), Some("lo"));
    }
    // Both ends share this host: the kernel counted interrupts on both views.
    assert!(r.local.interrupts.unwrap_or(0) > 0 && r.remote.interrupts.unwrap_or(0) > 0);
    let json = pathprobe::report::json(r);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    for key in [
        "kind",
        "direction",
        "duration_seconds",
        "bytes",
        "throughput_bits_per_second",
        "streams",
        "local",
        "remote",
    ] {
        assert!(v.get(key).is_some(), "JSON lacks {key}");
    }
    for side in ["local", "remote"] {
        for key in ["cpu_utilization", "interrupts", "kernel_release"] {
            assert!(v[side].get(key).is_some(), "JSON {side} lacks {key}");
        }
    }
}

fn check_tcp(r: &ProbeResult) {
    let t = r.tcp.as_ref().expect("TCP summary");
    assert!(t.rtt_seconds.is_some_and(|r| r > 0.0 && r < 0.1), "{t:?}");
    assert!(t.mss_bytes.is_some_and(|m| m > 1000), "{t:?}");
    assert!(t.cwnd_bytes.is_some_and(|c| c > 0));
    assert!(t.congestion.as_deref().is_some_and(|c| !c.is_empty()));
    assert!(t.send_buffer_bytes > 0 && t.receive_buffer_bytes > 0);
    let v: serde_json::Value = serde_json::from_str(&pathprobe::report::json(r)).unwrap();
    assert!(v["tcp"]["retransmits"].is_u64());
    assert!(v["tcp"]["rtt_seconds"].as_f64().unwrap() > 0.0);
}

fn check_udp(r: &ProbeResult) {
    let u = r.udp.as_ref().expect("UDP summary");
    assert!(u.packets_received <= u.packets_sent, "{u:?}");
    assert_eq!(u.packets_lost, u.packets_sent - u.packets_received);
    // 200 Mbit/s of 1448-byte datagrams for 1 s per direction.
    let per_direction = 200e6 / (1448.0 * 8.0);
    let expected = per_direction * r.directions.len() as f64;
    assert!(
        (u.packets_sent as f64 - expected).abs() / expected < 0.02,
        "sent {} expected {expected}",
        u.packets_sent
    );
    // Loopback at 200 Mbit/s, paced: nothing should be lost.
    assert!(u.loss_ratio < 0.001, "{u:?}");
    for d in &r.directions {
        assert!(
            (d.sender_throughput_bits_per_second - 200e6).abs() / 200e6 < 0.02,
            "{d:?}"
        );
    }
    let v: serde_json::Value = serde_json::from_str(&pathprobe::report::json(r)).unwrap();
    for key in [
        "packets_sent",
        "packets_received",
        "packets_lost",
        "loss_ratio",
        "jitter_seconds",
    ] {
        assert!(v["udp"].get(key).is_some(), "JSON udp lacks {key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_send() {
    let r = run(Kind::Tcp, Direction::Send, 1).await;
    check_common(&r, Kind::Tcp, Direction::Send, 1);
    check_tcp(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_receive_parallel() {
    let r = run(Kind::Tcp, Direction::Receive, 2).await;
    check_common(&r, Kind::Tcp, Direction::Receive, 2);
    check_tcp(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_bidir() {
    let r = run(Kind::Tcp, Direction::Bidir, 1).await;
    check_common(&r, Kind::Tcp, Direction::Bidir, 1);
    check_tcp(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_send() {
    let r = run(Kind::Udp, Direction::Send, 1).await;
    check_common(&r, Kind::Udp, Direction::Send, 1);
    check_udp(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_receive_parallel() {
    let r = run(Kind::Udp, Direction::Receive, 2).await;
    check_common(&r, Kind::Udp, Direction::Receive, 2);
    check_udp(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_bidir() {
    let r = run(Kind::Udp, Direction::Bidir, 1).await;
    check_common(&r, Kind::Udp, Direction::Bidir, 1);
    check_udp(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omit_excludes_the_warm_up() {
    let (addr, _, _stop) = responder::start(ResponderConfig::default()).await;
    let spec = ProbeSpec {
        kind: Kind::Udp,
        duration: Duration::from_millis(1000),
        omit: Duration::from_millis(500),
        bitrate: Some(100_000_000),
        ..ProbeSpec::default()
    };
    let r = probe::probe(&Target::from_addr(addr), &spec).await.unwrap();
    let u = r.udp.unwrap();
    // Only the measured second counts: 100 Mbit/s of 1448-byte datagrams.
    let expected = 100e6 / (1448.0 * 8.0);
    assert!(
        (u.packets_sent as f64 - expected).abs() / expected < 0.02,
        "{}",
        u.packets_sent
    );
    assert!(
        (r.duration_seconds - 1.0).abs() < 0.05,
        "{}",
        r.duration_seconds
    );
    assert_eq!(r.omit_seconds, 0.5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_probe_runs_its_own_responder() {
    let spec = ProbeSpec {
        duration: Duration::from_millis(500),
        ..ProbeSpec::default()
    };
    let r = pathprobe::loopback::probe_loopback(&spec, false)
        .await
        .unwrap();
    assert!(r.throughput_bits_per_second > 0.0);
    assert!(r.remote_address.starts_with("127.0.0.1:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_bitrate_paces_the_sender_without_overrunning_the_time() {
    // A rate measured to 3 %: alone, as it was in its own test binary.
    let _turn = turn::exclusive();
    let (addr, _, _stop) = responder::start(ResponderConfig::default()).await;
    let spec = ProbeSpec {
        duration: Duration::from_secs(1),
        bitrate: Some(50_000_000),
        ..ProbeSpec::default()
    };
    let r = probe::probe(&Target::from_addr(addr), &spec).await.unwrap();
    assert!(
        (r.throughput_bits_per_second - 50e6).abs() / 50e6 < 0.03,
        "{}",
        r.throughput_bits_per_second
    );
    // The sender does not fill its socket buffer ahead of the rate, so the
    // receiver is done when the time is up, not seconds later.
    assert!(
        (r.duration_seconds - 1.0).abs() < 0.05,
        "{}",
        r.duration_seconds
    );
}

/// Offload is used by default on loopback (this kernel has GSO and GRO),
/// and `no_offload` turns it off on both ends; every datagram is accounted
/// either way, and GSO sends reach the GRO socket whole, coalesced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_offload_modes_are_reported_and_can_be_turned_off() {
    let (addr, _, _stop) = responder::start(ResponderConfig::default()).await;
    for no_offload in [false, true] {
        for direction in [Direction::Send, Direction::Receive] {
            let spec = ProbeSpec {
                kind: Kind::Udp,
                direction,
                duration: Duration::from_millis(500),
                // 1 Gbit/s: 8 datagrams per send (docs/UDP.md).
                bitrate: Some(1_000_000_000),
                length: Some(1400),
                window: Some(8 << 20),
                no_offload,
                ..ProbeSpec::default()
            };
            let r = probe::probe(&Target::from_addr(addr), &spec).await.unwrap();
            let u = r.udp.unwrap();
            let what = format!("{direction:?} no_offload={no_offload}: {u:?}");
            let (send, receive) = if no_offload {
                ("sendmmsg", "recvmmsg")
            } else {
                ("gso", "gro")
            };
            assert_eq!(u.send_mode, Some(send), "{what}");
            assert_eq!(u.receive_mode, Some(receive), "{what}");
            assert_eq!(
                u.packets_received + u.packets_lost,
                u.packets_sent,
                "{what}"
            );
            assert!(u.packets_received > 0, "{what}");
            if no_offload {
                assert_eq!(u.packets_coalesced, 0, "{what}");
            } else {
                // A send of 8 arrives as one buffer of 8, unless the
                // sender fell behind its pacer and sent fewer at once.
                assert!(u.packets_coalesced > 0, "{what}");
            }
        }
    }
}
