//! `pathprobe serve` end to end, in process: a config with loopback modules
//! and a target at a second in-process responder, scraped over HTTP.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
        page.contains(">peer</a>") && page.contains("/metrics"),
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
    assert!(
        body.contains("unknown key `durations`: did you mean `duration`?"),
        "{body}"
    );
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

/// The `http:` limits: /probe outside `probe_allow` or the static targets
/// is 403, over `probe_max_concurrent` 503, and connections over
/// `max_connections` are closed at accept; each refusal is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_limits_refuse_probes_and_connections() {
    let run = InProcess::start(
        "http:\n  max_connections: 4\n  probe_max_concurrent: 1\n  probe_restrict_to_targets: true\n  probe_allow: [127.0.0.0/8]\n\
         modules:\n  tcp: {kind: tcp, duration: 200ms}\n  lo: {kind: loopback_tcp, duration: 2s}\n\
         targets:\n  - {name: peer, address: \"PEER\", modules: [tcp]}\n",
    )
    .await;
    let peer = run.peer;
    let (_, m) = http(run.http, "GET", "/metrics").await;
    for reason in ["connections", "probe_busy", "probe_forbidden"] {
        let label = format!("reason=\"{reason}\"");
        assert_eq!(
            sample(&m, "pathprobe_http_refusals_total", &[&label]),
            Some(0.0),
            "{reason} series missing at start:\n{m}"
        );
    }
    // A configured target inside probe_allow runs.
    let (status, body) = http(run.http, "GET", &format!("/probe?target={peer}&module=tcp")).await;
    assert_eq!(status, 200, "{body}");
    // Inside probe_allow but not a configured target.
    let (status, body) = http(run.http, "GET", "/probe?target=127.0.0.1:1&module=tcp").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body,
        "target 127.0.0.1:1 is not one of the configured targets (http.probe_restrict_to_targets)\n"
    );
    // Over the concurrency cap: three 2 s loopback probes at once; the one
    // place goes to one of them.
    let addr = run.http;
    let tries: Vec<_> = (0..3)
        .map(|_| tokio::spawn(async move { http(addr, "GET", "/probe?module=lo").await }))
        .collect();
    let mut statuses = Vec::new();
    for t in tries {
        let (status, body) = t.await.unwrap();
        if status == 503 {
            assert_eq!(
                body,
                "1 /probe requests are already running (http.probe_max_concurrent); retry later\n"
            );
        }
        statuses.push(status);
    }
    statuses.sort();
    assert_eq!(statuses, [200, 503, 503]);

    // Connections over max_connections are closed at once.
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(run.http).await.unwrap());
    }
    let mut over = TcpStream::connect(run.http).await.unwrap();
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), over.read(&mut buf))
        .await
        .expect("the connection over the cap was closed at once");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    drop(idle);
    // The server may not yet have seen the idle ones close, and would close
    // a scrape too: retry until one gets through.
    let deadline = Instant::now() + Duration::from_secs(10);
    let m = loop {
        let mut s = TcpStream::connect(run.http).await.unwrap();
        let mut raw = Vec::new();
        let got = async {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .await?;
            s.read_to_end(&mut raw).await
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), got).await;
        let text = String::from_utf8_lossy(&raw).into_owned();
        if text.starts_with("HTTP/1.1 200") {
            break text;
        }
        assert!(Instant::now() < deadline, "no scrape got through");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // At least the one above; a scrape retried above may add more.
    assert!(
        sample(
            &m,
            "pathprobe_http_refusals_total",
            &["reason=\"connections\""]
        ) >= Some(1.0)
    );
    assert_eq!(
        sample(
            &m,
            "pathprobe_http_refusals_total",
            &["reason=\"probe_forbidden\""]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &m,
            "pathprobe_http_refusals_total",
            &["reason=\"probe_busy\""]
        ),
        Some(2.0)
    );
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

