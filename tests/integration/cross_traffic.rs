//! Cross traffic (issue 11, point 4) in the lab: a probe from a to a
//! responder in b reports what its interface moved beyond its own bytes,
//! on both ends. Alone on the path that is (almost) nothing; with iperf3
//! sending paced UDP from a to b beside it, it is iperf3's bytes. The same
//! holds for the request/response kinds (issue 21), whose own traffic is
//! mostly headers and ACKs rather than payload.

use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::lab::{require_root, run_bounded, wait_bounded, Lab};

const PORT: u16 = 5301;
const IPERF_PORT: u16 = 5201;
const SECONDS: u64 = 3;
/// iperf3's UDP rate beside the probe, payload bits per second.
const CROSS_BPS: u64 = 10_000_000;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = wait_bounded(&mut self.0, Duration::from_secs(5));
    }
}

fn spawn(mut cmd: std::process::Command) -> Killed {
    Killed(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning"),
    )
}

fn wait_listening(lab: &Lab, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !lab.listening("b", port).unwrap() {
        assert!(Instant::now() < deadline, "nothing listens on b:{port}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// `pathprobe probe -J` from a, with `extra` arguments; the JSON document.
fn probe_with(lab: &Lab, extra: &[&str]) -> Value {
    let mut cmd = lab.exec_a(env!("CARGO_BIN_EXE_pathprobe"));
    cmd.args(["probe", "-J", "-t", &SECONDS.to_string()])
        .args(extra)
        .arg(lab.addr_b().to_string());
    let out = run_bounded(&mut cmd, Duration::from_secs(SECONDS + 20)).unwrap();
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

/// `pathprobe probe -J` from a: a TCP throughput test.
fn probe(lab: &Lab) -> Value {
    probe_with(lab, &[])
}

fn other(v: &Value, side: &str, way: &str) -> u64 {
    v[side]["cross_traffic"][way]
        .as_u64()
        .unwrap_or_else(|| panic!("no {side}.cross_traffic.{way} in {v:#}"))
}

/// iperf3 sending paced UDP from a to b for `seconds`.
fn filler(lab: &Lab, seconds: u64) -> Killed {
    let mut client = lab.exec_a("iperf3");
    client.args([
        "-c",
        &lab.addr_b().to_string(),
        "-p",
        &IPERF_PORT.to_string(),
        "-u",
        "-b",
        &CROSS_BPS.to_string(),
        "-t",
        &seconds.to_string(),
    ]);
    spawn(client)
}

#[test]
fn cross_traffic_beside_a_probe_is_told_apart_from_its_own() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("cross").unwrap();
    lab.shape(100).unwrap();
    let mut responder = lab.exec_b(env!("CARGO_BIN_EXE_pathprobe"));
    responder.args(["respond", "--port", &PORT.to_string()]);
    let _responder = spawn(responder);
    let mut iperf = lab.exec_b("iperf3");
    iperf.args(["-s", "-p", &IPERF_PORT.to_string()]);
    let _iperf_server = spawn(iperf);
    wait_listening(&lab, PORT);
    wait_listening(&lab, IPERF_PORT);

    // Alone: the probe's own bytes are all the interface moved.
    let quiet = probe(&lab);
    let bytes = quiet["bytes"].as_u64().unwrap();
    assert!(bytes > 10_000_000, "{quiet:#}");
    for side in ["local", "remote"] {
        for way in ["other_received", "other_sent"] {
            let o = other(&quiet, side, way);
            // ARP, the control connection: below 1% of the test.
            assert!(o < bytes / 100, "{side} {way}: {o} of {bytes}\n{quiet:#}");
        }
    }

    // iperf3 sends paced UDP from a to b throughout the probe.
    let _client = filler(&lab, SECONDS + 4);
    thread::sleep(Duration::from_millis(1500));
    let busy = probe(&lab);
    // iperf3's payload over the probe's window, with its headers (UDP,
    // IP, Ethernet on 1448-byte datagrams: +2.9%) less the allowance for
    // them, within 10%.
    let window = busy["duration_seconds"].as_f64().unwrap();
    let expected = CROSS_BPS as f64 / 8.0 * window;
    for (side, way) in [("local", "other_sent"), ("remote", "other_received")] {
        let o = other(&busy, side, way) as f64;
        assert!(
            (o / expected - 1.0).abs() < 0.10,
            "{side} {way}: {o} bytes, expected about {expected:.0}\n{busy:#}"
        );
    }
    // Nothing came the other way but the probe's own ACKs.
    let back = other(&busy, "local", "other_received");
    assert!(back < bytes / 100, "local other_received: {back}\n{busy:#}");
    eprintln!(
        "cross traffic: quiet {:?}, with {} Mbit/s of iperf3 {:?} (expected {expected:.0})",
        quiet["local"]["cross_traffic"],
        CROSS_BPS / 1_000_000,
        busy["local"]["cross_traffic"]
    );
}

/// The interface's bytes over the window, one way (the probe's own and
/// anyone else's).
fn moved(v: &Value, side: &str, way: &str) -> u64 {
    v[side]["cross_traffic"][way]
        .as_u64()
        .unwrap_or_else(|| panic!("no {side}.cross_traffic.{way} in {v:#}"))
}

/// Issue 21: a request/response probe's own packets are mostly headers and
/// ACKs (tcp_rr: a small segment each way per transaction; udp_rr: a small
/// datagram each way; tcp_crr: a whole connection per transaction). Alone
/// on an idle veth, what is left beyond them is under 1% of what the
/// interface moved, on both ends and both ways; with iperf3's UDP beside
/// the probe, iperf3's bytes are still reported.
#[test]
fn rr_kinds_own_packets_are_not_cross_traffic() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("crossrr").unwrap();
    let mut responder = lab.exec_b(env!("CARGO_BIN_EXE_pathprobe"));
    responder.args(["respond", "--port", &PORT.to_string()]);
    let _responder = spawn(responder);
    let mut iperf = lab.exec_b("iperf3");
    iperf.args(["-s", "-p", &IPERF_PORT.to_string()]);
    let _iperf_server = spawn(iperf);
    wait_listening(&lab, PORT);
    wait_listening(&lab, IPERF_PORT);

    // udp_rr's default (64 bytes every 10 ms) moves about 32 KB each way
    // in 3 s, where the responder's results frame on the control
    // connection (about 1 KB, which reaches the prober before it reads its
    // counters) alone is 3%: a round trip every millisecond of 256 bytes
    // makes 0.9 MB each way.
    let kinds: [(&str, &[&str]); 3] = [
        ("tcp_rr", &[]),
        ("udp_rr", &["--interval", "1ms", "-l", "256"]),
        ("tcp_crr", &[]),
    ];
    for (kind, shape) in kinds {
        let args = [&["--mode", kind][..], shape].concat();
        let quiet = probe_with(&lab, &args);
        // udp_rr's figures are under their own key.
        let transactions = quiet["rr"]["transactions"]
            .as_u64()
            .or(quiet["udp_rr"]["received"].as_u64())
            .unwrap_or(0);
        assert!(transactions > 100, "{kind}: {quiet:#}");
        for side in ["local", "remote"] {
            for (other_way, way) in [("other_received", "received"), ("other_sent", "sent")] {
                let o = other(&quiet, side, other_way);
                let all = moved(&quiet, side, way);
                eprintln!(
                    "{kind} quiet {side} {other_way}: {o} of {all} bytes the interface moved"
                );
                assert!(all > 0, "{kind} {side} {way}: nothing moved\n{quiet:#}");
                assert!(
                    o * 100 < all,
                    "{kind} {side} {other_way}: {o} of {all}\n{quiet:#}"
                );
            }
        }

        // iperf3's UDP from a to b beside the probe: the prober's interface
        // sent it, the responder's received it.
        let _client = filler(&lab, SECONDS + 4);
        thread::sleep(Duration::from_millis(1500));
        let busy = probe_with(&lab, &args);
        let window = busy["duration_seconds"].as_f64().unwrap();
        let expected = CROSS_BPS as f64 / 8.0 * window;
        for (side, way) in [("local", "other_sent"), ("remote", "other_received")] {
            let o = other(&busy, side, way) as f64;
            eprintln!("{kind} busy {side} {way}: {o} bytes, expected about {expected:.0}");
            assert!(
                (o / expected - 1.0).abs() < 0.10,
                "{kind} {side} {way}: {o} bytes, expected about {expected:.0}\n{busy:#}"
            );
        }
        drop(_client);
    }
}
