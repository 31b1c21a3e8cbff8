//! Access control in the network-namespace lab: missing and wrong secrets,
//! a client outside the allow list, and a spoofed UDP reverse request.
//! Each asserts the reason label on the prober, the CLI's exit code and
//! message, the responder's counters, and that the service still serves
//! /metrics (and real probes) afterwards.
//!
//! `b` runs `pathprobe serve` as the responder; `a` probes it, from
//! `pathprobe serve` and from the CLI; `r`, the router between them, plays
//! the victim of the spoofed request. Needs root.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::lab::in_netns;
use crate::common::lab::{require_root, Lab};
use crate::common::metrics::sample;
use crate::common::serve::Serve;
use pathprobe::probe::{Direction, Kind};
use pathprobe::protocol::message::Hello;
use pathprobe::protocol::{decode_frame, encode_frame, Message, TestRequest};

fn write_secret(dir: &tempfile::TempDir, name: &str, secret: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_str().unwrap().to_string()
}

fn rejections(body: &str, reason: &str) -> f64 {
    sample(
        body,
        "pathprobe_responder_rejections_total",
        &[&format!("reason=\"{reason}\"")],
    )
    .unwrap_or(0.0)
}

fn tests_total(body: &str, result: &str) -> f64 {
    sample(
        body,
        "pathprobe_responder_tests_total",
        &[&format!("result=\"{result}\"")],
    )
    .unwrap_or(0.0)
}

fn failed_with(body: &str, module: &str, reason: &str) -> bool {
    let module = format!("module=\"{module}\"");
    sample(body, "pathprobe_probe_success", &[&module]) == Some(0.0)
        && sample(
            body,
            "pathprobe_probe_failure_info",
            &[&module, &format!("reason=\"{reason}\"")],
        ) == Some(1.0)
        && sample(
            body,
            "pathprobe_probes_total",
            &[&module, &format!("result=\"{reason}\"")],
        )
        .is_some_and(|n| n >= 1.0)
}

/// `pathprobe probe ARGS` run in end `end`, bounded in time.
fn cli(lab: &Lab, end: &str, args: &[&str]) -> Output {
    let mut cmd = lab.exec(end, env!("CARGO_BIN_EXE_pathprobe"));
    cmd.arg("probe").args(args);
    let out = crate::common::lab::run_bounded(&mut cmd, Duration::from_secs(30)).unwrap();
    Output {
        status: out.status,
        stdout: out.stdout.into_bytes(),
        stderr: out.stderr.into_bytes(),
    }
}

