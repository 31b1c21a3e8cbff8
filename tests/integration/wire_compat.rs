//! Mixed wire versions: a prober and a responder of adjacent releases must
//! still complete a test during a rolling upgrade (issue 22).
//!
//! The previous release's side of the conversation is not invented here:
//! `tests/fixtures/wire/v2/` holds control frames recorded from the
//! version 2 code (commit 529e52e) by `capture_transcripts` below, run
//! through a recording proxy between a real prober and a real responder.
//! The tests hold this release's version 2 compatibility mode to those
//! frames, and run that mode against this release's own side.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use pathprobe::probe::{self, ProbeError, ProbeSpec, Target};
use pathprobe::protocol::adaptive::StopReason;
use pathprobe::responder::ResponderConfig;

use crate::common::responder;

/// The recorded control frames: who sent each, and the message.
type Log = Arc<Mutex<Vec<Value>>>;
/// Rewrites a frame in passing: (sender, message) to the message sent on.
type Rewrite = Arc<dyn Fn(&str, Value) -> Value + Send + Sync>;

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wire")
}

async fn read_raw_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut h = [0u8; 4];
    s.read_exact(&mut h).await.ok()?;
    let len = u32::from_be_bytes(h) as usize;
    if len == 0 || len > 1 << 20 {
        return None;
    }
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).await.ok()?;
    let mut out = h.to_vec();
    out.extend(p);
    Some(out)
}

/// Copies frames from `from` to `to`, recording each as sent by `who`.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    who: &'static str,
    log: Log,
    rewrite: Rewrite,
) {
    loop {
        let mut h = [0u8; 4];
        if from.read_exact(&mut h).await.is_err() {
            break;
        }
        let len = u32::from_be_bytes(h) as usize;
        if len == 0 || len > 1 << 20 {
            break;
        }
        let mut p = vec![0u8; len];
        if from.read_exact(&mut p).await.is_err() {
            break;
        }
        if let Ok(v) = serde_json::from_slice::<Value>(&p) {
            log.lock()
                .unwrap()
                .push(json!({ "from": who, "message": v.clone() }));
            p = serde_json::to_vec(&rewrite(who, v)).unwrap();
        }
        let h = (p.len() as u32).to_be_bytes();
        if to.write_all(&h).await.is_err() || to.write_all(&p).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// A TCP proxy in front of `upstream` that records the control
/// connection's frames both ways and passes data connections through.
pub struct Recorder {
    pub addr: SocketAddr,
    pub log: Log,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    pub async fn start(upstream: SocketAddr) -> Recorder {
        Recorder::rewriting(upstream, |_, v| v).await
    }

    /// A recorder that passes on `rewrite(sender, message)` for every
    /// control frame after the hello (it records what was sent).
    pub async fn rewriting(
        upstream: SocketAddr,
        rewrite: impl Fn(&str, Value) -> Value + Send + Sync + 'static,
    ) -> Recorder {
        let rewrite: Rewrite = Arc::new(rewrite);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log: Log = Arc::default();
        let l = log.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut down, _)) = listener.accept().await else {
                    continue;
                };
                let log = l.clone();
                let rewrite = rewrite.clone();
                tokio::spawn(async move {
                    let _ = down.set_nodelay(true);
                    let Some(first) = read_raw_frame(&mut down).await else {
                        return;
                    };
                    let Ok(mut up) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = up.set_nodelay(true);
                    let msg: Value = serde_json::from_slice(&first[4..]).unwrap_or(Value::Null);
                    if up.write_all(&first).await.is_err() {
                        return;
                    }
                    if msg["type"] != "hello" {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                        return;
                    }
                    log.lock()
                        .unwrap()
                        .push(json!({ "from": "prober", "message": msg }));
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::join!(
                        pump(dr, uw, "prober", log.clone(), rewrite.clone()),
                        pump(ur, dw, "responder", log.clone(), rewrite.clone())
                    );
                });
            }
        });
        Recorder { addr, log, task }
    }

    pub fn frames(&self) -> Vec<Value> {
        self.log.lock().unwrap().clone()
    }
}

fn short_tcp() -> ProbeSpec {
    ProbeSpec {
        duration: Duration::from_millis(300),
        ..ProbeSpec::default()
    }
}

