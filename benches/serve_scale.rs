//! How `pathprobe serve` scales to 1000 targets: /metrics render time and
//! size from a store full of real results, and the idle CPU, resident memory
//! and scrape time of the real service process with 1000 configured targets.
//!
//!     cargo bench --bench serve_scale
//!
//! Prints figures; it asserts nothing about time, as timings depend on the
//! machine. It does assert the history's memory bound: 1000 jobs with a
//! full default history (24 h of a probe a minute) add at most
//! [`HISTORY_BOUND_MIB`] to the resident set.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use pathprobe::loopback::probe_loopback;
use pathprobe::metrics::{HostMetrics, ProbeKey, ProbeOutcome, ResultStore, ServiceState};
use pathprobe::probe::{Direction, Kind, ProbeSpec};
use pathprobe::service::history::{History, Point, Retention};
use std::time::UNIX_EPOCH;

const TARGETS: usize = 1000;
/// The stated bound: the budget of docs/WEB.md, 84 KiB per job at most.
const HISTORY_BOUND_MIB: f64 = 84.0;

fn self_rss_kib() -> u64 {
    rss_kib(std::process::id())
}

/// A full day of history, one probe a minute, for `TARGETS` jobs named
/// as `serve_process` names them, recorded as the clock moves.
fn full_history() -> History {
    let h = History::new(Retention::default());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let release = pathprobe::host::kernel_release();
    for i in 0..TARGETS {
        let key = ProbeKey::new(format!("peer{i:04}"), "tcp");
        for m in 0..1440 {
            let t = now - 86400.0 + 30.0 + m as f64 * 60.0;
            let mut p = Point::new(t, Direction::Send);
            p.throughput = 9.4e9 + (m % 17) as f64 * 1e6;
            p.send = p.throughput;
            p.retransmits = (m % 5) as f64;
            p.rtt = 2e-4;
            p.local_cpu = 0.4;
            p.remote_cpu = 0.3;
            p.local_kernel = Some(release.as_str().into());
            p.remote_kernel = Some(release.as_str().into());
            h.record_point(&key, "tcp", p, UNIX_EPOCH + Duration::from_secs_f64(t));
        }
    }
    h
}

fn history_memory() -> History {
    let before = self_rss_kib();
    let t = Instant::now();
    let h = full_history();
    let took = t.elapsed();
    let grown = (self_rss_kib() - before) as f64 / 1024.0;
    println!(
        "history: {TARGETS} jobs x 24 h at one probe a minute: {} entries ({:.0} per job), RSS +{grown:.1} MiB ({:.1} KiB per job; bound {HISTORY_BOUND_MIB} MiB), filled in {:.1} s",
        h.len(),
        h.len() as f64 / TARGETS as f64,
        grown * 1024.0 / TARGETS as f64,
        took.as_secs_f64()
    );
    assert!(
        grown <= HISTORY_BOUND_MIB,
        "history over its memory bound: {grown:.1} MiB"
    );
    h
}

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
    get_path(addr, "/metrics")
}

fn get_path(addr: SocketAddr, path: &str) -> (f64, usize) {
    let t = Instant::now();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n"
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

fn serve_process(history: History) {
    let dir = tempfile::tempdir().unwrap();
    // The service starts with a full day of history for every target.
    let history_file = dir.path().join("history.json");
    history.save(&history_file, SystemTime::now()).unwrap();
    drop(history);
    let mut yaml = format!(
        "responder: {{listen: \"127.0.0.1:0\"}}\nscheduler: {{default_interval: 1h}}\nweb: {{history_file: \"{}\"}}\nmodules:\n  tcp: {{kind: tcp, duration: 1s}}\ntargets:\n",
        history_file.display()
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
    // The status page and its API at 1000 jobs with a full history.
    for path in [
        "/",
        "/?q=peer09&page=1",
        "/path?target=peer0500&module=tcp",
        "/kernels",
        "/kernels?page=20",
        "/fleet",
        "/api/v1/history?target=peer0500&module=tcp",
        "/api/v1/history?since=1h&limit=100",
    ] {
        let runs: Vec<(f64, usize)> = (0..20).map(|_| get_path(addr, path)).collect();
        let worst = runs.iter().map(|r| r.0).fold(0.0, f64::max);
        println!(
            "page {path}: {:.1} ms median, {worst:.1} ms worst of 20, {:.0} KiB",
            median(runs.iter().map(|r| r.0).collect()),
            runs[0].1 as f64 / 1024.0
        );
    }
    println!(
        "serve RSS after the page requests: {:.1} MiB",
        rss_kib(pid) as f64 / 1024.0
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
    let history = history_memory();
    render_from_store();
    serve_process(history);
}
