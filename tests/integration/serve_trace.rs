//! Tracing from `pathprobe serve` (`trace:`, issue 28), in process over
//! loopback: the paths it probes are traced after their probes, their hops
//! are on /metrics, and a trace refused by the bounds (here the per-host
//! interval) is counted and costs the probe nothing.

use std::time::Duration;

use crate::common::metrics::sample;
use crate::common::promtool;
use crate::common::serve::InProcess;

const CONFIG: &str = r#"
scheduler:
  default_interval: 2s
modules:
  tcp: {kind: tcp, duration: 300ms}
  tcp_b: {kind: tcp, duration: 300ms}
targets:
  - {name: peer, address: "PEER", modules: [tcp, tcp_b]}
  - {name: nobody, address: "127.0.0.2:1", modules: [tcp]}
trace:
  enabled: true
  min_interval: 1h
  interval: 1h
  max_hops: 4
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_traces_the_paths_it_probes_and_a_refused_trace_harms_no_probe() {
    let run = InProcess::start(CONFIG).await;
    let has = |b: &str, s: &str| b.lines().any(|l| l.starts_with(s));
    let body = run
        .wait_for(Duration::from_secs(60), |b| {
            // Both paths of the one host probed, one of them traced and
            // the other refused by the per-host interval; the refused
            // host's path traced too (after its failed probe).
            let peer_traced = has(b, "pathprobe_path_hops{target=\"peer\",module=\"tcp\"}")
                || has(b, "pathprobe_path_hops{target=\"peer\",module=\"tcp_b\"}");
            peer_traced
                && has(b, "pathprobe_path_hops{target=\"nobody\",module=\"tcp\"}")
                && sample(b, "pathprobe_traces_total", &["result=\"rate_limited\""])
                    .is_some_and(|v| v >= 1.0)
                && ["tcp", "tcp_b"].iter().all(|m| {
                    sample(
                        b,
                        "pathprobe_probe_success",
                        &["target=\"peer\"", &format!("module=\"{m}\"")],
                    )
                    .is_some()
                })
        })
        .await;
    promtool::check_metrics(&body);
    println!(
        "{}",
        body.lines()
            .filter(|l| l.starts_with("pathprobe_path") || l.starts_with("pathprobe_trace"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Over loopback the target is the first hop, and answers (SYN-ACK
    // from the responder, RST from the closed port). 127.0.0.2 is another
    // host to the per-host interval.
    let peer_module = if has(&body, "pathprobe_path_hops{target=\"peer\",module=\"tcp\"}") {
        "tcp"
    } else {
        "tcp_b"
    };
    let other = if peer_module == "tcp" { "tcp_b" } else { "tcp" };
    for (target, module, address) in [
        ("peer", peer_module, "127.0.0.1"),
        ("nobody", "tcp", "127.0.0.2"),
    ] {
        let a = format!("address=\"{address}\"");
        let t = format!("target=\"{target}\"");
        let m = format!("module=\"{module}\"");
        assert_eq!(sample(&body, "pathprobe_path_hops", &[&t, &m]), Some(1.0));
        assert_eq!(
            sample(&body, "pathprobe_path_hop_info", &[&t, &m, "hop=\"1\"", &a]),
            Some(1.0),
            "{body}"
        );
        assert_eq!(
            sample(&body, "pathprobe_path_changes_total", &[&t, &m]),
            Some(0.0)
        );
        assert!(sample(
            &body,
            "pathprobe_path_last_trace_timestamp_seconds",
            &[&t, &m]
        )
        .is_some());
    }
    // The path whose trace was refused exists at 0 changes, with no hops.
    let o = format!("module=\"{other}\"");
    assert_eq!(
        sample(
            &body,
            "pathprobe_path_changes_total",
            &["target=\"peer\"", &o]
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&body, "pathprobe_path_hops", &["target=\"peer\"", &o]),
        None
    );
    // Both probes to the peer succeeded: the refused trace cost them nothing.
    for m in ["tcp", "tcp_b"] {
        assert_eq!(
            sample(
                &body,
                "pathprobe_probe_success",
                &["target=\"peer\"", &format!("module=\"{m}\"")]
            ),
            Some(1.0),
            "{body}"
        );
    }
    // Two reached traces of one hop: a SYN each (one packet at the
    // destination's TTL), so 2 packets in all.
    assert_eq!(
        sample(&body, "pathprobe_traces_total", &["result=\"reached\""]),
        Some(2.0)
    );
    assert_eq!(
        sample(&body, "pathprobe_trace_packets_total", &[]),
        Some(2.0)
    );
    assert_eq!(
        sample(&body, "pathprobe_traces_total", &["result=\"failed\""]),
        Some(0.0)
    );
    run.shutdown().await;
}

/// The states of this namespace's IPv4 TCP sockets whose local port is
/// `port` (`/proc/net/tcp`; 06 is TIME_WAIT).
fn tcp_states_of_port(port: u16) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            (local_port == port).then(|| f.get(3).map(|s| s.to_string()))?
        })
        .collect()
}

/// Issue 28, point 4: serve's trace follows the probe's own flow. A TCP
/// probe's result carries its data stream's address, and a trace from it
/// right after the probe, while that connection is still in TIME_WAIT,
/// gets its very 4-tuple (the data socket is opened with SO_REUSEADDR so
/// that the trace may bind its port): under ECMP the trace then takes the
/// member the data took. Without it the trace fell back to another port
/// (`flow_matched: false`), which may hash onto the other member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_after_a_probe_takes_over_its_data_streams_four_tuple() {
    use pathprobe::probe::{self, Direction, Kind, ProbeSpec, Target};
    use pathprobe::responder::ResponderConfig;
    use pathprobe::trace::{Proto, TraceLimits, TraceSpec};

    let (addr, _counters, _stop) =
        crate::common::responder::start(ResponderConfig::default()).await;
    let spec = ProbeSpec {
        kind: Kind::Tcp,
        direction: Direction::Send,
        duration: Duration::from_millis(300),
        ..ProbeSpec::default()
    };
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        probe::probe(&Target::from_addr(addr), &spec),
    )
    .await
    .expect("probe in time")
    .expect("probe succeeded");
    let data = r.data_source.expect("a TCP probe records its data stream");
    let control: std::net::SocketAddr = r.local_address.parse().unwrap();
    assert_eq!(data.ip(), control.ip());
    assert_ne!(
        data.port(),
        control.port(),
        "the data stream's, not the control's"
    );
    // The data connection has closed and left its 4-tuple in TIME_WAIT on
    // this side: what used to push the trace onto another port.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut states = tcp_states_of_port(data.port());
    while !states.iter().any(|s| s == "06") && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        states = tcp_states_of_port(data.port());
    }
    println!("data stream {data}: socket states {states:?} before the trace");
    assert!(states.iter().any(|s| s == "06"), "{states:?}");
    let t = pathprobe::trace::trace(TraceSpec {
        proto: Proto::Tcp,
        destination: addr,
        source: Some(data),
        limits: TraceLimits {
            max_hops: 4,
            ..TraceLimits::default()
        },
    })
    .await
    .expect("trace");
    println!("{}", t.text());
    assert!(t.reached(), "{t:?}");
    assert!(t.flow_matched, "{t:?}");
    assert_eq!(t.source, Some(data), "{t:?}");
}