/// Sends one raw hello and returns the responder's answer.
async fn answer_to(addr: SocketAddr, hello: &Value) -> Value {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let body = serde_json::to_vec(hello).unwrap();
    s.write_all(&(body.len() as u32).to_be_bytes())
        .await
        .unwrap();
    s.write_all(&body).await.unwrap();
    let raw = tokio::time::timeout(Duration::from_secs(5), read_raw_frame(&mut s))
        .await
        .expect("an answer within 5 s")
        .expect("a frame");
    serde_json::from_slice(&raw[4..]).unwrap()
}

/// Records the transcripts of this build. Run by hand, on the commit whose
/// wire version is to be kept, with
/// `PATHPROBE_CAPTURE_WIRE=tests/fixtures/wire/vN cargo test --release
/// --test integration wire_compat::capture_transcripts -- --ignored`.
/// The v2 fixtures came from commit 529e52e.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "records fixtures; run by hand on the release whose wire is kept"]
async fn capture_transcripts() {
    let dir = PathBuf::from(std::env::var("PATHPROBE_CAPTURE_WIRE").expect("a directory"));
    std::fs::create_dir_all(&dir).unwrap();
    let (addr, _counters, _stop) = responder::start(ResponderConfig::default()).await;
    let rec = Recorder::start(addr).await;
    let result = probe::probe(&Target::from_addr(rec.addr), &short_tcp())
        .await
        .expect("the probe through the recorder completes");
    assert!(result.bytes > 0);
    let frames = rec.frames();
    assert_eq!(frames.len(), 7, "{frames:#?}");
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let tcp = json!({
        "captured_from": commit,
        "what": "a tcp test (1 stream, 300 ms, prober sends) between this commit's prober and responder, unauthenticated",
        "frames": frames,
    });
    std::fs::write(
        dir.join("tcp_send.json"),
        serde_json::to_string_pretty(&tcp).unwrap() + "\n",
    )
    .unwrap();
    // What this release's responder answers to hellos of other versions.
    let hello = frames[0]["message"].clone();
    let mut refusals = Vec::new();
    for version in [1, 3, 4] {
        let mut h = hello.clone();
        h["version"] = json!(version);
        h["software"] = json!(format!("pathprobe/v{version}-capture"));
        refusals.push(json!({ "hello": h, "answer": answer_to(addr, &h).await }));
    }
    std::fs::write(
        dir.join("refusals.json"),
        serde_json::to_string_pretty(&json!({ "captured_from": commit, "refusals": refusals }))
            .unwrap()
            + "\n",
    )
    .unwrap();
}

