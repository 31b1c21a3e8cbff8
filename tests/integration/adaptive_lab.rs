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

/// The one-span matrix: tbf rates in Mbit/s, and nft loss in percent.
const SPAN_MATRIX: [(u32, f64); 5] = [(20, 0.0), (50, 0.0), (200, 0.0), (1000, 0.0), (200, 0.3)];

/// UDP is sent a quarter over the bottleneck: what arrives is tbf's rate
/// (the drop is on r's forwarding, before tbf, which stays full).
fn udp_bitrate_mbit(mbit: u32) -> u32 {
    mbit + mbit / 4
}

/// The figure a probe prints on its direction line (`... = 47.8200 Mbps`).
fn printed_mbps(stdout: &str) -> f64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("send ") || l.starts_with("receive "))
        .unwrap_or_else(|| panic!("no direction line: {stdout}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "Mbps")
        .unwrap_or_else(|| panic!("no Mbps on: {line}"));
    words[at - 1]
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// One value of a metric in a scrape (the first series of `name`).
fn scraped(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// What an adaptive probe's evidence supports, on every output a user
/// reads: through tbf at 20, 50, 200 and 1000 Mbit/s, and at 200 with
/// 0.3% loss, TCP and UDP, both directions, the line `probe -t auto`
/// prints, the `-J` document's `throughput_bits_per_second`, and the
/// series a real `serve` exports for a `duration: auto` module (its
/// `/probe`, scraped) are each within 1% of tbf's truth whenever that
/// output calls the probe converged; otherwise it says not converged.
/// Before, the figure covered the span to the last byte, not the
/// estimate's: what the senders' sockets held and a receiver's last
/// read gathered after the end was decided put it 4% over the truth
/// while the probe said converged. One run of each output per case.
#[test]
fn every_output_of_an_adaptive_probe_is_within_1_percent_of_tbf_or_not_converged() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("adspan").unwrap();
    let _responder = Responder::start(&lab);
    let length = UDP_LENGTH.to_string();
    let mut yaml = String::from(
        "responder: {enabled: false}\nhttp: {probe_restrict_to_targets: false}\nmodules:\n  \
         t: {kind: tcp, duration: auto}\n  \
         tr: {kind: tcp, direction: receive, duration: auto}\n",
    );
    let mut rates: Vec<u32> = SPAN_MATRIX.iter().map(|&(mbit, _)| mbit).collect();
    rates.dedup();
    rates.sort_unstable();
    rates.dedup();
    for mbit in rates {
        let b = udp_bitrate_mbit(mbit);
        yaml.push_str(&format!(
            "  u{mbit}: {{kind: udp, duration: auto, bitrate: {b}M, length: {length}}}\n  \
             u{mbit}r: {{kind: udp, direction: receive, duration: auto, bitrate: {b}M, length: {length}}}\n"
        ));
    }
    yaml.push_str("targets: []\n");
    let serve = crate::common::serve::Serve::in_lab(&lab, "a", &yaml);
    let target = format!("{}:{PORT}", lab.addr_b());
    let (mut lines, mut bad, mut converged, mut runs) = (Vec::new(), Vec::new(), 0, 0);
    for (mbit, loss) in SPAN_MATRIX {
        lab.shape(mbit).unwrap();
        if loss > 0.0 {
            lab.drop_percent(loss).unwrap();
        } else {
            lab.nodrop().unwrap();
        }
        let ubit = format!("{}m", udp_bitrate_mbit(mbit));
        let cases: [(&str, Vec<&str>, String, f64); 4] = [
            // Retransmissions take the loss's share of tbf's bytes.
            (
                "tcp",
                vec![],
                "t".into(),
                truth(f64::from(mbit)) * (1.0 - loss / 100.0),
            ),
            (
                "tcp -R",
                vec!["-R"],
                "tr".into(),
                truth(f64::from(mbit)) * (1.0 - loss / 100.0),
            ),
            (
                "udp",
                vec!["-u", "-l", &length, "-b", &ubit],
                format!("u{mbit}"),
                udp_truth(f64::from(mbit), UDP_LENGTH),
            ),
            (
                "udp -R",
                vec!["-u", "-l", &length, "-b", &ubit, "-R"],
                format!("u{mbit}r"),
                udp_truth(f64::from(mbit), UDP_LENGTH),
            ),
        ];
        for (what, flags, module, want) in cases {
            let case = format!(
                "{mbit} Mbit/s{} {what}",
                if loss > 0.0 {
                    format!(" {loss}% loss")
                } else {
                    String::new()
                }
            );
            let mut args = flags.clone();
            args.extend(["-t", "auto"]);
            // -J: the document's figure and its verdict.
            let (v, _) = probe(&lab, &args);
            let json = v["throughput_bits_per_second"].as_f64().unwrap_or(0.0);
            let json_ok = adaptive(&v)["converged"].as_bool() == Some(true);
            // The printed line, and the adaptive line under it.
            let mut cmd = lab.exec_a(env!("CARGO_BIN_EXE_pathprobe"));
            cmd.args(["probe", "-p", &PORT.to_string()])
                .args(&args)
                .arg(lab.addr_b().to_string());
            let out = run_bounded(&mut cmd, PROBE_TIMEOUT).unwrap();
            assert!(out.status.success(), "{case}: {}{}", out.stdout, out.stderr);
            let printed = printed_mbps(&out.stdout) * 1e6;
            let printed_ok = out.stdout.contains("adaptive: converged:");
            assert!(
                printed_ok || out.stdout.contains("adaptive: NOT converged"),
                "{case}: no adaptive line: {}",
                out.stdout
            );
            // The series serve exports for a duration: auto module.
            let (status, body) = serve.get(&format!("/probe?target={target}&module={module}"));
            assert_eq!(status, 200, "{case}: {body}");
            let exported = scraped(&body, "pathprobe_throughput_bytes_per_second")
                .unwrap_or_else(|| panic!("{case}: no throughput series: {body}"))
                * 8.0;
            let exported_ok = scraped(&body, "pathprobe_adaptive_converged")
                .unwrap_or_else(|| panic!("{case}: no converged series: {body}"))
                == 1.0;
            for (output, got, ok) in [
                ("printed", printed, printed_ok),
                ("json", json, json_ok),
                ("exported", exported, exported_ok),
            ] {
                let err = got / want - 1.0;
                let line = format!(
                    "{case} {output}: {:.3} Mbit/s against {:.3} ({:+.2}%), {}",
                    got / 1e6,
                    want / 1e6,
                    err * 100.0,
                    if ok { "converged" } else { "NOT converged" }
                );
                eprintln!("{line}");
                runs += 1;
                if ok {
                    converged += 1;
                    if err.abs() > 0.01 {
                        bad.push(line.clone());
                    }
                }
                lines.push(line);
            }
        }
    }
    assert!(
        bad.is_empty(),
        "outputs called converged more than 1% off tbf's truth:\n  {}\nall:\n  {}",
        bad.join("\n  "),
        lines.join("\n  ")
    );
    // A matrix in which nothing converges proves nothing. On the loaded
    // 2-vCPU machine (load 16) 40% of the outputs converged; a quarter is
    // asked.
    assert!(
        converged * 4 >= runs,
        "only {converged} of {runs} outputs converged:\n  {}",
        lines.join("\n  ")
    );
}
