//! One control session on the responder: handshake (with the shared-secret
//! challenge when one is set), admission against the limits, collecting the data connections, running the responder's side of
//! the test and reporting its figures.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::{refuse, LimitPolicy, PendingTest, ResponderCounters, Shared};
use crate::auth::{self, unhex, Nonce, Secret};
use crate::control::{read_message, write_message, ControlError};
use crate::probe::datapath::{DataSocket, Plan, SideRun, StreamJob};
use crate::probe::spec::{stream_layout, FlowDirection, Kind};
use crate::probe::stats::{Role, SideStats};
use crate::probe::tcp::{apply_options, TcpOptions};
use crate::protocol::message::{
    check_hello, new_token, software, token_id, Hello, Welcome, WelcomeAuth,
};
use crate::protocol::{Message, RejectReason, TestRequest};

/// Time allowed after the planned end for data to drain before streams are stopped.
pub const DRAIN_GRACE: Duration = Duration::from_secs(3);

pub(super) async fn run(mut control: TcpStream, peer: SocketAddr, hello: Hello, shared: &Shared) {
    let _ = control.set_nodelay(true);
    let config = shared.config();
    let timeout = config.idle_timeout;
    let counters = &shared.counters;
    if let Err((reason, message)) = check_hello(&hello) {
        tracing::info!(%peer, %message, "prober rejected");
        refuse(&mut control, counters, reason, message, timeout).await;
        return;
    }
    let auth = match challenge(&hello, config.secret.as_ref()) {
        Ok(auth) => auth,
        Err((reason, message)) => {
            tracing::info!(%peer, %message, "prober not authenticated");
            refuse(&mut control, counters, reason, message, timeout).await;
            return;
        }
    };
    let welcome = Welcome {
        version: crate::protocol::PROTOCOL_VERSION,
        software: software(),
        limits: config.limits(),
        auth: auth.as_ref().map(|a| a.welcome.clone()),
    };
    if write_message(&mut control, &Message::Welcome(welcome), timeout)
        .await
        .is_err()
    {
        return;
    }
    let token = match &auth {
        None => None,
        Some(a) => match read_message(&mut control, timeout).await {
            Ok(Message::Auth { proof }) => match a.verify(&proof) {
                Some(token) => Some(token),
                None => {
                    tracing::info!(%peer, "prober's proof is wrong");
                    refuse(
                        &mut control,
                        counters,
                        RejectReason::AuthFailed,
                        AUTH_FAILED.into(),
                        timeout,
                    )
                    .await;
                    return;
                }
            },
            Ok(other) => {
                tracing::info!(%peer, message = ?other, "expected the prober's proof");
                refuse(
                    &mut control,
                    counters,
                    RejectReason::AuthFailed,
                    "authentication failed: expected the prober's proof (auth) after the challenge"
                        .into(),
                    timeout,
                )
                .await;
                return;
            }
            Err(e) => {
                count_control_error(shared, &e);
                return;
            }
        },
    };
    let request = match read_message(&mut control, timeout).await {
        Ok(Message::Request(r)) => r,
        Ok(other) => {
            ResponderCounters::inc(&counters.protocol_errors);
            tracing::debug!(%peer, message = ?other, "expected a test request");
            return;
        }
        Err(e) => {
            count_control_error(shared, &e);
            return;
        }
    };
    let admission = match check_limits(&request, &config) {
        Ok(a) => a,
        Err(message) => {
            tracing::info!(%peer, %message, "test refused");
            refuse(
                &mut control,
                counters,
                RejectReason::Limit,
                message,
                timeout,
            )
            .await;
            return;
        }
    };
    if let Err(wait) = shared.check_budget(config.max_bytes_per_hour) {
        tracing::info!(%peer, "test refused: the hour's byte budget is spent");
        let message = format!(
            "this responder has moved its allowance of {} bytes for the last hour; retry in {}",
            config.max_bytes_per_hour,
            whole_seconds(wait)
        );
        refuse(
            &mut control,
            counters,
            RejectReason::BudgetExhausted,
            message,
            timeout,
        )
        .await;
        return;
    }
    let request = admission.request;
    let planned = Duration::from_millis(request.omit_ms + request.duration_ms);
    let slot = match shared.try_claim(Instant::now() + planned + DRAIN_GRACE) {
        Ok(slot) => slot,
        Err(retry_after) => {
            ResponderCounters::inc(&counters.rejected_busy);
            tracing::info!(%peer, "busy: a test is already running");
            let msg = Message::Busy {
                retry_after_ms: retry_after.as_millis() as u64,
                message: format!(
                    "responder is running another test; retry in {:.0} s",
                    retry_after.as_secs_f64().ceil()
                ),
            };
            let _ = write_message(&mut control, &msg, timeout).await;
            return;
        }
    };
    // Counted only once a slot is won, so that "busy" answers, which cost
    // the responder nothing, do not use up a client's allowance.
    if let Err(wait) = shared.admit_client(peer.ip(), config.max_tests_per_client_per_minute) {
        drop(slot);
        tracing::info!(%peer, "test refused: client over its tests per minute");
        let message = format!(
            "{} has run its allowance of {} tests in the last minute; retry in {}",
            peer.ip(),
            config.max_tests_per_client_per_minute,
            whole_seconds(wait)
        );
        refuse(
            &mut control,
            counters,
            RejectReason::RateLimited,
            message,
            timeout,
        )
        .await;
        return;
    }
    if !admission.clamped.is_empty() {
        ResponderCounters::inc(&counters.tests_clamped);
        tracing::info!(%peer, clamped = ?admission.clamped, "test clamped to the limits");
    }
    let ok = match run_test(
        &mut control,
        peer,
        &request,
        admission.clamped,
        token,
        shared,
    )
    .await
    {
        Ok(stats) => {
            // The slot is freed and the test counted before the results
            // go out: the prober's next probe may follow at once, and must
            // find the responder free and the count current.
            ResponderCounters::inc(&counters.tests_succeeded);
            drop(slot);
            let results = Message::Results(Box::new(stats));
            match write_message(&mut control, &results, timeout).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::info!(%peer, error = %e, "could not send the results");
                    false
                }
            }
        }
        Err(e) => {
            ResponderCounters::inc(&counters.tests_failed);
            drop(slot);
            tracing::info!(%peer, error = %e, "test failed");
            let _ = write_message(
                &mut control,
                &Message::Error {
                    message: e.to_string(),
                },
                Duration::from_secs(1),
            )
            .await;
            false
        }
    };
    tracing::debug!(%peer, ok, "test finished");
    if ok {
        let _ = read_message(&mut control, Duration::from_secs(2)).await;
    }
}

