//! How `pathprobe serve` scales to 1000 targets: /metrics render time and
//! size from a store full of real results, and the idle CPU, resident memory
//! and scrape time of the real service process with 1000 configured targets.
//!
//!     cargo bench --bench serve_scale
//!
//! Prints figures; it asserts nothing, as timings depend on the machine.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use pathprobe::loopback::probe_loopback;
use pathprobe::metrics::{HostMetrics, ProbeKey, ProbeOutcome, ResultStore, ServiceState};
use pathprobe::probe::{Direction, Kind, ProbeSpec};

const TARGETS: usize = 1000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn render_from_store() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (tcp, udp) = rt.block_on(async {
        let tcp = probe_loopback(
            &ProbeSpec {
                duration: Duration::from_millis(300),
                ..Default::default()
            },
            false,
        )
        .await
        .unwrap();
        let udp = probe_loopback(
            &ProbeSpec {
                kind: Kind::Udp,
                bitrate: Some(100_000_000),
                duration: Duration::from_millis(300),
                ..Default::default()
            },
            false,
        )
        .await
        .unwrap();
        (tcp, udp)
    });
    let store = ResultStore::new();
    for i in 0..TARGETS {
        for (module, kind, result) in [("tcp", "tcp", &tcp), ("udp", "udp", &udp)] {
            store.record(
                ProbeKey::new(format!("peer{i:04}.example:5301"), module),
                ProbeOutcome {
                    kind: kind.into(),
                    direction: Direction::Send,
                    labels: [("site".to_string(), format!("dc{}", i % 4))].into(),
                    started: SystemTime::now(),
                    duration: Duration::from_millis(5300),
                    slot_wait: None,
                    result: Ok(result.clone()),
                },
            );
        }
    }
    let host = HostMetrics::default();
    let state = ServiceState::new(SystemTime::now());
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..20 {
        let t = Instant::now();
        let text = pathprobe::metrics::render(&store, &host, None, &state).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3);
        size = text.len();
    }
    println!(
        "render: {TARGETS} targets x 2 modules of real results: {:.1} ms median, {:.2} MiB, {} lines",
        median(times),
        size as f64 / (1024.0 * 1024.0),
        pathprobe::metrics::render(&store, &host, None, &state).unwrap().lines().count()
    );
}

fn get(addr: SocketAddr) -> (f64, usize) {
    let t = Instant::now();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = Vec::new();
    s.read_to_end(&mut body).unwrap();
    (t.elapsed().as_secs_f64() * 1e3, body.len())
}

fn proc_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap()
}

fn serve_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from(
        "responder: {listen: \"127.0.0.1:0\"}\nscheduler: {default_interval: 1h}\nmodules:\n  tcp: {kind: tcp, duration: 1s}\ntargets:\n",
    );
    for i in 0..TARGETS {
        // Nothing listens on port 1: every probe fails at once, so the
        // service is idle but for its schedule.
        yaml.push_str(&format!("  - {{name: peer{i:04}, address: \"127.0.0.{}:1\", modules: [tcp], labels: {{site: dc{}}}}}\n", 1 + i % 200, i % 4));
    }
    let path = dir.path().join("fleet.yml");
    std::fs::write(&path, yaml).unwrap();
    let exe = std::env::var("PATHPROBE_BIN").unwrap_or_else(|_| "target/release/pathprobe".into());
    let mut child = Command::new(exe)
        .args([
            "serve",
            "--web.listen-address",
            "127.0.0.1:0",
            "--log.level",
            "warn",
            "--config.file",
            path.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run `cargo build --release` first");
    // The address is logged at info; at warn, find it from the socket table instead.
    let pid = child.id();
    let addr = {
        let start = Instant::now();
        loop {
            let out = Command::new("ss").args(["-ltnpH"]).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let found = text
                .lines()
                .filter(|l| l.contains(&format!("pid={pid},")))
                .filter_map(|l| l.split_whitespace().nth(3))
                .filter_map(|a| a.parse::<SocketAddr>().ok())
                .find(|a| get_ok(*a));
            if let Some(a) = found {
                break a;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "serve did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Let the first run of every target pass, then measure an idle stretch.
    std::thread::sleep(Duration::from_secs(15));
    let cpu0 = proc_cpu_seconds(pid);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(20));
    let idle = (proc_cpu_seconds(pid) - cpu0) / t0.elapsed().as_secs_f64();
    let rss = rss_kib(pid);
    let scrapes: Vec<(f64, usize)> = (0..20).map(|_| get(addr)).collect();
    let size = scrapes.last().unwrap().1;
    println!(
        "serve: {TARGETS} targets: idle CPU {:.2} % of one CPU, RSS {:.1} MiB, /metrics {:.1} ms median ({:.2} MiB)",
        idle * 100.0,
        rss as f64 / 1024.0,
        median(scrapes.iter().map(|s| s.0).collect()),
        size as f64 / (1024.0 * 1024.0)
    );
    let _ = child.kill();
    let _ = child.wait();
}

fn get_ok(addr: SocketAddr) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(
        s,
        "GET /-/healthy HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return false;
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.contains("Healthy")
}

fn main() {
    render_from_store();
    serve_process();
}
