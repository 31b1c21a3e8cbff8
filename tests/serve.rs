//! `pathprobe serve` end to end, in process: a config with loopback modules
//! and a target at a second in-process responder, scraped over HTTP.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use pathprobe::responder::{bind, Responder, ResponderConfig};
use pathprobe::service::{self, ConfigSource, Listeners};

/// A minimal HTTP/1.1 request; returns the status and body.
async fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut s = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
        .await
        .unwrap()
        .unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The value of the first sample of `metric` whose labels contain all of `labels`.
fn sample(body: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            let name = l.split(['{', ' ']).next().unwrap_or("");
            name == metric && labels.iter().all(|want| l.contains(want))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// `promtool check metrics` on a live scrape (CI installs promtool).
fn promtool_check(body: &str) {
    use std::process::{Command, Stdio};
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        panic!("promtool is not installed (apt-get install prometheus; .ci/run does)");
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Running {
    http: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _peer_stop: oneshot::Sender<()>,
    config: tempfile::NamedTempFile,
}

impl Running {
    async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("serve stopped in time")
            .unwrap()
            .unwrap();
    }
}

/// Starts a peer responder and `serve` with `yaml` (PEER replaced by the
/// peer's address); everything on port 0.
async fn start(yaml: &str) -> (Running, SocketAddr) {
    let (tcp, udp) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let peer = Responder::new(tcp, udp, ResponderConfig::default()).unwrap();
    let peer_addr = peer.local_addr().unwrap();
    let (peer_tx, peer_rx) = oneshot::channel::<()>();
    tokio::spawn(peer.serve(async {
        let _ = peer_rx.await;
    }));

    let mut config = tempfile::Builder::new().suffix(".yml").tempfile().unwrap();
    config
        .write_all(yaml.replace("PEER", &peer_addr.to_string()).as_bytes())
        .unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_addr = http.local_addr().unwrap();
    let responder = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (_reload_tx, reload_rx) = mpsc::channel(1);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let source = ConfigSource::File(config.path().to_path_buf());
    let task = tokio::spawn(async move {
        let _keep = _reload_tx;
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
    (
        Running {
            http: http_addr,
            stop: Some(stop_tx),
            task,
            _peer_stop: peer_tx,
            config,
        },
        peer_addr,
    )
}

/// Scrapes until `ready` holds for the body, within `limit`.
async fn scrape_until(addr: SocketAddr, limit: Duration, ready: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let (status, body) = http(addr, "GET", "/metrics").await;
        assert_eq!(status, 200);
        if ready(&body) {
            return body;
        }
        assert!(
            start.elapsed() < limit,
            "metrics never became ready:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
    let (run, peer) = start(CONFIG).await;
    let body = scrape_until(run.http, Duration::from_secs(60), |b| {
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
    promtool_check(&body);
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
    let (run, _peer) =
        start("modules: {lo: {kind: loopback_tcp, duration: 200ms}}\ntargets: [{modules: [lo]}]\n")
            .await;
    scrape_until(run.http, Duration::from_secs(30), |b| {
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
    let m = scrape_until(run.http, Duration::from_secs(30), |b| {
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
    let (run, peer) = start(
        "http:\n  max_connections: 4\n  probe_max_concurrent: 1\n  probe_restrict_to_targets: true\n  probe_allow: [127.0.0.0/8]\n\
         modules:\n  tcp: {kind: tcp, duration: 200ms}\n  lo: {kind: loopback_tcp, duration: 2s}\n\
         targets:\n  - {name: peer, address: \"PEER\", modules: [tcp]}\n",
    )
    .await;
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
        .map(|_| tokio::spawn(async move { http(addr, "GET", "/probe?target=x&module=lo").await }))
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
