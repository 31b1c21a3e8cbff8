//! Federation by group with real Prometheus servers (docs/MESH.md,
//! "Federation by group"): two group Prometheus servers, configured from
//! config/prometheus-group.yml with config/federation.yml, scrape
//! two hosts each; a global one, configured from
//! config/prometheus-global.yml, federates from both. The global
//! one must hold every pair of groups' series, as many as
//! `metrics::budget::GROUP_PAIR_RECORDS` says (the mesh simulator's
//! count), and no host's own series.
//!
//! The hosts are fixed texts shaped as a host of a grouped mesh exports
//! them at `metrics.detail: fleet` (tests/rules/fleet.yml has the shapes,
//! checked against a live scrape), each served by a thread on a port of its
//! own. Needs the `prometheus` binary (Debian package `prometheus`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use serde_yaml::Value as Yaml;

use crate::common::http;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Serves `body` as /metrics (any request gets it) from a thread, on a port
/// bound to 0; the thread lives as long as the test process.
fn serve_static(body: String) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                pathprobe::metrics::CONTENT_TYPE,
                body.len()
            );
        }
    });
    addr
}

/// A port free now. Prometheus cannot be told to bind port 0 and say which
/// port it got, so the test picks one and hands it over; another process
/// taking it in between makes Prometheus fail to start, loudly.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One host's fleet-detail series: its group, and tcp and udp results per
/// target as `(target, target's rack, success, throughput, udp loss)`.
fn host_text(group: &str, paths: &[(&str, &str, u8, f64, f64)]) -> String {
    let mut out = format!("pathprobe_mesh_group_info{{group_by=\"rack\",group=\"{group}\"}} 1\n");
    for &(target, rack, ok, throughput, loss) in paths {
        for (module, kind) in [("tcp", "tcp"), ("udp", "udp")] {
            let path = format!(
                "target=\"{target}\",module=\"{module}\",kind=\"{kind}\",direction=\"send\",rack=\"{rack}\""
            );
            out += &format!("pathprobe_probe_success{{{path}}} {ok}\n");
            out +=
                &format!("pathprobe_probe_last_success_timestamp_seconds{{{path}}} 1700000000\n");
            out += &format!(
                "pathprobe_throughput_bytes_per_second{{{path},flow=\"send\"}} {throughput}\n"
            );
            if kind == "udp" {
                out += &format!("pathprobe_udp_loss_ratio{{{path},flow=\"send\"}} {loss}\n");
            }
        }
    }
    out
}

