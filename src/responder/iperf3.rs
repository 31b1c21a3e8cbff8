//! The responder's iperf3 port: answers stock `iperf3 -c` clients (3.12
//! and later) through iperf3's own protocol, on a port of its own (5201 by
//! convention, off unless configured; see docs/SECURITY.md for why not the
//! responder's port).
//!
//! Everything but the conversation is the responder's: the allow and deny
//! lists, the limits (refused when exceeded, except a duration under
//! `limit_policy: clamp`, which runs to the limit and is ended there by
//! the responder: an iperf3 client cannot be given fewer streams or a
//! lower rate than it asked for), the byte budget, the per-client
//! allowances, the host's test slots and its counters; and its defences
//! against hostile clients, shared with the native port: the per-client
//! share of waiting connections, the refusal budget, the session caps, the
//! stall watchdog and penalty, and the log limiter. The data path is the
//! one both ends of a native test run ([`TestSide`]). What iperf3
//! cannot express is refused through iperf3's error path (SERVER_ERROR
//! with the closest iperf3 error code, or ACCESS_DENIED for "try again
//! later"), so that a stock client prints a message and exits non-zero.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::log::limited_info;
use super::{
    normalize, LimitPolicy, ResponderCounters, ResponderState, MAX_PENDING_CONNECTIONS,
    MAX_PENDING_PER_CLIENT, MAX_SESSIONS_PER_CLIENT,
};
use crate::byte_budget::{BudgetRole, ChargeOnDrop};
use crate::engine::datapath::{DataSocket, UdpWire};
use crate::kinds::kind::Transport;
use crate::kinds::side::{End, TestSide};
use crate::probe::iperf3::local_results;
use crate::protocol::iperf3::{
    check_json_len, encode_json_len, encode_server_error, errors, is_cookie, same_cookie, Params,
    State, COOKIE_LEN, MAX_PARAMS_LEN,
};
use crate::protocol::{Direction, RejectReason, TestRequest};

/// iperf3's "an option you are trying to set is not implemented yet".
const IEUNIMP: i32 = 13;
/// iperf3's "no SCTP support available".
const IENOSCTP: i32 = 18;
/// Longest results JSON read from a client: a few hundred bytes a stream.
const MAX_CLIENT_RESULTS: u32 = 64 * 1024;
/// How long a refusal may take to write.
const REFUSAL_TIMEOUT: Duration = Duration::from_millis(500);

/// A TCP data connection, with its place in the accept order.
type DataConn = (u64, TcpStream);

/// A test in progress: its cookie, its client, where its TCP data
/// connections go, and how many of them it still expects. Connections past
/// that count are refused at once, so that one client cannot queue
/// connections without bound behind its own test.
struct Active {
    cookie: [u8; COOKIE_LEN],
    peer: IpAddr,
    tx: mpsc::UnboundedSender<DataConn>,
    wanted: u32,
}

/// The tests running on this port: up to the responder's
/// `max_concurrent_tests`, each found by its client and cookie.
#[derive(Default)]
struct Tests {
    next_id: u64,
    running: HashMap<u64, Active>,
}

type Registry = Arc<Mutex<Tests>>;

/// A listener that serves stock iperf3 clients with a responder's state.
pub struct Iperf3Server {
    shared: Arc<ResponderState>,
    tcp: TcpListener,
    tests: Registry,
}

impl super::Responder {
    /// An iperf3 listener sharing this responder's limits, slot, counters
    /// and defences (per-client shares, session caps, refusal budget, log
    /// limiter).
    pub fn iperf3(&self, tcp: TcpListener) -> Iperf3Server {
        Iperf3Server {
            shared: self.shared.clone(),
            tcp,
            tests: Registry::default(),
        }
    }
}

