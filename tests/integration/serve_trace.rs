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