const AUTH_REQUIRED: &str =
    "authentication required: this responder needs a shared secret (--auth.secret-file, or secret_file in a module)";
const AUTH_FAILED: &str = "authentication failed: the shared secrets differ";

/// "12 s", rounded up so that a prober waiting that long is never early.
fn whole_seconds(d: Duration) -> String {
    format!("{} s", d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

/// The responder's side of one authenticated handshake.
struct Challenge {
    secret: Secret,
    client: Nonce,
    server: Nonce,
    welcome: WelcomeAuth,
}

impl Challenge {
    /// The test token if `proof` (hex) is the prober's proof.
    fn verify(&self, proof: &str) -> Option<String> {
        let proof = unhex(proof)?;
        self.secret
            .verify_prober(&self.client, &self.server, &proof)
            .then(|| self.secret.test_token(&self.client, &self.server))
    }
}

/// Answers the prober's hello under `secret`: nothing to do without one,
/// a challenge when the hello offers a usable one, a refusal otherwise.
fn challenge(
    hello: &Hello,
    secret: Option<&Secret>,
) -> Result<Option<Challenge>, (RejectReason, String)> {
    let Some(secret) = secret else {
        // A prober that offered auth to a responder without a secret gets
        // a Welcome without a proof, and decides for itself (it refuses).
        return Ok(None);
    };
    let Some(offer) = &hello.auth else {
        return Err((RejectReason::AuthRequired, AUTH_REQUIRED.into()));
    };
    if offer.method != auth::METHOD {
        return Err((
            RejectReason::AuthFailed,
            format!(
                "authentication failed: unsupported method {:?}; this responder speaks {}",
                offer.method,
                auth::METHOD
            ),
        ));
    }
    let client = Nonce::parse(&offer.client_nonce, "client nonce").map_err(|e| {
        (
            RejectReason::AuthFailed,
            format!("authentication failed: {e}"),
        )
    })?;
    let server = Nonce::random().map_err(|e| {
        (
            RejectReason::AuthFailed,
            format!("authentication failed: {e}"),
        )
    })?;
    let welcome = WelcomeAuth {
        method: auth::METHOD.into(),
        server_nonce: server.to_hex(),
        server_proof: auth::hex(&secret.responder_proof(&client, &server)),
    };
    Ok(Some(Challenge {
        secret: secret.clone(),
        client,
        server,
        welcome,
    }))
}

fn count_control_error(shared: &Shared, e: &ControlError) {
    match e {
        ControlError::Timeout(_) => ResponderCounters::inc(&shared.counters.timeouts),
        ControlError::Closed => {}
        _ => ResponderCounters::inc(&shared.counters.protocol_errors),
    }
}

/// A request as the responder will run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub request: TestRequest,
    /// One sentence per value cut down to a limit, naming the limit
    /// ("max_duration: duration 120 s clamped to 60 s"); empty if none was.
    pub clamped: Vec<String>,
}

/// Holds a request to the responder's limits: duration, rate, streams,
/// write or datagram size, and socket buffer. A value over a limit is cut
/// down to it and said so under [`LimitPolicy::Clamp`], or refused with the
/// limit named under [`LimitPolicy::Refuse`]. Requests no responder could
/// run (zero duration or streams, an omit that leaves no measured time, a
/// length below the protocol's minimum) are refused under either policy.
pub fn check_limits(r: &TestRequest, c: &super::ResponderConfig) -> Result<Admission, String> {
    let mut request = r.clone();
    let mut clamped = Vec::new();
    // Under `refuse`, the first value over its limit ends the admission.
    let mut over = |limit: &str, asked: String, allowed: String| -> Result<(), String> {
        match c.limit_policy {
            LimitPolicy::Clamp => {
                clamped.push(format!("{limit}: {asked} clamped to {allowed}"));
                Ok(())
            }
            LimitPolicy::Refuse => Err(format!(
                "{limit}: {asked} exceeds this responder's maximum of {allowed} (limit_policy: refuse)"
            )),
        }
    };
    if r.duration_ms == 0 {
        return Err("duration must be greater than zero".into());
    }
    let max_ms = c.max_duration.as_millis().min(u64::MAX as u128) as u64;
    if r.omit_ms >= max_ms {
        return Err(format!(
            "max_duration: omit {} leaves no measured time within this responder's maximum of {}",
            seconds(r.omit_ms),
            seconds(max_ms)
        ));
    }
    if r.duration_ms.saturating_add(r.omit_ms) > max_ms {
        request.duration_ms = max_ms - r.omit_ms;
        let asked = if r.omit_ms > 0 {
            format!(
                "duration {} (plus {} omit)",
                seconds(r.duration_ms),
                seconds(r.omit_ms)
            )
        } else {
            format!("duration {}", seconds(r.duration_ms))
        };
        over("max_duration", asked, seconds(request.duration_ms))?;
    }
    if r.streams == 0 {
        return Err("0 streams requested; at least 1 is needed".into());
    }
    if r.streams > c.max_streams {
        request.streams = c.max_streams;
        over(
            "max_streams",
            format!("{} streams", r.streams),
            format!("{} streams", c.max_streams),
        )?;
    }
    if c.max_bitrate > 0 && (r.bitrate == 0 || r.bitrate > c.max_bitrate) {
        let asked = if r.bitrate == 0 {
            "unlimited rate".to_string()
        } else {
            format!("rate {} bit/s", r.bitrate)
        };
        request.bitrate = c.max_bitrate;
        over(
            "max_bitrate",
            asked,
            format!("{} bit/s per direction", c.max_bitrate),
        )?;
    }
    let (min_len, ceiling) = match r.kind {
        Kind::Udp => (crate::protocol::udp::HELLO_LEN as u32, 65_000),
        Kind::Tcp => (1, super::TCP_LENGTH_CEILING),
    };
    let max_len = c.max_length.clamp(min_len, ceiling);
    if r.length < min_len {
        return Err(format!(
            "buffer length {} is too small; {} needs at least {min_len} bytes",
            r.length,
            r.kind.as_str()
        ));
    }
    if r.length > max_len {
        request.length = max_len;
        over(
            "max_length",
            format!("buffer length {} bytes", r.length),
            format!("{max_len} bytes"),
        )?;
    }
    if let Some(w) = r.window.filter(|w| *w > c.max_window) {
        request.window = Some(c.max_window);
        over(
            "max_window",
            format!("window {w} bytes"),
            format!("{} bytes", c.max_window),
        )?;
    }
    Ok(Admission { request, clamped })
}

/// Milliseconds as "60 s" or "2.5 s".
fn seconds(ms: u64) -> String {
    if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// Why a test failed after it was accepted.
#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("{0}")]
    Control(#[from] ControlError),
    #[error("only {got} of {want} data streams arrived within {timeout:?}")]
    MissingStreams {
        got: usize,
        want: usize,
        timeout: Duration,
    },
    #[error("expected {expected}, got {got}")]
    Unexpected { expected: &'static str, got: String },
    #[error("data stream set-up failed: {0}")]
    Io(#[from] std::io::Error),
}

async fn run_test(
    control: &mut TcpStream,
    peer: SocketAddr,
    request: &TestRequest,
    clamped: Vec<String>,
    derived_token: Option<String>,
    shared: &Shared,
) -> Result<SideStats, TestError> {
    let timeout = shared.config().idle_timeout;
    // A derived token never travels on the control connection.
    let (token, sent_token) = match derived_token {
        Some(t) => (t, String::new()),
        None => {
            let t = new_token();
            (t.clone(), t)
        }
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let total = request.total_streams();
    shared
        .pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            token.clone(),
            PendingTest {
                peer_ip: peer.ip(),
                total_streams: total,
                registered: Default::default(),
                tx,
            },
        );
    // Unregister the token whatever happens below.
    struct Unregister<'a>(&'a Shared, String);
    impl Drop for Unregister<'_> {
        fn drop(&mut self) {
            self.0
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.1);
        }
    }
    let _unregister = Unregister(shared, token.clone());

    write_message(
        control,
        &Message::Accepted {
            token: sent_token,
            request: request.clone(),
            clamped,
        },
        timeout,
    )
    .await?;

    let mut sockets = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + timeout;
    while sockets.len() < total as usize {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((id, sock))) => {
                sockets.insert(id, sock);
            }
            _ => {
                return Err(TestError::MissingStreams {
                    got: sockets.len(),
                    want: total as usize,
                    timeout,
                })
            }
        }
    }
    write_message(control, &Message::Ready, timeout).await?;
    match read_message(control, timeout).await? {
        Message::Start => {}
        other => {
            return Err(TestError::Unexpected {
                expected: "start",
                got: format!("{other:?}"),
            })
        }
    }

    let layout = stream_layout(request.direction, request.streams);
    let ipv6 = control.local_addr().map(|a| a.is_ipv6()).unwrap_or(false);
    let streams_per_direction = request.streams.max(1) as u64;
    let tcp_opts = TcpOptions {
        window: request.window,
        congestion: request.congestion.clone(),
        tos: request.tos,
        bitrate: request.bitrate / streams_per_direction,
    };
    let mut jobs = Vec::with_capacity(sockets.len());
    for (id, socket) in sockets {
        let direction = layout[id as usize];
        // The prober's send direction is the responder's receive.
        let role = if direction == FlowDirection::Send {
            Role::Receiver
        } else {
            Role::Sender
        };
        match &socket {
            DataSocket::Tcp(s) => apply_options(&socket2::SockRef::from(s), &tcp_opts, ipv6)?,
            DataSocket::Udp(s) => {
                crate::probe::udp::configure_socket(s, request.window);
                if let Some(tos) = request.tos {
                    crate::probe::udp::set_tos(s, tos)?;
                }
            }
        }
        jobs.push(StreamJob {
            id,
            direction,
            role,
            socket,
        });
    }
    let plan = Plan {
        omit: Duration::from_millis(request.omit_ms),
        duration: Duration::from_millis(request.duration_ms),
        length: request.length,
        bitrate_per_stream: request.bitrate / streams_per_direction,
        affinity: request.affinity,
        test_id: token_id(&token),
    };
    let interface = crate::host::interface_for_peer(peer.ip());
    let irqs = interface
        .as_deref()
        .map(crate::host::interface_irqs)
        .unwrap_or_default();
    let side = SideRun::spawn(jobs, plan, irqs)?;
    let stop = side.stop.clone();
    let run = side.run(DRAIN_GRACE);
    tokio::pin!(run);
    // While the test runs the prober says nothing; anything it does say, or
    // its going away, ends the test early.
    let (streams, host) = tokio::select! {
        out = &mut run => out,
        msg = read_message(control, Duration::from_secs(24 * 3600)) => {
            tracing::info!(%peer, message = ?msg.as_ref().map(|_| ()), "prober interrupted the test");
            stop.stop();
            let _ = (&mut run).await;
            return Err(TestError::Unexpected { expected: "silence during the test", got: format!("{msg:?}") });
        }
    };
    let bytes: u64 = streams.iter().map(|s| s.bytes).sum();
    shared.spend(bytes);
    let stats = SideStats {
        streams,
        host,
        kernel_release: crate::host::kernel_release(),
        interface,
    };
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Direction;
    use crate::responder::ResponderConfig;

    fn limits(policy: LimitPolicy) -> ResponderConfig {
        ResponderConfig {
            max_duration: Duration::from_secs(10),
            max_streams: 2,
            max_bitrate: 100_000_000,
            max_length: 64 * 1024,
            max_window: 1 << 20,
            limit_policy: policy,
            ..ResponderConfig::default()
        }
    }

    fn request() -> TestRequest {
        TestRequest {
            kind: Kind::Tcp,
            direction: Direction::Send,
            duration_ms: 5000,
            omit_ms: 0,
            streams: 1,
            bitrate: 50_000_000,
            length: 32 * 1024,
            window: Some(512 * 1024),
            congestion: None,
            tos: None,
            affinity: None,
        }
    }

    /// Asks for more than every limit allows.
    fn greedy() -> TestRequest {
        TestRequest {
            duration_ms: 30_000,
            omit_ms: 2000,
            streams: 8,
            bitrate: 0,
            length: 1 << 20,
            window: Some(8 << 20),
            ..request()
        }
    }

    #[test]
    fn within_the_limits_runs_as_asked() {
        for policy in [LimitPolicy::Clamp, LimitPolicy::Refuse] {
            let a = check_limits(&request(), &limits(policy)).unwrap();
            assert_eq!(a.request, request());
            assert!(a.clamped.is_empty());
        }
    }

    #[test]
    fn clamp_cuts_every_limit_and_names_it() {
        let a = check_limits(&greedy(), &limits(LimitPolicy::Clamp)).unwrap();
        assert_eq!(
            a.request,
            TestRequest {
                duration_ms: 8000,
                omit_ms: 2000,
                streams: 2,
                bitrate: 100_000_000,
                length: 64 * 1024,
                window: Some(1 << 20),
                ..request()
            }
        );
        assert_eq!(
            a.clamped,
            [
                "max_duration: duration 30 s (plus 2 s omit) clamped to 8 s",
                "max_streams: 8 streams clamped to 2 streams",
                "max_bitrate: unlimited rate clamped to 100000000 bit/s per direction",
                "max_length: buffer length 1048576 bytes clamped to 65536 bytes",
                "max_window: window 8388608 bytes clamped to 1048576 bytes",
            ]
        );
    }

    #[test]
    fn refuse_names_the_first_limit_exceeded() {
        let c = limits(LimitPolicy::Refuse);
        assert_eq!(
            check_limits(&greedy(), &c).unwrap_err(),
            "max_duration: duration 30 s (plus 2 s omit) exceeds this responder's maximum of 8 s (limit_policy: refuse)"
        );
        let cases = [
            (
                TestRequest {
                    streams: 3,
                    ..request()
                },
                "max_streams: 3 streams exceeds this responder's maximum of 2 streams (limit_policy: refuse)",
            ),
            (
                TestRequest {
                    window: Some(2 << 20),
                    ..request()
                },
                "max_window: window 2097152 bytes exceeds this responder's maximum of 1048576 bytes (limit_policy: refuse)",
            ),
            (
                TestRequest {
                    length: 65 * 1024,
                    ..request()
                },
                "max_length: buffer length 66560 bytes exceeds this responder's maximum of 65536 bytes (limit_policy: refuse)",
            ),
        ];
        for (r, want) in cases {
            assert_eq!(check_limits(&r, &c).unwrap_err(), want);
        }
    }

    #[test]
    fn impossible_requests_are_refused_under_either_policy() {
        for policy in [LimitPolicy::Clamp, LimitPolicy::Refuse] {
            let c = limits(policy);
            for (r, want) in [
                (
                    TestRequest {
                        duration_ms: 0,
                        ..request()
                    },
                    "duration must be greater than zero",
                ),
                (
                    TestRequest {
                        omit_ms: 10_000,
                        ..request()
                    },
                    "max_duration: omit 10 s leaves no measured time within this responder's maximum of 10 s",
                ),
                (
                    TestRequest {
                        streams: 0,
                        ..request()
                    },
                    "0 streams requested; at least 1 is needed",
                ),
                (
                    TestRequest {
                        kind: Kind::Udp,
                        length: 4,
                        ..request()
                    },
                    "buffer length 4 is too small; udp needs at least 44 bytes",
                ),
            ] {
                assert_eq!(check_limits(&r, &c).unwrap_err(), want, "{policy:?}");
            }
        }
    }
}