/// Waits for `/-/ready`, which the service answers once its first
/// schedule (and so every job's series) is in place.
async fn ready(run: &InProcess) {
    let start = Instant::now();
    while run.request("GET", "/-/ready").await.0 != 200 {
        assert!(start.elapsed() < Duration::from_secs(15), "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_exist_at_zero_from_the_start_and_probe_refuses_a_target_for_loopback() {
    // Hourly jobs against nobody: their first run is, almost always, far
    // off; whichever way, nothing is skipped and nothing succeeds.
    let run = InProcess::start(
        r#"
scheduler: {default_interval: 1h}
modules:
  tcp: {kind: tcp, duration: 500ms}
  udp_both: {kind: udp, duration: 500ms, bitrate: 10M, direction: both}
  lo: {kind: loopback_tcp, duration: 200ms}
targets:
  - {name: nobody, address: "127.0.0.1:1", modules: [tcp, udp_both], labels: {site: x}}
"#,
    )
    .await;
    ready(&run).await;
    let (_, body) = run.request("GET", "/metrics").await;
    for module in ["tcp", "udp_both"] {
        for reason in ["missed", "busy", "timeout", "byte_budget"] {
            let labels = [
                "target=\"nobody\"",
                &format!("module=\"{module}\""),
                &format!("reason=\"{reason}\""),
            ];
            assert_eq!(
                sample(&body, "pathprobe_scheduler_runs_skipped_total", &labels),
                Some(0.0),
                "{module} {reason}:\n{body}"
            );
        }
    }
    let tcp = ["target=\"nobody\"", "module=\"tcp\"", "site=\"x\""];
    let with = |extra: &'static str| [tcp[0], tcp[1], tcp[2], extra];
    assert_eq!(
        sample(&body, "pathprobe_probes_total", &with("result=\"success\"")),
        Some(0.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "pathprobe_sent_bytes_total", &with("flow=\"send\"")),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &body,
            "pathprobe_tcp_retransmits_total",
            &with("flow=\"send\"")
        ),
        Some(0.0)
    );
    assert_eq!(sample(&body, "pathprobe_probe_clamped", &tcp), Some(0.0));
    for d in ["send", "receive"] {
        let labels = [
            "module=\"udp_both\"",
            &format!("direction=\"{d}\""),
            &format!("flow=\"{d}\""),
        ];
        assert_eq!(
            sample(&body, "pathprobe_sent_bytes_total", &labels),
            Some(0.0),
            "{body}"
        );
    }
    promtool::check_metrics(&body);

    // A loopback module probes this host: a target would be a lie.
    let (status, text) = run.request("GET", "/probe?target=10.9.9.9&module=lo").await;
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("loopback module") && text.contains("/probe?module=lo"),
        "{text}"
    );
    let (status, text) = run.request("GET", "/probe?module=tcp").await;
    assert_eq!(status, 400, "{text}");
    let (status, text) = run.request("GET", "/probe?module=lo").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        sample(&text, "pathprobe_probe_success", &[]),
        Some(1.0),
        "{text}"
    );
    run.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clamped_probes_are_flagged_in_metrics_and_on_the_landing_page() {
    let peer = pathprobe::responder::ResponderConfig {
        max_duration: Duration::from_millis(300),
        ..Default::default()
    };
    let run = InProcess::start_with_peer(
        r#"
modules:
  long: {kind: tcp, duration: 1s}
targets:
  - {name: peer, address: "PEER", modules: [long], interval: 5s}
"#,
        peer,
    )
    .await;
    let body = run
        .wait_for(Duration::from_secs(30), |b| {
            sample(b, "pathprobe_probe_success", &["target=\"peer\""]).is_some()
        })
        .await;
    assert_eq!(
        sample(&body, "pathprobe_probe_success", &["target=\"peer\""]),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        sample(
            &body,
            "pathprobe_probe_clamped",
            &["target=\"peer\"", "module=\"long\""]
        ),
        Some(1.0),
        "{body}"
    );
    let (_, page) = run.request("GET", "/").await;
    assert!(page.contains("ok, clamped"), "{page}");
    assert!(page.contains("max_duration"), "{page}");
    run.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_duration_leaves_out_the_wait_for_a_scheduled_probe() {
    // One slot: a /probe arriving while the 2 s scheduled probe runs waits.
    let run = InProcess::start(
        r#"
scheduler: {max_concurrent_probes: 1, jitter: 0}
modules:
  busy: {kind: loopback_tcp, duration: 2s}
  short: {kind: loopback_tcp, duration: 200ms}
targets:
  - {name: loopback, modules: [busy], interval: 3s}
"#,
    )
    .await;
    ready(&run).await;
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "no /probe ever waited"
        );
        let asked = Instant::now();
        let (status, text) = run.request("GET", "/probe?module=short").await;
        let elapsed = asked.elapsed().as_secs_f64();
        assert_eq!(status, 200, "{text}");
        let wait = sample(&text, "pathprobe_probe_slot_wait_seconds", &[]).expect(&text);
        let duration = sample(&text, "pathprobe_probe_duration_seconds", &[]).unwrap();
        assert!(
            wait + duration <= elapsed + 0.01,
            "{wait} + {duration} > {elapsed}"
        );
        if wait > 0.3 {
            // The probe itself is what remains of the request.
            assert!(duration <= elapsed - wait + 0.01, "{text}");
            assert!(duration < elapsed - 0.29, "{text}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    run.shutdown().await;
}

/// Issue 25 point 1: a target label the exposition format gives a meaning
/// to (`le` beside a histogram bucket's own `le`) made promtool, and
/// Prometheus, reject the host's whole scrape. Such names are now refused
/// at load time (tests/integration/cli.rs checks the message); every name
/// still allowed, on every kind of series (histograms and percentiles of
/// tcp_rr included), keeps the scrape valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_target_labels_keep_the_scrape_valid_for_promtool() {
    let run = InProcess::start(
        "modules:\n  rr: {kind: tcp_rr, duration: 300ms}\n  tcp: {kind: tcp, duration: 300ms}\n\
         targets:\n  - {name: peer, address: \"PEER\", modules: [rr, tcp], \
         labels: {rack: r12, site: lab, zone: a, _team: net, lower_bound: x, quantiles: y, env: \"le=\\\"1\\\"\"}}\n",
    )
    .await;
    let body = run
        .wait_for(Duration::from_secs(60), |b| {
            sample(b, "pathprobe_probe_success", &["module=\"rr\""]).is_some()
                && sample(b, "pathprobe_probe_success", &["module=\"tcp\""]).is_some()
        })
        .await;
    assert!(
        body.contains("pathprobe_rr_latency_seconds_bucket{"),
        "no histogram to check:\n{body}"
    );
    assert!(body.contains("rack=\"r12\""), "{body}");
    promtool::check_metrics(&body);
}

/// One in-process `serve` of two that probe each other: its HTTP address
/// and the service task, stopped on drop.
struct Twin {
    http: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _config: tempfile::NamedTempFile,
}

impl Drop for Twin {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.abort();
    }
}

