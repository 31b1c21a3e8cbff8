//! Plumbing for the hostile-peer tests: victims started as child processes
//! under resource limits, memory read from /proc, bounded HTTP, the loop of
//! real probes whose share served is the figure under test, and the
//! attackers' connection floods. Everything here ends within a bound.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pathprobe::probe::{self, ProbeSpec, Target};
use pathprobe::responder::{ResponderConfig, ResponderCounters};
use tokio::net::{TcpSocket, TcpStream};

pub const PROBER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
pub const ATTACKER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
pub const OUTSIDER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
pub const MIB: u64 = 1024 * 1024;
pub const GIB: u64 = 1024 * MIB;

/// A field of /proc/PID/status in KiB ("self" for this process).
pub fn status_kib(pid: &str, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Lets the test process hold the attackers' many sockets.
pub fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on this process with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Resource limits a victim child starts under (soft = hard): the
/// harness's own.
pub use crate::common::serve::Limits;

pub fn apply_limits(cmd: &mut Command, limits: Limits) {
    limits.apply(cmd);
}

/// A child process, killed when dropped. Its stderr is kept (the first
/// MiB) and lines mentioning a panic are counted, so that a log flood
/// cannot use up the test's memory.
pub struct Proc {
    pub child: Child,
    stderr: Arc<Mutex<String>>,
    pub panics: Arc<AtomicU64>,
}

impl Proc {
    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn hwm_kib(&self) -> u64 {
        status_kib(&self.pid(), "VmHWM:").unwrap_or(0)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `cmd` with piped stderr; each stderr line goes to `on_line` too.
pub fn spawn_logged(
    mut cmd: Command,
    limits: Limits,
    on_line: impl Fn(&str) + Send + 'static,
) -> Proc {
    apply_limits(&mut cmd, limits);
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn pathprobe");
    let stderr = Arc::new(Mutex::new(String::new()));
    let panics = Arc::new(AtomicU64::new(0));
    let pipe = BufReader::new(child.stderr.take().unwrap());
    let (keep, count) = (stderr.clone(), panics.clone());
    std::thread::spawn(move || {
        for line in pipe.lines().map_while(Result::ok) {
            if line.contains("panicked") {
                count.fetch_add(1, Ordering::Relaxed);
            }
            on_line(&line);
            let mut k = keep.lock().unwrap();
            if k.len() < MIB as usize {
                k.push_str(&line);
                k.push('\n');
            }
        }
    });
    Proc {
        child,
        stderr,
        panics,
    }
}

/// `pathprobe respond --listen 127.0.0.1 -p 0 ARGS` under `limits`, and the
/// address it prints.
pub fn spawn_respond(args: &[&str], limits: Limits) -> (Proc, SocketAddr) {
    // PATHPROBE_VICTIM_BIN runs another build as the victim, to take the
    // figures of an attack before a fix.
    let bin = std::env::var("PATHPROBE_VICTIM_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_pathprobe").to_string());
    let mut cmd = Command::new(bin);
    cmd.args(["respond", "--listen", "127.0.0.1", "-p", "0"])
        .args(args)
        .stdout(Stdio::piped());
    let mut proc = spawn_logged(cmd, limits, |_| {});
    let mut out = BufReader::new(proc.child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        let _ = tx.send(line);
        // Keep reading so that the child never blocks on a full pipe.
        let mut sink = Vec::new();
        let _ = out.read_to_end(&mut sink);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("respond printed its address");
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (proc, addr)
}

/// GET `path`: status, body and how long it took, or why it failed,
/// all within `limit`.
pub fn http_get(addr: SocketAddr, path: &str, limit: Duration) -> Result<(u16, String), String> {
    let deadline = Instant::now() + limit;
    let mut s = std::net::TcpStream::connect_timeout(&addr, limit).map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no complete answer within {limit:?}"));
        }
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("after {} bytes: {e}", raw.len())),
        }
    }
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
    Ok((status, body))
}

/// The value of the first sample named `metric` (any labels).
pub fn sample(body: &str, metric: &str) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.split(['{', ' ']).next() == Some(metric))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// An in-process responder on 127.0.0.1 (the harness's), stopped when the
/// returned handle drops.
pub async fn responder(
    config: ResponderConfig,
) -> (
    SocketAddr,
    Arc<ResponderCounters>,
    crate::common::responder::Stop,
) {
    crate::common::responder::start(config).await
}

/// A short TCP probe from `from`.
pub fn short_probe(seconds: f64, from: Ipv4Addr) -> ProbeSpec {
    ProbeSpec {
        duration: Duration::from_secs_f64(seconds),
        bind: Some(IpAddr::V4(from)),
        connect_timeout: Duration::from_secs(3),
        ..ProbeSpec::default()
    }
}

/// What a run of real probes got.
#[derive(Debug, Default)]
pub struct Served {
    pub served: u32,
    pub attempts: u32,
    /// Failure reasons of the probes not served (last try's reason).
    pub reasons: BTreeMap<String, u32>,
    /// Wall time of each served probe's successful try.
    pub walls: Vec<Duration>,
    /// retry_after of every busy reply seen.
    pub busy_hints: Vec<Duration>,
}

