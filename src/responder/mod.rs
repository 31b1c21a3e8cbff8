//! The responder: the server side of every probe (`pathprobe respond`, and
//! inside `pathprobe serve`), like `iperf3 -s` or `nuttcp -S`.
//!
//! One TCP port carries the control connection and every TCP data
//! connection; UDP flows use the same port number. Connections are told
//! apart by their first frame (`Hello` or `DataHello`). The responder runs a
//! limited number of tests at once (one by default) and answers any further
//! prober with `Busy` and a retry hint.
//!
//! Access control happens in layers, cheapest first: the allow and deny
//! lists at accept, before anything is read; the shared secret at the
//! handshake; then the test's own limits, the byte budget, the test slots
//! and the per-client allowance (see [`access`] and `session.rs`).

pub mod access;
mod session;
pub use session::{check_limits, Admission, DRAIN_GRACE};
mod udp;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use self::access::{AccessList, ByteBudget, ClientRate};
use crate::auth::Secret;
use crate::control::{read_message, write_message, ControlError};
use crate::probe::datapath::DataSocket;
use crate::protocol::message::Limits;
use crate::protocol::{Message, RejectReason};

/// The largest TCP write size any responder accepts: a test's buffers are
/// allocated from it, per stream.
pub const TCP_LENGTH_CEILING: u32 = 16 << 20;

/// What the responder does with a request over one of its per-test limits
/// (duration, rate, streams, length, window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitPolicy {
    /// Run the test cut down to the limits, and tell the prober what was cut.
    #[default]
    Clamp,
    /// Refuse the test, naming the limit.
    Refuse,
}

impl LimitPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitPolicy::Clamp => "clamp",
            LimitPolicy::Refuse => "refuse",
        }
    }
}

impl std::str::FromStr for LimitPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<LimitPolicy, String> {
        match s {
            "clamp" => Ok(LimitPolicy::Clamp),
            "refuse" => Ok(LimitPolicy::Refuse),
            _ => Err(format!(
                "invalid limit policy {s:?}: expected clamp or refuse"
            )),
        }
    }
}

/// Limits, timeouts and access control of a responder.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponderConfig {
    /// Omit included. Longer requests are clamped to it.
    pub max_duration: Duration,
    /// Per direction. More is refused.
    pub max_streams: u32,
    /// Bits per second per direction; 0 for no cap. Higher or unpaced
    /// requests are clamped to it.
    pub max_bitrate: u64,
    /// TCP write size or UDP payload size. Larger is refused.
    pub max_length: u32,
    /// SO_SNDBUF/SO_RCVBUF. Larger is clamped.
    pub max_window: u32,
    /// What happens to a request over one of the five limits above.
    pub limit_policy: LimitPolicy,
    pub max_concurrent_tests: usize,
    /// Tests one client (an IPv4 address or an IPv6 /64) may run in any
    /// minute; 0 for no limit.
    pub max_tests_per_client_per_minute: u32,
    /// Payload bytes all tests may move in any hour; 0 for no limit.
    pub max_bytes_per_hour: u64,
    /// Bound on every wait for the prober outside the data transfer.
    pub idle_timeout: Duration,
    /// When set, probers must prove they hold it.
    pub secret: Option<Secret>,
    pub access: AccessList,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        ResponderConfig {
            max_duration: Duration::from_secs(60),
            max_streams: 16,
            max_bitrate: 0,
            max_length: TCP_LENGTH_CEILING,
            max_window: 256 << 20,
            limit_policy: LimitPolicy::Clamp,
            max_concurrent_tests: 1,
            // A scheduler probing every few seconds stays well within this;
            // a client looping on the responder does not.
            max_tests_per_client_per_minute: 60,
            max_bytes_per_hour: 0,
            idle_timeout: Duration::from_secs(10),
            secret: None,
            access: AccessList::default(),
        }
    }
}

impl ResponderConfig {
    pub fn limits(&self) -> Limits {
        Limits {
            max_duration_ms: self.max_duration.as_millis() as u64,
            max_streams: self.max_streams,
            max_bitrate: self.max_bitrate,
            max_length: self.max_length,
            max_window: self.max_window,
            max_concurrent_tests: self.max_concurrent_tests.try_into().unwrap_or(u32::MAX),
            max_tests_per_client_per_minute: self.max_tests_per_client_per_minute,
            max_bytes_per_hour: self.max_bytes_per_hour,
            limit_policy: self.limit_policy.as_str().into(),
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
    pub rejected_auth_required: AtomicU64,
    pub rejected_auth_failed: AtomicU64,
    pub rejected_denied: AtomicU64,
    pub rejected_rate_limited: AtomicU64,
    pub rejected_budget: AtomicU64,
    /// Data connections whose hello named no pending test of that client:
    /// a wrong or guessed token.
    pub rejected_bad_token: AtomicU64,
    /// Accepted tests that asked for more than a limit and were cut down.
    pub tests_clamped: AtomicU64,
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

    /// Counts a refusal under its reason.
    fn reject(&self, reason: RejectReason) {
        ResponderCounters::inc(match reason {
            RejectReason::VersionMismatch => &self.rejected_version,
            RejectReason::Limit => &self.rejected_limit,
            RejectReason::BadRequest | RejectReason::Other => &self.protocol_errors,
            RejectReason::AuthRequired => &self.rejected_auth_required,
            RejectReason::AuthFailed => &self.rejected_auth_failed,
            RejectReason::Denied => &self.rejected_denied,
            RejectReason::RateLimited => &self.rejected_rate_limited,
            RejectReason::BudgetExhausted => &self.rejected_budget,
        });
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
    client_rate: Mutex<ClientRate>,
    bytes: Mutex<ByteBudget>,
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

    /// Records a test for `ip` against the per-client allowance.
    fn admit_client(&self, ip: IpAddr, per_minute: u32) -> Result<(), Duration> {
        self.client_rate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(ip, per_minute, Instant::now())
    }

    /// Whether the hour's byte budget has room for another test.
    fn check_budget(&self, per_hour: u64) -> Result<(), Duration> {
        self.bytes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .check(per_hour, Instant::now())
    }

    fn spend(&self, bytes: u64) {
        self.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.bytes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(bytes, Instant::now());
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
                client_rate: Mutex::default(),
                bytes: Mutex::new(ByteBudget::new(Instant::now())),
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
    let config = shared.config();
    if !config.access.permits(peer.ip()) {
        tracing::info!(%peer, "client refused by the allow/deny lists");
        refuse(
            &mut stream,
            &shared.counters,
            RejectReason::Denied,
            format!("this responder does not accept tests from {}", peer.ip()),
            config.idle_timeout,
        )
        .await;
        return;
    }
    let first = read_message(&mut stream, config.idle_timeout).await;
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
                ResponderCounters::inc(&shared.counters.rejected_bad_token);
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

/// Sends a refusal, counts it by reason, and closes so that the prober
/// reads it: frames the prober had already sent (a hello, or an `Auth`
/// pipelined with its request) are drained first, because closing a socket
/// with unread input sends a reset that can destroy the reply in flight.
pub(crate) async fn refuse(
    stream: &mut TcpStream,
    counters: &ResponderCounters,
    reason: RejectReason,
    message: String,
    timeout: Duration,
) {
    counters.reject(reason);
    let msg = Message::Rejected { reason, message };
    if write_message(stream, &msg, timeout).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    // Bounded in time and bytes, so a refused client cannot hold the task.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut buf = [0u8; 4096];
        let mut left = 64 * 1024usize;
        while left > 0 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
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
