//! The responder: the server side of every probe (`pathprobe respond`, and
//! inside `pathprobe serve`), like `iperf3 -s` or `nuttcp -S`.
//!
//! One TCP port carries the control connection and every TCP data
//! connection; UDP flows use the same port number. Connections are told
//! apart by their first frame (`Hello` or `DataHello`). A `tcp_crr` test's
//! data connections, one per transaction, keep coming while it runs: its
//! [`door`] bounds them in rate, count and queue. The responder runs a
//! limited number of tests at once (one by default) and answers any further
//! prober with `Busy` and a retry hint.
//!
//! Access control happens in layers, cheapest first: the allow and deny
//! lists at accept, before anything is read; the shared secret at the
//! handshake; then the test's own limits, the byte budget, the test slots
//! and the per-client allowance (see [`access`], `admission.rs` and
//! `session.rs`).

pub mod access;
mod admission;
pub mod door;
pub mod iperf3;
mod log;
mod session;
pub mod turns;
pub use crate::engine::datapath::DRAIN_GRACE;
pub use admission::{check_limits, Admission};
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

use crate::byte_budget::HostBudget;

use self::access::{AccessList, ByteBudget, ClientRate, KnownPeers, PerClient, SlotTime};
use self::log::LogLimiter;
use crate::auth::Secret;
use crate::control::{read_message, Control, ControlError};
use crate::engine::datapath::DataSocket;
use crate::protocol::message::Limits;
use crate::protocol::{Message, RejectReason};
use crate::slot::{Asker, HostSlot, SlotPermit};

/// The default largest write or datagram size a responder accepts.
pub const DEFAULT_MAX_LENGTH: u32 = 1 << 20;

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
    /// Seconds of test slot one client may hold in any hour; zero for no
    /// limit. Tests per minute alone would let one client hold the slot by
    /// running long tests back to back.
    pub max_test_seconds_per_client_per_hour: Duration,
    /// Bound on every wait for the prober outside the data transfer.
    pub idle_timeout: Duration,
    /// Bound on the wait for a new connection's first message, and for the
    /// prober's proof after the challenge: a real prober sends each at
    /// once, and a connection that says nothing holds a descriptor.
    pub first_message_timeout: Duration,
    /// Cap, in bits per second, on UDP the responder sends (reverse or
    /// bidirectional tests) when no `secret` is set; 0 for none. UDP has no
    /// congestion control: without it, anyone who reaches the port could
    /// make this host blast unpaced datagrams.
    pub max_unauthenticated_udp_bitrate: u64,
    /// Congestion control algorithms a prober may ask for; `None` for those
    /// the host allows unprivileged users
    /// (/proc/sys/net/ipv4/tcp_allowed_congestion_control). A responder
    /// running as root could set any loaded algorithm, so the prober's wish
    /// alone must not decide.
    pub allowed_congestion: Option<Vec<String>>,
    /// Whether a prober may set the TOS of this host's data sockets.
    pub allow_tos: bool,
    /// Whether a prober may pin this host's data threads to a CPU.
    pub allow_affinity: bool,
    /// Connections per second one `tcp_crr` test may open (at least 1);
    /// its count is this over the test. Told to probers in the welcome,
    /// which pace themselves to it; the door resets those beyond it.
    pub max_connections_per_second: u32,
    /// When set, probers must prove they hold it.
    pub secret: Option<Secret>,
    pub access: AccessList,
    /// The newest control protocol version to agree to; this release's by
    /// default. Held to 2, the responder answers exactly as the previous
    /// release did (the compatibility tests use it).
    pub max_protocol_version: u32,
    /// Whether each finished test is logged ("test done"). Off for the
    /// in-process responder of loopback probes, whose tests are the host's
    /// own probes, not counted in the service's responder metrics.
    pub log_tests: bool,
    /// TCP: whether this end moves bytes without copying them (the
    /// `zerocopy` key); the prober's `--zerocopy` governs only its own end.
    pub zerocopy: crate::engine::zerocopy::ZeroCopy,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        ResponderConfig {
            max_duration: Duration::from_secs(60),
            max_streams: 16,
            max_bitrate: 0,
            // A test allocates its write and read buffers per stream, so
            // this bounds a test's memory: at most 16 streams each way of
            // 1 MiB is 32 MiB, where the 16 MiB ceiling allowed 512 MiB.
            // iperf3 writes 128 KiB by default.
            max_length: DEFAULT_MAX_LENGTH,
            max_window: 256 << 20,
            limit_policy: LimitPolicy::Clamp,
            max_concurrent_tests: 1,
            // A scheduler probing every few seconds stays well within this;
            // a client looping on the responder does not.
            max_tests_per_client_per_minute: 60,
            max_bytes_per_hour: 0,
            // Half the hour: a fleet's scheduled probes use a small part of
            // it, and no single client can take more than its share.
            max_test_seconds_per_client_per_hour: Duration::from_secs(1800),
            idle_timeout: Duration::from_secs(10),
            first_message_timeout: Duration::from_secs(2),
            max_unauthenticated_udp_bitrate: 1_000_000_000,
            allowed_congestion: None,
            allow_tos: true,
            allow_affinity: true,
            max_connections_per_second: crate::protocol::crr::DEFAULT_MAX_CONNECTIONS_PER_SECOND,
            secret: None,
            access: AccessList::default(),
            max_protocol_version: crate::protocol::PROTOCOL_VERSION,
            log_tests: true,
            zerocopy: Default::default(),
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
            max_connections_per_second: self.max_connections_per_second.max(1),
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
    /// `tcp_crr` connections with a good token that their test's door
    /// turned away: over its connection rate or count, or its queue full.
    pub rejected_connection_limit: AtomicU64,
    /// Probers refused in mesh mode: not a member, or outside their
    /// planned slot (see [`turns`]).
    pub rejected_out_of_turn: AtomicU64,
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
    /// Of the tests above, those with stock iperf3 clients.
    pub iperf3_tests_succeeded: AtomicU64,
    pub iperf3_tests_failed: AtomicU64,
    /// Handshakes answered with a Welcome, by the protocol version agreed
    /// (index: version - OLDEST_PROTOCOL_VERSION).
    pub handshakes_by_version: [AtomicU64; HANDSHAKE_VERSIONS],
}