impl Iperf3Server {
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Serves until `shutdown` completes.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let local = match self.tcp.local_addr() {
            Ok(a) => a,
            Err(_) => return,
        };
        // Connections waiting for their cookie, as many as the native port
        // lets wait for their first message.
        let pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_CONNECTIONS));
        let mut tasks = tokio::task::JoinSet::new();
        // iperf3 gives a stream its role by the order the client opened it
        // in (bidir: its senders first). Each connection's cookie is read
        // in a task of its own, and those tasks finish in any order under
        // load, so the accept order travels with the connection.
        let mut accepted_seq: u64 = 0;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.tcp.accept() => match accepted {
                    Ok((stream, peer)) => {
                        accepted_seq += 1;
                        let conn = (accepted_seq, stream);
                        if let Some(task) = admit(conn, normalize(peer), local, &self.shared, &self.tests, &pending) {
                            tasks.spawn(task);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "iperf3 accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        tasks.shutdown().await;
    }
}

/// Decides what to do with a new connection, as the native port does
/// (`admit_connection` in the responder), cheapest check first: the allow
/// and deny lists before anything is read or held, answered within the
/// responder's separate budget of refusals in flight; then the client's
/// share of connections waiting for a first message (shared with the
/// native port), then the port's total.
fn admit(
    conn: DataConn,
    peer: SocketAddr,
    local: SocketAddr,
    shared: &Arc<ResponderState>,
    tests: &Registry,
    pending: &Arc<tokio::sync::Semaphore>,
) -> Option<BoxedTask> {
    let permitted = shared
        .config
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .access
        .permits(peer.ip());
    if !permitted {
        shared.counters.reject(RejectReason::Denied);
        limited_info!(shared.log, "iperf3_denied", %peer, "iperf3 client refused by the allow/deny lists");
        let permit = shared.refusals.clone().try_acquire_owned().ok()?;
        return Some(Box::pin(async move {
            refuse_with(conn.1, &encode_server_error(errors::IEAUTHTEST, 0)).await;
            drop(permit);
        }));
    }
    let Some(client) = shared
        .pending_clients
        .try_acquire(peer.ip(), MAX_PENDING_PER_CLIENT)
    else {
        ResponderCounters::inc(&shared.counters.overload);
        limited_info!(shared.log, "iperf3_overload_client", %peer, "iperf3 client has too many connections waiting; closed");
        return None;
    };
    let Ok(permit) = pending.clone().try_acquire_owned() else {
        ResponderCounters::inc(&shared.counters.overload);
        limited_info!(shared.log, "iperf3_overload", %peer, "too many iperf3 connections waiting; closed");
        return None;
    };
    let (shared, tests) = (shared.clone(), tests.clone());
    Some(Box::pin(async move {
        connection(conn, peer, local, shared, tests, (permit, client)).await;
    }))
}

type BoxedTask = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Writes `bytes` and closes, within a short bound.
async fn refuse_with(mut stream: TcpStream, bytes: &[u8]) {
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
        let _ = stream.write_all(bytes).await;
        let _ = stream.shutdown().await;
        // Read what the client sent, so that closing does not reset the
        // connection under the reply.
        let mut buf = [0u8; 1024];
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// Tells a client "busy, try again later" (ACCESS_DENIED) within the
/// responder's budget of refusals in flight; past it, closes at once.
async fn refuse_busy(shared: &ResponderState, stream: TcpStream) {
    if let Ok(permit) = shared.refusals.clone().try_acquire_owned() {
        refuse_with(stream, &[State::AccessDenied.byte()]).await;
        drop(permit);
    }
}

async fn connection(
    (seq, mut stream): DataConn,
    peer: SocketAddr,
    local: SocketAddr,
    shared: Arc<ResponderState>,
    tests: Registry,
    pending: (
        tokio::sync::OwnedSemaphorePermit,
        super::access::ClientPermit,
    ),
) {
    let config = shared.config();
    let counters = &shared.counters;
    let mut cookie = [0u8; COOKIE_LEN];
    let read = tokio::time::timeout(config.first_message_timeout, stream.read_exact(&mut cookie));
    // The shared pool may drop this waiting connection to make room for a
    // lighter client (see `access::PerClient`): then it closes at once.
    let read = tokio::select! {
        r = read => r,
        _ = pending.1.evicted() => {
            tracing::debug!(%peer, "iperf3 connection dropped for a lighter client");
            return;
        }
    };
    // Past its cookie a connection is a session (capped below) or a data
    // stream (capped by the test it joins).
    drop(pending);
    match read {
        Err(_) => {
            ResponderCounters::inc(&counters.timeouts);
            tracing::debug!(%peer, "iperf3 connection sent no cookie");
            return;
        }
        Ok(Err(_)) => {
            ResponderCounters::inc(&counters.protocol_errors);
            tracing::debug!(%peer, "iperf3 connection closed inside its cookie");
            return;
        }
        Ok(Ok(_)) => {}
    }
    // A data connection of a test in progress: its client's, with its
    // cookie, while the test still expects streams.
    let joined = {
        let mut tests = tests.lock().unwrap_or_else(|p| p.into_inner());
        tests
            .running
            .values_mut()
            .find(|a| a.peer == peer.ip() && same_cookie(&a.cookie, &cookie))
            .map(|a| {
                if a.wanted == 0 {
                    return None;
                }
                a.wanted -= 1;
                Some(a.tx.clone())
            })
    };
    match joined {
        Some(Some(tx)) => {
            let _ = tx.send((seq, stream));
            return;
        }
        Some(None) => {
            // More connections than the test asked for: closed at once,
            // never queued.
            ResponderCounters::inc(&counters.rejected_connection_limit);
            limited_info!(shared.log, "iperf3_extra_stream", %peer, "iperf3 data connection beyond its test's streams; closed");
            return;
        }
        None => {}
    }
    if !is_cookie(&cookie) {
        ResponderCounters::inc(&counters.protocol_errors);
        tracing::debug!(%peer, "iperf3 connection opened with no cookie");
        return;
    }
    // A new session: held to the native port's session pool (in all, for
    // unknown clients, and per client), which the two ports share.
    let own = shared
        .session_clients
        .try_acquire(peer.ip(), MAX_SESSIONS_PER_CLIENT);
    let Some(own) = own else {
        ResponderCounters::inc(&counters.overload);
        limited_info!(shared.log, "iperf3_sessions", %peer, "too many control sessions open; iperf3 client told busy");
        refuse_busy(&shared, stream).await;
        return;
    };
    if config.secret.is_some() {
        // iperf3's RSA authentication is not implemented: with a secret,
        // only authenticated pathprobe probers are served.
        counters.reject(RejectReason::AuthRequired);
        limited_info!(shared.log, "iperf3_auth_required", %peer, "iperf3 client refused: this responder requires pathprobe's authentication");
        refuse_with(stream, &encode_server_error(errors::IEAUTHTEST, 0)).await;
        return;
    }
    let _ = stream.set_nodelay(true);
    // Until it has asked for a test, the session may be dropped to make
    // room for a lighter client; `session` protects it once it has.
    tokio::select! {
        _ = session(stream, peer, local, cookie, &shared, &tests, &own) => {}
        _ = own.evicted() => {
            tracing::debug!(%peer, "idle iperf3 session dropped for a lighter client");
        }
    }
}

/// How a session ended, for the counters.
enum Outcome {
    Done,
    Failed(&'static str),
    /// Ended because it moved no data: its client sits out a while.
    Stalled(&'static str),
}

async fn session(
    mut control: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    cookie: [u8; COOKIE_LEN],
    shared: &ResponderState,
    tests: &Mutex<Tests>,
    permit: &super::access::ClientPermit,
) {
    let config = shared.config();
    let counters = &shared.counters;
    if control
        .write_all(&[State::ParamExchange.byte()])
        .await
        .is_err()
    {
        return;
    }
    // A stock client sends its parameters the moment it is asked: a
    // session that does not is held no longer than a silent connection.
    let params = match read_params(&mut control, config.first_message_timeout).await {
        Ok(p) => p,
        Err(ParamsError::Timeout) => {
            ResponderCounters::inc(&counters.timeouts);
            limited_info!(shared.log, "iperf3_no_params", %peer, "iperf3 client sent no parameters");
            return;
        }
        Err(ParamsError::Closed) => {
            ResponderCounters::inc(&counters.protocol_errors);
            return;
        }
        Err(ParamsError::Bad(why)) => {
            ResponderCounters::inc(&counters.protocol_errors);
            limited_info!(shared.log, "iperf3_bad_params", %peer, %why, "iperf3 client's parameters refused");
            refuse_with(control, &encode_server_error(errors::IERECVPARAMS, 0)).await;
            return;
        }
    };
    // It asked for a test: no longer cheap to drop.
    if !permit.protect() {
        return;
    }
    let request = match to_request(&params, &config) {
        Ok(r) => r,
        Err((code, why)) => {
            counters.reject(RejectReason::Limit);
            limited_info!(shared.log, "iperf3_limit", %peer, %why, "iperf3 test refused");
            refuse_with(control, &encode_server_error(code, 0)).await;
            return;
        }
    };
    // A byte or block count is known now: it must fit the hour's budget
    // (both directions' worth for --bidir).
    if let Some(bytes) = asked_bytes(&params, request.length) {
        let bytes = match request.direction {
            Direction::Bidir => bytes.saturating_mul(2),
            Direction::Send | Direction::Receive => bytes,
        };
        match budget_for(shared, config.max_bytes_per_hour, bytes) {
            Ok(()) => {}
            Err(never) => {
                limited_info!(shared.log, "iperf3_budget", %peer, bytes, never, "iperf3 test refused: over the byte budget");
                if never {
                    counters.reject(RejectReason::Limit);
                    refuse_with(control, &encode_server_error(errors::IETOTALRATE, 0)).await;
                } else {
                    counters.reject(RejectReason::BudgetExhausted);
                    refuse_with(control, &[State::AccessDenied.byte()]).await;
                }
                return;
            }
        }
    }
    let planned = Duration::from_millis(request.omit_ms + request.duration_ms);
    // Allowances and the slot: every "not now" is iperf3's "busy, try
    // again later".
    if let Err((reason, message)) = super::session::allowances(shared, &config, peer.ip(), planned)
    {
        counters.reject(reason);
        limited_info!(shared.log, "iperf3_allowance", %peer, %message, "iperf3 test refused");
        refuse_with(control, &[State::AccessDenied.byte()]).await;
        return;
    }
    let Ok(slot) = shared.try_claim(peer.ip(), Instant::now() + planned, None) else {
        ResponderCounters::inc(&counters.rejected_busy);
        limited_info!(shared.log, "iperf3_busy", %peer, "iperf3 client told busy: the test slots are taken");
        refuse_with(control, &[State::AccessDenied.byte()]).await;
        return;
    };
    if shared
        .admit_client(peer.ip(), config.max_tests_per_client_per_minute)
        .is_err()
    {
        drop(slot);
        counters.reject(RejectReason::RateLimited);
        limited_info!(shared.log, "iperf3_allowance", %peer, "iperf3 test refused: the client has run its tests for this minute");
        refuse_with(control, &[State::AccessDenied.byte()]).await;
        return;
    }
    let (tx, rx) = mpsc::unbounded_channel();
    // UDP streams have no connection: only TCP ones join through the port.
    let wanted = match crate::kinds::of(request.kind).transport() {
        Transport::Udp => 0,
        Transport::Tcp => request.total_streams(),
    };
    let id = {
        let mut t = tests.lock().unwrap_or_else(|p| p.into_inner());
        t.next_id += 1;
        let id = t.next_id;
        t.running.insert(
            id,
            Active {
                cookie,
                peer: peer.ip(),
                tx,
                wanted,
            },
        );
        id
    };
    struct Clear<'a>(&'a Mutex<Tests>, u64);
    impl Drop for Clear<'_> {
        fn drop(&mut self) {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .running
                .remove(&self.1);
        }
    }
    let _clear = Clear(tests, id);
    let began = Instant::now();
    let outcome = run(
        &mut control,
        peer,
        local,
        &params,
        &request,
        rx,
        shared,
        &slot,
    )
    .await;
    drop(slot);
    match outcome {
        Outcome::Done => {
            ResponderCounters::inc(&counters.tests_succeeded);
            ResponderCounters::inc(&counters.iperf3_tests_succeeded);
            tracing::info!(
                %peer,
                protocol = "iperf3",
                kind = %request.kind,
                direction = %request.direction,
                // A number (ms resolution), so that JSON logs carry it as one.
                duration_seconds = (began.elapsed().as_secs_f64() * 1e3).round() / 1e3,
                clamped = clamped_duration(&params, &request).unwrap_or_default(),
                limit_policy = shared.config().limit_policy.as_str(),
                "test done"
            );
        }
        Outcome::Failed(why) => {
            ResponderCounters::inc(&counters.tests_failed);
            ResponderCounters::inc(&counters.iperf3_tests_failed);
            tracing::info!(%peer, protocol = "iperf3", error = why, "test failed");
        }
        Outcome::Stalled(why) => {
            ResponderCounters::inc(&counters.tests_failed);
            ResponderCounters::inc(&counters.iperf3_tests_failed);
            // As on the native port: the client sits out before its next
            // test, so that it cannot take turn after turn at the slot.
            shared.penalize_stall(peer.ip());
            tracing::info!(%peer, protocol = "iperf3", error = why, "test failed");
        }
    }
}

enum ParamsError {
    Timeout,
    Closed,
    Bad(String),
}

async fn read_params(control: &mut TcpStream, t: Duration) -> Result<Params, ParamsError> {
    let read = async {
        let mut prefix = [0u8; 4];
        control
            .read_exact(&mut prefix)
            .await
            .map_err(|_| ParamsError::Closed)?;
        let len =
            check_json_len(prefix, MAX_PARAMS_LEN).map_err(|e| ParamsError::Bad(e.to_string()))?;
        let mut body = vec![0u8; len];
        control
            .read_exact(&mut body)
            .await
            .map_err(|_| ParamsError::Closed)?;
        Params::decode(&body).map_err(|e| ParamsError::Bad(e.to_string()))
    };
    tokio::time::timeout(t, read)
        .await
        .map_err(|_| ParamsError::Timeout)?
}

/// The test a client's parameters ask for, held to the responder's limits
/// (refused, never cut down), or the iperf3 error code to refuse it with.
pub fn to_request(
    p: &Params,
    config: &super::ResponderConfig,
) -> Result<TestRequest, (i32, String)> {
    let unsupported = |what: &str| Err((IEUNIMP, format!("{what} is not supported")));
    if p.sctp.is_some() {
        return Err((IENOSCTP, "SCTP is not supported".into()));
    }
    if p.mptcp.is_some() {
        return unsupported("MPTCP");
    }
    if p.mss.is_some_and(|m| m > 0) {
        return unsupported("setting the MSS (-M)");
    }
    if p.authtoken.is_some() {
        return Err((
            errors::IEAUTHTEST,
            "iperf3 authentication is not supported".into(),
        ));
    }
    let kind = crate::kinds::registry::iperf3_kind(if p.is_udp() {
        crate::kinds::kind::Transport::Udp
    } else {
        crate::kinds::kind::Transport::Tcp
    });
    let direction = match (p.bidirectional.is_some(), p.reverse.is_some()) {
        (true, _) => Direction::Bidir,
        (false, true) => Direction::Receive,
        _ => Direction::Send,
    };
    if !(1..=128).contains(&p.parallel) {
        return Err((errors::IENUMSTREAMS, format!("{} streams", p.parallel)));
    }
    let streams = p.parallel as u32;
    if p.omit < 0 || p.time < 0 || p.omit > 3600 || p.time > 86_400 {
        return Err((errors::IEDURATION, "time or omit out of range".into()));
    }
    if p.num < 0 || p.blockcount < 0 {
        return Err((errors::IERECVPARAMS, "negative byte or block count".into()));
    }
    let max_ms = config.max_duration.as_millis() as u64;
    let omit_ms = p.omit as u64 * 1000;
    // -n/-k come with `time` 0: the client ends the test when it has
    // moved that much; the responder lets it run at most max_duration,
    // and ends it there (see `run`).
    let duration_ms = match p.time {
        0 => max_ms.saturating_sub(omit_ms).max(1),
        t => t as u64 * 1000,
    };
    let udp = crate::kinds::of(kind).transport() == Transport::Udp;
    // iperf3's own defaults and bounds (its datagram header, not ours);
    // the native bounds of the kind apply through check_limits below.
    let length = match p.len {
        Some(l) if l > 0 && l <= i64::from(u32::MAX) => l as u32,
        Some(_) if udp => return Err((errors::IEUDPBLOCKSIZE, "bad length".into())),
        Some(_) => return Err((errors::IEBLOCKSIZE, "bad length".into())),
        None if udp => 1460,
        None => 128 * 1024,
    };
    if udp && !(16..=65_507).contains(&length) {
        return Err((
            errors::IEUDPBLOCKSIZE,
            format!("datagrams of {length} bytes"),
        ));
    }
    let per_stream = p.bandwidth.unwrap_or(0);
    if per_stream < 0 {
        return Err((errors::IETOTALRATE, "negative rate".into()));
    }
    // A count that the asked rate cannot move within max_duration would be
    // cut short there: refused now, as a -t over the limit is.
    let rate = (per_stream as u64).saturating_mul(p.parallel as u64);
    if let (0, Some(bytes), true) = (p.time, asked_bytes(p, length), rate > 0) {
        let needed_ms = (bytes as u128 * 8 * 1000).div_ceil(u128::from(rate));
        if u128::from(omit_ms) + needed_ms > u128::from(max_ms) {
            return Err((
                duration_code(p),
                format!(
                    "max_duration: {bytes} bytes at {rate} bit/s take {:.1} s, over this responder's maximum of {} s",
                    needed_ms as f64 / 1000.0,
                    max_ms / 1000
                ),
            ));
        }
    }
    // Under `clamp`, a -t over max_duration runs to the limit and the
    // responder ends it there as a client's TEST_END would (see `run`):
    // a stock client then prints its full report of the time that ran,
    // with exit 0, and is never told a wrong limit. Every other limit is
    // refused below: a client opens the streams and sends at the rate it
    // asked for whatever the server says.
    let duration_ms = match config.limit_policy {
        LimitPolicy::Clamp if p.time > 0 && omit_ms < max_ms => duration_ms.min(max_ms - omit_ms),
        _ => duration_ms,
    };
    let request = TestRequest {
        kind,
        direction,
        duration_ms,
        omit_ms,
        streams,
        bitrate: (per_stream as u64).saturating_mul(u64::from(streams)),
        length,
        window: match p.window {
            Some(w) if w > 0 => Some(w.min(i64::from(u32::MAX)) as u32),
            _ => None,
        },
        congestion: p.congestion.clone(),
        tos: match p.tos {
            Some(t) if (1..=255).contains(&t) => Some(t as u8),
            Some(0) | None => None,
            Some(_) => return Err((IEUNIMP, "TOS out of range".into())),
        },
        affinity: None,
        interval_ms: None,
        no_offload: false,
        rr: None,
        adaptive: None,
    };
    // An iperf3 client cannot be told of a cut-down test, so any limit
    // refuses it, with the code whose message names it best.
    let refusing = super::ResponderConfig {
        limit_policy: LimitPolicy::Refuse,
        ..config.clone()
    };
    let admitted = super::check_limits(&request, &refusing).map_err(|m| {
        let code = if m.starts_with("max_duration") || m.starts_with("duration") {
            duration_code(p)
        } else if m.starts_with("max_streams") {
            errors::IENUMSTREAMS
        } else if m.contains("bitrate") {
            errors::IETOTALRATE
        } else if m.starts_with("max_length") {
            match crate::kinds::of(kind).transport() {
                Transport::Udp => errors::IEUDPBLOCKSIZE,
                Transport::Tcp => errors::IEBLOCKSIZE,
            }
        } else if m.starts_with("max_window") {
            errors::IEBUFSIZE
        } else {
            IEUNIMP
        };
        // Named with the operator's own policy, not the one forced here.
        let m = match config.limit_policy {
            LimitPolicy::Refuse => m,
            LimitPolicy::Clamp => format!(
                "{} (limit_policy: clamp, which an iperf3 test can only follow for its duration: a stock client opens the streams and sends at the rate it asked for, so it is refused)",
                m.trim_end_matches(" (limit_policy: refuse)")
            ),
        };
        (code, m)
    })?;
    Ok(admitted.request)
}

/// The code that refuses a test longer than this responder's
/// max_duration. A stock client prints a fixed text per code and cannot
/// be sent a number: code 5's text names iperf3's own maximum
/// ("maximum = 86400 seconds"), which a client would take for this
/// responder's. Clients from 3.20 on know code 37, whose text says the
/// server's own limit was exceeded, so they get that; older ones only
/// know 5.
fn duration_code(p: &Params) -> i32 {
    let version = p.client_version.as_deref().unwrap_or("");
    let mut parts = version.split(['.', '+', '-']).map(|n| n.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) if (major, minor) >= (3, 20) => {
            errors::IEMAXSERVERTESTDURATIONEXCEEDED
        }
        _ => errors::IEDURATION,
    }
}

/// The most a `-n`/`-k` test moves in each direction: the client stops at
/// `num` bytes, or at `blockcount` blocks (writes of `length`, or reads of
/// at most `length` with `-R`); `None` for a test bounded by time.
pub fn asked_bytes(p: &Params, length: u32) -> Option<u64> {
    match (p.num, p.blockcount) {
        (n, _) if n > 0 => Some(n as u64),
        (_, k) if k > 0 => Some((k as u64).saturating_mul(u64::from(length))),
        _ => None,
    }
}

/// Whether the hour's byte budget has room for a test that asks to move
/// `bytes` (`-n`/`-k`): never (more than the whole hour's), not now, or yes.
fn budget_for(shared: &ResponderState, per_hour: u64, bytes: u64) -> Result<(), bool> {
    if per_hour == 0 {
        return Ok(());
    }
    if bytes > per_hour {
        return Err(true);
    }
    let spent = shared
        .bytes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .spent(Instant::now());
    if spent.saturating_add(bytes) > per_hour {
        return Err(false);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn run(
    control: &mut TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    params: &Params,
    request: &TestRequest,
    mut rx: mpsc::UnboundedReceiver<DataConn>,
    shared: &ResponderState,
    slot: &super::SlotGuard<'_>,
) -> Outcome {
    let t = shared.config().idle_timeout;
    let counters = &shared.counters;
    let counters64 = params.udp_counters_64bit.is_some();
    // With -n/-k the responder's senders stop at the count, as iperf3's
    // server does; the client ends the test once it has received it.
    let side = TestSide::new(End::Responder, request, "", None, peer.ip())
        .with_wire(UdpWire::Iperf3 { counters64 })
        .with_send_limit(asked_bytes(params, request.length))
        .with_zerocopy(shared.config().zerocopy);
    let total = side.stream_count();
    // UDP flows arrive on the iperf3 port's UDP side, bound before the
    // client is told to open them.
    let udp_main = match crate::kinds::of(request.kind).transport() {
        Transport::Udp => match super::udp::bind_main(local) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(%local, error = %e, "cannot bind the iperf3 UDP port");
                let _ = control
                    .write_all(&encode_server_error(
                        errors::IESTREAMLISTEN,
                        e.raw_os_error().unwrap_or(0),
                    ))
                    .await;
                return Outcome::Failed("UDP port unavailable");
            }
        },
        Transport::Tcp => None,
    };
    if control
        .write_all(&[State::CreateStreams.byte()])
        .await
        .is_err()
    {
        return Outcome::Failed("client gone");
    }
    let mut sockets: BTreeMap<u32, DataSocket> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + t;
    let collect = async {
        let mut tcp: Vec<DataConn> = Vec::new();
        for id in 0..total as u32 {
            let socket = match &udp_main {
                None => {
                    tcp.push(tokio::time::timeout_at(deadline, rx.recv()).await.ok()??);
                    continue;
                }
                Some(main) => loop {
                    let mut buf = [0u8; 64];
                    let (n, from) = tokio::time::timeout_at(deadline, main.recv_from(&mut buf))
                        .await
                        .ok()?
                        .ok()?;
                    // Flows only from the control connection's host: UDP
                    // is never sent anywhere else.
                    if normalize(from).ip() != peer.ip() {
                        ResponderCounters::inc(&counters.udp_ignored);
                        continue;
                    }
                    let sock = super::udp::flow_socket(local, from).ok()?;
                    let _ = sock.send(&crate::protocol::iperf3::udp_reply_for(&buf[..n.min(4)]));
                    break DataSocket::Udp(sock);
                },
            };
            sockets.insert(id, socket);
        }
        // Stream i is the i-th connection the client opened.
        tcp.sort_by_key(|(seq, _)| *seq);
        for (id, (_, s)) in tcp.into_iter().enumerate() {
            let s = s.into_std().ok()?;
            crate::engine::datapath::prepare_blocking(&s).ok()?;
            sockets.insert(id as u32, DataSocket::Tcp(s));
        }
        Some(())
    };
    let mut byte = [0u8; 1];
    let collected = tokio::select! {
        c = collect => c.is_some(),
        _ = control.read(&mut byte) => false,
    };
    drop(udp_main);
    if !collected {
        ResponderCounters::inc(&counters.timeouts);
        // The slot was held for nothing: as a test that moved no data.
        return Outcome::Stalled("data streams did not arrive");
    }
    let ipv6 = local.is_ipv6();
    for socket in sockets.values() {
        if side.prepare(socket, ipv6).is_err() {
            let _ = control
                .write_all(&encode_server_error(errors::IESETCONGESTION, 0))
                .await;
            return Outcome::Failed("socket options");
        }
    }
    // iperf3's receiver stops counting at TEST_END: shutting the read side
    // wakes a reader held by its low-water mark at once, so that its
    // window ends with the test, not a poll later.
    let readers: Vec<std::net::TcpStream> = sockets
        .values()
        .filter_map(|s| match s {
            DataSocket::Tcp(t) => t.try_clone().ok(),
            DataSocket::Udp(_) | DataSocket::Connections(_) => None,
        })
        .collect();
    // UDP sockets stay open until the test is over, too: a datagram to a
    // closed one draws an ICMP error that fails a client still sending
    // when the responder ends a clamped test.
    let _udp_open: Vec<std::net::UdpSocket> = sockets
        .values()
        .filter_map(|s| match s {
            DataSocket::Udp(u) => u.try_clone().ok(),
            DataSocket::Tcp(_) | DataSocket::Connections(_) => None,
        })
        .collect();
    let running = match side.spawn(sockets) {
        Ok(r) => r,
        Err(_) => return Outcome::Failed("stream threads"),
    };
    let stop = running.stop.clone();
    let progress = running.progress.clone();
    // What moved counts against the host's byte budget however the test
    // ends, its warm-up included.
    let _charge = {
        let moved = progress.clone();
        ChargeOnDrop::new(shared.host_budget.clone(), BudgetRole::Serving, move || {
            moved.get()
        })
    };
    let stall_limit = running.stall_limit();
    if control
        .write_all(&[State::TestStart.byte(), State::TestRunning.byte()])
        .await
        .is_err()
    {
        return Outcome::Failed("client gone");
    }
    let planned = Duration::from_millis(request.omit_ms + request.duration_ms);
    slot.started(Instant::now() + planned);
    // The client owns the clock: its TEST_END ends the test. Its going
    // away, or silence past the planned end, ends it too. A test with no
    // time of its own (-n, -k) ends at the responder's max_duration: the
    // client is told with iperf3's "test duration too long", since iperf3
    // has no way for a server to end a test cleanly.
    let open_ended = params.time == 0;
    // A -t the responder clamped (limit_policy: clamp): the responder ends
    // it at the limit by starting the results exchange itself. A stock
    // client (3.12 to 3.21) handles EXCHANGE_RESULTS in any state: it
    // stops, sends its results, prints its full report with ours and
    // exits 0. SERVER_TERMINATE, the only other way a server can end a
    // test, makes it print a receiver of 0 bytes and fail.
    let clamped = clamped_duration(params, request);
    let limit = match (open_ended, clamped.is_some()) {
        (false, false) => planned + crate::engine::datapath::DRAIN_GRACE + t,
        _ => planned,
    };
    const CUT: &str = "max_duration reached before the client's byte or block count";
    const STALLED: &str = "no data moved: the client stopped taking part";
    // A test in which nothing moves is ended as on the native port: a
    // client that opened its streams and then sends or reads nothing
    // would otherwise hold the slot until the planned end and past it.
    let stalled = async {
        let mut watchdog = tokio::time::interval(Duration::from_millis(250));
        let mut last = (progress.get(), Instant::now());
        loop {
            watchdog.tick().await;
            let now = progress.get();
            if now != last.0 {
                last = (now, Instant::now());
            } else if last.1.elapsed() >= stall_limit {
                return;
            }
        }
    };
    let watch = async {
        let r = tokio::select! {
            r = tokio::time::timeout(limit, control.read_u8()) => Some(r),
            _ = stalled => None,
        };
        let Some(r) = r else {
            limited_info!(shared.log, "iperf3_stalled", %peer, "no data moved; iperf3 test ended");
            stop.stop();
            for s in &readers {
                let _ = s.shutdown(std::net::Shutdown::Read);
            }
            // iperf3's "idle timeout for receiving data".
            let _ = tokio::time::timeout(
                REFUSAL_TIMEOUT,
                control.write_all(&encode_server_error(errors::IENOMSG, 0)),
            )
            .await;
            return Err(STALLED);
        };
        if r.is_err() && open_ended {
            // The error first, and the client gone, before its data
            // connections are closed under it: a client that met the
            // reset first would report that instead.
            let _ = tokio::time::timeout(
                REFUSAL_TIMEOUT,
                control.write_all(&encode_server_error(errors::IEDURATION, 0)),
            )
            .await;
            let mut rest = [0u8; 64];
            let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
                while matches!(control.read(&mut rest).await, Ok(n) if n > 0) {}
            })
            .await;
        }
        stop.stop();
        for s in &readers {
            let _ = s.shutdown(std::net::Shutdown::Read);
        }
        match r {
            Ok(Ok(b)) if State::from_byte(b) == State::TestEnd => Ok(()),
            Ok(Ok(b)) if State::from_byte(b) == State::ClientTerminate => Err("client terminated"),
            Ok(Ok(_)) => Err("unexpected state from the client"),
            Ok(Err(_)) => Err("client vanished during the test"),
            Err(_) if clamped.is_some() => Ok(()),
            Err(_) if open_ended => Err(CUT),
            Err(_) => Err("no TEST_END from the client"),
        }
    };
    let (stats, ended) = tokio::join!(running.finish(), watch);
    // What moved counts against the hour's budget however the test ended.
    if let Ok(stats) = &stats {
        shared.spend(stats.streams.iter().map(|s| s.bytes).sum());
    }
    if let Err(why) = ended {
        if why == "no TEST_END from the client" {
            ResponderCounters::inc(&counters.timeouts);
        }
        if why == STALLED {
            return Outcome::Stalled(why);
        }
        return Outcome::Failed(why);
    }
    let Ok(stats) = stats else {
        return Outcome::Failed("data path failed");
    };
    let exchange = async {
        control
            .write_all(&[State::ExchangeResults.byte()])
            .await
            .ok()?;
        let mut prefix = [0u8; 4];
        control.read_exact(&mut prefix).await.ok()?;
        let len = check_json_len(prefix, MAX_CLIENT_RESULTS).ok()?;
        let mut theirs = vec![0u8; len];
        control.read_exact(&mut theirs).await.ok()?;
        let mut ours = local_results(request, &stats);
        if params.get_server_output.is_some() {
            let mut text = server_output(request, &stats);
            if let Some(c) = &clamped {
                text.push_str(&format!("note: the responder clamped this test: {c}\n"));
            }
            ours.server_output_text = Some(text);
        }
        let body = ours.encode();
        let mut msg = encode_json_len(body.len()).to_vec();
        msg.extend_from_slice(&body);
        msg.push(State::DisplayResults.byte());
        control.write_all(&msg).await.ok()?;
        // IPERF_DONE, then close.
        let done = control.read_u8().await.ok()?;
        (State::from_byte(done) == State::IperfDone).then_some(())
    };
    match tokio::time::timeout(t, exchange).await {
        Ok(Some(())) => Outcome::Done,
        Ok(None) => {
            ResponderCounters::inc(&counters.protocol_errors);
            Outcome::Failed("results exchange failed")
        }
        Err(_) => {
            ResponderCounters::inc(&counters.timeouts);
            Outcome::Failed("results exchange timed out")
        }
    }
}

