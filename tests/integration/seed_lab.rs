//! The first seed replayed (issue 24): an a–r–b lab with tbf on r, b's
//! responder first on a faked old kernel (`setarch --uname-2.6`), then
//! restarted on the real one with `net.ipv4.tcp_wmem` max lowered in b's
//! namespace; a's `serve` probes b (b sends, `direction: receive`) with
//! 1 s probes every 3 s. It passes when serve finds the step within 5
//! probes of the change and attributes it (both releases, the changed
//! sysctl); a healthy run of the same length finds nothing.
//!
//! A window matters only with a round trip: a's UDP filler keeps r's tbf
//! queue towards b full, so that b's data's ACKs wait in it (the lab has
//! no netem; tests/integration/diagnosis.rs does the same the other way).
//! The same seed on the prober's own host: a's `serve` on a faked old
//! kernel, stopped, then started again on the real one behind a slower
//! path (the reboot into a new kernel), with its history file: the step
//! of its own outbound path is found within 5 probes of the restart.
//!
//! Needs root; without it the tests print why and pass.

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::lab::{require_root, run_bounded, wait_bounded, Lab, UdpFiller};
use crate::common::serve::Serve;

const PORT: u16 = 5303;
const RATE_MBIT: u64 = 20;
/// Probes of each phase: 7 before the change (the detector needs 5), and
/// up to 5 after it.
const BEFORE: usize = 7;
const AFTER: usize = 5;
const INTERVAL_S: u64 = 3;

/// `pathprobe respond` in b, under `setarch` when asked; killed when dropped.
struct Responder(Child);

impl Responder {
    fn start(lab: &Lab, old_kernel: bool) -> Responder {
        let bin = env!("CARGO_BIN_EXE_pathprobe");
        let mut cmd = if old_kernel {
            let mut c = lab.exec("b", "setarch");
            c.args(["x86_64", "--uname-2.6", bin]);
            c
        } else {
            lab.exec("b", bin)
        };
        let child = cmd
            .args(["respond", "--port", &PORT.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning the responder");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !lab.listening("b", PORT).unwrap() {
            assert!(Instant::now() < deadline, "responder not listening");
            thread::sleep(Duration::from_millis(20));
        }
        Responder(child)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = wait_bounded(&mut self.0, Duration::from_secs(5));
    }
}

fn sysctl(lab: &Lab, key: &str, value: &str) {
    let out = run_bounded(
        lab.exec("b", "sysctl")
            .args(["-qw", &format!("{key}={value}")]),
        Duration::from_secs(10),
    )
    .unwrap();
    assert!(out.status.success(), "sysctl {key}: {}", out.stderr);
}

/// Restores b's tcp_wmem when the test ends, however it ends.
struct Restore<'a>(&'a Lab, String);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let _ = run_bounded(
            self.0
                .exec("b", "sysctl")
                .args(["-qw", &format!("net.ipv4.tcp_wmem={}", self.1)]),
            Duration::from_secs(10),
        );
    }
}

fn serve_probing_b(lab: &Lab) -> Serve {
    let target = format!("{}:{PORT}", lab.addr_b());
    Serve::in_lab(
        lab,
        "a",
        &format!(
            "responder: {{enabled: false}}\nscheduler: {{default_interval: {INTERVAL_S}s, jitter: 0}}\n\
             modules:\n  \
               tcp_r: {{kind: tcp, direction: receive, duration: 1s, timeout: 8s, connect_timeout: 2s}}\n\
             targets:\n  - {{name: b, address: \"{target}\", modules: [tcp_r]}}\n"
        ),
    )
}

/// Successful probes so far, from a's /metrics.
fn successes(serve: &Serve) -> usize {
    serve
        .metrics()
        .lines()
        .find(|l| l.starts_with("pathprobe_probes_total{") && l.contains("result=\"success\""))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or(0.0) as usize
}