/// How many protocol versions this release speaks.
pub const HANDSHAKE_VERSIONS: usize =
    (crate::protocol::PROTOCOL_VERSION - crate::protocol::OLDEST_PROTOCOL_VERSION + 1) as usize;

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
pub struct ResponderHandle(Arc<ResponderState>);

impl ResponderHandle {
    pub fn set_config(&self, config: ResponderConfig) {
        self.0.known.set_allow(config.access.allow.clone());
        *self.0.config.write().unwrap_or_else(|p| p.into_inner()) = config;
    }

    /// Replaces the networks of the peers this host knows from its own
    /// configuration and discovery (mesh members, static targets), which
    /// get capacity of their own (see [`access::PerClient`]).
    pub fn set_known_peers(&self, nets: Vec<ipnet::IpNet>) {
        self.0.known.set_networks(nets);
    }

    /// In mesh mode, the plan whose turns probers must keep (`None`: any
    /// time), in force when this host's scheduler switches to it. The plan
    /// before it is kept too, so that members switching to a new plan at
    /// slightly different times are not refused (see [`turns::TurnBook`]).
    pub fn set_turns(&self, turns: Option<turns::Turns>) {
        self.0
            .turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set(turns, unix_now());
    }

    /// In mesh mode, whether this host's plan leaves it idle now for a
    /// test of `need` that this host runs itself (a `/probe`): `Ok` with
    /// how long until the gap ends (`None`: no end, or not in mesh mode),
    /// or the refusal with the next free gap.
    pub fn mesh_gap(&self, need: Duration) -> Result<Option<Duration>, turns::Refusal> {
        let turns = self.0.turns.lock().unwrap_or_else(|p| p.into_inner());
        if turns.is_empty() {
            return Ok(None);
        }
        let now = unix_now();
        turns
            .gap(None, now, need)
            .map(|until| until.map(|u| u.saturating_sub(now)))
    }

