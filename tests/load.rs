//! A one-minute load test against a responder on loopback: junk connections
//! from several threads the whole time, and a prober running short probes
//! back to back. The responder stays up, every test it admits succeeds,
//! and its memory stays bounded. The figures are printed for the record.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LOAD_TIME: Duration = Duration::from_secs(60);

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn metrics(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: l\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn sample(body: &str, metric: &str, label: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(metric) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn responder_under_a_minute_of_load() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("responder.yml");
    std::fs::write(
        &config,
        // One prober runs back to back here, far beyond the default
        // allowance of tests per client per minute, which is not under test.
        "responder: {listen: \"127.0.0.1:0\", idle_timeout: 2s, max_tests_per_client_per_minute: 0}\nmodules: {}\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pathprobe"))
        .args([
            "serve",
            "--web.listen-address",
            "127.0.0.1:0",
            "--config.file",
            config.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let pid = child.id();
    let proc_guard = Proc(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let field = |key: &str| {
                line.split(key)
                    .nth(1)
                    .map(|r| r.split_whitespace().next().unwrap_or("").to_string())
            };
            if line.contains("responder listening") {
                let _ = tx.send(("responder", field("addr=").unwrap_or_default()));
            } else if line.contains("serving metrics") {
                let _ = tx.send(("http", field("addr=").unwrap_or_default()));
            }
        }
    });
    let (mut responder, mut http) = (None, None);
    while responder.is_none() || http.is_none() {
        let (what, addr) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("serve logged its addresses");
        let addr: SocketAddr = addr.parse().unwrap();
        if what == "responder" {
            responder = Some(addr)
        } else {
            http = Some(addr)
        }
    }
    let (responder, http) = (responder.unwrap(), http.unwrap());
    let baseline = rss_kib(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let junk_made = Arc::new(AtomicU64::new(0));
    let junk: Vec<_> = (0..4)
        .map(|i| {
            let (stop, made) = (stop.clone(), junk_made.clone());
            std::thread::spawn(move || {
                let mut open = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(mut s) =
                        TcpStream::connect_timeout(&responder, Duration::from_secs(1))
                    {
                        // Silent, half a header, garbage, an oversized header.
                        let _ = match i {
                            0 => Ok(()),
                            1 => s.write_all(&[0, 0]),
                            2 => s.write_all(b"\x00\x00\x00\x05hello"),
                            _ => s.write_all(&[0xff, 0xff, 0xff, 0xff]),
                        };
                        open.push(s);
                        made.fetch_add(1, Ordering::Relaxed);
                    }
                    if open.len() >= 64 {
                        open.clear();
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        })
        .collect();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut ok, mut failed, mut peak) = (0u64, Vec::new(), baseline);
    let start = Instant::now();
    while start.elapsed() < LOAD_TIME {
        let spec = pathprobe::probe::ProbeSpec {
            duration: Duration::from_millis(500),
            ..Default::default()
        };
        match rt.block_on(pathprobe::probe::probe(
            &pathprobe::probe::Target::from_addr(responder),
            &spec,
        )) {
            Ok(r) => {
                assert!(r.bytes > 0);
                ok += 1;
            }
            Err(e) => failed.push(e.reason()),
        }
        peak = peak.max(rss_kib(pid));
    }
    stop.store(true, Ordering::Relaxed);
    for j in junk {
        j.join().unwrap();
    }
    let m = metrics(http);
    let served = sample(&m, "pathprobe_responder_tests_total", "result=\"success\"");
    let admitted_failed = sample(&m, "pathprobe_responder_tests_total", "result=\"failure\"");
    let mut reasons = std::collections::BTreeMap::new();
    for r in &failed {
        *reasons.entry(*r).or_insert(0u32) += 1;
    }
    println!(
        "load: {:.0} s, {} junk connections, {ok} probes succeeded, {} not admitted {reasons:?}; responder served {served}, failed {admitted_failed}; RSS {baseline} KiB at rest, {peak} KiB peak",
        start.elapsed().as_secs_f64(),
        junk_made.load(Ordering::Relaxed),
        failed.len(),
    );
    // Back-to-back probes may find the previous test still draining; that
    // is a busy reply, never anything else.
    assert!(failed.iter().all(|r| *r == "busy"), "{reasons:?}");
    assert!(ok >= 20, "only {ok} probes got through in a minute");
    // Every test the responder admitted was served.
    assert_eq!(admitted_failed, 0.0, "{m}");
    assert_eq!(served, ok as f64);
    assert!(
        peak < baseline + 32 * 1024,
        "RSS grew from {baseline} KiB to {peak} KiB"
    );
    drop(proc_guard);
}
