//! The bottleneck verdict against staged bottlenecks: each test builds one
//! limit for real (loopback CPU, tbf, a small socket buffer on one end, a
//! cgroup CPU quota on the receiver, the probe's own -b, nftables drops)
//! and checks that the probe names it, with the verdict's own figure in a
//! stated range (docs/DIAGNOSIS.md). The namespace tests need root; without
//! it they print why and pass. Probes are 2 s, to keep CI short.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::lab::{require_root, run_bounded, wait_bounded, Lab, UdpFiller};

const PORT: u16 = 5302;
const SECONDS: &str = "2";
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);
const PROBE_TIMEOUT: Duration = Duration::from_secs(25);

/// `pathprobe respond` in namespace b; killed when dropped.
struct Responder {
    child: Child,
    log: File,
}

impl Responder {
    fn start(lab: &Lab) -> Responder {
        Responder::start_with(lab, lab.exec_b(env!("CARGO_BIN_EXE_pathprobe")), &[])
    }

    fn start_with(lab: &Lab, mut cmd: Command, extra: &[&str]) -> Responder {
        let log = tempfile::tempfile().expect("responder log file");
        let child = cmd
            .args(["respond", "--port", &PORT.to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log.try_clone().unwrap()))
            .spawn()
            .expect("spawning the responder");
        let mut r = Responder { child, log };
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        while !lab.listening("b", PORT).unwrap() {
            if let Some(status) = r.child.try_wait().unwrap() {
                panic!("responder exited ({status}):\n{}", r.log());
            }
            assert!(
                Instant::now() < deadline,
                "responder not listening:\n{}",
                r.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
        r
    }

    fn pid(&self) -> u32 {
        // `ip netns exec` execs the responder: this is its pid.
        self.child.id()
    }

    fn log(&mut self) -> String {
        let mut s = String::new();
        let _ = self.log.seek(SeekFrom::Start(0));
        let _ = self.log.read_to_string(&mut s);
        s
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = wait_bounded(&mut self.child, Duration::from_secs(5));
    }
}

/// The verdict of one probe, with the JSON for failure messages.
struct Verdict {
    limit: String,
    strength: f64,
    also: Option<String>,
    json: Value,
}

impl Verdict {
    fn evidence(&self, key: &str) -> Option<f64> {
        self.json["diagnosis"]["evidence"][key].as_f64()
    }
    fn show(&self) -> String {
        format!(
            "verdict {} ({:.3}) also {:?}; diagnosis {:#}",
            self.limit, self.strength, self.also, self.json["diagnosis"]
        )
    }
}

fn verdict_of(cmd: &mut Command, args: &[&str]) -> Verdict {
    cmd.args(["probe", "-J", "-t", SECONDS]).args(args);
    let out = run_bounded(cmd, PROBE_TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(
        out.status.success(),
        "probe {args:?} failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    let json: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", out.stdout));
    let d = &json["diagnosis"];
    let v = Verdict {
        limit: d["limit"].as_str().expect("diagnosis.limit").to_string(),
        strength: d["strength"].as_f64().expect("diagnosis.strength"),
        also: d["also"]["limit"].as_str().map(str::to_string),
        json: json.clone(),
    };
    eprintln!(
        "probe {args:?}: {:.1} Mbit/s, {}",
        json["throughput_bits_per_second"].as_f64().unwrap_or(0.0) / 1e6,
        v.show()
    );
    v
}

fn probe(lab: &Lab, args: &[&str]) -> Verdict {
    let target = lab.addr_b().to_string();
    let mut all: Vec<&str> = vec!["-p"];
    let port = PORT.to_string();
    all.push(&port);
    all.extend_from_slice(args);
    all.push(&target);
    let mut cmd = lab.exec_a(env!("CARGO_BIN_EXE_pathprobe"));
    verdict_of(&mut cmd, &all)
}

/// Sets a sysctl inside one end's namespace.
fn sysctl(lab: &Lab, end: &str, key: &str, value: &str) {
    let out = run_bounded(
        lab.exec(end, "sysctl")
            .args(["-qw", &format!("{key}={value}")]),
        Duration::from_secs(10),
    )
    .unwrap();
    assert!(out.status.success(), "sysctl {key}: {}", out.stderr);
}

#[test]
fn loopback_unpaced_is_limited_by_a_data_thread_s_cpu() {
    let _turn = crate::common::turn::exclusive();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pathprobe"));
    let steal = crate::common::lab::Steal::start();
    let v = verdict_of(&mut cmd, &["--loopback"]);
    // With a fifth of the CPUs stolen, CI saw the thread run half the
    // window, 79 retransmits on loopback and the verdict `network`.
    if !steal.allows("the loopback verdict") {
        return;
    }
    assert!(
        v.limit == "sender_cpu" || v.limit == "receiver_cpu",
        "{}",
        v.show()
    );
    assert!(v.strength >= 0.95 && v.strength <= 1.0, "{}", v.show());
}

#[test]
fn tbf_on_the_router_is_the_network() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("dnet").unwrap();
    lab.shape(100).unwrap();
    let _r = Responder::start(&lab);
    let v = probe(&lab, &[]);
    assert_eq!(v.limit, "network", "{}", v.show());
    assert!((0.5..=1.0).contains(&v.strength), "{}", v.show());
    // The queue tbf keeps shows in the RTT.
    assert!(
        v.evidence("rtt_over_min").unwrap_or(0.0) > 2.0,
        "{}",
        v.show()
    );
}

#[test]
fn a_small_receive_buffer_on_the_receiver_is_the_receive_window() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("drwnd").unwrap();
    // ~20 ms of queueing delay on the ACK path, and a receive buffer far
    // below the bandwidth-delay product, on the receiver only.
    lab.shape(20).unwrap();
    sysctl(&lab, "b", "net.ipv4.tcp_rmem", "4096 8192 8192");
    let _r = Responder::start(&lab);
    let _delay = UdpFiller::start(&lab, false, 20, Duration::from_secs(30));
    let v = probe(&lab, &[]);
    assert_eq!(v.limit, "receive_window", "{}", v.show());
    // The kernel books part of each round trip as plain busy (measured
    // 0.47-0.61 rwnd-limited); tbf and drops read below 0.01.
    assert!((0.25..=1.0).contains(&v.strength), "{}", v.show());
    // The advice names the limit and the receiver's setting as it is.
    let advice = v.json["diagnosis"]["advice"][0]
        .as_str()
        .unwrap_or_default();
    assert!(
        advice.contains("raise -w, or net.ipv4.tcp_rmem max on the receiver (now 8192)"),
        "{}",
        v.show()
    );
    // Following it lifts the probe: the same path with the receiver's
    // tcp_rmem max raised carries markedly more, and the window is no
    // longer the verdict.
    let before = throughput(&v);
    sysctl(&lab, "b", "net.ipv4.tcp_rmem", "4096 131072 6291456");
    let after = probe(&lab, &[]);
    assert!(
        throughput(&after) >= 2.0 * before,
        "{:.2} -> {:.2} Mbit/s; {}",
        before / 1e6,
        throughput(&after) / 1e6,
        after.show()
    );
    assert_ne!(after.limit, "receive_window", "{}", after.show());
    assert!(
        after.json["diagnosis"]["advice"].is_null(),
        "{}",
        after.show()
    );
}

