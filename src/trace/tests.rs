use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};

use super::*;

fn quick() -> TraceLimits {
    TraceLimits {
        max_hops: 8,
        probes_per_hop: 2,
        gap: 2,
        probe_timeout: Duration::from_millis(200),
        time_limit: Duration::from_secs(5),
        pace: Duration::from_millis(1),
    }
}

fn spec(proto: Proto, dst: SocketAddr) -> TraceSpec {
    TraceSpec {
        proto,
        destination: dst,
        source: None,
        limits: quick(),
    }
}

#[test]
fn tcp_to_a_listener_is_reached_in_one_hop_on_one_port() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let t = trace_blocking(&spec(Proto::Tcp, l.local_addr().unwrap())).unwrap();
    assert_eq!(t.stop, Stop::Reached, "{t:?}");
    assert_eq!(t.hop_count(), Some(1));
    assert_eq!(t.hops[0].address, Some(Ipv4Addr::LOCALHOST.into()));
    // Stops at the first answer: one packet.
    assert_eq!(t.packets, 1);
    assert!(t.flow_matched);
    assert!(t.source.is_some_and(|s| s.port() != 0), "{t:?}");
}

#[test]
fn tcp_to_a_closed_port_is_reached_by_its_reset() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let t = trace_blocking(&spec(Proto::Tcp, port)).unwrap();
    assert_eq!(t.stop, Stop::Reached, "{t:?}");
    assert_eq!(t.hop_count(), Some(1));
}

#[test]
fn tcp_trace_keeps_the_given_source_port() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let src_port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut s = spec(Proto::Tcp, l.local_addr().unwrap());
    s.source = Some(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), src_port));
    let t = trace_blocking(&s).unwrap();
    assert_eq!(t.source.map(|s| s.port()), Some(src_port), "{t:?}");
    let (_, peer) = l.accept().unwrap();
    assert_eq!(peer.port(), src_port);
}

#[test]
fn udp_to_a_closed_port_is_reached_by_port_unreachable() {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let t = trace_blocking(&spec(Proto::Udp, port)).unwrap();
    assert_eq!(t.stop, Stop::Reached, "{t:?}");
    assert_eq!(t.hop_count(), Some(1));
    assert!(t.hops[0].best_rtt_ms().is_some_and(|ms| ms < 200.0));
}

#[test]
fn udp_to_a_silent_open_port_ends_after_the_gap_and_claims_no_hop() {
    let open = UdpSocket::bind("127.0.0.1:0").unwrap();
    let t = trace_blocking(&spec(Proto::Udp, open.local_addr().unwrap())).unwrap();
    assert_eq!(t.stop, Stop::Gap, "{t:?}");
    // Silent tail trimmed; cost is gap x probes per hop.
    assert!(t.hops.is_empty(), "{t:?}");
    assert_eq!(t.packets, 4);
    assert_eq!(t.hop_count(), None);
    // The datagrams did arrive: the flow is the one asked for.
    let mut buf = [0u8; 64];
    open.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let (n, _) = open.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..8], b"pptrace\0");
    assert_eq!(n, 16);
}

#[test]
fn udp_trace_uses_the_probe_source_port() {
    let dst = UdpSocket::bind("127.0.0.1:0").unwrap();
    let src = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut s = spec(Proto::Udp, dst.local_addr().unwrap());
    s.source = Some(src);
    s.limits.gap = 1;
    s.limits.probes_per_hop = 1;
    let t = trace_blocking(&s).unwrap();
    assert!(t.flow_matched);
    assert_eq!(t.source, Some(src));
    dst.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = [0u8; 64];
    let (_, from) = dst.recv_from(&mut buf).unwrap();
    assert_eq!(from, src);
}

#[test]
fn a_busy_udp_source_port_falls_back_and_says_so() {
    let dst = UdpSocket::bind("127.0.0.1:0").unwrap();
    let holder = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = spec(Proto::Udp, dst.local_addr().unwrap());
    s.source = Some(holder.local_addr().unwrap());
    s.limits.gap = 1;
    s.limits.probes_per_hop = 1;
    let t = trace_blocking(&s).unwrap();
    assert!(!t.flow_matched, "{t:?}");
    assert_ne!(t.source, s.source);
}

#[test]
fn the_time_limit_bounds_a_trace_of_silent_hops() {
    let open = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = spec(Proto::Udp, open.local_addr().unwrap());
    s.limits = TraceLimits {
        max_hops: 64,
        probes_per_hop: 5,
        gap: 64,
        probe_timeout: Duration::from_millis(100),
        time_limit: Duration::from_millis(300),
        pace: Duration::from_millis(1),
    };
    let start = Instant::now();
    let t = trace_blocking(&s).unwrap();
    assert_eq!(t.stop, Stop::TimeLimit);
    assert!(
        start.elapsed() < Duration::from_millis(800),
        "{:?}",
        start.elapsed()
    );
    // 300 ms of 100 ms waits: three packets, and one or two cut short.
    assert!((3..=5).contains(&t.packets), "{}", t.packets);
}

