//! Interval reports (`-i`) over real loopback probes: the intervals are the
//! receiver's, they add up to the stream's totals, and a reverse test's
//! sender figures are the responder's own.

use std::time::Duration;

use pathprobe::analysis::result::IntervalSummary;
use pathprobe::engine::stats::Role;
use pathprobe::probe::{self, Direction, Kind, ProbeResult, ProbeSpec, Target};
use pathprobe::responder::ResponderConfig;

use crate::common::responder;

async fn run(kind: Kind, direction: Direction) -> ProbeResult {
    let (addr, _, _stop) = responder::start(ResponderConfig::default()).await;
    let spec = ProbeSpec {
        kind,
        direction,
        duration: Duration::from_secs(2),
        interval: Some(Duration::from_millis(500)),
        bitrate: Some(match kind {
            Kind::Udp => 100_000_000,
            // Paced, so that a 2 s test moves a bounded amount on a busy CI
            // host (any other kind, so that a new one needs no edit here).
            _ => 2_000_000_000,
        }),
        ..ProbeSpec::default()
    };
    tokio::time::timeout(
        Duration::from_secs(30),
        probe::probe(&Target::from_addr(addr), &spec),
    )
    .await
    .expect("probe finished in time")
    .expect("probe succeeded")
}

/// Four half-second intervals, each stream's adding up to its totals.
fn check(r: &ProbeResult) {
    assert_eq!(r.interval_seconds, Some(0.5));
    assert_eq!(r.intervals.len(), 4, "{:#?}", r.intervals);
    for (k, i) in r.intervals.iter().enumerate() {
        assert_eq!(i.start, k as f64 * 0.5);
        if k < 3 {
            assert!((i.end - i.start - 0.5).abs() < 1e-9, "{i:?}");
        }
        assert_eq!(i.streams.len(), 1);
        assert!(i.streams[0].bytes > 0, "interval {k} moved nothing: {i:?}");
    }
    let s = &r.streams[0];
    let sum = |f: fn(&IntervalSummary) -> u64| r.intervals.iter().map(f).sum::<u64>();
    assert_eq!(sum(|i| i.streams[0].bytes), s.bytes);
    assert_eq!(
        sum(|i| i.streams[0]
            .sender_bytes
            .expect("both ends report intervals")),
        s.sender_bytes
    );
    // A pathprobe responder reports its intervals: every figure is the
    // receiver's own.
    for i in &r.intervals {
        assert_eq!(i.streams[0].measured_by, Role::Receiver, "{i:?}");
        assert_eq!(i.sums[0].measured_by, Role::Receiver, "{i:?}");
    }
    assert_eq!(sum(|i| i.sums[0].bytes), r.bytes);
    match r.kind {
        Kind::Tcp => {
            let retrans = sum(|i| i.streams[0].retransmits.expect("TCP has retransmits"));
            let total = s.tcp.as_ref().unwrap().retransmits;
            assert!(retrans <= total + 64, "{retrans} {total}");
        }
        Kind::Udp => {
            let u = s.udp.as_ref().unwrap();
            assert_eq!(sum(|i| i.streams[0].packets.unwrap()), u.packets_received);
            assert_eq!(
                sum(|i| i.streams[0].sender_packets.unwrap()),
                u.packets_sent
            );
            assert!(r.intervals.iter().all(|i| i.streams[0].lost.is_some()));
        }
        // Request/response kinds report no retransmits or datagrams here.
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_intervals_are_the_responders_as_receiver() {
    let r = run(Kind::Tcp, Direction::Send).await;
    check(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_reverse_intervals_take_the_responders_as_sender() {
    // -R: this side receives; the sender figures, retransmits included,
    // can only have come from the responder's results.
    let r = run(Kind::Tcp, Direction::Receive).await;
    check(&r);
    assert!(r
        .intervals
        .iter()
        .all(|i| i.streams[0].sender_bytes > Some(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_intervals_add_up_to_the_datagrams() {
    let r = run(Kind::Udp, Direction::Send).await;
    check(&r);
    // 100 Mbit/s of 1448-byte datagrams is about 4300 in half a second.
    let sent = r.intervals[1].streams[0].sender_packets.unwrap();
    assert!((3000..6000).contains(&sent), "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_reverse_intervals() {
    let r = run(Kind::Udp, Direction::Receive).await;
    check(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_interval_there_are_none() {
    let (addr, _, _stop) = responder::start(ResponderConfig::default()).await;
    let spec = ProbeSpec {
        duration: Duration::from_millis(300),
        ..ProbeSpec::default()
    };
    let r = probe::probe(&Target::from_addr(addr), &spec).await.unwrap();
    assert!(r.intervals.is_empty() && r.interval_seconds.is_none());
    assert!(!pathprobe::report::json(&r).contains("intervals"));
}