fn throughput(v: &Verdict) -> f64 {
    v.json["throughput_bits_per_second"].as_f64().unwrap_or(0.0)
}

#[test]
fn a_small_send_buffer_on_the_sender_is_the_send_buffer() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("dsnd").unwrap();
    lab.shape(20).unwrap();
    sysctl(&lab, "a", "net.ipv4.tcp_wmem", "4096 8192 8192");
    let _r = Responder::start(&lab);
    let _delay = UdpFiller::start(&lab, false, 20, Duration::from_secs(30));
    let v = probe(&lab, &[]);
    assert_eq!(v.limit, "send_buffer", "{}", v.show());
    // Measured 0.47 sndbuf-limited, the rest plain busy.
    assert!((0.25..=1.0).contains(&v.strength), "{}", v.show());
    let advice = v.json["diagnosis"]["advice"][0]
        .as_str()
        .unwrap_or_default();
    assert!(
        advice.contains("raise -w, or net.ipv4.tcp_wmem max on the sender (now 8192)"),
        "{}",
        v.show()
    );
    // Following it lifts the probe, and the buffer is no longer the verdict.
    // The small buffer already carries about half of tbf's 20 Mbit/s
    // (measured 10.5), so the lift is bounded by the path: measured 1.8x.
    let before = throughput(&v);
    sysctl(&lab, "a", "net.ipv4.tcp_wmem", "4096 16384 4194304");
    let after = probe(&lab, &[]);
    assert!(
        throughput(&after) >= 1.5 * before,
        "{:.2} -> {:.2} Mbit/s; {}",
        before / 1e6,
        throughput(&after) / 1e6,
        after.show()
    );
    assert_ne!(after.limit, "send_buffer", "{}", after.show());
    assert!(
        after.json["diagnosis"]["advice"].is_null(),
        "{}",
        after.show()
    );
}

