//! A fake responder: it speaks the framing (4-byte big-endian length, then
//! JSON) and runs a test far enough for a prober to finish it, but the
//! `Accepted` and `Results` it sends go through two rewriting functions,
//! so that each test can play one kind of lying responder. With both
//! functions the identity, it is an honest (if minimal) responder, which
//! the tests use first to show that the fake itself works.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Mutex};

use pathprobe::engine::stats::{Role, SideStats, StreamStats};
use pathprobe::probe::FlowDirection;
use pathprobe::protocol::message::{Limits, Welcome};
use pathprobe::protocol::{Message, PROTOCOL_VERSION};

/// Maps the request the prober sent (the `request` object) to the one the
/// fake claims to accept.
pub type AcceptFn = Arc<dyn Fn(&Value) -> Value + Send + Sync>;
/// Maps the honest `Results` message (as JSON) to the one sent.
pub type ResultsFn = Arc<dyn Fn(Value) -> Value + Send + Sync>;

/// Data connections the fake holds at most per test, whatever it accepted.
const MAX_DATA: usize = 64;

pub struct Fake {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fake {
    /// The honest fake.
    pub async fn honest() -> Fake {
        Fake::start(Arc::new(|r| r.clone()), Arc::new(|v| v)).await
    }

    /// A fake whose `Accepted` carries `accept(request)`.
    pub async fn accepting(accept: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Fake {
        Fake::start(Arc::new(accept), Arc::new(|v| v)).await
    }

    /// A fake that runs the test honestly and sends `results(honest)`.
    pub async fn reporting(results: impl Fn(Value) -> Value + Send + Sync + 'static) -> Fake {
        Fake::start(Arc::new(|r| r.clone()), Arc::new(results)).await
    }

    pub async fn start(accept: AcceptFn, results: ResultsFn) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(serve(listener, accept, results));
        Fake { addr, task }
    }
}

async fn serve(listener: TcpListener, accept: AcceptFn, results: ResultsFn) {
    let (data_tx, data_rx) = mpsc::channel::<(u32, TcpStream)>(MAX_DATA);
    let data_rx = Arc::new(Mutex::new(data_rx));
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            continue;
        };
        let (accept, results, data_tx, data_rx) = (
            accept.clone(),
            results.clone(),
            data_tx.clone(),
            data_rx.clone(),
        );
        tasks.spawn(async move {
            let _ = s.set_nodelay(true);
            let Ok(first) = read_frame(&mut s, Duration::from_secs(5)).await else {
                return;
            };
            match first["type"].as_str() {
                Some("hello") => {
                    // One session at a time owns the data connections.
                    let mut rx = data_rx.lock().await;
                    while rx.try_recv().is_ok() {}
                    let _ = session(s, &mut rx, &accept, &results).await;
                }
                Some("data_hello") => {
                    let id = first["stream"].as_u64().unwrap_or(0) as u32;
                    // A full channel means more than MAX_DATA: close the extra.
                    let _ = data_tx.try_send((id, s));
                }
                _ => {}
            }
        });
        while tasks.try_join_next().is_some() {}
    }
}

pub async fn read_frame(s: &mut TcpStream, limit: Duration) -> Result<Value, String> {
    tokio::time::timeout(limit, async {
        let mut h = [0u8; 4];
        s.read_exact(&mut h).await.map_err(|e| e.to_string())?;
        let len = u32::from_be_bytes(h) as usize;
        if len == 0 || len > 1 << 20 {
            return Err(format!("frame of {len} bytes"));
        }
        let mut p = vec![0u8; len];
        s.read_exact(&mut p).await.map_err(|e| e.to_string())?;
        serde_json::from_slice(&p).map_err(|e| e.to_string())
    })
    .await
    .map_err(|_| "timeout".to_string())?
}