fn fixture(name: &str) -> Value {
    let path = fixtures_dir().join("v2").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The version 2 transcript's frames, in order.
fn v2_frames() -> Vec<Value> {
    fixture("tcp_send.json")["frames"]
        .as_array()
        .unwrap()
        .clone()
}

fn v2_message(ty: &str) -> Value {
    v2_frames()
        .into_iter()
        .map(|f| f["message"].clone())
        .find(|m| m["type"] == ty)
        .unwrap()
}

/// A message without the fields that differ from run to run or build to
/// build (software string, token); everything else must match exactly.
fn stable(mut m: Value) -> Value {
    if let Some(o) = m.as_object_mut() {
        o.remove("software");
        o.remove("token");
    }
    m
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

/// Holds a recorded conversation to the version 2 transcript: the same
/// messages from the same sides in the same order; hello, welcome,
/// request, accepted, ready and start equal field for field (but for the
/// software string and the token), results with the same fields.
fn assert_speaks_v2(frames: &[Value]) {
    let want = v2_frames();
    let seq = |f: &[Value]| -> Vec<(String, String)> {
        f.iter()
            .map(|x| {
                (
                    x["from"].as_str().unwrap().to_string(),
                    x["message"]["type"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(seq(frames), seq(&want));
    for (got, want) in frames.iter().zip(&want) {
        let (got, want) = (&got["message"], &want["message"]);
        if want["type"] == "results" {
            assert_eq!(keys(got), keys(want));
        } else {
            assert_eq!(stable(got.clone()), stable(want.clone()));
        }
    }
}

fn held_to(version: u32) -> ProbeSpec {
    ProbeSpec {
        max_protocol_version: version,
        ..short_tcp()
    }
}

fn v2_responder() -> ResponderConfig {
    ResponderConfig {
        max_protocol_version: 2,
        ..ResponderConfig::default()
    }
}

/// This release held to version 2, on both ends, says exactly what the
/// version 2 release said (the fixtures): the compatibility mode the other
/// tests use is the previous release's wire, not a guess at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compatibility_mode_speaks_the_recorded_v2_conversation() {
    let (addr, _c, _stop) = responder::start(v2_responder()).await;
    let rec = Recorder::start(addr).await;
    let r = probe::probe(&Target::from_addr(rec.addr), &held_to(2))
        .await
        .unwrap();
    assert_eq!(r.protocol_version, Some(2));
    assert_speaks_v2(&rec.frames());
}

/// A prober of this release against a version 2 responder: its hello
/// passes the version 2 check (the legacy `version` field is 2: the
/// fixtures show that release refusing a hello of version 3 or 4), the
/// responder answers as version 2 did, and the test completes at
/// version 2, with no clock reading (version 2 sends no time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_prober_completes_a_test_with_a_v2_responder() {
    let refusals = fixture("refusals.json");
    for r in refusals["refusals"].as_array().unwrap() {
        let v = r["hello"]["version"].as_u64().unwrap();
        assert_eq!(r["answer"]["type"], "rejected", "v2 refused version {v}");
    }
    let (addr, counters, _stop) = responder::start(v2_responder()).await;
    let rec = Recorder::start(addr).await;
    let r = probe::probe(&Target::from_addr(rec.addr), &short_tcp())
        .await
        .expect("the new prober completes a test with a v2 responder");
    assert!(r.bytes > 0);
    assert_eq!(r.protocol_version, Some(2));
    assert_eq!(r.peer_clock, None);
    let frames = rec.frames();
    let hello = &frames[0]["message"];
    assert_eq!(
        (&hello["protocol"], &hello["version"]),
        (&json!("pathprobe"), &json!(2))
    );
    assert_eq!(hello["max_version"], 3);
    // What the v2-held responder answered is what v2 answered.
    let welcome = frames[1]["message"].clone();
    assert_eq!(stable(welcome), stable(v2_message("welcome")));
    assert_eq!(counters.handshakes_by_version[0].load(Ordering::Relaxed), 1);
    assert_eq!(counters.handshakes_by_version[1].load(Ordering::Relaxed), 0);
}

/// A version 2 prober against this release's responder: the recorded v2
/// hello, byte for byte, gets a version 2 welcome of the v2 layout, and a
/// prober held to version 2 (which sends that hello: see the test above)
/// completes a test, counted under version 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_prober_completes_a_test_with_a_new_responder() {
    let (addr, counters, _stop) = responder::start(ResponderConfig::default()).await;
    let welcome = answer_to(addr, &v2_message("hello")).await;
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    assert_eq!(welcome["version"], 2);
    assert_eq!(keys(&welcome), keys(&v2_message("welcome")));
    let rec = Recorder::start(addr).await;
    let r = probe::probe(&Target::from_addr(rec.addr), &held_to(2))
        .await
        .expect("a v2 prober completes a test with the new responder");
    assert!(r.bytes > 0);
    assert_eq!(r.protocol_version, Some(2));
    let frames = rec.frames();
    assert_eq!(
        stable(frames[0]["message"].clone()),
        stable(v2_message("hello"))
    );
    assert_eq!(frames[1]["message"]["version"], 2);
    assert!(frames[1]["message"].get("time_us").is_none());
    assert_eq!(counters.handshakes_by_version[0].load(Ordering::Relaxed), 2);
    assert_eq!(counters.tests_succeeded.load(Ordering::Relaxed), 1);
}

/// Two releases of this version agree on 3 and read each other's clock:
/// on one host, the offset is within a few milliseconds of 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_release_agrees_on_3_and_reads_the_clock() {
    let (addr, counters, _stop) = responder::start(ResponderConfig::default()).await;
    let r = probe::probe(&Target::from_addr(addr), &short_tcp())
        .await
        .unwrap();
    assert_eq!(r.protocol_version, Some(3));
    let clock = r.peer_clock.expect("a version 3 welcome carries the time");
    eprintln!(
        "same host: offset {:+.6} s, uncertainty {:.6} s",
        clock.offset_seconds, clock.uncertainty_seconds
    );
    assert!(clock.offset_seconds.abs() < 0.05, "{clock:?}");
    assert!(clock.uncertainty_seconds < 0.05, "{clock:?}");
    assert!(
        clock.offset_seconds.abs() <= clock.uncertainty_seconds + 0.001,
        "{clock:?}"
    );
    assert_eq!(counters.handshakes_by_version[1].load(Ordering::Relaxed), 1);
}

/// A responder whose clock is 30 s ahead (its welcome's stamp moved by a
/// relay, as a skewed host would send it): the prober says so, to within
/// the handshake's round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responder_30_s_ahead_is_seen_30_s_ahead() {
    let (addr, _c, _stop) = responder::start(ResponderConfig::default()).await;
    let rec = Recorder::rewriting(addr, |_, mut m| {
        if m["type"] == "welcome" {
            m["time_us"] = json!(m["time_us"].as_u64().unwrap() + 30_000_000);
        }
        m
    })
    .await;
    let r = probe::probe(&Target::from_addr(rec.addr), &short_tcp())
        .await
        .unwrap();
    let clock = r.peer_clock.unwrap();
    eprintln!(
        "skewed peer: offset {:+.6} s, uncertainty {:.6} s",
        clock.offset_seconds, clock.uncertainty_seconds
    );
    assert!((clock.offset_seconds - 30.0).abs() < 0.05, "{clock:?}");
    assert!(
        (clock.offset_seconds - 30.0).abs() <= clock.uncertainty_seconds + 0.001,
        "{clock:?}"
    );
    let json = pathprobe::report::json(&r);
    assert!(json.contains("\"peer_clock\""), "{json}");
    // The offset is 30 s within the round trip (above), so it may print
    // as +29.999: the text must say the offset measured, not a rounding.
    let said = format!("its clock {:+.3} s from ours", clock.offset_seconds);
    assert!(said.starts_with("its clock +29.9") || said.starts_with("its clock +30.0"));
    let text = pathprobe::report::text(&r, true);
    assert!(text.contains(&said), "{said:?} not in:\n{text}");
}

/// Versions two apart are refused, both ways, with a message naming both
/// sides' versions, and counted: a version 1 or version 5 prober by this
/// responder (`version_mismatch`), and a responder that chose version 5
/// by this prober (`version_unsupported`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_two_apart_are_refused_named_and_counted() {
    let (addr, counters, _stop) = responder::start(ResponderConfig::default()).await;
    let mut hello = v2_message("hello");
    for (version, max, theirs) in [
        (1, None, "prober speaks 1 ("),
        (5, Some(5), "prober speaks 5 ("),
    ] {
        hello["version"] = json!(version);
        if let Some(m) = max {
            hello["max_version"] = json!(m);
        }
        let answer = answer_to(addr, &hello).await;
        assert_eq!(answer["type"], "rejected", "{answer}");
        assert_eq!(answer["reason"], "version_mismatch");
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains("responder speaks protocol versions 2 to 3 (pathprobe/"),
            "{message}"
        );
        assert!(message.contains(theirs), "{message}");
    }
    assert_eq!(counters.rejected_version.load(Ordering::Relaxed), 2);
    assert_eq!(counters.handshakes_by_version[0].load(Ordering::Relaxed), 0);
    // A (future) responder that answers with version 5.
    let rec = Recorder::rewriting(addr, |who, mut m| {
        if who == "responder" && m["type"] == "welcome" {
            m["version"] = json!(5);
        }
        m
    })
    .await;
    match probe::probe(&Target::from_addr(rec.addr), &short_tcp()).await {
        Err(e @ ProbeError::VersionMismatch(_)) => {
            assert_eq!(e.reason(), "version_unsupported");
            let m = e.to_string();
            assert!(m.contains("responder chose protocol version 5"), "{m}");
            assert!(m.contains("prober speaks 2 to 3"), "{m}");
        }
        other => panic!("expected version_unsupported, got {other:?}"),
    }
    // A responder held to a version this prober no longer speaks is
    // stood in for by the rejection it would send.
    let rec = Recorder::rewriting(addr, |who, m| {
        if who == "responder" && m["type"] == "welcome" {
            json!({"type": "rejected", "reason": "version_mismatch", "message": "responder speaks protocol version 1 (pathprobe/0.0.1), prober speaks 2 to 3"})
        } else {
            m
        }
    })
    .await;
    match probe::probe(&Target::from_addr(rec.addr), &short_tcp()).await {
        Err(e) => {
            assert_eq!(e.reason(), "version_unsupported", "{e}");
            assert!(
                e.to_string()
                    .contains("responder speaks protocol version 1"),
                "{e}"
            );
        }
        Ok(r) => panic!("expected a refusal, got a result {r:?}"),
    }
}

