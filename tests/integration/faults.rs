//! Fault injection in the network-namespace lab: a peer killed mid-probe, a
//! blackholed path, a restarted responder, a slow client, garbage frames.
//! Each ends in a counted, labelled failure, the service keeps serving
//! /metrics, and the next probe succeeds once the fault is gone.
//!
//! `a` runs `pathprobe serve` probing `b`; `b` runs `pathprobe serve` as the
//! responder (so its counters are on its /metrics). Needs root.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::common::lab::{in_netns, require_root, Lab};
use crate::common::metrics::sample;
use crate::common::serve::Serve;

/// The responder side: no targets of its own.
const RESPONDER: &str = "responder: {listen: \"0.0.0.0:5301\", idle_timeout: 2s}\nmodules: {}\n";

/// The prober side: a short TCP probe of b every few seconds.
fn prober(b: std::net::Ipv4Addr) -> String {
    format!(
        "responder: {{enabled: false}}\nscheduler: {{default_interval: 4s, jitter: 0}}\n\
         modules:\n  tcp: {{kind: tcp, duration: 2s, timeout: 8s, connect_timeout: 2s}}\n\
         targets:\n  - {{name: b, address: \"{b}:5301\", modules: [tcp]}}\n"
    )
}

fn success(body: &str) -> Option<f64> {
    sample(body, "pathprobe_probe_success", &["target=\"b\""])
}

fn failed_with(body: &str, reason: &str) -> bool {
    success(body) == Some(0.0)
        && sample(
            body,
            "pathprobe_probe_failure_info",
            &["target=\"b\"", &format!("reason=\"{reason}\"")],
        ) == Some(1.0)
}

fn probes(body: &str, result: &str) -> f64 {
    sample(
        body,
        "pathprobe_probes_total",
        &["target=\"b\"", &format!("result=\"{result}\"")],
    )
    .unwrap_or(0.0)
}

/// Waits until b's responder is in the middle of a test.
fn wait_mid_test(b: &Serve) {
    b.wait_for(Duration::from_secs(15), "a test running on b", |m| {
        sample(m, "pathprobe_responder_active_tests", &[]) == Some(1.0)
    });
}

#[test]
fn peer_killed_mid_probe_then_back() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("peer_killed").unwrap();
    let mut b = Serve::in_lab(&lab, "b", RESPONDER);
    let a = Serve::in_lab(&lab, "a", &prober(lab.addr_b()));
    a.wait_for(Duration::from_secs(20), "first good probe", |m| {
        success(m) == Some(1.0)
    });

    wait_mid_test(&b);
    b.kill();
    // The responder vanished mid-test: its side of the control connection
    // closed, so the probe ends as aborted, not as a hang.
    let m = a.wait_for(Duration::from_secs(15), "probe aborted", |m| {
        failed_with(m, "aborted")
    });
    assert!(probes(&m, "aborted") >= 1.0, "{m}");
    assert_eq!(
        sample(
            &m,
            "pathprobe_throughput_bytes_per_second",
            &["target=\"b\""]
        ),
        Some(0.0)
    );

    let _b = Serve::in_lab(&lab, "b", RESPONDER);
    a.wait_for(Duration::from_secs(20), "recovery", |m| {
        success(m) == Some(1.0)
    });
}

#[test]
fn blackholed_path_times_out_then_recovers() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("blackhole").unwrap();
    let b = Serve::in_lab(&lab, "b", RESPONDER);
    let a = Serve::in_lab(&lab, "a", &prober(lab.addr_b()));
    a.wait_for(Duration::from_secs(20), "first good probe", |m| {
        success(m) == Some(1.0)
    });

    wait_mid_test(&b);
    let cut = Instant::now();
    lab.drop_percent(100.0).unwrap();
    let m = a.wait_for(Duration::from_secs(20), "probe timed out", |m| {
        failed_with(m, "timeout")
    });
    // Within the module's 8 s deadline and a scrape or two.
    assert!(
        cut.elapsed() < Duration::from_secs(12),
        "took {:?}",
        cut.elapsed()
    );
    assert!(probes(&m, "timeout") >= 1.0);

    lab.nodrop().unwrap();
    a.wait_for(Duration::from_secs(30), "recovery", |m| {
        success(m) == Some(1.0)
    });
    // The responder dropped the dead test and is free again.
    b.wait_for(Duration::from_secs(20), "responder idle", |m| {
        sample(m, "pathprobe_responder_active_tests", &[]) == Some(0.0)
    });
}

#[test]
fn restarted_responder_is_refused_meanwhile_then_probed_again() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("restart").unwrap();
    let mut b = Serve::in_lab(&lab, "b", RESPONDER);
    let a = Serve::in_lab(&lab, "a", &prober(lab.addr_b()));
    a.wait_for(Duration::from_secs(20), "first good probe", |m| {
        success(m) == Some(1.0)
    });
    // Between tests: wait until b is idle, then take it down.
    b.wait_for(Duration::from_secs(15), "b idle", |m| {
        sample(m, "pathprobe_responder_active_tests", &[]) == Some(0.0)
    });
    b.kill();
    let m = a.wait_for(Duration::from_secs(15), "probe refused", |m| {
        failed_with(m, "refused")
    });
    assert!(probes(&m, "refused") >= 1.0);
    let _b = Serve::in_lab(&lab, "b", RESPONDER);
    a.wait_for(Duration::from_secs(20), "recovery", |m| {
        success(m) == Some(1.0)
    });
}