/// The limit a -t was clamped to, as the native port words it, when the
/// responder cut it (`limit_policy: clamp`).
pub fn clamped_duration(params: &Params, request: &TestRequest) -> Option<String> {
    let asked_ms = u64::try_from(params.time).ok()?.saturating_mul(1000);
    (params.time > 0 && request.duration_ms < asked_ms).then(|| {
        format!(
            "max_duration: duration {} s clamped to {} s",
            params.time,
            request.duration_ms as f64 / 1000.0
        )
    })
}

/// The server's report for `--get-server-output`: what this side
/// measured, one line per stream, in iperf3's units.
fn server_output(request: &TestRequest, stats: &crate::engine::stats::SideStats) -> String {
    let mut out = format!(
        "pathprobe responder {}: {} {} test\n",
        env!("CARGO_PKG_VERSION"),
        request.kind,
        request.direction
    );
    for s in &stats.streams {
        let role = match s.role {
            Some(crate::protocol::Role::Sender) => "sender",
            _ => "receiver",
        };
        let rate = crate::engine::stats::ratio(s.bytes as f64 * 8.0, s.seconds);
        out.push_str(&format!(
            "[{:>3}] 0.00-{:.2} sec {} bytes {:.2} Mbits/sec {role}\n",
            crate::probe::iperf3::stream_id(s.id as usize),
            s.seconds,
            s.bytes,
            rate / 1e6
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Kind;

    fn params(json: &str) -> Params {
        Params::decode(json.as_bytes()).unwrap()
    }

    #[test]
    fn parameters_become_the_test_or_iperf3s_error() {
        let c = super::super::ResponderConfig::default();
        let r = to_request(
            &params(r#"{"udp":true,"time":3,"omit":1,"parallel":2,"len":1400,"bandwidth":1000000,"bidirectional":true}"#),
            &c,
        )
        .unwrap();
        assert_eq!(
            (r.kind, r.direction, r.streams),
            (Kind::Udp, Direction::Bidir, 2)
        );
        assert_eq!(
            (r.duration_ms, r.omit_ms, r.length, r.bitrate),
            (3000, 1000, 1400, 2_000_000)
        );
        let code = |j: &str| to_request(&params(j), &c).unwrap_err().0;
        // Under clamp (the default), a -t over max_duration runs to it.
        let p70 = params(r#"{"tcp":true,"time":70,"omit":2}"#);
        let long = to_request(&p70, &c).unwrap();
        assert_eq!((long.duration_ms, long.omit_ms), (58_000, 2000));
        assert_eq!(
            clamped_duration(&p70, &long).as_deref(),
            Some("max_duration: duration 70 s clamped to 58 s")
        );
        let p5 = params(r#"{"tcp":true,"time":5}"#);
        assert_eq!(clamped_duration(&p5, &to_request(&p5, &c).unwrap()), None);
        assert_eq!(code(r#"{"tcp":true,"time":600000}"#), errors::IEDURATION);
        let refusing = super::super::ResponderConfig {
            limit_policy: LimitPolicy::Refuse,
            ..c.clone()
        };
        let refused = |j: &str| to_request(&params(j), &refusing).unwrap_err().0;
        // A client that knows "exceeds the server's maximum" hears it,
        // rather than the 86400 s maximum code 5 prints.
        assert_eq!(
            refused(r#"{"tcp":true,"time":70,"client_version":"3.21"}"#),
            errors::IEMAXSERVERTESTDURATIONEXCEEDED
        );
        assert_eq!(
            refused(r#"{"tcp":true,"time":70,"client_version":"3.12"}"#),
            errors::IEDURATION
        );
        // The refusal names the real limit and the operator's policy.
        let why =
            |j: &str, c: &super::super::ResponderConfig| to_request(&params(j), c).unwrap_err().1;
        let wide = why(r#"{"tcp":true,"parallel":20}"#, &c);
        assert!(wide.contains("maximum of 16 streams"), "{wide}");
        assert!(wide.contains("limit_policy: clamp"), "{wide}");
        assert!(!wide.contains("limit_policy: refuse"), "{wide}");
        let long = why(r#"{"tcp":true,"time":70}"#, &refusing);
        assert!(long.contains("maximum of 60 s"), "{long}");
        assert!(long.ends_with("(limit_policy: refuse)"), "{long}");
        assert_eq!(code(r#"{"tcp":true,"parallel":64}"#), errors::IENUMSTREAMS);
        assert_eq!(code(r#"{"sctp":true}"#), IENOSCTP);
        assert_eq!(code(r#"{"tcp":true,"MSS":1000}"#), IEUNIMP);
        assert_eq!(code(r#"{"udp":true,"len":8}"#), errors::IEUDPBLOCKSIZE);
        assert_eq!(code(r#"{"tcp":true,"len":99999999}"#), errors::IEBLOCKSIZE);
        assert_eq!(code(r#"{"tcp":true,"authtoken":"x"}"#), errors::IEAUTHTEST);
        // -n/-k without -t: up to the responder's longest.
        let n = to_request(&params(r#"{"tcp":true,"time":0,"num":1000}"#), &c).unwrap();
        assert_eq!(n.duration_ms, 60_000);
        // What a count moves: bytes, or blocks of the length.
        let k = params(r#"{"tcp":true,"time":0,"blockcount":10,"len":1000}"#);
        assert_eq!(asked_bytes(&k, 1000), Some(10_000));
        assert_eq!(asked_bytes(&params(r#"{"tcp":true,"time":5}"#), 1000), None);
        // 1 MB at 1 Mbit/s is 8 s, within the 60 s; 10 MB is 80 s, not.
        let udp = |num: u64| format!(r#"{{"udp":true,"time":0,"num":{num},"bandwidth":1000000}}"#);
        assert!(to_request(&params(&udp(1_000_000)), &c).is_ok());
        assert_eq!(code(&udp(10_000_000)), errors::IEDURATION);
        // 3.12 prints -1 as 2^64-1: a negative count is no count.
        assert_eq!(
            code(r#"{"tcp":true,"time":0,"num":18446744073709551615}"#),
            errors::IERECVPARAMS
        );
    }
}