/// Its maximum is long (10 s) so that a loaded CI machine, whose noisy
/// samples converge later (seen at 2.4 s where a quiet one takes 0.8 s),
/// still ends it well before; a test that must end early asserts less
/// than the maximum.
fn adaptive_tcp() -> ProbeSpec {
    ProbeSpec {
        duration: Duration::from_secs(10),
        adaptive: Some(pathprobe::protocol::adaptive::AdaptiveRequest {
            min_duration_ms: 300,
            precision_ppm: 200_000,
            receiver_progress: false,
        }),
        ..ProbeSpec::default()
    }
}

/// Issue 27: an adaptive probe against this release's responder ends the
/// test itself with an `end` frame, before its maximum, and reports how.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_probe_ends_the_test_with_an_end_frame() {
    let (addr, _counters, _stop) = responder::start(ResponderConfig::default()).await;
    let rec = Recorder::start(addr).await;
    let r = probe::probe(&Target::from_addr(rec.addr), &adaptive_tcp())
        .await
        .expect("an adaptive probe completes");
    let a = r.adaptive.expect("an adaptive result");
    let frames = rec.frames();
    let types: Vec<&str> = frames
        .iter()
        .filter_map(|f| f["message"]["type"].as_str())
        .collect();
    let end = types
        .iter()
        .position(|t| *t == "end")
        .expect("an end frame");
    let results = types.iter().position(|t| *t == "results").unwrap();
    assert!(end < results, "{types:?}");
    assert_eq!(a.stop_reason, StopReason::Converged, "{a:?}");
    assert!(a.elapsed_seconds < 10.0, "{a:?}");
    assert!(
        r.bytes > 0 && r.duration_seconds < 10.0,
        "{}",
        r.duration_seconds
    );
}

