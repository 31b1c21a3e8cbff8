//! `pathprobe serve` end to end, in process: a config with loopback modules
//! and a target at a second in-process responder, scraped over HTTP.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::metrics::sample;
use crate::common::promtool;
use crate::common::serve::InProcess;

async fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    crate::common::http::request_async(addr, method, path).await
}

const CONFIG: &str = r#"
scheduler:
  default_interval: 30s
modules:
  lo_tcp: {kind: loopback_tcp, duration: 500ms}
  lo_udp: {kind: loopback_udp, duration: 500ms, bitrate: 100M}
  tcp: {kind: tcp, duration: 500ms}
  udp_both: {kind: udp, duration: 500ms, bitrate: 50M, direction: both}
targets:
  - {name: loopback, modules: [lo_tcp, lo_udp]}
  - {name: peer, address: "PEER", modules: [tcp, udp_both], labels: {site: lab}}
  - {name: nobody, address: "127.0.0.1:1", modules: [tcp]}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_probes_and_exports() {
    let run = InProcess::start(CONFIG).await;
    let peer = run.peer;
    let body = run
        .wait_for(Duration::from_secs(60), |b| {
            [
                ("loopback", "lo_tcp"),
                ("loopback", "lo_udp"),
                ("peer", "tcp"),
                ("peer", "udp_both"),
                ("nobody", "tcp"),
            ]
            .iter()
            .all(|(tg, m)| {
                b.contains(&format!(
                    "pathprobe_probe_success{{target=\"{tg}\",module=\"{m}\""
                ))
            }) && b
                .matches("pathprobe_probe_success{target=\"peer\",module=\"udp_both\"")
                .count()
                == 2
        })
        .await;
    // The exposition must satisfy Prometheus' own linter (names, units,
    // help text), with real results of every kind in it.
    promtool::check_metrics(&body);
    let ok = |target: &str, module: &str| {
        sample(
            &body,
            "pathprobe_probe_success",
            &[
                &format!("target=\"{target}\""),
                &format!("module=\"{module}\""),
            ],
        )
    };
    let failures: Vec<_> = body
        .lines()
        .filter(|l| l.starts_with("pathprobe_probe_failure_info"))
        .collect();
    for (target, module) in [
        ("loopback", "lo_tcp"),
        ("loopback", "lo_udp"),
        ("peer", "tcp"),
    ] {
        assert_eq!(
            ok(target, module),
            Some(1.0),
            "{target}/{module}: {failures:#?}"
        );
    }
    // A refused target is a metric value with its reason, not an error.
    assert_eq!(ok("nobody", "tcp"), Some(0.0));
    assert_eq!(
        sample(
            &body,
            "pathprobe_probe_failure_info",
            &["target=\"nobody\"", "reason=\"refused\""]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &body,
            "pathprobe_probes_total",
            &["target=\"nobody\"", "result=\"refused\""]
        ),
        Some(1.0)
    );
    // Real figures, with the target's own labels.
    let tput = sample(
        &body,
        "pathprobe_throughput_bytes_per_second",
        &["target=\"peer\"", "module=\"tcp\"", "site=\"lab\""],
    )
    .unwrap();
    assert!(tput > 1e6, "{tput}");
    let udp = sample(
        &body,
        "pathprobe_throughput_bytes_per_second",
        &["target=\"loopback\"", "module=\"lo_udp\""],
    )
    .unwrap();
    assert!((udp * 8.0 - 100e6).abs() / 100e6 < 0.05, "{udp}");
    for dir in ["send", "receive"] {
        let v = sample(
            &body,
            "pathprobe_probe_success",
            &[
                "target=\"peer\"",
                "module=\"udp_both\"",
                &format!("direction=\"{dir}\""),
            ],
        );
        assert_eq!(v, Some(1.0), "udp_both {dir}");
    }
    assert!(sample(&body, "pathprobe_tcp_rtt_seconds", &["target=\"peer\""]).unwrap() > 0.0);
    assert!(
        sample(
            &body,
            "pathprobe_probe_last_run_timestamp_seconds",
            &["target=\"peer\""]
        )
        .unwrap()
            > 1.7e9
    );
    assert!(body.contains("pathprobe_host_info{"));
    assert!(body.contains("pathprobe_build_info{"));
    assert_eq!(
        sample(&body, "pathprobe_config_last_reload_successful", &[]),
        Some(1.0)
    );

    // /probe runs one probe now and returns only its metrics.
    let (status, probe) = http(run.http, "GET", &format!("/probe?target={peer}&module=tcp")).await;
    assert_eq!(status, 200);
    assert_eq!(
        sample(&probe, "pathprobe_probe_success", &[]),
        Some(1.0),
        "{probe}"
    );
    assert!(
        !probe.contains("target=\""),
        "/probe leaves target labels to Prometheus: {probe}"
    );
    let (_, failed) = http(run.http, "GET", "/probe?target=127.0.0.1:1&module=tcp").await;
    assert_eq!(
        sample(&failed, "pathprobe_probe_success", &[]),
        Some(0.0),
        "{failed}"
    );
    let (status, debug) = http(
        run.http,
        "GET",
        &format!("/probe?target={peer}&module=tcp&debug=true"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        debug.contains("Probing") && debug.contains(" Mbps "),
        "{debug}"
    );
    let (status, _) = http(run.http, "GET", "/probe?target=x&module=nosuch").await;
    assert_eq!(status, 400);

    let (status, page) = http(run.http, "GET", "/").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("<td>peer</td>") && page.contains("/metrics"),
        "{page}"
    );
    assert_eq!(http(run.http, "GET", "/-/healthy").await.0, 200);
    assert_eq!(http(run.http, "GET", "/-/ready").await.0, 200);
    run.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_keeps_the_old_config_when_the_new_one_is_broken() {
    let run = InProcess::start(
        "modules: {lo: {kind: loopback_tcp, duration: 200ms}}\ntargets: [{modules: [lo]}]\n",
    )
    .await;
    run.wait_for(Duration::from_secs(30), |b| {
        b.contains("pathprobe_probe_success{target=\"loopback\"")
    })
    .await;

    std::fs::write(
        run.config.path(),
        "modules: {lo: {kind: loopback_tcp, durations: 1s}}\n",
    )
    .unwrap();
    let (status, body) = http(run.http, "POST", "/-/reload").await;
    assert_eq!(status, 500);
    assert!(body.contains("unknown field `durations`"), "{body}");
    let (_, m) = http(run.http, "GET", "/metrics").await;
    assert_eq!(
        sample(&m, "pathprobe_config_last_reload_successful", &[]),
        Some(0.0)
    );
    // The old configuration still runs: its target is still there.
    assert!(m.contains("pathprobe_probe_success{target=\"loopback\""));

    // A good file that renames the target: the old series go, the new come.
    std::fs::write(run.config.path(), "modules: {lo: {kind: loopback_tcp, duration: 200ms}}\ntargets: [{name: self, modules: [lo]}]\n").unwrap();
    let (status, _) = http(run.http, "POST", "/-/reload").await;
    assert_eq!(status, 200);
    let m = run
        .wait_for(Duration::from_secs(30), |b| {
            b.contains("pathprobe_probe_success{target=\"self\"")
        })
        .await;
    assert_eq!(
        sample(&m, "pathprobe_config_last_reload_successful", &[]),
        Some(1.0)
    );
    assert!(
        !m.contains("target=\"loopback\""),
        "removed target's series remain"
    );
    assert_eq!(http(run.http, "GET", "/-/reload").await.0, 405);
    run.shutdown().await;
}

/// One test per host in either role: while `serve` probes out (here a
/// `/probe` request), its own responder tells probers busy, and says why
/// in its metrics; once the probe is done, it serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_probing_out_tells_probers_busy() {
    use pathprobe::probe::{self, ProbeError, ProbeSpec, Target};
    let run = InProcess::start("modules:\n  long: {kind: tcp, duration: 3s}\n").await;
    run.wait_for(Duration::from_secs(10), |b| {
        b.contains("pathprobe_build_info")
    })
    .await;
    let (http_addr, peer) = (run.http, run.peer);
    let out = tokio::spawn(async move {
        http(
            http_addr,
            "GET",
            &format!("/probe?target={peer}&module=long"),
        )
        .await
    });
    let spec = ProbeSpec {
        duration: Duration::from_millis(200),
        ..ProbeSpec::default()
    };
    let me = Target::from_addr(run.responder);
    // Probe the host until it answers busy: its /probe has the slot.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let busy = loop {
        match probe::probe(&me, &spec).await {
            Err(ProbeError::Busy { .. }) => break true,
            Ok(_) if std::time::Instant::now() < deadline => continue,
            other => panic!("expected busy while the host probes out: {other:?}"),
        }
    };
    assert!(busy);
    let (status, body) = tokio::time::timeout(Duration::from_secs(20), out)
        .await
        .expect("/probe finished")
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        sample(&body, "pathprobe_probe_success", &[]),
        Some(1.0),
        "{body}"
    );
    let (_, metrics) = http(run.http, "GET", "/metrics").await;
    let refused = |reason: &str| {
        sample(
            &metrics,
            "pathprobe_host_slot_refusals_total",
            &[&format!("reason=\"{reason}\"")],
        )
        .unwrap()
    };
    assert!(
        refused("probing") + refused("probe_waiting") >= 1.0,
        "{metrics}"
    );
    assert_eq!(refused("serving"), 0.0);
    // The slot is free again: the host serves.
    probe::probe(&me, &spec)
        .await
        .expect("served once the probe ended");
}
