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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use pathprobe::probe::{self, ProbeSpec, Target};
use pathprobe::responder::ResponderConfig;

use crate::common::responder;

/// One recorded control frame: who sent it, and the message.
type Log = Arc<Mutex<Vec<Value>>>;

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
                .push(json!({ "from": who, "message": v }));
        }
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
                        pump(dr, uw, "prober", log.clone()),
                        pump(ur, dw, "responder", log.clone())
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