/// An adaptive probe against a responder that does not know the field
/// (which drops it, as serde does for an older release): the probe runs
/// its whole maximum as a fixed one, says so, and sends no `end`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_probe_runs_fixed_against_an_older_responder() {
    let (addr, _counters, _stop) = responder::start(ResponderConfig::default()).await;
    let rec = Recorder::rewriting(addr, |_, mut v| {
        if let Some(m) = v.as_object_mut() {
            m.remove("adaptive");
            if let Some(r) = m.get_mut("request").and_then(|r| r.as_object_mut()) {
                r.remove("adaptive");
            }
        }
        v
    })
    .await;
    let spec = ProbeSpec {
        duration: Duration::from_millis(800),
        ..adaptive_tcp()
    };
    let r = probe::probe(&Target::from_addr(rec.addr), &spec)
        .await
        .expect("the probe completes against an older responder");
    assert!(r.adaptive.is_none());
    assert!(
        r.clamped.iter().any(|c| c.contains("adaptive duration")),
        "{:?}",
        r.clamped
    );
    assert!(r.duration_seconds > 0.6, "{}", r.duration_seconds);
    let frames = rec.frames();
    assert!(frames.iter().all(|f| f["message"]["type"] != "end"));
}

/// A UDP probe the prober sends, adaptive, with a loose precision so that
/// it ends early on loopback.
fn adaptive_udp() -> ProbeSpec {
    ProbeSpec {
        kind: pathprobe::probe::Kind::Udp,
        bitrate: Some(50_000_000),
        ..adaptive_tcp()
    }
}