    /// Who counts as a known peer now.
    pub fn known_peers(&self) -> Arc<KnownPeers> {
        self.0.known.clone()
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
    /// `tcp_crr`: where the test's connections go, for its whole run.
    door: Option<door::Door>,
}

/// What became of a TCP data connection offered to the pending tests.
enum Joined {
    Yes,
    /// Its hello named no test of this client: the connection, to reset.
    Unknown(std::net::TcpStream),
    /// A `tcp_crr` test's door turned it away.
    OverLimit(std::net::TcpStream),
}

/// Wall-clock time since the Unix epoch: the mesh plan is read off it.
fn unix_now() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

pub(crate) struct ResponderState {
    config: std::sync::RwLock<ResponderConfig>,
    pub(crate) counters: Arc<ResponderCounters>,
    pending: Mutex<HashMap<String, PendingTest>>,
    /// The host's test slot, shared with its own probes in `serve`.
    slot: Arc<HostSlot>,
    /// Clients told busy, and until when their turn is kept.
    waiting: Mutex<HashMap<IpAddr, Waiting>>,
    /// Clients whose last test moved no data, and until when they wait.
    stalled: Mutex<HashMap<IpAddr, Instant>>,
    client_rate: Mutex<ClientRate>,
    slot_time: Mutex<SlotTime>,
    bytes: Mutex<ByteBudget>,
    /// The host's byte budget (`scheduler.max_bytes_per_hour`), shared
    /// with its own probes in `serve`: served tests count against it too.
    pub(crate) host_budget: Arc<HostBudget>,
    /// Mesh members, static targets, allow-list entries and clients that
    /// proved the secret: they have capacity of their own below.
    pub(crate) known: Arc<KnownPeers>,
    /// Mesh plans whose turns probers must keep: the current and the one
    /// before it, or one not yet in force; empty outside mesh mode.
    turns: Mutex<turns::TurnBook>,
    /// Connections waiting for their first message, per client and in
    /// all ([`MAX_PENDING_CONNECTIONS`]).
    pub(crate) pending_clients: Arc<PerClient>,
    /// Control sessions open, per client and in all ([`MAX_SESSIONS`]).
    pub(crate) session_clients: Arc<PerClient>,
    refusals: Arc<tokio::sync::Semaphore>,
    pub(crate) log: LogLimiter,
}

impl ResponderState {
    /// The limits in force now; a reload may change them between tests.
    pub(crate) fn config(&self) -> ResponderConfig {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Claims a test slot for `client`, planned to end at `planned_end`;
    /// on refusal returns how long until one is likely free.
    ///
    /// Slots are taken in turns: a client that was told busy keeps a claim
    /// to the next free slot until shortly after the time it was told, so
    /// that a client running test after test cannot keep the slot from
    /// everyone else by asking again the instant its test ends.
    ///
    /// `asker` (the prober's and our own address of its connection) lets
    /// a probe of ours aimed at that prober give way to it
    /// ([`crate::slot::gives_way`]); the iperf3 port passes none.
    fn try_claim(
        &self,
        client: IpAddr,
        planned_end: Instant,
        asker: Option<Asker>,
    ) -> Result<SlotGuard<'_>, Duration> {
        let now = Instant::now();
        let key = access::client_key(client);
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.retain(|_, w| w.until > now);
        // Turns go to whoever was told busy first.
        let mine = waiting.get(&key).map(|w| w.since);
        let others_first = waiting
            .iter()
            .any(|(k, w)| *k != key && mine.is_none_or(|since| w.since < since));
        // The slot is the host's: taken by the tests it serves and by its
        // own probes alike (see [`crate::slot`]).
        let claimed = if others_first {
            Err(Duration::from_secs(1))
        } else {
            self.slot
                .try_serve_from(self.config().max_concurrent_tests, planned_end, asker)
                .map_err(|refused| refused.retry_after)
        };
        let permit = match claimed {
            Ok(permit) => permit,
            Err(wait) => {
                let until = now + wait + TURN_GRACE;
                let room = waiting.len() < MAX_WAITING_CLIENTS;
                match waiting.get_mut(&key) {
                    Some(w) => w.until = until,
                    None if room => {
                        waiting.insert(key, Waiting { since: now, until });
                    }
                    None => {}
                }
                return Err(wait);
            }
        };
        waiting.remove(&key);
        self.counters.active_tests.fetch_add(1, Ordering::Relaxed);
        Ok(SlotGuard {
            shared: self,
            permit,
            client: key,
            claimed: now,
        })
    }

