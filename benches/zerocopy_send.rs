//! Three ways for a TCP sender to move filler, measured side by side (issue
//! 26 point 1): plain `write` (pathprobe's default), `MSG_ZEROCOPY` with its
//! completions read from the error queue (pathprobe::engine::msg_zerocopy),
//! and `sendfile` from a memfd (pathprobe::engine::zerocopy, `--zerocopy=send`).
//! The receiver discards with `MSG_TRUNC`, as pathprobe's default does.
//!
//!     cargo bench --bench zerocopy_send -- [--seconds S] [--rounds N]
//!         [--len BYTES] [--addr IP] [--send-netns PATH] [--recv-netns PATH]
//!         [--label NAME]
//!
//! Each run is a fresh connection; the modes take turns within each round
//! so that a change in the machine's load spreads over all of them. The
//! sender and the receiver are two threads of this process, each in the
//! network namespace given (benches/zerocopy_send.sh makes a veth pair
//! between two), and each thread's CPU is its own (getrusage
//! RUSAGE_THREAD): the sender's from its first send to its last
//! completion read, the receiver's from accept to end of stream. GB are
//! 1e9 bytes received. It prints figures and asserts nothing about time;
//! it fails a run whose receiver did not count what the sender sent, or
//! whose sender did not read every completion.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pathprobe::engine::msg_zerocopy::{ZeroCopyReport, ZeroCopySend};
use pathprobe::engine::zerocopy::{discard, PayloadFile};
use pathprobe::host::ThreadUsage;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Write,
    MsgZeroCopy,
    Sendfile,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Write, Mode::MsgZeroCopy, Mode::Sendfile];
    fn name(self) -> &'static str {
        match self {
            Mode::Write => "write",
            Mode::MsgZeroCopy => "msg_zerocopy",
            Mode::Sendfile => "sendfile",
        }
    }
}