/// Issue 25 point 4: two hosts that probe each other outside mesh mode
/// (the Compose demo's layout) told each other `busy` whenever their
/// probes met. With busy retries alone one host gave up 3 of 13 runs as
/// busy in this dense 4 s schedule; with h6's tie-break (the lower address
/// gives way, 2 yields per run) still 2 to 4 of 12 to 14 (3 runs: 2, 4,
/// 3). The rest came from a waiting own probe stopping the yield, from
/// too few yields, and above all from the peer's retry reaching us while
/// our probe read its results (told busy, one retry each): now the
/// responder lets the slot settle (pathprobe_host_slot_settles_total) and
/// no probe may end busy (3 of 3 runs: 0 busy, 0 busy retries, 7 to 9
/// yields).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_probing_each_other_do_not_fail_with_busy() {
    use pathprobe::responder::bind;
    use pathprobe::service::{self, ConfigSource, Listeners};
    use std::io::Write as _;
    let _turn = crate::common::turn::exclusive();
    // Both responders first, so that each config can name the other.
    let mut listeners = Vec::new();
    for _ in 0..2 {
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let responder = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        listeners.push((http, responder));
    }
    let addrs: Vec<SocketAddr> = listeners
        .iter()
        .map(|(_, r)| r.0.local_addr().unwrap())
        .collect();
    let mut twins = Vec::new();
    for (i, (http, responder)) in listeners.into_iter().enumerate() {
        let peer = addrs[1 - i];
        // A busy schedule: three runs of about a second each way in every
        // 4 s, so that the two hosts' probes meet often.
        let yaml = format!(
            "scheduler:\n  default_interval: 4s\n  jitter: 0.5\n  busy_backoff: 200ms\n  busy_retries: 5\n\
             modules:\n  tcp: {{kind: tcp, duration: 400ms, direction: both, bitrate: 100M}}\n  \
             udp: {{kind: udp, duration: 400ms, bitrate: 20M}}\n\
             targets:\n  - {{name: peer, address: \"{peer}\", modules: [tcp, udp]}}\n"
        );
        let mut config = tempfile::Builder::new().suffix(".yml").tempfile().unwrap();
        config.write_all(yaml.as_bytes()).unwrap();
        let http_addr = http.local_addr().unwrap();
        let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(1);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let source = ConfigSource::File(config.path().to_path_buf());
        let task = tokio::spawn(async move {
            let _keep = reload_tx;
            service::run(
                source,
                Listeners {
                    http,
                    responder: Some(responder),
                },
                reload_rx,
                async {
                    let _ = stop_rx.await;
                },
            )
            .await
        });
        twins.push(Twin {
            http: http_addr,
            stop: Some(stop_tx),
            task,
            _config: config,
        });
    }
    // Until each host has run 12 probes (four intervals), within a bound.
    let start = Instant::now();
    loop {
        let mut done = true;
        for t in &twins {
            let (_, body) = http(t.http, "GET", "/metrics").await;
            done &= crate::common::metrics::sum(&body, "pathprobe_probes_total", &[]) >= 12.0;
        }
        if done {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the hosts ran too few probes"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut retries_seen = 0.0;
    let mut yields_seen = 0.0;
    let mut bodies = Vec::new();
    for (i, t) in twins.iter().enumerate() {
        let (status, body) = http(t.http, "GET", "/metrics").await;
        assert_eq!(status, 200);
        let count = |result: &str| {
            crate::common::metrics::sum(
                &body,
                "pathprobe_probes_total",
                &[&format!("result=\"{result}\"")],
            )
        };
        let all = crate::common::metrics::sum(&body, "pathprobe_probes_total", &[]);
        let retries = crate::common::metrics::sum(
            &body,
            "pathprobe_scheduler_busy_retries_total",
            &["target=\"peer\""],
        );
        let served_busy =
            crate::common::metrics::sum(&body, "pathprobe_host_slot_refusals_total", &[]);
        let yields = crate::common::metrics::sum(&body, "pathprobe_host_slot_yields_total", &[]);
        let settles = crate::common::metrics::sum(&body, "pathprobe_host_slot_settles_total", &[]);
        let skipped = |reason: &str| {
            crate::common::metrics::sum(
                &body,
                "pathprobe_scheduler_runs_skipped_total",
                &[&format!("reason=\"{reason}\"")],
            )
        };
        // Both hosts' figures first, so that a failure shows the whole run.
        eprintln!(
            "host {i}: {all} probes, {} successes, {} busy failures; {retries} busy retries; told {served_busy} probers busy; gave way {yields} times; let the slot settle for {settles} probers; runs missed {}, timed out {}",
            count("success"),
            count("busy"),
            skipped("missed"),
            skipped("timeout"),
        );
        bodies.push((all, count("success"), count("busy"), body));
        retries_seen += retries;
        yields_seen += yields;
    }
    eprintln!("over both hosts: {retries_seen} busy retries, {yields_seen} yields");
    // The clashes were met and settled, not avoided by chance (7 to 9
    // yields a run when measured).
    assert!(
        yields_seen >= 1.0,
        "no clash happened: the test proved nothing"
    );
    assert!(
        bodies
            .iter()
            .all(|(.., body)| body.contains("pathprobe_host_slot_settles_total ")),
        "the settle counter is missing"
    );
    for (i, (all, success, busy, body)) in bodies.iter().enumerate() {
        assert_eq!(*busy, 0.0, "host {i} failed probes with busy:\n{body}");
        assert_eq!(success, all, "host {i}:\n{body}");
        assert!(*all >= 12.0, "host {i} ran {all} probes");
    }
}