    /// In mesh mode, whether `ip` may take the host slot now for a test
    /// of `need`: as the planned prober of this slot, or in a gap the plan
    /// leaves this host idle, which the test must not outlast (the Unix
    /// time it is cut at). Outside mesh mode, anyone, for any time.
    fn check_turn(
        &self,
        ip: IpAddr,
        need: Duration,
    ) -> Result<Option<turns::Admit>, turns::Refusal> {
        let turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        if turns.is_empty() {
            return Ok(None);
        }
        turns.check(ip, unix_now(), need).map(Some)
    }

    /// Records a test for `ip` against the per-client allowance.
    fn admit_client(&self, ip: IpAddr, per_minute: u32) -> Result<(), Duration> {
        self.client_rate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(ip, per_minute, Instant::now())
    }

    /// A client whose test moved no data sits out [`STALL_PENALTY`]: a
    /// prober that opens its streams and then does nothing would otherwise
    /// take every other turn at the slot for the seconds it takes to notice.
    fn penalize_stall(&self, ip: IpAddr) {
        let now = Instant::now();
        let mut stalled = self.stalled.lock().unwrap_or_else(|p| p.into_inner());
        stalled.retain(|_, until| *until > now);
        if stalled.len() < MAX_WAITING_CLIENTS {
            stalled.insert(access::client_key(ip), now + STALL_PENALTY);
        }
    }

    /// How long `ip` still sits out after a test that moved no data.
    fn stall_penalty(&self, ip: IpAddr) -> Option<Duration> {
        let now = Instant::now();
        let stalled = self.stalled.lock().unwrap_or_else(|p| p.into_inner());
        stalled
            .get(&access::client_key(ip))
            .filter(|until| **until > now)
            .map(|until| until.saturating_duration_since(now))
    }

    /// Whether `ip` may hold a slot for another `planned` within its hour.
    fn check_slot_time(
        &self,
        ip: IpAddr,
        planned: Duration,
        per_hour: Duration,
    ) -> Result<(), Duration> {
        self.slot_time
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .check(ip, planned, per_hour, Instant::now())
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

    /// Offers a TCP data connection, its hello read, to the test its token
    /// names.
    fn join_tcp(
        &self,
        token: &str,
        peer: IpAddr,
        stream: u32,
        socket: std::net::TcpStream,
    ) -> Joined {
        use crate::engine::connections::Arrival;
        use crate::protocol::crr::{END_STREAM, TRANSACTION_STREAM};
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let Some(test) = pending.get_mut(token).filter(|t| t.peer_ip == peer) else {
            return Joined::Unknown(socket);
        };
        if let Some(door) = test.door.as_mut() {
            let arrival = match stream {
                TRANSACTION_STREAM => Arrival::Transaction(socket),
                END_STREAM => Arrival::End(socket),
                _ => return Joined::Unknown(socket),
            };
            return match door.offer(arrival, Instant::now()) {
                Ok(()) => Joined::Yes,
                Err(a) => Joined::OverLimit(a.into_stream()),
            };
        }
        if stream >= test.total_streams || test.registered.contains(&stream) {
            return Joined::Unknown(socket);
        }
        test.registered.insert(stream);
        match test.tx.send((stream, DataSocket::Tcp(socket))) {
            Ok(()) => Joined::Yes,
            // The test is ending.
            Err(mpsc::error::SendError((_, DataSocket::Tcp(s)))) => Joined::Unknown(s),
            Err(_) => Joined::Yes,
        }
    }

    fn register(&self, token: &str, peer: IpAddr, stream: u32, socket: DataSocket) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let Some(test) = pending.get_mut(token).filter(|t| t.door.is_none()) else {
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
            t.door.is_none()
                && t.peer_ip == peer
                && stream < t.total_streams
                && !t.registered.contains(&stream)
        })
    }
}