#[test]
fn slow_and_garbage_clients_are_cut_off_and_counted() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("junk").unwrap();
    let b = Serve::in_lab(&lab, "b", RESPONDER);
    let target: SocketAddr = (lab.addr_b(), 5301).into();
    let ns_a = format!("{}-a", lab.name());

    // A slowloris: a valid frame header, then one byte a second. The whole
    // message has one deadline (idle_timeout, 2 s here), so it is cut off.
    let slow = std::thread::spawn({
        let ns = ns_a.clone();
        move || {
            in_netns(&ns, move || {
                let mut s = TcpStream::connect_timeout(&target, Duration::from_secs(3)).unwrap();
                s.write_all(&[0, 0, 0, 40]).unwrap();
                let start = Instant::now();
                for _ in 0..30 {
                    if s.write_all(b"{").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                    let mut buf = [0u8; 16];
                    s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
                    if let Ok(0) = s.read(&mut buf) {
                        break;
                    }
                }
                start.elapsed()
            })
        }
    });
    // Meanwhile a real probe from a is served.
    let probe = lab
        .exec_a(env!("CARGO_BIN_EXE_pathprobe"))
        .args(["probe", "-J", "-t", "1", &target.to_string()])
        .output()
        .unwrap();
    assert!(
        probe.status.success(),
        "{}",
        String::from_utf8_lossy(&probe.stdout)
    );
    let held = slow.join().unwrap();
    assert!(
        held < Duration::from_secs(5),
        "slow client held a connection for {held:?}"
    );

    // Garbage: an HTTP request, an oversized frame header, bad JSON.
    for junk in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &[0x7f, 0xff, 0xff, 0xff][..],
        &[0, 0, 0, 3, b'{', b'{', b'{'][..],
    ] {
        let junk = junk.to_vec();
        in_netns(&ns_a, move || {
            let mut s = TcpStream::connect_timeout(&target, Duration::from_secs(3)).unwrap();
            s.write_all(&junk).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 64];
            assert!(
                matches!(s.read(&mut buf), Ok(0) | Err(_)),
                "responder answered junk"
            );
        });
    }
    let m = b.wait_for(Duration::from_secs(10), "junk counted", |m| {
        sample(
            m,
            "pathprobe_responder_rejections_total",
            &["reason=\"protocol_error\""],
        ) == Some(3.0)
            && sample(
                m,
                "pathprobe_responder_rejections_total",
                &["reason=\"timeout\""],
            ) == Some(1.0)
    });
    assert_eq!(
        sample(
            &m,
            "pathprobe_responder_tests_total",
            &["result=\"success\""]
        ),
        Some(1.0)
    );
    // And it still serves.
    let again = lab
        .exec_a(env!("CARGO_BIN_EXE_pathprobe"))
        .args(["probe", "-t", "0.5", &target.to_string()])
        .output()
        .unwrap();
    assert!(again.status.success());
}

#[test]
fn a_connection_flood_leaves_memory_flat_and_probes_served() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("flood").unwrap();
    let b = Serve::in_lab(&lab, "b", RESPONDER);
    let target: SocketAddr = (lab.addr_b(), 5301).into();
    let ns_a = format!("{}-a", lab.name());
    let before = b.rss_kib();
    let mut peak = before;
    // 10,000 connections from 8 threads, each keeping up to 100 open with a
    // half-sent frame before dropping them.
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let ns = ns_a.clone();
            std::thread::spawn(move || {
                in_netns(&ns, move || {
                    let mut open = Vec::new();
                    let mut made = 0;
                    for _ in 0..1250 {
                        if let Ok(mut s) =
                            TcpStream::connect_timeout(&target, Duration::from_secs(2))
                        {
                            let _ = s.write_all(&[0, 0, 0x3e, 0x80, b'{']);
                            open.push(s);
                            made += 1;
                        }
                        if open.len() >= 100 {
                            open.clear();
                        }
                    }
                    made
                })
            })
        })
        .collect();
    let start = Instant::now();
    while workers.iter().any(|w| !w.is_finished()) {
        peak = peak.max(b.rss_kib());
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "flood did not finish"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let made: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(made >= 9_000, "only {made} connections were made");
    peak = peak.max(b.rss_kib());
    eprintln!("flood: {made} connections; responder RSS {before} KiB before, {peak} KiB peak");
    assert!(
        peak < before + 24 * 1024,
        "RSS grew from {before} KiB to {peak} KiB"
    );
    // Still serving metrics and probes.
    let probe = lab
        .exec_a(env!("CARGO_BIN_EXE_pathprobe"))
        .args(["probe", "-J", "-t", "1", &target.to_string()])
        .output()
        .unwrap();
    assert!(
        probe.status.success(),
        "{}",
        String::from_utf8_lossy(&probe.stdout)
    );
    b.wait_for(Duration::from_secs(10), "probe counted", |m| {
        sample(
            m,
            "pathprobe_responder_tests_total",
            &["result=\"success\""],
        ) == Some(1.0)
    });
}