/// A Prometheus server on a free port, its files in a directory of its
/// own; killed when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus with `config` (written as prometheus.yml beside
    /// copies of `rule_files` from config/) and waits, bounded, until it
    /// answers ready.
    fn start(config: &Yaml, rule_files: &[&str]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("prometheus.yml"),
            serde_yaml::to_string(config).unwrap(),
        )
        .unwrap();
        for f in rule_files {
            std::fs::copy(root().join("config").join(f), dir.path().join(f)).unwrap();
        }
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        let child = Command::new("prometheus")
            .args([
                format!("--config.file={}", path("prometheus.yml")),
                format!("--storage.tsdb.path={}", path("data")),
                format!("--web.listen-address={addr}"),
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawning prometheus (Debian package `prometheus`)");
        let mut p = Prometheus { child, addr, dir };
        let start = Instant::now();
        while !matches!(http::try_request(p.addr, "GET", "/-/ready"), Ok((200, _))) {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("prometheus exited ({status}):\n{}", p.log());
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "prometheus never became ready:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The samples of an instant query.
    fn vector(&self, promql: &str) -> Vec<Value> {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", promql)
            .finish();
        let (status, body) = http::request(self.addr, "GET", &format!("/api/v1/query?{q}"));
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{promql}: {status}, not JSON ({e}): {body}"));
        assert_eq!(v["status"], "success", "{promql}: {body}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn load(path: &Path) -> Yaml {
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A shipped example config with second-long intervals and `targets` as
/// its one job's only targets.
fn example(file: &str, targets: &[SocketAddr], external: Option<&str>) -> Yaml {
    let mut c = load(&root().join("config").join(file));
    for key in ["scrape_interval", "evaluation_interval", "scrape_timeout"] {
        c["global"][key] = "1s".into();
    }
    if let Some(name) = external {
        c["global"]["external_labels"]["group_prometheus"] = name.into();
    }
    let jobs = c["scrape_configs"].as_sequence_mut().unwrap();
    assert_eq!(jobs.len(), 1, "{file}: one job");
    let list: Vec<Yaml> = targets.iter().map(|a| a.to_string().into()).collect();
    let mut entry = serde_yaml::Mapping::new();
    entry.insert("targets".into(), list.into());
    jobs[0]["static_configs"] = vec![Yaml::Mapping(entry)].into();
    c
}

fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

#[test]
fn the_global_prometheus_holds_every_pair_of_groups_and_no_host_series() {
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("prometheus is required (Debian package `prometheus`; .ci/run installs it)");
    }
    // Rack r1: m1 and m2; rack r2: m3 and m4. Each host probes the other
    // member of its rack, and rack r2 as one target (fleet detail). m2's
    // probes of r2 fail: the pair r1 -> r2 succeeds half the time, and its
    // throughput is m1's alone.
    let hosts = [
        (
            "r1",
            host_text(
                "r1",
                &[("m2", "r1", 1, 1e9, 0.0), ("rack=r2", "r2", 1, 4e8, 0.01)],
            ),
        ),
        (
            "r1",
            host_text(
                "r1",
                &[("m1", "r1", 1, 1e9, 0.0), ("rack=r2", "r2", 0, 0.0, 0.0)],
            ),
        ),
        (
            "r2",
            host_text(
                "r2",
                &[("m4", "r2", 1, 2e9, 0.0), ("rack=r1", "r1", 1, 3e8, 0.02)],
            ),
        ),
        (
            "r2",
            host_text(
                "r2",
                &[("m3", "r2", 1, 2e9, 0.0), ("rack=r1", "r1", 1, 5e8, 0.04)],
            ),
        ),
    ];
    let addrs: Vec<(&str, SocketAddr)> = hosts
        .iter()
        .map(|(g, text)| (*g, serve_static(text.clone())))
        .collect();
    let of = |g: &str| -> Vec<SocketAddr> {
        addrs
            .iter()
            .filter(|(x, _)| *x == g)
            .map(|(_, a)| *a)
            .collect()
    };
    let rules = ["alerts.yml", "federation.yml"];
    let r1 = Prometheus::start(
        &example("prometheus-group.yml", &of("r1"), Some("rack-r1")),
        &rules,
    );
    let r2 = Prometheus::start(
        &example("prometheus-group.yml", &of("r2"), Some("rack-r2")),
        &rules,
    );
    let global = Prometheus::start(
        &example("prometheus-global.yml", &[r1.addr, r2.addr], None),
        &[],
    );

    // tcp and udp one way: 2 directions, 2 throughput flows, 1 udp flow.
    let per_pair = pathprobe::metrics::budget::PairPaths {
        directions: 2,
        throughput_flows: 2,
        udp_flows: 1,
        ..Default::default()
    }
    .series();
    let want = 4 * per_pair;
    let pairs = r#"{__name__=~"pathprobe_group_pair:.+"}"#;
    // The pair series exist as soon as a group's Prometheus has scraped one
    // of its hosts; their values are both hosts' once it has scraped both
    // and the global one has federated since. So wait, bounded, for the
    // count and the values together.
    let r1_r2 = r#"prober_group="r1",target_group="r2",module="tcp""#;
    let r2_r1 = r#"prober_group="r2",target_group="r1",module="udp""#;
    let checks = [
        (
            format!("pathprobe_group_pair:probe_success:ratio{{{r1_r2}}}"),
            0.5,
        ),
        (
            format!("pathprobe_group_pair:probe_success:failing{{{r1_r2}}}"),
            1.0,
        ),
        // m1's alone: m2's failed probe (0) is not the pair's min.
        (
            format!("pathprobe_group_pair:throughput_bytes_per_second:min{{{r1_r2}}}"),
            4e8,
        ),
        (
            format!("pathprobe_group_pair:udp_loss_ratio:max{{{r2_r1}}}"),
            0.04,
        ),
        (
            format!("pathprobe_group_pair:throughput_bytes_per_second:median{{{r2_r1}}}"),
            4e8,
        ),
    ];
    let start = Instant::now();
    loop {
        let got = global.vector(pairs).len();
        let values: Vec<Vec<f64>> = checks
            .iter()
            .map(|(q, _)| global.vector(q).iter().map(value).collect())
            .collect();
        if got == want && checks.iter().zip(&values).all(|((_, v), g)| g == &[*v]) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the global Prometheus has {got} pair series (want {want}); values {values:?} \
             (want {checks:?}):\n{:#?}\ngroup r1's log:\n{}",
            global.vector(pairs),
            r1.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    // Every pair of groups, each from its own group's Prometheus.
    for (from, to) in [("r1", "r1"), ("r1", "r2"), ("r2", "r1"), ("r2", "r2")] {
        let q = format!(
            r#"{{__name__=~"pathprobe_group_pair:.+",prober_group="{from}",target_group="{to}"}}"#
        );
        let samples = global.vector(&q);
        assert_eq!(samples.len(), per_pair, "{from} -> {to}: {samples:#?}");
        for s in &samples {
            let m = &s["metric"];
            // The group Prometheus it came from, by its external label.
            assert_eq!(m["group_prometheus"], format!("rack-{from}"), "{s}");
            // No host's labels: /federate sends the pair series with an
            // empty instance, which honor_labels keeps (so absent).
            for label in ["instance", "target", "rack", "group"] {
                assert!(m.get(label).is_none(), "{label}: {s}");
            }
        }
    }
    // No host's own series, nor the per-host helper, reached the global
    // level: only the pairs and Prometheus' own series of its scrapes.
    let others =
        global.vector(r#"{__name__=~".+",__name__!~"pathprobe_group_pair:.+|up|scrape_.+"}"#);
    assert!(others.is_empty(), "{others:#?}");
    // While the groups' Prometheus servers hold the hosts' series.
    assert_eq!(r1.vector("pathprobe_probe_success").len(), 2 * 2 * 2);
    assert_eq!(r1.vector("pathprobe_host:mesh_group:info").len(), 2);
}
