//! A man in the middle between a prober and a real responder. Control
//! connections are relayed frame by frame, each frame offered to a rule
//! that may replace it (with any number of frames: none drops it, two
//! inject one). Frames the rule leaves alone are passed on byte for byte,
//! so that an authenticated frame is not disturbed by re-encoding. A data
//! connection (first frame `data_hello`) is copied through untouched.
//!
//! Rules work on `serde_json::Value`, not on the library's message types:
//! the frames may carry fields (a MAC) that this relay knows nothing about.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::fake::frame;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    ToResponder,
    ToProber,
}

/// `None` passes the frame on as it came; `Some(frames)` sends those instead.
pub type Rule = Arc<dyn Fn(Dir, &Value) -> Option<Vec<Value>> + Send + Sync>;

pub struct Relay {
    pub addr: SocketAddr,
    /// Frames the rule replaced.
    pub rewrites: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Relay {
    pub async fn start(upstream: SocketAddr, rule: Rule) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let rewrites = Arc::new(AtomicU64::new(0));
        let count = rewrites.clone();
        let task = tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let (rule, count) = (rule.clone(), count.clone());
                tasks.spawn(async move {
                    let _ = relay(client, upstream, rule, count).await;
                });
                while tasks.try_join_next().is_some() {}
            }
        });
        Relay {
            addr,
            rewrites,
            task,
        }
    }
}

async fn read_raw<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Vec<u8>> {
    let mut h = [0u8; 4];
    r.read_exact(&mut h).await?;
    let len = u32::from_be_bytes(h) as usize;
    if len > 1 << 20 {
        return Err(std::io::Error::other("oversized frame"));
    }
    let mut out = h.to_vec();
    out.resize(4 + len, 0);
    r.read_exact(&mut out[4..]).await?;
    Ok(out)
}

async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    rule: Rule,
    count: Arc<AtomicU64>,
) -> std::io::Result<()> {
    let _ = client.set_nodelay(true);
    let first = tokio::time::timeout(Duration::from_secs(10), read_raw(&mut client))
        .await
        .map_err(|_| std::io::Error::other("silent client"))??;
    let mut server = TcpStream::connect(upstream).await?;
    let _ = server.set_nodelay(true);
    let is_data = serde_json::from_slice::<Value>(&first[4..])
        .map(|v| v["type"] == "data_hello")
        .unwrap_or(false);
    if is_data {
        server.write_all(&first).await?;
        tokio::io::copy_bidirectional(&mut client, &mut server).await?;
        return Ok(());
    }
    let (cr, cw) = client.into_split();
    let (sr, mut sw) = server.into_split();
    pass(Dir::ToResponder, &first, &mut sw, &rule, &count).await?;
    let up = pump(cr, sw, Dir::ToResponder, rule.clone(), count.clone());
    let down = pump(sr, cw, Dir::ToProber, rule, count);
    // Whichever side closes first ends the relay of both.
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
    Ok(())
}

async fn pass<W: AsyncWrite + Unpin>(
    dir: Dir,
    raw: &[u8],
    w: &mut W,
    rule: &Rule,
    count: &AtomicU64,
) -> std::io::Result<()> {
    let replaced = serde_json::from_slice::<Value>(&raw[4..])
        .ok()
        .and_then(|v| rule(dir, &v));
    match replaced {
        None => w.write_all(raw).await,
        Some(frames) => {
            count.fetch_add(1, Ordering::Relaxed);
            for f in frames {
                w.write_all(&frame(&f)).await?;
            }
            Ok(())
        }
    }
}

async fn pump<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut r: R,
    mut w: W,
    dir: Dir,
    rule: Rule,
    count: Arc<AtomicU64>,
) -> std::io::Result<()> {
    loop {
        let raw = read_raw(&mut r).await?;
        pass(dir, &raw, &mut w, &rule, &count).await?;
    }
}

/// Applies `f` to every object under `v` (itself included).
pub fn walk_objects(v: &mut Value, f: &mut dyn FnMut(&mut serde_json::Map<String, Value>)) {
    match v {
        Value::Object(m) => {
            f(m);
            for (_, child) in m.iter_mut() {
                walk_objects(child, f);
            }
        }
        Value::Array(a) => {
            for child in a {
                walk_objects(child, f);
            }
        }
        _ => {}
    }
}