#[test]
fn limits_are_clamped_whatever_is_asked() {
    let l = TraceLimits {
        max_hops: 255,
        probes_per_hop: 200,
        gap: 0,
        probe_timeout: Duration::from_secs(3600),
        time_limit: Duration::ZERO,
        pace: Duration::ZERO,
    }
    .clamped();
    assert_eq!(l.max_hops, 64);
    assert_eq!(l.probes_per_hop, 5);
    assert_eq!(l.gap, 1);
    assert_eq!(l.probe_timeout, Duration::from_secs(5));
    assert_eq!(l.time_limit, Duration::from_millis(10));
    assert_eq!(l.pace, Duration::from_millis(1));
    assert_eq!(l.max_packets(), 320);
    assert_eq!(TraceLimits::default().max_packets(), 60);
}

#[test]
fn admission_limits_each_host_and_the_traces_at_once() {
    let a = Admission::new(Duration::from_secs(60), 2);
    let t0 = Instant::now();
    let h1: IpAddr = "10.0.0.1".parse().unwrap();
    let h2: IpAddr = "10.0.0.2".parse().unwrap();
    let h3: IpAddr = "10.0.0.3".parse().unwrap();
    let k1 = a.admit(h1, t0).unwrap();
    assert!(matches!(
        a.admit(h1, t0 + Duration::from_secs(59)),
        Err(TraceError::RateLimited { ago_ms: 59_000, .. })
    ));
    let _k2 = a.admit(h2, t0).unwrap();
    assert!(matches!(a.admit(h3, t0), Err(TraceError::Busy(2))));
    drop(k1);
    let _k3 = a.admit(h3, t0).unwrap();
    drop(_k3);
    assert!(a.admit(h1, t0 + Duration::from_secs(60)).is_ok());
}

#[test]
fn admission_remembers_a_bounded_number_of_hosts() {
    let a = Admission::new(Duration::from_secs(60), 1);
    let t0 = Instant::now();
    for i in 0..(MAX_REMEMBERED_HOSTS as u32 + 100) {
        let host = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
        drop(a.admit(host, t0).unwrap());
    }
    assert_eq!(a.last.lock().unwrap().len(), MAX_REMEMBERED_HOSTS);
}

fn hop(ttl: u8, addr: Option<&str>) -> Hop {
    Hop {
        ttl,
        address: addr.map(|a| a.parse().unwrap()),
        rtt_ms: vec![addr.map(|_| 1.0)],
    }
}

fn path(hops: Vec<Hop>, stop: Stop) -> Trace {
    Trace {
        protocol: Proto::Tcp,
        destination: "10.0.9.2:5301".parse().unwrap(),
        source: None,
        flow_matched: true,
        stop,
        hops,
        packets: 3,
        elapsed_ms: 1.0,
    }
}

#[test]
fn a_silent_hop_is_no_path_change_but_a_new_router_is() {
    let base = path(
        vec![
            hop(1, Some("10.0.1.1")),
            hop(2, Some("10.0.2.2")),
            hop(3, Some("10.0.9.2")),
        ],
        Stop::Reached,
    );
    let silent = path(
        vec![
            hop(1, Some("10.0.1.1")),
            hop(2, None),
            hop(3, Some("10.0.9.2")),
        ],
        Stop::Reached,
    );
    let other = path(
        vec![
            hop(1, Some("10.0.1.1")),
            hop(2, Some("10.0.3.2")),
            hop(3, Some("10.0.9.2")),
        ],
        Stop::Reached,
    );
    let longer = path(
        vec![
            hop(1, Some("10.0.1.1")),
            hop(2, Some("10.0.2.2")),
            hop(3, Some("10.0.5.2")),
            hop(4, Some("10.0.9.2")),
        ],
        Stop::Reached,
    );
    assert_eq!(base.hop_count(), Some(3));
    assert_eq!(base.routers().len(), 2);
    assert!(!base.path_differs(&silent));
    assert!(base.path_differs(&other));
    assert!(base.path_differs(&longer));
    assert!(!base.path_differs(&base.clone()));
}

#[test]
fn text_marks_silent_hops_and_states_the_cost() {
    let t = path(
        vec![
            hop(1, Some("10.0.1.1")),
            hop(2, None),
            hop(3, Some("10.0.9.2")),
        ],
        Stop::Reached,
    );
    let text = t.text();
    assert!(text.contains("  2  *"), "{text}");
    assert!(text.contains("1.000 ms"), "{text}");
    assert!(text.contains("reached in 3 hops; 3 packets"), "{text}");
    let json = serde_json::to_value(&t).unwrap();
    assert_eq!(json["hops"][1]["address"], serde_json::Value::Null);
    assert_eq!(json["hops"][1]["rtt_ms"][0], serde_json::Value::Null);
    assert_eq!(json["stop"], "reached");
}