/// A client told busy: since when it waits, and until when its turn is
/// kept if it does not come back.
struct Waiting {
    since: Instant,
    until: Instant,
}

/// How long a client whose test moved no data waits before its next test.
pub const STALL_PENALTY: Duration = Duration::from_secs(30);

/// How long past its retry hint a client told busy keeps its turn.
const TURN_GRACE: Duration = Duration::from_secs(3);
/// Clients whose turn is remembered at once; more are simply told busy.
const MAX_WAITING_CLIENTS: usize = 1024;

struct SlotGuard<'a> {
    shared: &'a ResponderState,
    permit: SlotPermit,
    client: IpAddr,
    claimed: Instant,
}

impl SlotGuard<'_> {
    /// The test started now: its slot frees at `end`.
    fn started(&self, end: Instant) {
        self.permit.set_end(end);
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        self.shared
            .slot_time
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(
                self.client,
                now.saturating_duration_since(self.claimed),
                now,
            );
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
    // A deep accept queue: under a flood of connections, a full queue drops
    // real probers' SYNs, which they only retry a second later.
    sock.listen(1024)?;
    TcpListener::from_std(sock.into())
}

/// A responder ready to serve on bound sockets.
pub struct Responder {
    shared: Arc<ResponderState>,
    tcp: TcpListener,
    udp: Arc<UdpSocket>,
}

impl Responder {
    /// A responder with a test slot of its own (`pathprobe respond`).
    pub fn new(
        tcp: TcpListener,
        udp: UdpSocket,
        config: ResponderConfig,
    ) -> std::io::Result<Responder> {
        Responder::with_slot(tcp, udp, config, HostSlot::new())
    }

    /// A responder whose tests take `slot`, the host's test slot that its
    /// own probes take too, with no host byte budget.
    pub fn with_slot(
        tcp: TcpListener,
        udp: UdpSocket,
        config: ResponderConfig,
        slot: Arc<HostSlot>,
    ) -> std::io::Result<Responder> {
        Responder::with_slot_and_budget(tcp, udp, config, slot, Arc::default())
    }