#[test]
fn missing_and_wrong_secrets_are_refused_by_reason() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let good = write_secret(&dir, "good", "the fleet's shared secret");
    let wrong = write_secret(&dir, "wrong", "somebody else's secret");
    let lab = Lab::up("authsecret").unwrap();
    let b = Serve::in_lab(&lab,
        "b",
        &format!(
            "responder: {{listen: \"0.0.0.0:5301\", idle_timeout: 2s, secret_file: \"{good}\"}}\nmodules: {{}}\n"
        ),
    );
    let target = format!("{}:5301", lab.addr_b());
    let a = Serve::in_lab(&lab,
        "a",
        &format!(
            "responder: {{enabled: false}}\nscheduler: {{default_interval: 4s, jitter: 0}}\n\
             modules:\n  \
               nosecret: {{kind: tcp, duration: 1s, timeout: 8s, connect_timeout: 2s}}\n  \
               wrong: {{kind: tcp, duration: 1s, timeout: 8s, connect_timeout: 2s, secret_file: \"{wrong}\"}}\n  \
               good: {{kind: tcp, duration: 1s, timeout: 8s, connect_timeout: 2s, secret_file: \"{good}\"}}\n\
             targets:\n  - {{name: b, address: \"{target}\", modules: [nosecret, wrong, good]}}\n"
        ),
    );
    let m = a.wait_for(
        Duration::from_secs(40),
        "each module's outcome on the prober",
        |m| {
            failed_with(m, "nosecret", "auth_required")
                && failed_with(m, "wrong", "auth_failed")
                && sample(m, "pathprobe_probe_success", &["module=\"good\""]) == Some(1.0)
        },
    );
    // A refused probe never ran: no figures pretend it did.
    assert_eq!(
        sample(
            &m,
            "pathprobe_throughput_bytes_per_second",
            &["module=\"nosecret\""]
        ),
        Some(0.0)
    );
    drop(a);

    // With the prober stopped, b's counters move only for the CLI below.
    let before = b.metrics();
    assert!(rejections(&before, "auth_required") >= 1.0, "{before}");
    assert!(rejections(&before, "auth_failed") >= 1.0, "{before}");
    assert!(tests_total(&before, "success") >= 1.0, "{before}");

    let out = cli(&lab, "a", &["-t", "0.5", &target]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(
            "pathprobe: responder refused the test (auth_required): authentication required:"
        ),
        "{err}"
    );
    let out = cli(
        &lab,
        "a",
        &["-J", "-t", "0.5", "--auth.secret-file", &wrong, &target],
    );
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["reason"], "auth_failed");
    assert_eq!(
        v["error"]["message"],
        "responder refused the test (auth_failed): authentication failed: the shared secrets differ"
    );
    let out = cli(
        &lab,
        "a",
        &["-t", "0.5", "--auth.secret-file", &good, &target],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Exactly one more of each, and the responder still serves /metrics.
    let after = b.wait_for(Duration::from_secs(5), "CLI runs counted", |m| {
        tests_total(m, "success") == tests_total(&before, "success") + 1.0
    });
    for reason in ["auth_required", "auth_failed"] {
        assert_eq!(
            rejections(&after, reason),
            rejections(&before, reason) + 1.0,
            "{reason}"
        );
    }
    assert_eq!(rejections(&after, "denied"), 0.0);
}