/// A cgroup v1 CPU quota, removed when dropped.
struct CpuQuota(std::path::PathBuf);

impl CpuQuota {
    fn new(name: &str, percent: u64, pid: u32) -> Option<CpuQuota> {
        let root = std::path::Path::new("/sys/fs/cgroup/cpu");
        if !root.join("cpu.cfs_quota_us").exists() {
            return None;
        }
        let dir = root.join(name);
        let _ = std::fs::create_dir(&dir);
        let q = CpuQuota(dir);
        std::fs::write(q.0.join("cpu.cfs_period_us"), "100000").unwrap();
        std::fs::write(q.0.join("cpu.cfs_quota_us"), (percent * 1000).to_string()).unwrap();
        std::fs::write(q.0.join("cgroup.procs"), pid.to_string()).unwrap();
        Some(q)
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        // The responder is gone by now (dropped first); move any leftover
        // task back to the root before removing the group.
        if let Ok(tasks) = std::fs::read_to_string(self.0.join("cgroup.procs")) {
            for t in tasks.lines() {
                let _ = std::fs::write("/sys/fs/cgroup/cpu/cgroup.procs", t);
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_receiver_held_to_1_percent_of_a_cpu_is_the_receiver_cpu() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("dcpu").unwrap();
    let r = Responder::start(&lab);
    let Some(_quota) = CpuQuota::new(
        &format!("pathprobe-diag-{}", std::process::id()),
        1,
        r.pid(),
    ) else {
        println!("skipping: no cgroup v1 cpu controller");
        return;
    };
    // 1% (the least cfs_quota_us takes): on veth the receive path's
    // protocol work runs in softirq, outside the cgroup, and the reading
    // thread only copies: at 5% it kept up with 1.4 Gbit/s.
    let v = probe(&lab, &[]);
    drop(r);
    assert_eq!(v.limit, "receiver_cpu", "{}", v.show());
    assert!((0.9..=1.0).contains(&v.strength), "{}", v.show());
}

/// A container's CPU limit: the responder held to 15% of a CPU. Its thread
/// is runnable far less than the window (the quota throttles the whole
/// group, and the kernel counts that apart from the run queue), so only the
/// cgroup's own throttling counters show it was CPU-bound.
///
/// The quota holds the receiver only while the sender can outrun it: on a
/// machine whose other work starves the sender too (CI's builds), a run
/// may find the receiver throttled in only some periods. Of up to five
/// runs, the first whose receiver's cgroup was throttled in ≥ 90% of its
/// periods is the staged case; the others are printed.
fn staged_quota(mut run: impl FnMut() -> Verdict) -> Verdict {
    let mut last = None;
    for _ in 0..5 {
        let v = run();
        let t = v.json["diagnosis"]["evidence"]["receiver_throttled"].as_f64();
        if t.is_some_and(|t| t >= 0.9) {
            return v;
        }
        eprintln!("receiver throttled in {t:?} of its periods: not the staged case, again");
        last = Some(v);
    }
    last.unwrap()
}

fn receiver_at_15_percent(v: &Verdict) {
    assert_eq!(v.limit, "receiver_cpu", "{}", v.show());
    assert!((0.9..=1.0).contains(&v.strength), "{}", v.show());
    let throttled = v.json["diagnosis"]["evidence"]["receiver_throttled"]
        .as_f64()
        .unwrap_or_else(|| panic!("no receiver_throttled: {}", v.show()));
    assert!(throttled >= 0.9, "{}", v.show());
    assert!(
        v.json["diagnosis"]["evidence"]["sender_throttled"]
            .as_f64()
            .is_some_and(|s| s < 0.1),
        "the prober ran free: {}",
        v.show()
    );
}

#[test]
fn a_receiver_held_to_15_percent_of_a_cpu_by_a_cgroup_quota_is_the_receiver_cpu() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("dq15").unwrap();
    // nsenter rather than `ip netns exec`, which mounts a /sys of its own
    // without the cgroup file system: pathprobe could not read its quota.
    let r = Responder::start_with(
        &lab,
        lab.exec_keeping_sys("b", env!("CARGO_BIN_EXE_pathprobe")),
        // A receiver that copies what it reads, as applications do: one
        // that discards in the kernel (MSG_TRUNC, with `--zerocopy on`) spends
        // so little of its own CPU per byte that 15% of a CPU keeps up,
        // and the quota would stage nothing.
        &["--zerocopy", "off"],
    );
    let Some(_quota) = CpuQuota::new(
        &format!("pathprobe-diag15-{}", std::process::id()),
        15,
        r.pid(),
    ) else {
        println!("skipping: no cgroup v1 cpu controller");
        return;
    };
    let target = lab.addr_b().to_string();
    let run = || {
        verdict_of(
            &mut lab.exec_keeping_sys("a", env!("CARGO_BIN_EXE_pathprobe")),
            &["-p", &PORT.to_string(), &target],
        )
    };
    let v = staged_quota(run);
    drop(r);
    receiver_at_15_percent(&v);
    // No advice: on veth, lifting the quota did not lift the probe here
    // (7.48 -> 7.05 Gbit/s; the receive path's protocol work runs in
    // softirq, outside the cgroup, and the sender then ran out of CPU).
    assert!(v.json["diagnosis"]["advice"].is_null(), "{}", v.show());
}

#[test]
fn on_loopback_a_receiver_held_to_15_percent_of_a_cpu_is_the_receiver_cpu_never_the_network() {
    if !require_root() {
        return;
    }
    let port = 5311;
    let log = tempfile::tempfile().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pathprobe"))
        .args(["respond", "--listen", &format!("127.0.0.1:{port}")])
        // A copying receiver, as above: a discarding one keeps up at 15%.
        .args(["--zerocopy", "off"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let deadline = Instant::now() + LISTEN_TIMEOUT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "responder not listening");
        thread::sleep(Duration::from_millis(20));
    }
    let quota = CpuQuota::new(
        &format!("pathprobe-diag15lo-{}", std::process::id()),
        15,
        child.id(),
    );
    let v = quota.as_ref().map(|_| {
        staged_quota(|| {
            verdict_of(
                &mut Command::new(env!("CARGO_BIN_EXE_pathprobe")),
                &["-p", &port.to_string(), "127.0.0.1"],
            )
        })
    });
    let _ = child.kill();
    let _ = wait_bounded(&mut child, Duration::from_secs(5));
    drop(quota);
    let Some(v) = v else {
        println!("skipping: no cgroup v1 cpu controller");
        return;
    };
    receiver_at_15_percent(&v);
}

#[test]
fn the_probe_s_own_cap_is_the_rate_limit() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("drate").unwrap();
    let _r = Responder::start(&lab);
    let v = probe(&lab, &["-b", "50M"]);
    assert_eq!(v.limit, "rate_limit", "{}", v.show());
    assert!((0.95..=1.05).contains(&v.strength), "{}", v.show());
}

#[test]
fn random_drops_with_cubic_are_the_network_with_retransmits() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("ddrop").unwrap();
    lab.drop_percent(2.0).unwrap();
    let _r = Responder::start(&lab);
    let v = probe(&lab, &["-C", "cubic"]);
    assert_eq!(v.limit, "network", "{}", v.show());
    assert!((0.5..=1.0).contains(&v.strength), "{}", v.show());
    let retrans = v.json["diagnosis"]["evidence"]["retransmits"]
        .as_u64()
        .unwrap_or(0);
    assert!(retrans > 10, "{}", v.show());
    let ratio = v.evidence("retransmit_ratio").unwrap_or(0.0);
    assert!((0.005..=0.1).contains(&ratio), "{}", v.show());
}