    /// A responder whose tests take `slot` and count against `budget`,
    /// the host's byte budget, as its own probes do (`pathprobe serve`).
    pub fn with_slot_and_budget(
        tcp: TcpListener,
        udp: UdpSocket,
        config: ResponderConfig,
        slot: Arc<HostSlot>,
        budget: Arc<HostBudget>,
    ) -> std::io::Result<Responder> {
        let known = Arc::new(KnownPeers::default());
        known.set_allow(config.access.allow.clone());
        Ok(Responder {
            shared: Arc::new(ResponderState {
                config: std::sync::RwLock::new(config),
                counters: Arc::default(),
                pending: Mutex::default(),
                slot,
                waiting: Mutex::default(),
                stalled: Mutex::default(),
                client_rate: Mutex::default(),
                slot_time: Mutex::default(),
                bytes: Mutex::new(ByteBudget::new(Instant::now())),
                host_budget: budget,
                pending_clients: Arc::new(PerClient::new(
                    MAX_PENDING_CONNECTIONS,
                    KNOWN_PENDING_RESERVE,
                    known.clone(),
                )),
                session_clients: Arc::new(PerClient::new(
                    MAX_SESSIONS,
                    KNOWN_SESSION_RESERVE,
                    known.clone(),
                )),
                known,
                turns: Mutex::default(),
                refusals: Arc::new(tokio::sync::Semaphore::new(MAX_REFUSALS_IN_FLIGHT)),
                log: LogLimiter::default(),
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
        let udp_task = tokio::spawn(udp::serve_hellos(self.udp.clone(), self.shared.clone()));
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.tcp.accept() => match accepted {
                    Ok((stream, peer)) => {
                        if let Some(conn) = admit_connection(stream, normalize(peer), &self.shared) {
                            tasks.spawn(conn);
                        }
                    }
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
/// Connections one client (an IPv4 address or an IPv6 /64) may have
/// waiting for their first message: a quarter of all, so one client cannot
/// take them all. A prober opens its data connections one after another
/// without waiting for the responder to read each hello, so a test of 16
/// streams each way can have all 32 waiting at once.
pub const MAX_PENDING_PER_CLIENT: u32 = 64;
/// Control sessions open at once, past their hello, in all and per client.
/// Only one test runs at a time; the rest are handshakes and busy answers,
/// which are quick.
pub const MAX_SESSIONS: usize = 64;
pub const MAX_SESSIONS_PER_CLIENT: u32 = 4;
/// Of the waiting connections and the sessions, how many only known peers
/// (mesh members, static targets, allow-list entries, clients that proved
/// the secret) may use: unknown clients, however many addresses they
/// have, leave known ones these.
pub const KNOWN_PENDING_RESERVE: usize = 64;
pub const KNOWN_SESSION_RESERVE: usize = 16;
/// Refusals being written at once; past this, refused clients are closed
/// without a word.
const MAX_REFUSALS_IN_FLIGHT: usize = 64;
/// How long a refusal may take to write and drain.
const REFUSAL_TIMEOUT: Duration = Duration::from_millis(500);

/// Decides what to do with a new connection, cheapest check first: the
/// allow and deny lists before anything is read or held, then the caps on
/// waiting connections per client and in all. Returns the task that serves
/// the connection, if it is to be served.
fn admit_connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<ResponderState>,
) -> Option<impl Future<Output = ()> + Send + 'static> {
    let permitted = shared
        .config
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .access
        .permits(peer.ip());
    if !permitted {
        shared.counters.reject(RejectReason::Denied);
        log::limited_info!(shared.log, "denied", %peer, "client refused by the allow/deny lists");
        // Told why, so that an operator's prober can say so, but within a
        // small budget of time and of refusals in flight.
        let permit = shared.refusals.clone().try_acquire_owned().ok()?;
        let message = format!("this responder does not accept tests from {}", peer.ip());
        return Some(futures_refusal(stream, message, permit));
    }
    let client = match shared.pending_clients.admit(
        peer.ip(),
        MAX_PENDING_PER_CLIENT,
        Instant::now(),
    ) {
        Ok(admitted) => admitted.permit,
        Err(access::ShareRefused::Client) => {
            ResponderCounters::inc(&shared.counters.overload);
            log::limited_info!(shared.log, "overload_client", %peer, "client has too many connections waiting; closed");
            return None;
        }
        Err(access::ShareRefused::Full) => {
            // A flood: close at once rather than queue without bound; real
            // probers retry.
            ResponderCounters::inc(&shared.counters.overload);
            log::limited_info!(shared.log, "overload", %peer, "too many connections waiting; closed");
            return None;
        }
    };
    let shared = shared.clone();
    Some(either_connection(stream, peer, shared, client))
}

/// Boxed so that [`admit_connection`] returns one future type for both kinds
/// of connection.
fn futures_refusal(
    stream: TcpStream,
    message: String,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let mut control = Control::new(stream);
        let msg = Message::Rejected {
            reason: RejectReason::Denied,
            message,
        };
        let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
            if control.send(&msg, REFUSAL_TIMEOUT).await.is_ok() {
                drain_and_close(control.stream()).await;
            }
        })
        .await;
        drop(permit);
    })
}

fn either_connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<ResponderState>,
    pending: access::ClientPermit,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(handle_connection(stream, peer, shared, pending))
}

