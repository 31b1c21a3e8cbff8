//! An in-process responder on 127.0.0.1, port 0, for tests that drive a
//! prober (or raw bytes) at it.

use std::net::SocketAddr;
use std::sync::Arc;

use pathprobe::responder::{bind, Responder, ResponderConfig, ResponderCounters};

use super::turn::{self, Turn};

/// Keeps the responder running; it stops when this is dropped.
pub struct Stop {
    _tx: tokio::sync::oneshot::Sender<()>,
    _turn: Turn,
}

/// Starts a responder with `config` on the current tokio runtime: its
/// address, its counters, and what stops it.
pub async fn start(config: ResponderConfig) -> (SocketAddr, Arc<ResponderCounters>, Stop) {
    let turn = turn::shared();
    let (tcp, udp) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let r = Responder::new(tcp, udp, config).unwrap();
    let addr = r.local_addr().unwrap();
    let counters = r.counters();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(r.serve(async {
        let _ = rx.await;
    }));
    (
        addr,
        counters,
        Stop {
            _tx: tx,
            _turn: turn,
        },
    )
}