#[test]
fn a_client_outside_the_allow_list_is_denied() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("allowlist").unwrap();
    let a_ip = lab.addr_a();
    // r reaches b from its b-side address, inside the allow list; a's
    // network is outside it.
    let r_ip = Ipv4Addr::from(u32::from(lab.addr_b()) - 1);
    let b = Serve::in_lab(&lab,
        "b",
        &format!(
            "responder: {{listen: \"0.0.0.0:5301\", idle_timeout: 2s, allow: [\"{r_ip}/32\", 192.0.2.0/24], deny: [198.51.100.0/24]}}\nmodules: {{}}\n"
        ),
    );
    let target = format!("{}:5301", lab.addr_b());
    let a = Serve::in_lab(
        &lab,
        "a",
        &format!(
            "responder: {{enabled: false}}\nscheduler: {{default_interval: 4s, jitter: 0}}\n\
             modules:\n  tcp: {{kind: tcp, duration: 1s, timeout: 8s, connect_timeout: 2s}}\n\
             targets:\n  - {{name: b, address: \"{target}\", modules: [tcp]}}\n"
        ),
    );
    a.wait_for(Duration::from_secs(20), "probe denied", |m| {
        failed_with(m, "tcp", "denied")
    });
    drop(a);
    let before = b.metrics();
    assert!(rejections(&before, "denied") >= 1.0, "{before}");
    assert_eq!(tests_total(&before, "success"), 0.0);

    let out = cli(&lab, "a", &["-J", "-t", "0.5", &target]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["reason"], "denied");
    assert_eq!(
        v["error"]["message"],
        format!(
            "responder refused the test (denied): this responder does not accept tests from {a_ip}"
        )
    );
    // An allowed client is served, TCP and reverse UDP.
    for args in [&["-t", "0.5"][..], &["-u", "-R", "-t", "0.5"][..]] {
        let mut args = args.to_vec();
        args.push(&target);
        let out = cli(&lab, "r", &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let after = b.wait_for(Duration::from_secs(5), "allowed probes counted", |m| {
        tests_total(m, "success") == 2.0
    });
    assert_eq!(
        rejections(&after, "denied"),
        rejections(&before, "denied") + 1.0
    );
}

/// Reads one control message from a blocking stream.
fn read_msg(s: &mut TcpStream) -> Message {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((msg, _)) = decode_frame(&buf).unwrap() {
            return msg;
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed before a whole message");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn a_spoofed_udp_reverse_request_sends_nothing_to_the_victim() {
    if !require_root() {
        return;
    }
    let lab = Lab::up("spoofudp").unwrap();
    let b = Serve::in_lab(
        &lab,
        "b",
        "responder: {listen: \"0.0.0.0:5301\", idle_timeout: 2s}\nmodules: {}\n",
    );
    let target: SocketAddr = (lab.addr_b(), 5301).into();
    let ns_a = format!("{}-a", lab.name());
    let ns_r = format!("{}-r", lab.name());

    // The attacker on a asks for a reverse UDP test at 50 Mbit/s and learns
    // its token, as any prober does.
    let (mut control, token) = in_netns(&ns_a, move || {
        let mut s = TcpStream::connect_timeout(&target, Duration::from_secs(3)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&encode_frame(&Message::Hello(Hello::new())).unwrap())
            .unwrap();
        assert!(matches!(read_msg(&mut s), Message::Welcome(_)));
        let request = TestRequest {
            kind: Kind::Udp,
            direction: Direction::Receive,
            duration_ms: 3000,
            omit_ms: 0,
            streams: 1,
            bitrate: 50_000_000,
            length: 1400,
            window: None,
            congestion: None,
            tos: None,
            affinity: None,
            interval_ms: None,
            no_offload: false,
            rr: None,
            adaptive: None,
        };
        s.write_all(&encode_frame(&Message::Request(request)).unwrap())
            .unwrap();
        match read_msg(&mut s) {
            Message::Accepted { token, .. } => (s, token),
            other => panic!("expected accepted, got {other:?}"),
        }
    });

    // The flow's hello comes from the victim r, not from the control
    // connection's peer: the responder must send r nothing.
    let victim = in_netns(&ns_r, move || {
        let victim = UdpSocket::bind("0.0.0.0:0").unwrap();
        let hello = pathprobe::protocol::udp::hello_datagram(&token, 0);
        for _ in 0..3 {
            victim.send_to(&hello, target).unwrap();
        }
        victim
    });
    // The attacker plays its part to the end: had the responder taken the
    // flow, it would say Ready, and Start would aim the test at r.
    let verdict = read_msg(&mut control);
    if verdict == Message::Ready {
        control
            .write_all(&encode_frame(&Message::Start).unwrap())
            .unwrap();
    }
    // Past the test's whole length: anything sent would have arrived.
    let until = Instant::now() + Duration::from_secs(4);
    let mut received = 0usize;
    let mut buf = [0u8; 65536];
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        victim
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match victim.recv_from(&mut buf) {
            Ok((n, _)) => received += n,
            Err(_) => break,
        }
    }
    assert_eq!(
        received, 0,
        "the responder sent {received} bytes to the victim"
    );

    // The test got no flow from its prober, so the responder gave up on it.
    match verdict {
        Message::Error { message } => {
            assert!(
                message.starts_with("only 0 of 1 data streams arrived"),
                "{message}"
            )
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let m = b.wait_for(Duration::from_secs(10), "spoofed test failed", |m| {
        tests_total(m, "failure") == 1.0
    });
    assert_eq!(
        sample(&m, "pathprobe_responder_ignored_datagrams_total", &[]),
        Some(3.0)
    );
    assert_eq!(tests_total(&m, "success"), 0.0);
    drop(control);

    // A genuine reverse UDP probe is still served.
    let out = cli(&lab, "a", &["-u", "-R", "-t", "0.5", &target.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    b.wait_for(Duration::from_secs(5), "genuine probe counted", |m| {
        tests_total(m, "success") == 1.0
    });
}
