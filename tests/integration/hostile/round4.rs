//! Hostile peers, round four: a responder's strings. Every string a
//! responder sends (its release, interface, each stream's congestion
//! control, its warnings and notes, the sentence of a refusal) is held to
//! one rule where it enters: printable ASCII of its kind's length. A
//! responder that breaks it has its reply refused as a protocol error, so
//! that none of its ESC, BEL or CR reaches a terminal, a label value, a
//! page or a log line. Each test prints what it saw (`--nocapture`).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::fake::{self, Fake};
use crate::common::serve::Serve;
use crate::common::turn;

/// A screen clear, a window title ended by BEL, and a forged log line
/// after a carriage return: what a responder sent `probe -v` before.
const HOSTILE: &str = "6.1.0\u{1b}[2J\u{1b}]0;owned\u{7}\rlevel=error msg=forged";

/// The bytes that must appear nowhere in what pathprobe writes.
fn control_bytes(s: &str) -> Vec<String> {
    let mut found: Vec<String> = ['\u{1b}', '\u{7}', '\r']
        .iter()
        .filter(|c| s.contains(**c))
        .map(|c| format!("{c:?}"))
        .collect();
    if s.contains("owned") || s.contains("msg=forged") {
        found.push("the forged text".into());
    }
    if s.contains(&"e".repeat(64)) {
        found.push("the long interface name".into());
    }
    found
}

type Lie = fn(Value) -> Value;

/// Each string of the responder's Results, made hostile one at a time.
fn lies() -> Vec<(&'static str, Lie)> {
    vec![
        ("kernel_release with ESC, BEL and CR", |mut v| {
            v["kernel_release"] = json!(HOSTILE);
            v
        }),
        ("a 100,000-byte interface name", |mut v| {
            v["interface"] = json!("e".repeat(100_000));
            v
        }),
        ("interface with a window title", |mut v| {
            v["interface"] = json!("eth0\u{1b}]0;owned\u{7}");
            v
        }),
        ("stream congestion with CR", |mut v| {
            for s in v["streams"].as_array_mut().unwrap() {
                s["congestion"] = json!("bbr\r\u{1b}[2J");
            }
            v
        }),
        ("a warning with ESC", |mut v| {
            v["warnings"] = json!([HOSTILE]);
            v
        }),
        ("a fingerprint value with BEL", |mut v| {
            v["fingerprint"] = json!({"kernel": HOSTILE});
            v
        }),
    ]
}

/// `pathprobe probe -v -t 0.5 ADDR`, bounded: exit code and everything it
/// wrote, stdout then stderr.
fn probe_verbose(addr: &str) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pathprobe"))
        .args(["probe", "-v", "-t", "0.5", addr])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let a = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = so.read_to_end(&mut s);
        s
    });
    let b = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = se.read_to_end(&mut s);
        s
    });
    let t0 = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = a.join().unwrap();
    out.extend(b.join().unwrap());
    (code, String::from_utf8_lossy(&out).into_owned())
}

/// A responder that welcomes the prober, then answers its request with
/// `reply` (a Busy, a Rejected or an Error carrying hostile text).
async fn refusing(reply: Value) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            let reply = reply.clone();
            tokio::spawn(async move {
                let t = Duration::from_secs(5);
                if fake::read_frame(&mut s, t).await.is_err() {
                    return;
                }
                let _ = fake::write_frame(&mut s, &fake::welcome()).await;
                if let Ok(mut request) = fake::read_frame(&mut s, t).await {
                    // An Accepted agrees to exactly what was asked.
                    let mut reply = reply;
                    if reply["request"].is_null() && reply["type"] == "accepted" {
                        request.as_object_mut().unwrap().remove("type");
                        reply["request"] = request;
                    }
                    let _ = fake::write_frame(&mut s, &reply).await;
                }
                let _ = fake::read_frame(&mut s, Duration::from_secs(2)).await;
            });
        }
    });
    (addr, task)
}