async fn handle_connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<ResponderState>,
    pending: access::ClientPermit,
) {
    let config = shared.config();
    // A connection that has said nothing is the cheapest work to drop: it
    // goes when a lighter client needs its place (see `PerClient`).
    let first = tokio::select! {
        first = read_message(&mut stream, config.first_message_timeout) => first,
        _ = pending.evicted() => {
            ResponderCounters::inc(&shared.counters.overload);
            log::limited_info!(shared.log, "evicted", %peer, "waiting connection dropped to make room for a lighter client");
            return;
        }
    };
    // Past its first message a connection is a session (bounded below) or
    // a data stream (bounded by the test that it joins).
    drop(pending);
    match first {
        Ok(Message::Hello(hello)) => {
            let own = shared
                .session_clients
                .try_acquire(peer.ip(), MAX_SESSIONS_PER_CLIENT);
            let Some(own) = own else {
                ResponderCounters::inc(&shared.counters.overload);
                log::limited_info!(shared.log, "sessions", %peer, "too many control sessions open; told busy");
                let busy = Message::Busy {
                    retry_after_ms: 1000,
                    message: "responder has too many control sessions open; retry in 1 s".into(),
                };
                let mut control = Control::new(stream);
                let _ = control.send(&busy, REFUSAL_TIMEOUT).await;
                return;
            };
            // An unauthenticated session that has not asked for a test yet
            // goes when a lighter client needs its place; past that point
            // the session protects its unit (see `session::run`).
            tokio::select! {
                _ = session::run(stream, peer, hello, &shared, &own) => {}
                _ = own.evicted() => {
                    ResponderCounters::inc(&shared.counters.overload);
                    log::limited_info!(shared.log, "evicted", %peer, "idle session dropped to make room for a lighter client");
                }
            }
        }
        Ok(Message::DataHello { token, stream: id }) => {
            let joined = stream.into_std().and_then(|s| {
                crate::engine::datapath::prepare_blocking(&s)?;
                Ok(shared.join_tcp(&token, peer.ip(), id, s))
            });
            // Turned-away connections are reset, so that a flood of them
            // leaves no TIME_WAIT here.
            match joined {
                Ok(Joined::Yes) => {}
                Ok(Joined::OverLimit(s)) => {
                    ResponderCounters::inc(&shared.counters.rejected_connection_limit);
                    log::limited_info!(shared.log, "connection_limit", %peer, "tcp_crr connection over its test's limits; reset");
                    crate::kinds::tcp_crr::abort(s);
                }
                Ok(Joined::Unknown(s)) => {
                    ResponderCounters::inc(&shared.counters.rejected_bad_token);
                    tracing::debug!(%peer, stream = id, "data connection for no pending test");
                    crate::kinds::tcp_crr::abort(s);
                }
                Err(_) => {
                    ResponderCounters::inc(&shared.counters.rejected_bad_token);
                    tracing::debug!(%peer, stream = id, "data connection could not be taken over");
                }
            }
        }
        Ok(other) => {
            ResponderCounters::inc(&shared.counters.protocol_errors);
            tracing::debug!(%peer, received = ?other, "unexpected first message");
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
    control: &mut Control<TcpStream>,
    counters: &ResponderCounters,
    reason: RejectReason,
    message: String,
    timeout: Duration,
) {
    counters.reject(reason);
    let msg = Message::Rejected { reason, message };
    if control.send(&msg, timeout).await.is_err() {
        return;
    }
    drain_and_close(control.stream()).await;
}

/// Half-closes, then reads what the client had already sent, bounded in
/// time and bytes, so that closing does not reset the connection and
/// destroy the reply in flight, and a refused client cannot hold the task.
async fn drain_and_close(stream: &mut TcpStream) {
    let _ = stream.shutdown().await;
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
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