fn wait_probes(serve: &Serve, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(INTERVAL_S * (n as u64 + 3) + 10);
    while successes(serve) < n {
        assert!(
            Instant::now() < deadline,
            "{n} successful probes not within their time:\n{}",
            serve.log()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// The history's steps and throughputs of the job, from a's API.
fn history(serve: &Serve) -> serde_json::Value {
    history_of(serve, "tcp_r")
}

fn history_of(serve: &Serve, module: &str) -> serde_json::Value {
    let (status, body) = serve.get(&format!("/api/v1/history?target=b&module={module}"));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn figures(h: &serde_json::Value) -> Vec<f64> {
    h["jobs"][0]["samples"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["throughput_bits_per_second"].as_f64())
        .map(|v| (v / 1e5).round() / 10.0)
        .collect()
}

#[test]
fn the_seed_upgrade_is_found_within_five_probes_and_attributed() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("seed").unwrap();
    lab.shape(RATE_MBIT as u32).unwrap();
    let wmem = lab.sysctl("b", "net/ipv4/tcp_wmem").unwrap();
    let _restore = Restore(&lab, wmem.clone());
    let _delay = UdpFiller::start(&lab, true, RATE_MBIT, Duration::from_secs(80));
    let old = Responder::start(&lab, true);
    let a = serve_probing_b(&lab);
    wait_probes(&a, BEFORE);
    assert!(
        history(&a)["jobs"][0]["steps"].is_null(),
        "a step on the old kernel: {}",
        history(&a)
    );

    // The upgrade: b restarts on its real kernel with a smaller send buffer.
    drop(old);
    let max_wmem = "4096 16384 8192";
    sysctl(&lab, "net.ipv4.tcp_wmem", max_wmem);
    let changed_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let _new = Responder::start(&lab, false);
    let n0 = successes(&a);
    let deadline = Instant::now() + Duration::from_secs(INTERVAL_S * (AFTER as u64 + 3) + 10);
    let step = loop {
        let h = history(&a);
        if let Some(s) = h["jobs"][0]["steps"].as_array().and_then(|s| s.first()) {
            break s.clone();
        }
        assert!(
            Instant::now() < deadline && successes(&a) <= n0 + AFTER,
            "no step within {AFTER} probes of the change; throughput (Mbit/s) {:?}\n{}",
            figures(&h),
            a.log()
        );
        thread::sleep(Duration::from_millis(200));
    };
    let h = history(&a);
    let after: usize = h["jobs"][0]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            let t = s["timestamp_seconds"].as_f64().unwrap();
            t >= changed_at && t <= step["detected_seconds"].as_f64().unwrap()
        })
        .count();
    eprintln!(
        "step found at the {after}th probe after the change: {}; throughput (Mbit/s) {:?}",
        step["summary"],
        figures(&h)
    );
    assert!(after <= AFTER, "found {after} probes after the change");
    assert_eq!(step["figure"], "throughput", "{step:#}");
    // setarch --uname-2.6 reports 2.6.(60 + minor) with the rest kept.
    let before = step["release_before"].as_str().unwrap_or_default();
    assert!(before.starts_with("2.6."), "{step:#}");
    let real = run_bounded(Command::new("uname").arg("-r"), Duration::from_secs(5))
        .unwrap()
        .stdout;
    assert_eq!(step["release_after"], real.trim(), "{step:#}");
    let summary = step["summary"].as_str().unwrap();
    assert!(
        summary.contains(&format!(
            "net.ipv4.tcp_wmem {} → {max_wmem}",
            wmem.split_whitespace().collect::<Vec<_>>().join(" ")
        )),
        "{summary}"
    );
    assert!(step["ratio"].as_f64().unwrap() < 0.75, "{step:#}");
    // The log says it too, and the metrics carry it for the alert.
    assert!(a.log().contains("step detected"), "{}", a.log());
    let m = a.metrics();
    assert!(
        m.lines()
            .any(|l| l.starts_with("pathprobe_step_last_ratio{")
                && l.contains(&format!("from_release=\"{before}\""))),
        "{m}"
    );
}

#[test]
fn a_healthy_run_of_the_same_length_finds_no_step() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("seedok").unwrap();
    lab.shape(RATE_MBIT as u32).unwrap();
    let _delay = UdpFiller::start(&lab, true, RATE_MBIT, Duration::from_secs(80));
    let _r = Responder::start(&lab, false);
    let a = serve_probing_b(&lab);
    wait_probes(&a, BEFORE + AFTER);
    let h = history(&a);
    eprintln!("healthy throughput (Mbit/s) {:?}", figures(&h));
    assert!(h["jobs"][0]["steps"].is_null(), "{h:#}");
    assert!(!a.log().contains("step detected"), "{}", a.log());
}