/// `probe -v` against a responder whose strings carry ESC, BEL, CR or a
/// 100,000-byte name: before, they reached the terminal (a screen clear,
/// a window title, a forged `level=error` line). Now each reply is
/// refused as a protocol error and the output holds none of it.
#[test]
fn r4_a_responders_control_characters_reach_no_terminal() {
    let _turn = turn::shared();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The honest fake first: the lie is what fails, not the fake.
    let honest = rt.block_on(Fake::honest());
    let (code, out) = probe_verbose(&honest.addr.to_string());
    drop(honest);
    eprintln!("R4 honest: exit {code:?}");
    assert_eq!(code, Some(0), "the honest fake failed:\n{out}");
    assert!(control_bytes(&out).is_empty(), "{out}");

    let mut failures = Vec::new();
    let mut cases: Vec<(String, std::net::SocketAddr, Box<dyn std::any::Any>)> = Vec::new();
    for (what, lie) in lies() {
        let f = rt.block_on(Fake::reporting(lie));
        cases.push((format!("results: {what}"), f.addr, Box::new(f)));
    }
    for (what, reply) in [
        (
            "busy",
            json!({"type": "busy", "retry_after_ms": 1000, "message": HOSTILE}),
        ),
        (
            "rejected",
            json!({"type": "rejected", "reason": "limit", "message": HOSTILE}),
        ),
        ("error", json!({"type": "error", "message": HOSTILE})),
        (
            "accepted with a hostile note",
            json!({"type": "accepted", "token": "t", "request": null, "clamped": [HOSTILE]}),
        ),
    ] {
        let (addr, task) = rt.block_on(refusing(reply));
        cases.push((what.to_string(), addr, Box::new(task)));
    }
    for (what, addr, _keep) in &cases {
        let (code, out) = probe_verbose(&addr.to_string());
        let found = control_bytes(&out);
        let error = out
            .lines()
            .find(|l| l.contains("protocol") || l.contains("error"))
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        eprintln!(
            "R4 {what}: exit {code:?}, {} bytes of output, hostile bytes {found:?}: {error}",
            out.len()
        );
        if !found.is_empty() {
            failures.push(format!("{what}: the output holds {found:?}"));
        }
        if code != Some(1) || !out.contains("protocol") {
            failures.push(format!(
                "{what}: not refused as a protocol error (exit {code:?}): {error}"
            ));
        }
    }
    for (_, _, keep) in cases {
        if let Ok(task) = keep.downcast::<tokio::task::JoinHandle<()>>() {
            task.abort();
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `serve` probing a target whose responder sends ESC, BEL and CR in its
/// release, interface and congestion control: the probes fail as
/// protocol errors, counted, and `/metrics`, `/probe`, the pages, the
/// history and serve's log hold none of those bytes.
#[test]
fn r4_a_responders_control_characters_reach_no_metrics_page_or_log() {
    let _turn = turn::shared();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let liar = rt.block_on(Fake::reporting(|mut v| {
        v["kernel_release"] = json!(HOSTILE);
        v["interface"] = json!("eth0\u{1b}]0;owned\u{7}");
        for s in v["streams"].as_array_mut().unwrap() {
            s["congestion"] = json!("cubic\rlevel=error msg=forged");
        }
        v
    }));
    let serve = Serve::yaml(&format!(
        "responder: {{enabled: false}}\nscheduler: {{default_interval: 2s, jitter: 0}}\n\
         modules:\n  tcp: {{kind: tcp, duration: 500ms, timeout: 6s, connect_timeout: 2s}}\n\
         targets:\n  - {{name: liar, address: \"{}\", modules: [tcp]}}\n",
        liar.addr
    ))
    .start();
    let counted = |m: &str| {
        m.lines().any(|l| {
            l.starts_with("pathprobe_probes_total{")
                && l.contains("result=\"protocol_error\"")
                && l.contains("target=\"liar\"")
                && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) >= Some(2.0)
        })
    };
    let metrics = serve.wait_for(
        Duration::from_secs(40),
        "two probes of the liar counted as protocol errors",
        counted,
    );
    let (_, probe) = serve.get(&format!("/probe?target={}&module=tcp", liar.addr));
    let mut failures = Vec::new();
    let mut pages = vec![
        ("/metrics".to_string(), metrics),
        ("/probe".to_string(), probe.clone()),
    ];
    for path in [
        "/",
        "/path?target=liar&module=tcp",
        "/kernels",
        "/fleet",
        "/api/v1/history",
    ] {
        let (status, body) = serve.get(path);
        eprintln!("R4 serve: GET {path} -> {status}, {} bytes", body.len());
        pages.push((path.to_string(), body));
    }
    pages.push(("serve's log".to_string(), serve.log()));
    for (what, body) in &pages {
        let found = control_bytes(body);
        if !found.is_empty() {
            failures.push(format!("{what} holds {found:?}"));
        }
    }
    let success = probe
        .lines()
        .find(|l| l.starts_with("pathprobe_probe_success"))
        .unwrap_or("none")
        .to_string();
    eprintln!(
        "R4 serve: {}; /probe: {success}; failures {failures:?}",
        pages[0]
            .1
            .lines()
            .find(|l| counted(l))
            .unwrap_or("not counted")
    );
    assert!(success.ends_with(" 0"), "{success}");
    assert!(failures.is_empty(), "{failures:#?}");
}
