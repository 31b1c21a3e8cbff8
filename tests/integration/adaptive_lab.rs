//! Adaptive duration against the kernel's truth (issue 27): in namespaces
//! a -- r -- b with tbf on r, an adaptive TCP probe's estimate is within
//! 2% of the rate tbf allows (R × 1448/1514) and crosses the bottleneck
//! with at least 5× fewer bytes than a fixed probe of 1 s omitted + 5 s,
//! both counted by tbf itself; a rate changed mid-probe is reported
//! not converged, or at the rate at the end; and UDP the prober sends is
//! judged on what arrived: over the bottleneck it is the received rate or
//! not converged, under it the paced rate. Needs root; without it the
//! tests print why and pass.

use std::io::Read;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::lab::{require_root, run_bounded, wait_bounded, Lab, FRAME_OVERHEAD, MSS};

const PORT: u16 = 5301;
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// The responder in b, killed when dropped.
struct Responder(Child);

impl Responder {
    fn start(lab: &Lab) -> Responder {
        let child = lab
            .exec_b(env!("CARGO_BIN_EXE_pathprobe"))
            .args(["respond", "--port", &PORT.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning the responder");
        let mut r = Responder(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !lab.listening("b", PORT).unwrap() {
            assert!(
                r.0.try_wait().unwrap().is_none(),
                "the responder exited before listening"
            );
            assert!(Instant::now() < deadline, "the responder is not listening");
            thread::sleep(Duration::from_millis(20));
        }
        r
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = wait_bounded(&mut self.0, Duration::from_secs(5));
    }
}

fn probe_args(lab: &Lab, extra: &[&str]) -> std::process::Command {
    let mut cmd = lab.exec_a(env!("CARGO_BIN_EXE_pathprobe"));
    cmd.args(["probe", "-J", "-p", &PORT.to_string()])
        .args(extra)
        .arg(lab.addr_b().to_string());
    cmd
}

fn json_of(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Runs one probe from a to b; returns its JSON and the bytes tbf passed
/// toward b meanwhile (frames, as tbf meters them).
fn probe(lab: &Lab, extra: &[&str]) -> (Value, f64) {
    let before = lab.tbf_sent("b").unwrap();
    let out = run_bounded(&mut probe_args(lab, extra), PROBE_TIMEOUT).unwrap();
    let after = lab.tbf_sent("b").unwrap();
    assert!(
        out.status.success(),
        "probe {extra:?} failed: {}{}",
        out.stdout,
        out.stderr
    );
    (json_of(&out.stdout), after.bytes - before.bytes)
}

/// The payload rate tbf at `mbit` allows: full frames of MSS payload.
fn truth(mbit: f64) -> f64 {
    mbit * 1e6 * MSS / (MSS + FRAME_OVERHEAD)
}

fn adaptive(v: &Value) -> &Value {
    v.get("adaptive")
        .unwrap_or_else(|| panic!("no adaptive section: {v:#}"))
}

fn estimate_bps(v: &Value) -> f64 {
    adaptive(v)["estimate"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("no estimate: {v:#}"))
}

/// Adaptive TCP through tbf at `mbit`: the estimate against the truth,
/// and tbf's bytes against a fixed 1 s + 5 s probe's.
fn accuracy_and_bytes(mbit: u32) {
    let lab = Lab::up(&format!("ad{mbit}")).unwrap();
    lab.shape(mbit).unwrap();
    let _responder = Responder::start(&lab);
    let want = truth(f64::from(mbit));
    // A probe that misses 2% once may have met the machine's load (six
    // builds share two cores); three tries, each reported.
    let mut tries = Vec::new();
    for _ in 0..3 {
        let (a, a_bytes) = probe(&lab, &["-t", "auto"]);
        let got = estimate_bps(&a);
        let err = got / want - 1.0;
        let reason = adaptive(&a)["stop_reason"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        let converged = adaptive(&a)["converged"].as_bool() == Some(true);
        let elapsed = adaptive(&a)["elapsed_seconds"].as_f64().unwrap_or(0.0);
        tries.push(format!(
            "estimate {:.3} Mbit/s against {:.3} ({:+.2}%), {reason}, {elapsed:.2} s, tbf passed {:.0} bytes",
            got / 1e6,
            want / 1e6,
            err * 100.0,
            a_bytes
        ));
        eprintln!("tbf {mbit} Mbit/s adaptive: {}", tries.last().unwrap());
        if converged && err.abs() <= 0.02 {
            let (f, f_bytes) = probe(&lab, &["-t", "5", "-O", "1"]);
            let fixed_err = f["throughput_bits_per_second"].as_f64().unwrap() / want - 1.0;
            let ratio = f_bytes / a_bytes;
            eprintln!(
                "tbf {mbit} Mbit/s fixed 1+5 s: {:+.2}%, tbf passed {f_bytes:.0} bytes: {ratio:.1}x the adaptive probe's",
                fixed_err * 100.0
            );
            assert!(
                ratio >= 5.0,
                "the adaptive probe crossed tbf with {a_bytes:.0} bytes, the fixed one {f_bytes:.0}: only {ratio:.1}x"
            );
            return;
        }
    }
    panic!(
        "tbf {mbit} Mbit/s: no adaptive probe converged within 2% of the truth:\n  {}",
        tries.join("\n  ")
    );
}

/// At 20 Mbit/s the count moves in ~12 KB steps (tbf's timer): read at
/// arbitrary moments, the 100 ms rates swung by 2-5% and the rule took
/// 1.6 to 5 s (1.3 to 4x fewer bytes). Read just after each step they are
/// within 0.2%, and it converges in 0.8 s (docs/ADAPTIVE.md).
#[test]
fn adaptive_tcp_at_20mbit_is_within_2_percent_with_5x_fewer_bytes() {
    if !require_root() {
        return;
    }
    accuracy_and_bytes(20);
}

#[test]
fn adaptive_tcp_at_200mbit_is_within_2_percent_with_5x_fewer_bytes() {
    if !require_root() {
        return;
    }
    accuracy_and_bytes(200);
}

/// tbf drops from 200 to 50 Mbit/s a second into a probe held to at
/// least 2.5 s: the probe must say it did not converge, or report the
/// rate at the end, never one in between as precise.
#[test]
fn a_rate_change_mid_probe_is_not_converged_or_the_end_rate() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("adstep").unwrap();
    lab.shape(200).unwrap();
    let _responder = Responder::start(&lab);
    let mut child = probe_args(
        &lab,
        &["-t", "auto", "--min-duration", "2.5", "--max-duration", "5"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    thread::sleep(Duration::from_secs(1));
    lab.shape(50).unwrap();
    let status = wait_bounded(&mut child, PROBE_TIMEOUT).unwrap();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert!(
        status.is_some_and(|s| s.success()),
        "probe failed: {stdout}"
    );
    let v = json_of(&stdout);
    let a = adaptive(&v);
    let got = estimate_bps(&v);
    let end = truth(50.0);
    let err = got / end - 1.0;
    eprintln!(
        "rate change 200 -> 50 Mbit/s: {} (converged {}), estimate {:.3} Mbit/s ({:+.2}% of the end rate), {:.2} s",
        a["stop_reason"], a["converged"], got / 1e6, err * 100.0, a["elapsed_seconds"]
    );
    if a["converged"].as_bool() == Some(true) {
        assert!(
            err.abs() <= 0.03,
            "converged on {:.3} Mbit/s, not the end rate {:.3}: {a:#}",
            got / 1e6,
            end / 1e6
        );
    } else {
        assert_ne!(a["stop_reason"], "converged", "{a:#}");
    }
}

/// Payload the tbf at `mbit` lets through for UDP datagrams of `length`
/// bytes: each frame adds UDP, IP and Ethernet headers (42 bytes).
fn udp_truth(mbit: f64, length: f64) -> f64 {
    mbit * 1e6 * length / (length + 42.0)
}

/// One adaptive UDP probe's account, for the lab's messages.
struct UdpRun {
    estimate: f64,
    converged: bool,
    reason: String,
    receiver: Option<f64>,
    elapsed: f64,
}

/// The datagrams' payload: the MSS, so that each fills one frame.
const UDP_LENGTH: f64 = MSS;

fn adaptive_udp(lab: &Lab, bitrate: &str) -> UdpRun {
    let length = UDP_LENGTH.to_string();
    let (v, _) = probe(lab, &["-u", "-l", &length, "-b", bitrate, "-t", "auto"]);
    let a = adaptive(&v);
    UdpRun {
        estimate: estimate_bps(&v),
        converged: a["converged"].as_bool() == Some(true),
        reason: a["stop_reason"].as_str().unwrap_or("?").to_string(),
        receiver: a["receiver_bits_per_second"].as_f64(),
        elapsed: a["elapsed_seconds"].as_f64().unwrap_or(0.0),
    }
}

/// UDP paced at 300 Mbit/s into a 200 Mbit/s tbf: the sender's rate is
/// steady, what arrives is tbf's. Before the receiver's count was judged
/// the probe said converged at +55% of what arrived; now it must be
/// within 2% of the received truth, or say it did not converge.
#[test]
fn adaptive_udp_over_the_bottleneck_is_the_received_rate_or_not_converged() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("adudpover").unwrap();
    lab.shape(200).unwrap();
    let _responder = Responder::start(&lab);
    let run = adaptive_udp(&lab, "300m");
    let want = udp_truth(200.0, UDP_LENGTH);
    let err = run.estimate / want - 1.0;
    eprintln!(
        "udp 300m over 200 Mbit/s: {} (converged {}), estimate {:.3} Mbit/s against {:.3} received ({:+.2}%), receiver's figure {:?}, {:.2} s",
        run.reason,
        run.converged,
        run.estimate / 1e6,
        want / 1e6,
        err * 100.0,
        run.receiver.map(|r| r / 1e6),
        run.elapsed
    );
    let got = run
        .receiver
        .expect("the receiver's figure over the span is reported for UDP the prober sends");
    assert!(
        (got / want - 1.0).abs() <= 0.02,
        "the receiver's figure {:.3} Mbit/s is not tbf's {:.3}",
        got / 1e6,
        want / 1e6
    );
    if run.converged {
        assert!(
            err.abs() <= 0.02,
            "converged at {:.3} Mbit/s, {:+.2}% of the {:.3} Mbit/s that arrived",
            run.estimate / 1e6,
            err * 100.0,
            want / 1e6
        );
    } else {
        assert_ne!(run.reason, "converged");
    }
}

/// UDP paced at 100 Mbit/s under a 200 Mbit/s tbf: everything arrives,
/// and the probe converges within 2% of the paced rate (three tries, as
/// the machine's load may hold one back).
#[test]
fn adaptive_udp_under_the_bottleneck_converges_within_2_percent() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("adudpunder").unwrap();
    lab.shape(200).unwrap();
    let _responder = Responder::start(&lab);
    let want = 100e6;
    let mut tries = Vec::new();
    for _ in 0..3 {
        let run = adaptive_udp(&lab, "100m");
        let err = run.estimate / want - 1.0;
        tries.push(format!(
            "{} (converged {}), estimate {:.3} Mbit/s ({:+.2}%), receiver's figure {:?}, {:.2} s",
            run.reason,
            run.converged,
            run.estimate / 1e6,
            err * 100.0,
            run.receiver.map(|r| r / 1e6),
            run.elapsed
        ));
        eprintln!("udp 100m under 200 Mbit/s: {}", tries.last().unwrap());
        if run.converged && err.abs() <= 0.02 {
            return;
        }
    }
    panic!(
        "udp 100m under 200 Mbit/s: no probe converged within 2%:\n  {}",
        tries.join("\n  ")
    );
}

/// Issue 27's one case left: TCP through tbf at 1000 Mbit/s with 0.5% nft
/// loss. Cubic is held to about a third of the rate and its 100 ms rates
/// swing by about 30%: no probe's figure is precise to 1% within 5 s, and
/// the adaptive probe ran its whole maximum (190-269 MB by tbf's count)
/// to say so. It must now stop early, `out_of_reach`, not converged, with
/// well under the fixed probe's bytes; and on the same lab at 200 Mbit/s
/// without loss the rule must not fire: the probe still converges.
#[test]
fn adaptive_tcp_at_1000mbit_with_loss_stops_out_of_reach_and_200mbit_still_converges() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("adreach").unwrap();
    lab.shape(1000).unwrap();
    lab.drop_percent(0.5).unwrap();
    let _responder = Responder::start(&lab);
    // The rule stops a probe whose interval could not come within three
    // times the precision by the maximum. A run whose swings happen to be
    // milder may end there within it (CI saw ±2.93% at 5 s): then running
    // on was right. Up to three runs; each must be one or the other, and
    // one must stop early.
    let mut stopped_early = false;
    for _ in 0..3 {
        let (v, tbf_bytes) = probe(&lab, &["-t", "auto"]);
        let a = adaptive(&v);
        let got = estimate_bps(&v);
        let elapsed = a["elapsed_seconds"].as_f64().unwrap_or(0.0);
        let rel = a["estimate"]["half_width_bits_per_second"]
            .as_f64()
            .unwrap_or(0.0)
            / got;
        let best = a["best_half_width_at_max_bits_per_second"].as_f64();
        eprintln!(
            "tbf 1000 Mbit/s, 0.5% loss: {} (converged {}), estimate {:.1} Mbit/s ±{:.2}%, best at the maximum {:?}, {elapsed:.2} s, tbf passed {:.1} MB",
            a["stop_reason"],
            a["converged"],
            got / 1e6,
            rel * 100.0,
            best.map(|b| format!("±{:.2}%", b / got * 100.0)),
            tbf_bytes / 1e6
        );
        assert_eq!(a["converged"], false, "{a:#}");
        if a["stop_reason"] == "max_duration" {
            assert!(rel <= 0.03, "ran to the maximum out of reach: {a:#}");
            continue;
        }
        assert_eq!(a["stop_reason"], "out_of_reach", "{a:#}");
        assert!(
            best.is_some_and(|b| b > 0.03 * got),
            "the best at the maximum is not reported out of reach: {a:#}"
        );
        // Judged from 1.25 s on: stopped well before the 5 s maximum, with
        // well under the 190 MB the full maximum moved at the least.
        assert!(elapsed < 4.0, "stopped at {elapsed} s: {a:#}");
        assert!(tbf_bytes < 150e6, "tbf passed {tbf_bytes} bytes");
        stopped_early = true;
        break;
    }
    assert!(stopped_early, "no run of three stopped out of reach");

    // The same lab without loss at 200 Mbit/s: converges as before.
    lab.nodrop().unwrap();
    lab.shape(200).unwrap();
    let want = truth(200.0);
    let mut tries = Vec::new();
    for _ in 0..3 {
        let (v, _) = probe(&lab, &["-t", "auto"]);
        let a = adaptive(&v);
        let err = estimate_bps(&v) / want - 1.0;
        tries.push(format!(
            "{} (converged {}), {:+.2}%, {:.2} s",
            a["stop_reason"],
            a["converged"],
            err * 100.0,
            a["elapsed_seconds"]
        ));
        eprintln!("tbf 200 Mbit/s: {}", tries.last().unwrap());
        assert_ne!(a["stop_reason"], "out_of_reach", "{a:#}");
        if a["converged"].as_bool() == Some(true) && err.abs() <= 0.02 {
            return;
        }
    }
    panic!(
        "tbf 200 Mbit/s: no adaptive probe converged within 2%:\n  {}",
        tries.join("\n  ")
    );
}