/// a's `serve` probing b's responder with a's data (`direction: send`),
/// its history in `history`; under `setarch --uname-2.6` when `old`.
fn serve_sending_to_b(lab: &Lab, history: &std::path::Path, old: bool) -> Serve {
    let target = format!("{}:{PORT}", lab.addr_b());
    let yaml = format!(
        "responder: {{enabled: false}}\nscheduler: {{default_interval: {INTERVAL_S}s, jitter: 0}}\n\
         web: {{history_file: \"{}\"}}\n\
         modules:\n  \
           tcp_s: {{kind: tcp, direction: send, duration: 1s, timeout: 8s, connect_timeout: 2s}}\n\
         targets:\n  - {{name: b, address: \"{target}\", modules: [tcp_s]}}\n",
        history.display()
    );
    let b = Serve::yaml(&yaml);
    if old {
        b.in_lab_on_old_kernel(lab, "a").start()
    } else {
        b.in_lab(lab, "a").start()
    }
}

/// Stops `serve` as systemd would (SIGTERM), which saves its history.
fn stop(mut serve: Serve) {
    serve.signal(libc::SIGTERM);
    let status = wait_bounded(&mut serve.child, Duration::from_secs(15))
        .unwrap()
        .unwrap_or_else(|| panic!("serve did not exit after SIGTERM:\n{}", serve.log()));
    assert!(status.success(), "{status:?}\n{}", serve.log());
}

#[test]
fn a_prober_rebooted_into_a_new_kernel_finds_its_own_step_after_the_restart() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("seedre").unwrap();
    lab.shape(100).unwrap();
    let _b = Responder::start(&lab, false);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("history.json");

    // Before: a on its old kernel, a fast path.
    let old = serve_sending_to_b(&lab, &file, true);
    wait_probes(&old, BEFORE);
    let h = history_of(&old, "tcp_s");
    assert!(
        h["jobs"][0]["steps"].is_null(),
        "a step before the reboot: {h}"
    );
    let before_figures = figures(&h);
    stop(old);

    // The reboot: the real kernel, and the path 88% slower.
    lab.shape(12).unwrap();
    let new = serve_sending_to_b(&lab, &file, false);
    assert!(
        new.log().contains("step detectors seeded from the history"),
        "{}",
        new.log()
    );
    let deadline = Instant::now() + Duration::from_secs(INTERVAL_S * (AFTER as u64 + 3) + 15);
    let step = loop {
        let h = history_of(&new, "tcp_s");
        if let Some(s) = h["jobs"][0]["steps"].as_array().and_then(|s| s.first()) {
            break s.clone();
        }
        assert!(
            Instant::now() < deadline && successes(&new) <= AFTER,
            "no step within {AFTER} probes of the restart; throughput (Mbit/s) before \
             {before_figures:?}, all {:?}\n{}",
            figures(&h),
            new.log()
        );
        thread::sleep(Duration::from_millis(200));
    };
    let probes_after = successes(&new);
    eprintln!(
        "step found at probe {probes_after} after the restart: {}; throughput (Mbit/s) {:?}",
        step["summary"],
        figures(&history_of(&new, "tcp_s"))
    );
    assert!(
        probes_after <= AFTER,
        "found {probes_after} probes after the restart"
    );
    assert_eq!(step["figure"], "throughput", "{step:#}");
    assert!(step["ratio"].as_f64().unwrap() < 0.25, "{step:#}");
    let before = step["release_before"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(before.starts_with("2.6."), "{step:#}");
    let real = run_bounded(Command::new("uname").arg("-r"), Duration::from_secs(5))
        .unwrap()
        .stdout;
    let real = real.trim();
    assert_eq!(step["release_after"], real, "{step:#}");
    let summary = step["summary"].as_str().unwrap();
    assert!(
        summary.contains(&format!("kernel {before} → {real}")),
        "{summary}"
    );
    // The log line and the metrics the alert reads name both releases.
    let log = new.log();
    let line = log
        .lines()
        .find(|l| l.contains("step detected"))
        .unwrap_or_else(|| panic!("no step logged:\n{log}"));
    assert!(line.contains(&before) && line.contains(real), "{line}");
    let m = new.metrics();
    assert!(
        m.lines()
            .any(|l| l.starts_with("pathprobe_step_last_ratio{")
                && l.contains(&format!("from_release=\"{before}\""))
                && l.contains(&format!("to_release=\"{real}\""))),
        "{m}"
    );
    stop(new);
}