/// Issue 21: a request/response probe (tcp_rr, udp_rr, tcp_crr) has no
/// bottleneck verdict: judged as throughput it always read "limited by
/// unknown (0%)". Real probes of each kind on loopback print no verdict,
/// with or without -v, carry no `diagnosis` in their JSON, and a serve
/// running them exports no pathprobe_probe_limited_by; a TCP probe keeps
/// its verdict.
#[test]
fn request_response_probes_have_no_verdict() {
    use std::io::{BufRead, BufReader};

    let _turn = crate::common::turn::shared();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pathprobe"))
        .args(["respond", "--listen", "127.0.0.1", "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning the responder");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = wait_bounded(&mut self.0, Duration::from_secs(5));
        }
    }
    let _responder = Kill(child);
    let addr = line
        .split_whitespace()
        .nth(4)
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let probe = |args: &[&str]| -> String {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pathprobe"));
        cmd.args(["probe", "-t", "1"]).args(args).arg(&addr);
        let out = run_bounded(&mut cmd, PROBE_TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(
            out.status.success(),
            "probe {args:?} failed:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        out.stdout
    };
    for kind in ["tcp_rr", "udp_rr", "tcp_crr"] {
        for extra in [&[][..], &["-v"][..]] {
            let text = probe(&[&["--mode", kind][..], extra].concat());
            eprintln!("{kind} {extra:?}:\n{text}");
            for word in ["unknown (0%)", "limited by", "verdict"] {
                assert!(
                    !text.contains(word),
                    "{kind} {extra:?} says {word:?}:\n{text}"
                );
            }
        }
        let json: Value = serde_json::from_str(&probe(&["--mode", kind, "-J"])).unwrap();
        assert!(json.get("diagnosis").is_none(), "{kind}: {json:#}");
        let directions = json["directions"].as_array().expect("directions");
        assert!(!directions.is_empty(), "{kind}: {json:#}");
        for d in directions {
            assert!(d.get("diagnosis").is_none(), "{kind}: {d:#}");
        }
    }
    // A throughput probe still names what limited it.
    let tcp = probe(&[]);
    assert!(tcp.contains(" limited by "), "{tcp}");
    let json: Value = serde_json::from_str(&probe(&["-J"])).unwrap();
    assert!(json["diagnosis"]["limit"].is_string(), "{json:#}");

    // Nor does a serve export a verdict for them.
    let body = crate::common::rr::scrape();
    assert!(
        body.contains("pathprobe_rr_transactions_per_second{"),
        "{body}"
    );
    let verdicts: Vec<&str> = body
        .lines()
        .filter(|l| {
            l.starts_with("pathprobe_probe_limited_by{")
                || l.starts_with("pathprobe_probe_limit_strength_ratio{")
        })
        .collect();
    assert!(verdicts.is_empty(), "{verdicts:#?}");
}

/// 64-byte UDP datagrams from a to b as fast as one thread sends them,
/// the thread pinned to `cpu`: on veth the receive path runs in softirq on
/// the sending CPU, so the storm's softirqs land there. b holds a socket
/// that never reads, so every datagram takes the whole receive path.
/// Bounded in time; stops when dropped.
struct SoftirqStorm {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
    _sink: std::net::UdpSocket,
}

impl SoftirqStorm {
    fn start(lab: &Lab, cpu: usize, threads: usize) -> SoftirqStorm {
        use std::sync::atomic::{AtomicBool, Ordering};
        let sink_ns = format!("{}-b", lab.name());
        let to = std::net::SocketAddr::from((lab.addr_b(), 5399));
        let sink = crate::common::lab::in_netns(&sink_ns, move || {
            std::net::UdpSocket::bind(to).expect("the storm's sink")
        });
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let ns = format!("{}-a", lab.name());
        let threads = (0..threads)
            .map(|_| {
                let (ns, flag) = (ns.clone(), stop.clone());
                thread::spawn(move || {
                    crate::common::lab::in_netns(&ns, move || {
                        // SAFETY: a CPU set on this thread's stack, for this thread.
                        unsafe {
                            let mut set: libc::cpu_set_t = std::mem::zeroed();
                            libc::CPU_SET(cpu, &mut set);
                            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
                        }
                        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
                        let payload = [0u8; 64];
                        let start = Instant::now();
                        while !flag.load(Ordering::Relaxed)
                            && start.elapsed() < Duration::from_secs(90)
                        {
                            for _ in 0..256 {
                                let _ = sock.send_to(&payload, to);
                            }
                        }
                    })
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(300));
        SoftirqStorm {
            stop,
            threads,
            _sink: sink,
        }
    }
}

impl Drop for SoftirqStorm {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A loopback probe, its sender pinned to CPU 0 and its receiver (the
/// in-process responder's data thread) to CPU 1.
fn pinned_loopback() -> Verdict {
    verdict_of(
        &mut Command::new(env!("CARGO_BIN_EXE_pathprobe")),
        &["--loopback", "-A", "0,1"],
    )
}

/// Ignored until seen to pass on an idle machine: written while other
/// builds loaded the 2-core machine, where the storm's run read the
/// receiver waiting 40% on a CPU with 14.9% interrupts (NET_RX softirqs
/// 146,707 against 20,825 quiet) and `unknown` (docs/DIAGNOSIS.md).
#[test]
#[ignore = "the staged storm has not yet been seen to pass on an idle machine"]
fn a_softirq_storm_on_the_receiver_s_cpu_is_the_receiver_and_a_quiet_run_the_sender() {
    if !require_root() {
        return;
    }
    if thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        println!("skipping: the storm needs a second CPU");
        return;
    }
    // The lab's lock and an exclusive turn: no other test's traffic.
    let lab = Lab::up("storm").unwrap();
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let quiet = pinned_loopback();
    let sender_wait = quiet.json["diagnosis"]["evidence"]["sender"]["wait"]
        .as_f64()
        .unwrap_or(0.0);
    if ci || sender_wait < 0.2 {
        assert_eq!(quiet.limit, "sender_cpu", "{}", quiet.show());
    } else {
        println!(
            "not checking the quiet run: its sender waited for a CPU {:.0}% of the window (the machine is busy with other work)",
            sender_wait * 100.0
        );
    }
    let storm = SoftirqStorm::start(&lab, 1, 1);
    for run in 1..=3 {
        let v = pinned_loopback();
        let receiver = &v.json["diagnosis"]["evidence"]["receiver"];
        eprintln!(
            "storm run {run}: receiver waited {:?}, its CPU {:?} in interrupts, {:?} NET_RX softirqs",
            receiver["wait"],
            receiver["cpu_interrupt_share"],
            v.json["diagnosis"]["evidence"]["receiver_net_rx_softirqs"]
        );
        assert_eq!(v.limit, "receiver_cpu", "storm run {run}: {}", v.show());
        assert_eq!(receiver["cpu"], 1, "{}", v.show());
        assert!(
            receiver["wait"].as_f64().unwrap() >= 0.25
                && receiver["cpu_interrupt_share"].as_f64().unwrap() >= 0.15,
            "{}",
            v.show()
        );
    }
    drop(storm);
}
