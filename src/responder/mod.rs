//! The responder: the server side of every probe (`pathprobe respond`, and
//! inside `pathprobe serve`), like `iperf3 -s` or `nuttcp -S`.
//!
//! One TCP port carries the control connection and every TCP data
//! connection; UDP flows use the same port number. Connections are told
//! apart by their first frame (`Hello` or `DataHello`). The responder runs a
//! limited number of tests at once (one by default) and answers any further
//! prober with `Busy` and a retry hint.

mod session;
pub use session::{check_limits, DRAIN_GRACE};
mod udp;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;

use crate::control::{read_message, ControlError};
use crate::probe::datapath::DataSocket;
use crate::protocol::message::Limits;
use crate::protocol::Message;

/// Limits and timeouts of a responder.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponderConfig {
    pub max_duration: Duration,
    pub max_streams: u32,
    /// Bits per second per direction; 0 for no cap.
    pub max_bitrate: u64,
    pub max_concurrent_tests: usize,
    /// Bound on every wait for the prober outside the data transfer.
    pub idle_timeout: Duration,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        ResponderConfig {
            max_duration: Duration::from_secs(60),
            max_streams: 16,
            max_bitrate: 0,
            max_concurrent_tests: 1,
            idle_timeout: Duration::from_secs(10),
        }
    }
}

impl ResponderConfig {
    pub fn limits(&self) -> Limits {
        Limits {
            max_duration_ms: self.max_duration.as_millis() as u64,
            max_streams: self.max_streams,
            max_bitrate: self.max_bitrate,
        }
    }
}

/// Counters the exporter reads. Labels are fixed, so cardinality is bounded.
#[derive(Debug, Default)]
pub struct ResponderCounters {
    pub tests_succeeded: AtomicU64,
    pub tests_failed: AtomicU64,
    pub rejected_busy: AtomicU64,
    pub rejected_limit: AtomicU64,
    pub rejected_version: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub timeouts: AtomicU64,
    pub udp_ignored: AtomicU64,
    /// Connections closed at once because too many were already waiting
    /// for their first message.
    pub overload: AtomicU64,
    pub bytes: AtomicU64,
    pub active_tests: AtomicU64,
}

impl ResponderCounters {
    fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Changes a running responder's limits (on config reload); tests already
/// admitted keep the limits they were admitted under.
#[derive(Clone)]
pub struct ResponderHandle(Arc<Shared>);

impl ResponderHandle {
    pub fn set_config(&self, config: ResponderConfig) {
        *self.0.config.write().unwrap_or_else(|p| p.into_inner()) = config;
    }

    pub fn counters(&self) -> Arc<ResponderCounters> {
        self.0.counters.clone()
    }
}

/// A test waiting for its data connections and flows.
struct PendingTest {
    peer_ip: IpAddr,
    total_streams: u32,
    registered: HashSet<u32>,
    tx: mpsc::UnboundedSender<(u32, DataSocket)>,
}

pub(crate) struct Shared {
    config: std::sync::RwLock<ResponderConfig>,
    pub(crate) counters: Arc<ResponderCounters>,
    pending: Mutex<HashMap<String, PendingTest>>,
    running: Mutex<Vec<Instant>>,
}

impl Shared {
    /// The limits in force now; a reload may change them between tests.
    pub(crate) fn config(&self) -> ResponderConfig {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Claims a test slot; on refusal returns how long until one frees up.
    fn try_claim(&self, expected_end: Instant) -> Result<SlotGuard<'_>, Duration> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running.len() >= self.config().max_concurrent_tests {
            let soonest = running.iter().min().copied().unwrap_or_else(Instant::now);
            return Err(soonest.saturating_duration_since(Instant::now()) + Duration::from_secs(1));
        }
        running.push(expected_end);
        self.counters.active_tests.fetch_add(1, Ordering::Relaxed);
        Ok(SlotGuard {
            shared: self,
            end: expected_end,
        })
    }

    fn register(&self, token: &str, peer: IpAddr, stream: u32, socket: DataSocket) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let Some(test) = pending.get_mut(token) else {
            return false;
        };
        if test.peer_ip != peer || stream >= test.total_streams || !test.registered.insert(stream) {
            return false;
        }
        test.tx.send((stream, socket)).is_ok()
    }

    fn knows(&self, token: &str, peer: IpAddr, stream: u32) -> bool {
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.get(token).is_some_and(|t| {
            t.peer_ip == peer && stream < t.total_streams && !t.registered.contains(&stream)
        })
    }
}