pub fn frame(v: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(v).unwrap();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

pub async fn write_frame(s: &mut TcpStream, v: &Value) -> Result<(), String> {
    s.write_all(&frame(v)).await.map_err(|e| e.to_string())
}

pub fn welcome() -> Value {
    serde_json::to_value(Message::Welcome(Welcome {
        version: PROTOCOL_VERSION,
        software: "fake/0".into(),
        time_us: None,
        limits: Limits {
            max_duration_ms: 3_600_000,
            max_streams: 128,
            max_bitrate: 0,
            max_length: 16 << 20,
            max_window: 256 << 20,
            max_concurrent_tests: 1,
            max_tests_per_client_per_minute: 0,
            max_bytes_per_hour: 0,
            limit_policy: "clamp".into(),
            max_connections_per_second: 0,
        },
        auth: None,
    }))
    .unwrap()
}

/// What one data connection carried, for the honest figures.
struct Carried {
    id: u32,
    direction: FlowDirection,
    bytes: u64,
    seconds: f64,
    syscalls: u64,
}

async fn session(
    mut s: TcpStream,
    data: &mut mpsc::Receiver<(u32, TcpStream)>,
    accept: &AcceptFn,
    results: &ResultsFn,
) -> Result<(), String> {
    let t = Duration::from_secs(5);
    write_frame(&mut s, &welcome()).await?;
    let req = read_frame(&mut s, t).await?;
    if req["type"] != "request" {
        return Err("expected a request".into());
    }
    let mut asked = req.clone();
    asked.as_object_mut().unwrap().remove("type");
    let agreed = accept(&asked);
    let token = pathprobe::protocol::message::new_token();
    write_frame(
        &mut s,
        &json!({"type": "accepted", "token": token, "request": agreed}),
    )
    .await?;

    // What the fake itself must run follows what it claimed, within bounds.
    let kind = agreed["kind"].as_str().unwrap_or("tcp").to_string();
    let direction = agreed["direction"].as_str().unwrap_or("send").to_string();
    let streams = agreed["streams"].as_u64().unwrap_or(1);
    let per_dir = streams.min(MAX_DATA as u64);
    let total = if direction == "bidir" {
        (per_dir * 2).min(MAX_DATA as u64)
    } else {
        per_dir
    } as usize;
    let run_for = Duration::from_millis(
        agreed["duration_ms"]
            .as_u64()
            .unwrap_or(0)
            .saturating_add(agreed["omit_ms"].as_u64().unwrap_or(0))
            .min(10_000),
    );
    let dir_of = |id: u32| -> FlowDirection {
        match direction.as_str() {
            "receive" => FlowDirection::Receive,
            "bidir" if u64::from(id) >= streams => FlowDirection::Receive,
            _ => FlowDirection::Send,
        }
    };
    let mut conns = Vec::new();
    if kind == "tcp" {
        let deadline = Instant::now() + Duration::from_secs(3);
        while conns.len() < total {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, data.recv()).await {
                Ok(Some(c)) => conns.push(c),
                _ => break,
            }
        }
    } else {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    write_frame(&mut s, &json!({"type": "ready"})).await?;
    let start = read_frame(&mut s, t).await?;
    if start["type"] != "start" {
        return Err("expected start".into());
    }
    let mut waits = Vec::new();
    for (id, conn) in conns {
        let (tx, rx) = oneshot::channel();
        let direction = dir_of(id);
        tokio::spawn(async move {
            let _ = tx.send(carry(conn, id, direction, run_for).await);
        });
        waits.push(rx);
    }
    let mut carried = Vec::new();
    let deadline = Instant::now() + run_for + Duration::from_secs(4);
    for w in waits {
        let left = deadline.saturating_duration_since(Instant::now());
        if let Ok(Ok(c)) = tokio::time::timeout(left, w).await {
            carried.push(c);
        }
    }
    carried.sort_by_key(|c| c.id);
    let stats = SideStats {
        streams: carried
            .iter()
            .map(|c| StreamStats {
                id: c.id,
                direction: Some(c.direction),
                role: Some(match c.direction {
                    FlowDirection::Send => Role::Receiver,
                    FlowDirection::Receive => Role::Sender,
                }),
                bytes: c.bytes,
                seconds: c.seconds,
                syscalls: c.syscalls,
                send_buffer_bytes: 212_992,
                receive_buffer_bytes: 131_072,
                ..StreamStats::default()
            })
            .collect(),
        kernel_release: "fake".into(),
        ..SideStats::default()
    };
    let honest = serde_json::to_value(Message::Results(Box::new(stats))).unwrap();
    write_frame(&mut s, &results(honest)).await?;
    // Let the prober read the results before the connection closes.
    let _ = read_frame(&mut s, Duration::from_secs(2)).await;
    Ok(())
}

/// Moves the data of one stream as the responder would: reads to EOF when
/// the prober sends, writes for `run_for` then half-closes when it receives.
async fn carry(mut c: TcpStream, id: u32, direction: FlowDirection, run_for: Duration) -> Carried {
    let mut buf = vec![0u8; 128 * 1024];
    let (mut bytes, mut syscalls) = (0u64, 0u64);
    let (mut first, mut last) = (None, Instant::now());
    match direction {
        FlowDirection::Send => {
            let deadline = Instant::now() + run_for + Duration::from_secs(3);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, c.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => {
                        syscalls += 1;
                        bytes += n as u64;
                        let now = Instant::now();
                        first.get_or_insert(now);
                        last = now;
                    }
                    _ => break,
                }
            }
        }
        FlowDirection::Receive => {
            let start = Instant::now();
            first = Some(start);
            while start.elapsed() < run_for {
                match tokio::time::timeout(Duration::from_millis(200), c.write(&buf)).await {
                    Ok(Ok(n)) => {
                        syscalls += 1;
                        bytes += n as u64;
                        last = Instant::now();
                    }
                    Ok(Err(_)) => break,
                    Err(_) => {}
                }
            }
            let _ = c.shutdown().await;
            let _ = tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf)).await;
        }
    }
    let seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    Carried {
        id,
        direction,
        bytes,
        seconds,
        syscalls,
    }
}