/// Issue 27: an adaptive UDP probe the prober sends asks the responder
/// for its received count, is judged on it, and reports the receiver's
/// figure over the span. (Directly: the recorder relays only the control
/// connection, not the datagrams. The lab's
/// `adaptive_lab::adaptive_udp_over_the_bottleneck_is_the_received_rate_or_not_converged`
/// covers a receiver that got less than was sent.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_udp_probe_is_judged_on_the_responders_progress() {
    let (addr, _counters, _stop) = responder::start(ResponderConfig::default()).await;
    let r = probe::probe(&Target::from_addr(addr), &adaptive_udp())
        .await
        .expect("an adaptive UDP probe completes");
    let a = r.adaptive.expect("an adaptive result");
    let got = a
        .receiver_bits_per_second
        .expect("the receiver's figure over the span");
    let est = a.estimate.expect("an estimate").bits_per_second;
    // 50 Mbit/s asked, nothing lost on loopback: both figures are it.
    assert!((got / 50e6 - 1.0).abs() < 0.1, "{a:?}");
    assert!((est / 50e6 - 1.0).abs() < 0.1, "{a:?}");
    assert!(a.converged, "{a:?}");
    assert!(a.elapsed_seconds < 10.0, "{a:?}");
    assert!(r.clamped.is_empty(), "{:?}", r.clamped);
}

/// Issue 27: a probe whose precision is out of reach (1 ppm: no 100 ms
/// rate on loopback is that steady) stops early, once a quarter of its
/// 10 s maximum has passed, says `out_of_reach`, and sends `end` with that
/// reason. The responder it meets is made to read the reason as an older
/// release does (the recorder renames it to one this release does not
/// know, which reads as `other`, as `out_of_reach` does there): it still
/// ends the test at once and cuts its figures to the span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_out_of_reach_probe_ends_early_and_an_older_responder_follows() {
    let (addr, _counters, _stop) = responder::start(ResponderConfig::default()).await;
    let rec = Recorder::rewriting(addr, |who, mut v| {
        if who == "prober" && v["type"] == "end" && v["reason"] == "out_of_reach" {
            v["reason"] = json!("a_reason_of_a_later_release");
        }
        v
    })
    .await;
    let spec = ProbeSpec {
        // The responder sends: its senders must obey `end` for the test
        // to end early.
        direction: pathprobe::probe::Direction::Receive,
        adaptive: Some(pathprobe::protocol::adaptive::AdaptiveRequest {
            min_duration_ms: 300,
            precision_ppm: 1,
            receiver_progress: false,
        }),
        ..adaptive_tcp()
    };
    let started = std::time::Instant::now();
    let r = probe::probe(&Target::from_addr(rec.addr), &spec)
        .await
        .expect("the probe completes");
    let took = started.elapsed();
    let a = r.adaptive.expect("an adaptive result");
    assert_eq!(a.stop_reason, StopReason::OutOfReach, "{a:?}");
    assert!(!a.converged, "{a:?}");
    assert!(a.responder_agreed, "{a:?}");
    // Judged from 2.5 s on (a quarter of 10 s), once ten batches are in.
    assert!(
        (2.5..6.0).contains(&a.elapsed_seconds),
        "stopped at {}",
        a.elapsed_seconds
    );
    assert!(took < Duration::from_secs(8), "{took:?}");
    let est = a.estimate.expect("an estimate");
    let best = a
        .best_half_width_at_max_bits_per_second
        .expect("the best the maximum could give");
    assert!(best > 3.0 * 1e-6 * est.bits_per_second, "{best} {est:?}");
    // The frame the responder got: `end`, before its results, with the
    // reason it cannot name.
    let frames = rec.frames();
    let end = frames
        .iter()
        .position(|f| f["message"]["type"] == "end")
        .expect("an end frame");
    assert_eq!(frames[end]["message"]["reason"], "out_of_reach");
    let results = frames
        .iter()
        .position(|f| f["message"]["type"] == "results" && f["from"] == "responder")
        .expect("the responder's results");
    assert!(end < results);
    // The responder cut its figures to the span: its seconds are the
    // span's, not the test's since its start.
    let remote = &frames[results]["message"];
    let seconds = remote["streams"]
        .as_array()
        .and_then(|s| {
            s.iter()
                .filter_map(|s| s["seconds"].as_f64())
                .reduce(f64::max)
        })
        .unwrap_or_else(|| panic!("no stream seconds in {remote}"));
    assert!(
        seconds < a.elapsed_seconds - est.span_start_seconds + 0.3
            && seconds > est.span_seconds - 0.3,
        "the responder's {seconds} s against a span of {} s from {} s: {remote}",
        est.span_seconds,
        est.span_start_seconds
    );
}