#[derive(Debug, Clone)]
struct Args {
    seconds: f64,
    rounds: usize,
    len: usize,
    addr: IpAddr,
    send_netns: Option<PathBuf>,
    recv_netns: Option<PathBuf>,
    label: String,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        seconds: 2.5,
        rounds: 5,
        // pathprobe's TCP write size (DEFAULT_TCP_LENGTH).
        len: 128 * 1024,
        addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
        send_netns: None,
        recv_netns: None,
        label: "loopback".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // `cargo bench` passes --bench to every bench target.
        if flag == "--bench" {
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--seconds" => a.seconds = value.parse().map_err(|e| bad(&e))?,
            "--rounds" => a.rounds = value.parse().map_err(|e| bad(&e))?,
            "--len" => a.len = value.parse().map_err(|e| bad(&e))?,
            "--addr" => a.addr = value.parse().map_err(|e| bad(&e))?,
            "--send-netns" => a.send_netns = Some(value.into()),
            "--recv-netns" => a.recv_netns = Some(value.into()),
            "--label" => a.label = value,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if !a.seconds.is_finite() || a.seconds <= 0.0 || a.rounds == 0 || a.len == 0 {
        return Err("--seconds, --rounds and --len must be positive".into());
    }
    Ok(a)
}

/// Moves the calling thread (only it) into the network namespace at `path`.
fn enter_netns(path: &Option<PathBuf>) -> Result<(), String> {
    let Some(path) = path else { return Ok(()) };
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: an open namespace descriptor and a valid nstype.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "setns {}: {}",
            path.display(),
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[derive(Debug)]
struct Run {
    sent: u64,
    received: u64,
    seconds: f64,
    sender_cpu: f64,
    receiver_cpu: f64,
    syscalls: u64,
    zc: Option<ZeroCopyReport>,
}

impl Run {
    fn gbps(&self) -> f64 {
        self.received as f64 * 8.0 / self.seconds / 1e9
    }
    fn per_gb(&self, cpu: f64) -> f64 {
        cpu / (self.received as f64 / 1e9)
    }
}

/// The sender's loop: `mode` for `seconds`, then (MSG_ZEROCOPY) every
/// completion read. Returns bytes sent, the window, its CPU, the send
/// calls and the zerocopy tally.
fn send(stream: &TcpStream, mode: Mode, args: &Args) -> Result<Run, String> {
    let payload: Vec<u8> = (0..args.len).map(|i| (i % 251) as u8).collect();
    // Made before the clock starts, as a probe makes it once per stream.
    let file = match mode {
        Mode::Sendfile => Some(PayloadFile::new(&payload).map_err(|e| format!("memfd: {e}"))?),
        _ => None,
    };
    let mut zc = match mode {
        Mode::MsgZeroCopy => {
            Some(ZeroCopySend::new(stream, payload.clone()).map_err(|e| e.to_string())?)
        }
        _ => None,
    };
    let window = Duration::from_secs_f64(args.seconds);
    let before = ThreadUsage::current();
    let start = Instant::now();
    let (mut sent, mut calls) = (0u64, 0u64);
    // `Write` is implemented for `&TcpStream`, and needs it mutable.
    let mut writer = stream;
    while start.elapsed() < window {
        let took = match (mode, &mut zc, &file) {
            (Mode::MsgZeroCopy, Some(z), _) => z.send().map_err(|e| e.to_string())?,
            (Mode::Sendfile, _, Some(f)) => match f.send_to(stream) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                r => r.map_err(|e| format!("sendfile: {e}"))?,
            },
            _ => match writer.write(&payload) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                r => r.map_err(|e| format!("write: {e}"))?,
            },
        };
        sent += took as u64;
        calls += 1;
    }
    let report = match zc {
        Some(z) => Some(
            z.finish(Duration::from_secs(10))
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let seconds = start.elapsed().as_secs_f64();
    let sender_cpu = ThreadUsage::current().since(&before).cpu().as_secs_f64();
    Ok(Run {
        sent,
        received: 0,
        seconds,
        sender_cpu,
        receiver_cpu: 0.0,
        syscalls: calls + report.map_or(0, |r| r.error_queue_reads),
        zc: report,
    })
}

fn run_once(mode: Mode, args: &Args) -> Result<Run, String> {
    let (port_tx, port_rx) = mpsc::channel();
    let (recv_ns, addr) = (args.recv_netns.clone(), args.addr);
    let receiver = std::thread::spawn(move || -> Result<(u64, f64), String> {
        enter_netns(&recv_ns)?;
        let l = TcpListener::bind((addr, 0)).map_err(|e| format!("bind {addr}: {e}"))?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        let _ = port_tx.send(port);
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let before = ThreadUsage::current();
        let mut got = 0u64;
        loop {
            match discard(&s, 1 << 20) {
                Ok(0) => break,
                Ok(n) => got += n as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("receive: {e}")),
            }
        }
        Ok((
            got,
            ThreadUsage::current().since(&before).cpu().as_secs_f64(),
        ))
    });
    let port = port_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "the receiver did not start".to_string());
    let sender = port.map(|port| {
        let (send_ns, a) = (args.send_netns.clone(), args.clone());
        std::thread::spawn(move || -> Result<Run, String> {
            enter_netns(&send_ns)?;
            let s = TcpStream::connect((a.addr, port)).map_err(|e| format!("connect: {e}"))?;
            let run = send(&s, mode, &a);
            // End the stream whatever happened, so the receiver returns.
            let _ = s.shutdown(Shutdown::Write);
            run
        })
    });
    let sent = match sender {
        Ok(h) => h.join().map_err(|_| "the sender panicked".to_string())?,
        Err(e) => Err(e),
    };
    let received = receiver
        .join()
        .map_err(|_| "the receiver panicked".to_string())?;
    let mut run = sent?;
    let (bytes, cpu) = received?;
    run.received = bytes;
    run.receiver_cpu = cpu;
    Ok(run)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if !n.is_multiple_of(2) => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("zerocopy_send: {e}");
            std::process::exit(2);
        }
    };
    println!(
        "== {}: {} rounds of {} s per mode, modes taking turns, {} B per call, receiver MSG_TRUNC ==",
        args.label, args.rounds, args.seconds, args.len
    );
    println!(
        "{:<5} {:<13} {:>7} {:>9} {:>9} {:>9} {:>8} {:>9} {:>8} {:>7}",
        "round",
        "mode",
        "Gbit/s",
        "snd s/GB",
        "rcv s/GB",
        "calls",
        "notifs",
        "completed",
        "copied%",
        "enobufs"
    );
    let mut runs: Vec<(Mode, Run)> = Vec::new();
    let mut failed = false;
    for round in 1..=args.rounds {
        for mode in Mode::ALL {
            match run_once(mode, &args) {
                Ok(r) => {
                    let (notifs, completed, copied, enobufs) = match r.zc {
                        Some(z) => (
                            z.completions.notifications.to_string(),
                            format!("{}/{}", z.completions.completed, z.completions.issued),
                            format!(
                                "{:.1}",
                                100.0 * z.completions.copied as f64
                                    / z.completions.issued.max(1) as f64
                            ),
                            z.enobufs.to_string(),
                        ),
                        None => ("-".into(), "-".into(), "-".into(), "-".into()),
                    };
                    println!(
                        "{round:<5} {:<13} {:>7.2} {:>9.3} {:>9.3} {:>9} {:>8} {:>9} {:>8} {:>7}",
                        mode.name(),
                        r.gbps(),
                        r.per_gb(r.sender_cpu),
                        r.per_gb(r.receiver_cpu),
                        r.syscalls,
                        notifs,
                        completed,
                        copied,
                        enobufs
                    );
                    let complete =
                        r.zc.is_none_or(|z| z.completions.completed == z.completions.issued);
                    if r.received != r.sent || !complete {
                        println!(
                            "      FAILED: sent {} received {} ({:?})",
                            r.sent, r.received, r.zc
                        );
                        failed = true;
                    }
                    runs.push((mode, r));
                }
                Err(e) => {
                    println!("{round:<5} {:<13} FAILED: {e}", mode.name());
                    failed = true;
                }
            }
        }
    }
    println!("-- {}: medians (min-max Gbit/s) --", args.label);
    println!(
        "| mode | Gbit/s | sender s/GB | receiver s/GB | completions read per run | sends per run | COPIED share |"
    );
    println!("|---|---|---|---|---|---|---|");
    for mode in Mode::ALL {
        let rs: Vec<&Run> = runs
            .iter()
            .filter(|(m, _)| *m == mode)
            .map(|(_, r)| r)
            .collect();
        if rs.is_empty() {
            continue;
        }
        let g: Vec<f64> = rs.iter().map(|r| r.gbps()).collect();
        let (lo, hi) = g
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        let zc = |f: &dyn Fn(&ZeroCopyReport) -> f64| {
            let v: Vec<f64> = rs.iter().filter_map(|r| r.zc.as_ref().map(f)).collect();
            if v.is_empty() {
                "-".to_string()
            } else {
                format!("{:.0}", median(v))
            }
        };
        let share: Vec<f64> = rs
            .iter()
            .filter_map(|r| {
                r.zc.map(|z| {
                    100.0 * z.completions.copied as f64 / z.completions.issued.max(1) as f64
                })
            })
            .collect();
        println!(
            "| {} | {:.2} ({:.1}-{:.1}) | {:.3} | {:.3} | {} | {} | {} |",
            mode.name(),
            median(g),
            lo,
            hi,
            median(rs.iter().map(|r| r.per_gb(r.sender_cpu)).collect()),
            median(rs.iter().map(|r| r.per_gb(r.receiver_cpu)).collect()),
            zc(&|z| z.completions.notifications as f64),
            zc(&|z| z.completions.issued as f64),
            if share.is_empty() {
                "-".to_string()
            } else {
                format!("{:.1}%", median(share))
            },
        );
    }
    if failed {
        std::process::exit(1);
    }
}