struct SlotGuard<'a> {
    shared: &'a Shared,
    end: Instant,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        let mut running = self
            .shared
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(i) = running.iter().position(|t| *t == self.end) {
            running.remove(i);
        }
        self.shared
            .counters
            .active_tests
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Binds the responder's TCP listener and UDP socket on one port. Port 0
/// picks a free port that is free for both.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, UdpSocket)> {
    for _ in 0..20 {
        let tcp = bind_tcp(addr)?;
        let port = tcp.local_addr()?.port();
        match udp::bind_main(SocketAddr::new(addr.ip(), port)) {
            Ok(u) => return Ok((tcp, u)),
            Err(e) if addr.port() == 0 && e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "no port free for both TCP and UDP",
    ))
}

/// A TCP listener with SO_REUSEADDR; on `[::]` it also accepts IPv4.
pub fn bind_tcp(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    if addr.is_ipv6() {
        // Listen on [::] for IPv4 probers too, as iperf3 does.
        let _ = sock.set_only_v6(false);
    }
    sock.set_reuse_address(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(128)?;
    TcpListener::from_std(sock.into())
}

/// A responder ready to serve on bound sockets.
pub struct Responder {
    shared: Arc<Shared>,
    tcp: TcpListener,
    udp: Arc<UdpSocket>,
}

impl Responder {
    pub fn new(
        tcp: TcpListener,
        udp: UdpSocket,
        config: ResponderConfig,
    ) -> std::io::Result<Responder> {
        Ok(Responder {
            shared: Arc::new(Shared {
                config: std::sync::RwLock::new(config),
                counters: Arc::default(),
                pending: Mutex::default(),
                running: Mutex::default(),
            }),
            tcp,
            udp: Arc::new(udp),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    pub fn counters(&self) -> Arc<ResponderCounters> {
        self.shared.counters.clone()
    }

    /// A handle that changes the limits of the running responder.
    pub fn handle(&self) -> ResponderHandle {
        ResponderHandle(self.shared.clone())
    }

    /// Serves until `shutdown` completes. Tests in progress are stopped
    /// (their threads see the stop flag) when their tasks are dropped.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        tracing::debug!(addr = ?self.tcp.local_addr().ok(), "responder listening");
        let mut tasks = tokio::task::JoinSet::new();
        let pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_CONNECTIONS));
        let udp_task = tokio::spawn(udp::serve_hellos(self.udp.clone(), self.shared.clone()));
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.tcp.accept() => match accepted {
                    Ok((stream, peer)) => match pending.clone().try_acquire_owned() {
                        Ok(permit) => {
                            let shared = self.shared.clone();
                            tasks.spawn(async move { handle_connection(stream, peer, shared, permit).await });
                        }
                        Err(_) => {
                            // A flood: close at once rather than queue
                            // without bound; real probers retry.
                            ResponderCounters::inc(&self.shared.counters.overload);
                            drop(stream);
                        }
                    },
                    Err(e) => {
                        // Out of descriptors and the like: back off rather than spin.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        udp_task.abort();
        tasks.shutdown().await;
        tracing::debug!("responder stopped");
    }
}

/// Connections that may wait for their first message at once. Each holds at
/// most one small frame, so junk connections cost bounded memory.
pub const MAX_PENDING_CONNECTIONS: usize = 256;

async fn handle_connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    pending: tokio::sync::OwnedSemaphorePermit,
) {
    let peer = normalize(peer);
    let first = read_message(&mut stream, shared.config().idle_timeout).await;
    // Past its first message a connection is a session or a data stream,
    // both bounded by the test slots.
    drop(pending);
    match first {
        Ok(Message::Hello(hello)) => session::run(stream, peer, hello, &shared).await,
        Ok(Message::DataHello { token, stream: id }) => {
            let registered = stream
                .into_std()
                .and_then(|s| {
                    crate::probe::tcp::prepare_blocking(&s)?;
                    Ok(s)
                })
                .map(|s| shared.register(&token, peer.ip(), id, DataSocket::Tcp(s)));
            if !matches!(registered, Ok(true)) {
                ResponderCounters::inc(&shared.counters.protocol_errors);
                tracing::debug!(%peer, stream = id, "data connection for no pending test");
            }
        }
        Ok(other) => {
            ResponderCounters::inc(&shared.counters.protocol_errors);
            tracing::debug!(%peer, message = ?other, "unexpected first message");
        }
        Err(ControlError::Timeout(_)) => {
            ResponderCounters::inc(&shared.counters.timeouts);
            tracing::debug!(%peer, "connection said nothing");
        }
        Err(ControlError::Closed) => {}
        Err(e) => {
            ResponderCounters::inc(&shared.counters.protocol_errors);
            tracing::debug!(%peer, error = %e, "bad first frame");
        }
    }
}

/// IPv4 probers reach a dual-stack listener as ::ffff:a.b.c.d; compare and
/// report them as plain IPv4.
pub fn normalize(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}
