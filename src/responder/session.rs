//! One control session on the responder: the handshake (with the
//! shared-secret challenge when one is set, after which every frame is
//! sealed), admission (see `admission.rs`), the test slot, collecting the
//! data connections, running the responder's side of the test (built by
//! [`crate::kinds::side`], as the prober builds its own) and reporting its
//! figures.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::admission::check_limits;
use super::door::Door;
use super::log::limited_info;
use super::{refuse, PendingTest, ResponderCounters, ResponderState, SlotGuard};
use crate::auth::{self, Challenge};
use crate::byte_budget::{BudgetRole, ChargeOnDrop};
use crate::control::{Control, ControlError};
use crate::engine::connections::{Arrivals, Connections};
use crate::engine::datapath::DataSocket;
use crate::engine::stats::SideStats;
use crate::kinds::side::{End, TestSide};
use crate::protocol::adaptive::{Progress, TestEnd, PROGRESS_INTERVAL_US};
use crate::protocol::message::{negotiate, new_token, now_us, software, Hello, Welcome};
use crate::protocol::{Message, RejectReason, TestRequest};

pub(super) async fn run(
    stream: TcpStream,
    peer: SocketAddr,
    hello: Hello,
    shared: &ResponderState,
    unit: &super::access::ClientPermit,
) {
    let _ = stream.set_nodelay(true);
    // Our address as this prober reached it: the tie-break when its test
    // and ours start at the same moment compares it with our target's.
    let asker = stream
        .local_addr()
        .ok()
        .map(|local| crate::slot::Asker { peer, local });
    let mut control = Control::new(stream);
    let config = shared.config();
    let timeout = config.idle_timeout;
    let counters = &shared.counters;
    let version = match negotiate(&hello, config.max_protocol_version) {
        Ok(v) => v,
        Err((reason, message)) => {
            limited_info!(shared.log, "hello_rejected", %peer, %message, "prober rejected");
            refuse(&mut control, counters, reason, message, timeout).await;
            return;
        }
    };
    let auth = match Challenge::for_hello(&hello, config.secret.as_ref()) {
        Ok(auth) => auth,
        Err((reason, message)) => {
            limited_info!(shared.log, "auth_required", %peer, %message, "prober not authenticated");
            refuse(&mut control, counters, reason, message, timeout).await;
            return;
        }
    };
    // The prober's settings are its word only, and hostile until checked:
    // a forged map is dropped whole, and only its short hash is logged.
    let prober_fingerprint = hello.fingerprint.as_ref().filter(|f| f.check().is_ok());
    if hello.fingerprint.is_some() && prober_fingerprint.is_none() {
        limited_info!(shared.log, "fingerprint", %peer, "prober's fingerprint ignored: not one a pathprobe sends");
    }
    tracing::debug!(%peer, fingerprint = prober_fingerprint.map(|f| f.hash()), "prober's host fingerprint");
    // At version 2 the Welcome is the previous release's, field for field.
    let welcome = Welcome {
        version,
        software: software(),
        time_us: (version >= 3).then(now_us),
        limits: config.limits(),
        auth: auth.as_ref().map(|a| a.welcome.clone()),
    };
    if let Some(n) = counters
        .handshakes_by_version
        .get((version - crate::protocol::OLDEST_PROTOCOL_VERSION) as usize)
    {
        ResponderCounters::inc(n);
    }
    if control
        .send(&Message::Welcome(welcome), timeout)
        .await
        .is_err()
    {
        return;
    }
    let token = match &auth {
        None => None,
        // A real prober sends its proof at once; an unauthenticated
        // connection is not held for long.
        Some(a) => match control.recv(config.first_message_timeout).await {
            Ok(Message::Auth { proof }) => match a.verify(&proof) {
                Some(verified) => {
                    // A prober with the secret is a known peer from now
                    // on, with capacity of its own, and this session is
                    // no longer cheap to drop.
                    shared.known.proved(peer.ip(), Instant::now());
                    unit.promote();
                    if !unit.protect() {
                        return;
                    }
                    // From here on every frame, both ways, is sealed.
                    control.seal(verified.sealer);
                    Some(verified.token)
                }
                None => {
                    limited_info!(shared.log, "auth_failed", %peer, "prober's proof is wrong");
                    refuse(
                        &mut control,
                        counters,
                        RejectReason::AuthFailed,
                        auth::AUTH_FAILED.into(),
                        timeout,
                    )
                    .await;
                    return;
                }
            },
            Ok(other) => {
                limited_info!(shared.log, "auth_failed", %peer, received = ?other, "expected the prober's proof");
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
    let request = match control.recv(timeout).await {
        // Asked for a test: from here the session is not dropped to make
        // room for others (unless it had been already).
        Ok(Message::Request(r)) if unit.protect() => r,
        Ok(Message::Request(_)) => return,
        Ok(other) => {
            ResponderCounters::inc(&counters.protocol_errors);
            tracing::debug!(%peer, received = %describe(&other), "expected a test request");
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
            limited_info!(shared.log, "limit", %peer, %message, "test refused");
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
    let request = admission.request;
    let planned = Duration::from_millis(request.omit_ms.saturating_add(request.duration_ms));
    // In mesh mode the host slot is kept for the plan's tests: the planned
    // prober gets its slot, anyone else only a gap the plan leaves this
    // host idle for the whole test, and is told the next gap otherwise.
    let cut_at = match shared.check_turn(peer.ip(), planned + super::turns::HAND_SETUP) {
        Ok(Some(super::turns::Admit::Gap { until: Some(until) })) => {
            let left = until.saturating_sub(super::unix_now());
            Some(tokio::time::Instant::now() + left)
        }
        Ok(_) => None,
        Err(refusal) => {
            ResponderCounters::inc(&counters.rejected_out_of_turn);
            let message = refusal.message;
            limited_info!(shared.log, "out_of_turn", %peer, %message, "test refused");
            let msg = Message::Busy {
                retry_after_ms: refusal.retry_after.as_millis() as u64,
                message,
            };
            let _ = control.send(&msg, timeout).await;
            return;
        }
    };
    if let Err((reason, message)) = allowances(shared, &config, peer.ip(), planned) {
        limited_info!(shared.log, "allowance", %peer, %message, "test refused");
        refuse(&mut control, counters, reason, message, timeout).await;
        return;
    }
    // Our own probe letting go of the slot, or asking this very prober
    // for its test, is given a moment before the prober hears busy.
    // A prober that closes meanwhile (it gave way to us, or gave up) is
    // let go without a slot taken for nobody.
    let mut peeked = [0u8; 1];
    tokio::select! {
        _ = shared.slot.settle(asker, crate::slot::SETTLE_GRACE) => {}
        // A peek, not readable(): readiness left over from reading the
        // request would end the wait at once.
        _ = control.stream().peek(&mut peeked) => {
            tracing::debug!(%peer, "prober left while waiting for the slot");
            return;
        }
    }
    let slot = match shared.try_claim(peer.ip(), Instant::now() + planned, asker) {
        Ok(slot) => slot,
        Err(retry_after) => {
            ResponderCounters::inc(&counters.rejected_busy);
            limited_info!(shared.log, "busy", %peer, "busy: a test is already running");
            let msg = Message::Busy {
                retry_after_ms: retry_after.as_millis() as u64,
                message: format!(
                    "responder is running another test; retry in {:.0} s",
                    retry_after.as_secs_f64().ceil()
                ),
            };
            let _ = control.send(&msg, timeout).await;
            return;
        }
    };
    // Counted only once a slot is won, so that "busy" answers, which cost
    // the responder nothing, do not use up a client's allowance.
    if let Err(wait) = shared.admit_client(peer.ip(), config.max_tests_per_client_per_minute) {
        drop(slot);
        let message = format!(
            "{} has run its allowance of {} in the last minute; retry in {}",
            peer.ip(),
            crate::units::plural(config.max_tests_per_client_per_minute, "test"),
            whole_seconds(wait)
        );
        limited_info!(shared.log, "allowance", %peer, %message, "test refused");
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
        tracing::info!(%peer, clamped = %admission.clamped.join("; "), "test clamped to the limits");
    }
    let kind = request.kind;
    let direction = request.direction;
    let began = Instant::now();
    let run = run_test(
        &mut control,
        peer,
        &request,
        admission.clamped,
        token,
        shared,
        &slot,
    );
    // A test let into a gap of the mesh plan ends where the gap does,
    // however slowly its prober sets it up: it must not hold the slot
    // into the next planned test.
    let outcome = match cut_at {
        Some(cut) => tokio::time::timeout_at(cut, run)
            .await
            .unwrap_or(Err(TestError::GapEnded)),
        None => run.await,
    };
    let ok = match outcome {
        Ok(stats) => {
            // The slot is freed and the test counted before the results
            // go out: the prober's next probe may follow at once, and must
            // find the responder free and the count current.
            ResponderCounters::inc(&counters.tests_succeeded);
            drop(slot);
            // One line per test, as a server log should have: who, what,
            // how much and how long. Not rate-limited: tests are already
            // held to one at a time and to the per-client allowance.
            if config.log_tests {
                let bytes: u64 = stats.streams.iter().map(|s| s.bytes).sum();
                tracing::info!(
                    %peer,
                    kind = %kind,
                    direction = %direction,
                    streams = stats.streams.len(),
                    protocol_version = version,
                    bytes,
                    // A number (ms resolution), so that JSON logs carry it as one.
                    duration_seconds = (began.elapsed().as_secs_f64() * 1e3).round() / 1e3,
                    "test done"
                );
            }
            let mut stats = stats;
            // A version 2 prober reads the previous release's results, field
            // for field: the fingerprint is version 3's.
            if version < 3 {
                stats.fingerprint = None;
            }
            let results = Message::Results(Box::new(stats));
            match control.send(&results, timeout).await {
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
            if matches!(e, TestError::Stalled(_)) {
                shared.penalize_stall(peer.ip());
            }
            tracing::info!(%peer, error = %e, "test failed");
            let _ = control
                .send(
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
        let _ = control.recv(Duration::from_secs(2)).await;
    }
}

/// "12 s", rounded up so that a prober waiting that long is never early.
fn whole_seconds(d: Duration) -> String {
    format!("{} s", d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

/// The allowances a test must fit before it may take a slot: the hour's
/// byte budget, the client's sitting out after a test that moved no data,
/// and the client's test time in the hour. The refusal says when to retry.
pub(super) fn allowances(
    shared: &ResponderState,
    config: &super::ResponderConfig,
    ip: std::net::IpAddr,
    planned: Duration,
) -> Result<(), (RejectReason, String)> {
    if let Err(wait) = shared.check_budget(config.max_bytes_per_hour) {
        return Err((
            RejectReason::BudgetExhausted,
            format!(
                "this responder has moved its allowance of {} for the last hour; retry in {}",
                crate::units::plural(config.max_bytes_per_hour, "byte"),
                whole_seconds(wait)
            ),
        ));
    }
    // The host's budget, both roles (scheduler.max_bytes_per_hour): a
    // host spent on its own probes or on other probers serves no more
    // until bytes age out. A served test's size is not known before it
    // runs, so one starts while any of the budget is left.
    if let Err(over) = shared.host_budget.admit(BudgetRole::Serving, 0) {
        return Err((
            RejectReason::BudgetExhausted,
            format!(
                "this host has moved its budget of {} for the last hour (its own probes and \
                 the tests it serves); retry in {}",
                crate::units::plural(over.limit, "byte"),
                whole_seconds(over.retry_after.unwrap_or(crate::byte_budget::WINDOW))
            ),
        ));
    }
    if let Some(wait) = shared.stall_penalty(ip) {
        return Err((
            RejectReason::RateLimited,
            format!(
                "{ip}'s last test moved no data; retry in {}",
                whole_seconds(wait)
            ),
        ));
    }
    let per_hour = config.max_test_seconds_per_client_per_hour;
    if let Err(wait) = shared.check_slot_time(ip, planned, per_hour) {
        return Err((
            RejectReason::RateLimited,
            format!(
                "{ip} has used its allowance of {} s of tests in the last hour; retry in {}",
                per_hour.as_secs(),
                whole_seconds(wait)
            ),
        ));
    }
    Ok(())
}

fn count_control_error(shared: &ResponderState, e: &ControlError) {
    match e {
        ControlError::Timeout(_) => ResponderCounters::inc(&shared.counters.timeouts),
        ControlError::Closed => {}
        _ => ResponderCounters::inc(&shared.counters.protocol_errors),
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
    #[error("{0}")]
    DataPath(#[from] crate::kinds::side::DataPathFailed),
    #[error("no data moved for {0:?}: the prober stopped taking part")]
    Stalled(Duration),
    #[error("cut where this mesh member's free gap ends: a planned test is due")]
    GapEnded,
}

async fn run_test(
    control: &mut Control<TcpStream>,
    peer: SocketAddr,
    request: &TestRequest,
    clamped: Vec<String>,
    derived_token: Option<String>,
    shared: &ResponderState,
    slot: &SlotGuard<'_>,
) -> Result<SideStats, TestError> {
    let config = shared.config();
    let timeout = config.idle_timeout;
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
    // A tcp_crr test opens no data connection before the start: its
    // connections, one per transaction, come through its door while it
    // runs, for as long as its registration stands.
    let planned = Duration::from_millis(request.omit_ms.saturating_add(request.duration_ms));
    let (door, arrivals) = if crate::kinds::of(request.kind).connection_per_transaction() {
        let (door, rx, over_limit) =
            Door::new(config.max_connections_per_second, planned, Instant::now());
        (Some(door), Some((rx, over_limit)))
    } else {
        (None, None)
    };
    let expected = if door.is_some() { 0 } else { total };
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
                door,
            },
        );
    // Unregister the token whatever happens below.
    struct Unregister<'a>(&'a ResponderState, String);
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

    control
        .send(
            &Message::Accepted {
                token: sent_token,
                request: request.clone(),
                clamped,
            },
            timeout,
        )
        .await?;

    // The prober says nothing until every stream is open; its going away
    // (or anything it says) ends the test at once, so that a request
    // followed by a disconnect does not hold the slot.
    let mut sockets = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + timeout;
    let collect = async {
        while sockets.len() < expected as usize {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some((id, sock))) => {
                    sockets.insert(id, sock);
                }
                _ => return false,
            }
        }
        true
    };
    let collected = tokio::select! {
        all = collect => all,
        // Past the streams' own deadline, so that a prober that stays
        // silent without sending them is told which streams were missing.
        msg = control.recv(timeout + Duration::from_secs(1)) => {
            return Err(TestError::Unexpected {
                expected: "the data streams",
                got: describe_recv(&msg),
            });
        }
    };
    if !collected {
        return Err(TestError::MissingStreams {
            got: sockets.len(),
            want: expected as usize,
            timeout,
        });
    }
    control.send(&Message::Ready, timeout).await?;
    match control.recv(timeout).await? {
        Message::Start => {}
        other => {
            return Err(TestError::Unexpected {
                expected: "start",
                got: describe(&other),
            })
        }
    }
    slot.started(
        Instant::now() + Duration::from_millis(request.omit_ms.saturating_add(request.duration_ms)),
    );

    let side = TestSide::new(End::Responder, request, &token, request.affinity, peer.ip())
        .with_zerocopy(config.zerocopy);
    if let Some((rx, over_limit)) = arrivals {
        let arrivals = Arrivals {
            rx: rx.into(),
            options: side.tcp.clone(),
            over_limit,
        };
        sockets.insert(0, DataSocket::Connections(Connections::Accepted(arrivals)));
    }
    let ipv6 = control
        .stream()
        .local_addr()
        .map(|a| a.is_ipv6())
        .unwrap_or(false);
    for socket in sockets.values() {
        side.prepare(socket, ipv6)?;
    }
    let adaptive = side.plan.adaptive.clone();
    let running = side.spawn(sockets)?;
    let stop = running.stop.clone();
    let progress = running.progress.clone();
    // What moved counts against the host's byte budget however the test
    // ends (a prober gone mid-test still used the link), its warm-up
    // included.
    let _charge = {
        let moved = progress.clone();
        ChargeOnDrop::new(shared.host_budget.clone(), BudgetRole::Serving, move || {
            moved.get()
        })
    };
    let stall_limit = running.stall_limit();
    let run = running.finish();
    tokio::pin!(run);
    // While the test runs the prober says nothing; anything it does say, or
    // its going away, ends the test early. So does a test in which nothing
    // moves: a prober that opened its streams and then sends or reads
    // nothing would otherwise hold the slot for the whole duration. The
    // one exception is an adaptive test's `End`, once.
    let mut watchdog = tokio::time::interval(Duration::from_millis(250));
    let mut last = (progress.get(), Instant::now());
    let mut ended: Option<TestEnd> = None;
    // A prober that sends datagrams asked for this side's received count
    // while the test runs: its stopping rule judges what arrived.
    let reporter = adaptive
        .clone()
        .filter(|_| request.adaptive.is_some_and(|a| a.receiver_progress));
    let mut report_tick = tokio::time::interval(Duration::from_micros(PROGRESS_INTERVAL_US));
    report_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut byte = [0u8; 1];
    let mut stats = loop {
        tokio::select! {
            out = &mut run => break out?,
            // A peek, then the whole read: the other branches firing drop
            // this one every 100 ms, and a peek loses nothing when dropped
            // where a half-read frame would.
            _ = control.stream().peek(&mut byte) => {
                let msg = control.recv(timeout.min(FRAME_REST_TIMEOUT)).await;
                if let (Ok(Message::End(end)), Some(a), None) = (&msg, &adaptive, &ended) {
                    // The prober's estimate is known: this side's senders
                    // stop as at the planned end.
                    a.end();
                    ended = Some(*end);
                    continue;
                }
                limited_info!(shared.log, "interrupted", %peer, received = %describe_recv(&msg), "prober interrupted the test");
                stop.stop();
                let _ = (&mut run).await;
                return Err(TestError::Unexpected {
                    expected: "silence during the test",
                    got: describe_recv(&msg),
                });
            }
            _ = report_tick.tick(), if reporter.is_some() && ended.is_none() => {
                let Some(a) = &reporter else { continue };
                let Some(origin) = a.origin() else { continue };
                let s = a.sample();
                let report = Message::Progress(Progress {
                    at_us: s.at.saturating_duration_since(origin).as_micros() as u64,
                    bytes: s.bytes,
                });
                // A prober that does not read its reports must not hold
                // the slot: a short send timeout ends the test instead.
                if let Err(e) = control.send(&report, PROGRESS_SEND_TIMEOUT).await {
                    limited_info!(shared.log, "progress", %peer, error = %e, "could not send progress; test ended");
                    stop.stop();
                    let _ = (&mut run).await;
                    return Err(e.into());
                }
            }
            _ = watchdog.tick() => {
                let now = progress.get();
                if now != last.0 {
                    last = (now, Instant::now());
                } else if last.1.elapsed() >= stall_limit {
                    limited_info!(shared.log, "stalled", %peer, "no data moved; test ended");
                    stop.stop();
                    let _ = (&mut run).await;
                    return Err(TestError::Stalled(stall_limit));
                }
            }
        }
    };
    let bytes: u64 = stats.streams.iter().map(|s| s.bytes).sum();
    shared.spend(bytes);
    if let Some(a) = &adaptive {
        // The prober sends `End` when it decides, also at the maximum; a
        // receiving side may see its streams close before the message
        // arrives, so it waits for it, within the idle timeout.
        if ended.is_none() {
            match control.recv(timeout).await {
                Ok(Message::End(end)) => ended = Some(end),
                other => {
                    return Err(TestError::Unexpected {
                        expected: "the end of an adaptive test",
                        got: describe_recv(&other),
                    })
                }
            }
        }
        if let Some(end) = ended {
            a.cut(&mut stats, end.span_start_us, end.span_end_us);
        }
    }
    Ok(stats)
}

/// Longest the rest of a frame may take once its first byte came during
/// the test: a prober's frame arrives whole, and one that trickles must
/// not hold the slot past the test's end for a whole idle timeout.
const FRAME_REST_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest a progress report may take to send: the prober reads them as
/// they come, so one that is not read within this is not being read.
const PROGRESS_SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// What a receive brought, in words for logs and errors: a message by its
/// type, or why none came ("the peer closed the control connection"),
/// never Rust's debug form.
fn describe_recv(msg: &Result<Message, ControlError>) -> String {
    match msg {
        Ok(m) => format!("a {} message", message_type(m)),
        Err(e) => e.to_string(),
    }
}

/// A message's type as the wire names it (`start`, `results`, ...).
fn message_type(msg: &Message) -> String {
    serde_json::to_value(msg)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(String::from))
        .unwrap_or_else(|| "unknown".into())
}

/// A peer's message for logs and errors: its type only, as a hostile
/// peer's message can be large and is not repeated.
fn describe(msg: &Message) -> String {
    format!("a {} message", message_type(msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receives_are_described_in_words_not_debug_text() {
        assert_eq!(
            describe_recv(&Err(ControlError::Closed)),
            "the peer closed the control connection"
        );
        assert_eq!(describe_recv(&Ok(Message::Start)), "a start message");
        assert_eq!(describe(&Message::Ready), "a ready message");
    }
}