impl Served {
    pub fn share_ok(&self, percent: u32) -> bool {
        self.attempts > 0 && self.served * 100 >= self.attempts * percent
    }
    pub fn max_wall(&self) -> Duration {
        self.walls.iter().max().copied().unwrap_or_default()
    }
    pub fn summary(&self) -> String {
        format!(
            "served {} of {} (failures {:?}; slowest served {:.2} s; busy hints up to {:.1} s)",
            self.served,
            self.attempts,
            self.reasons,
            self.max_wall().as_secs_f64(),
            self.busy_hints
                .iter()
                .max()
                .copied()
                .unwrap_or_default()
                .as_secs_f64()
        )
    }
}

/// Real probes back to back for `phase` (at most `max` of them). A probe
/// answered `busy` is retried after the hint capped at 2 s, up to
/// `busy_tries` tries in all; any other failure counts as not served.
pub async fn real_probes(
    addr: SocketAddr,
    spec: &ProbeSpec,
    phase: Duration,
    max: u32,
    busy_tries: u32,
) -> Served {
    let start = Instant::now();
    let mut out = Served::default();
    let target = Target::from_addr(addr);
    let bound = spec.duration + Duration::from_secs(15);
    while start.elapsed() < phase && out.attempts < max {
        out.attempts += 1;
        let mut tries = 0;
        loop {
            tries += 1;
            let t0 = Instant::now();
            let r = tokio::time::timeout(bound, probe::probe(&target, spec)).await;
            match r {
                Ok(Ok(result)) if result.bytes > 0 => {
                    out.served += 1;
                    out.walls.push(t0.elapsed());
                    break;
                }
                Ok(Ok(_)) => {
                    *out.reasons.entry("zero_bytes".into()).or_default() += 1;
                    break;
                }
                Ok(Err(e)) => {
                    if let pathprobe::probe::ProbeError::Busy { retry_after, .. } = &e {
                        out.busy_hints.push(*retry_after);
                        if tries < busy_tries && start.elapsed() < phase {
                            tokio::time::sleep((*retry_after).min(Duration::from_secs(2))).await;
                            continue;
                        }
                    }
                    *out.reasons.entry(e.reason().into()).or_default() += 1;
                    // A refused probe returns at once: pace the next one.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    break;
                }
                Err(_) => {
                    *out.reasons.entry("hung".into()).or_default() += 1;
                    break;
                }
            }
        }
    }
    out
}

/// A TCP connection from `from` to `to`, within 3 s.
pub async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    pathprobe::engine::tcp_socket::bind_source(&socket2::SockRef::from(&s), IpAddr::V4(from))?;
    match tokio::time::timeout(Duration::from_secs(3), s.connect(to)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connect timed out",
        )),
    }
}

/// Reads and discards until the peer closes or `limit` passes; returns
/// whether the peer closed.
pub async fn wait_closed(s: &mut TcpStream, limit: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// An attack running on the tokio runtime until `stop`.
pub struct Attack {
    pub stop: Arc<AtomicBool>,
    /// Connections made so far.
    pub made: Arc<AtomicU64>,
    /// Connections open now.
    pub open: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Attack {
    pub async fn end(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
        self.made.load(Ordering::Relaxed)
    }
}

/// `n` connections from `from`, each sending `opening` (possibly nothing)
/// and then sitting until the responder closes it; a closed one is opened
/// again after 250 ms, so that `n` stay open as long as the responder lets
/// them.
pub fn holders(from: Ipv4Addr, to: SocketAddr, n: usize, opening: Vec<u8>) -> Attack {
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let open = Arc::new(AtomicU64::new(0));
    let opening = Arc::new(opening);
    let tasks = (0..n)
        .map(|_| {
            let (stop, made, open, opening) =
                (stop.clone(), made.clone(), open.clone(), opening.clone());
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(mut s) = connect_from(from, to).await {
                        made.fetch_add(1, Ordering::Relaxed);
                        open.fetch_add(1, Ordering::Relaxed);
                        if !opening.is_empty() {
                            let _ = s.write_all(&opening).await;
                        }
                        wait_closed(&mut s, Duration::from_secs(120)).await;
                        open.fetch_sub(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        })
        .collect();
    Attack {
        stop,
        made,
        open,
        tasks,
    }
}

/// About `per_second` new connections a second from `from`, each left
/// sitting for `hold` without a byte read or written (the responder's
/// refusal stays unread) and then closed; at most `cap` open at once.
pub fn flood(from: Ipv4Addr, to: SocketAddr, per_second: u32, hold: Duration, cap: u64) -> Attack {
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let open = Arc::new(AtomicU64::new(0));
    let (s2, m2, o2) = (stop.clone(), made.clone(), open.clone());
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while !s2.load(Ordering::Relaxed) {
            tick.tick().await;
            if o2.load(Ordering::Relaxed) >= cap {
                continue;
            }
            let (m, o) = (m2.clone(), o2.clone());
            o.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                if let Ok(s) = connect_from(from, to).await {
                    m.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(hold).await;
                    drop(s);
                }
                o.fetch_sub(1, Ordering::Relaxed);
            });
        }
    });
    Attack {
        stop,
        made,
        open,
        tasks: vec![task],
    }
}
