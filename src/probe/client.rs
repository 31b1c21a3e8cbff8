//! The prober's side of a test: connect, agree the test, open the data
//! connections or UDP flows, run the local streams, and combine the local
//! figures with those the responder reports.

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::net::TcpStream;

use super::spec::ProbeSpec;
use super::target::{resolve, Target};
use super::{verify, ProbeError};
use crate::analysis::result::{ProbeContext, ProbeResult};
use crate::auth::{self, Nonce};
use crate::control::{Control, ControlError};
use crate::engine::adaptive::{AdaptiveOutcome, AdaptiveRun, Estimator, Sample, Step};
use crate::engine::connections::{Connections, Dialer};
use crate::engine::datapath::{DataSocket, DRAIN_GRACE};
use crate::kinds::kind::Transport;
use crate::kinds::side::{End, TestSide};
use crate::kinds::{tcp, udp};
use crate::protocol::adaptive::{
    AdaptiveRequest, Progress, StopReason, TestEnd, PROGRESS_INTERVAL_US,
};
use crate::protocol::message::{now_us, software, span, ClockOffset, Hello, HelloAuth, Limits};
use crate::protocol::text::{self, TextKind};
use crate::protocol::{Direction, Message, RejectReason, DEFAULT_PORT};

/// The longest a whole probe may take: its measured time and warm-up, the
/// drain, and an allowance for set-up and tear-down of two control
/// timeouts and two seconds. Each stage has its own timeout too, but a
/// peer answering each one just in time (or dribbling) would otherwise
/// stretch a 1 s test to tens of seconds.
pub fn overall_deadline(spec: &ProbeSpec) -> Duration {
    spec.omit
        .saturating_add(spec.duration)
        .saturating_add(DRAIN_GRACE)
        .saturating_add(spec.connect_timeout.saturating_mul(2))
        .saturating_add(Duration::from_secs(2))
}

/// Runs one probe against `target`, within [`overall_deadline`]: past it
/// the probe fails with a timeout, and dropping it stops its data threads.
pub async fn probe(target: &Target, spec: &ProbeSpec) -> Result<ProbeResult, ProbeError> {
    let limit = overall_deadline(spec);
    match tokio::time::timeout(limit, probe_unbounded(target, spec)).await {
        Ok(r) => r,
        Err(_) => Err(ProbeError::Timeout {
            stage: "running the whole probe (its duration, warm-up, drain and set-up allowance)",
            after: limit,
        }),
    }
}

async fn probe_unbounded(target: &Target, spec: &ProbeSpec) -> Result<ProbeResult, ProbeError> {
    let moved;
    let target = match spec.port {
        Some(port) => {
            moved = Target {
                host: target.host.clone(),
                port,
            };
            &moved
        }
        None => target,
    };
    if spec.wire == super::spec::Wire::Iperf3 {
        return super::iperf3::probe(target, spec).await;
    }
    spec.validate().map_err(|e| ProbeError::BadArgument(e.0))?;
    spec.check_local()
        .map_err(|e| ProbeError::BadArgument(e.0))?;
    let addrs = resolve(target, spec.bind, spec.family).await?;
    let mut last = None;
    for addr in addrs {
        // A scheduled probe says whom it asks before it asks, so that the
        // peer asking us at the same moment can be given way to.
        crate::slot::aim(addr);
        match tcp::connect(addr, spec.bind, None, spec.connect_timeout).await {
            Ok(control) => return run_test(control, addr, target, spec).await,
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| ProbeError::BadArgument("no address to probe".into())))
}

/// The handshake's outcome.
struct Handshake {
    /// The test token, when it was derived rather than sent.
    token: Option<String>,
    limits: Limits,
    /// The protocol version both ends agreed on.
    version: u32,
    /// The responder's clock against this side's, when it sent its time.
    clock: Option<ClockOffset>,
}

async fn handshake(
    control: &mut Control<TcpStream>,
    spec: &ProbeSpec,
    peer: SocketAddr,
) -> Result<Handshake, ProbeError> {
    let t = spec.connect_timeout;
    let client_nonce = match &spec.secret {
        Some(_) => Some(Nonce::random().map_err(|e| ProbeError::Auth(e.to_string()))?),
        None => None,
    };
    let hello = Hello {
        auth: client_nonce.map(|n| HelloAuth {
            method: auth::METHOD.into(),
            client_nonce: n.to_hex(),
        }),
        // A version 2 responder reads only the fields it knows; ours goes
        // only with version 3, so the version 2 hello stays the old one.
        fingerprint: (spec.max_protocol_version >= 3).then(|| {
            crate::host::read_fingerprint(crate::host::interface_for_peer(peer.ip()).as_deref())
        }),
        ..Hello::speaking(spec.max_protocol_version)
    };
    let (oldest, newest) = hello.versions();
    // The round trip is timed on the monotonic clock, so that a wall clock
    // stepped during the handshake cannot make it negative.
    let sent_us = hello.time_us.unwrap_or_else(now_us);
    let sent = Instant::now();
    control.send(&Message::Hello(hello), t).await?;
    let reply = control.recv(t).await;
    let received_us = sent_us.saturating_add(sent.elapsed().as_micros() as u64);
    let welcome = match reply {
        Ok(Message::Welcome(w)) => w,
        Ok(other) => return Err(refusal(other, "welcome")),
        // TCP connected, so no firewall is in the way: whatever holds the
        // port either says nothing to a hello (an iperf3 server waits for
        // its cookie, `nc -l` for input) or answers in another protocol.
        Err(ControlError::Timeout(after)) => {
            return Err(not_a_responder(format!(
                "no answer to the hello within {after:?}"
            )))
        }
        Err(ControlError::Frame(e)) => {
            return Err(not_a_responder(format!(
                "its answer is not a pathprobe frame: {e}"
            )))
        }
        Err(e) => return Err(e.into()),
    };
    // The software name is shown in a version mismatch and in logs.
    text::check(TextKind::Software, &welcome.software)
        .map_err(|e| ProbeError::Protocol(format!("the responder's welcome: {e}")))?;
    // A responder that answers with a version this side does not speak
    // (a broken or much newer one) is refused here, naming both.
    if !(oldest..=newest).contains(&welcome.version) {
        return Err(ProbeError::VersionMismatch(format!(
            "responder chose protocol version {} ({}), prober speaks {} ({}); adjacent releases work together, so upgrade the older end",
            welcome.version,
            describe_str(&welcome.software),
            span(oldest, newest),
            software(),
        )));
    }
    // The stamp is read only when version 3 was agreed: a version 2 peer
    // never sends one.
    let clock = if welcome.version >= 3 {
        ClockOffset::estimate(sent_us, received_us, welcome.time_us)
    } else {
        None
    };
    let mut done = Handshake {
        token: None,
        limits: welcome.limits,
        version: welcome.version,
        clock,
    };
    let (Some(secret), Some(client)) = (&spec.secret, client_nonce) else {
        return Ok(done);
    };
    let answer =
        auth::answer_challenge(secret, &client, welcome.auth.as_ref()).map_err(ProbeError::Auth)?;
    control
        .send(
            &Message::Auth {
                proof: answer.proof,
            },
            t,
        )
        .await?;
    if !answer.responder_proven {
        // The proof was still sent, so that the responder counts the
        // failure and says it in its own words; nothing more is sent to a
        // responder that could not prove itself.
        return Err(match control.recv(t).await {
            Ok(reply @ Message::Rejected { .. }) => refusal(reply, "rejected"),
            _ => {
                ProbeError::Auth("the responder's proof is wrong: the shared secrets differ".into())
            }
        });
    }
    control.seal(answer.sealer);
    done.token = Some(answer.token);
    Ok(done)
}

async fn run_test(
    control: TcpStream,
    addr: SocketAddr,
    target: &Target,
    spec: &ProbeSpec,
) -> Result<ProbeResult, ProbeError> {
    let _ = control.set_nodelay(true);
    let t = spec.connect_timeout;
    let local_addr = control
        .local_addr()
        .map_err(|e| ProbeError::io("control connection", e))?;
    let mut control = Control::new(control);
    let Handshake {
        token: derived_token,
        limits,
        version,
        clock,
    } = handshake(&mut control, spec, addr).await?;
    tracing::debug!(target = %target, version, clock_offset = ?clock, "handshake done");
    let mut asked = spec.to_request();
    // A prober that sends datagrams sees what it sent, not what arrived:
    // its adaptive rule asks for the responder's count as the test runs.
    // (A TCP sender's acknowledged bytes are what arrived; a receiver
    // counts what arrived itself.)
    let sends_datagrams = crate::kinds::of(asked.kind).transport() == Transport::Udp
        && asked.direction == Direction::Send;
    if let Some(a) = asked.adaptive.as_mut() {
        a.receiver_progress = sends_datagrams;
    }
    control.send(&Message::Request(asked.clone()), t).await?;
    let (token, request, clamped) = match control.recv(t).await? {
        Message::Accepted {
            token,
            request: agreed,
            clamped,
        } => (derived_token.unwrap_or(token), agreed, clamped),
        other => return Err(refusal(other, "accepted")),
    };
    // Data moves from here: the host slot no longer gives way for this
    // probe, and a prober told busy meanwhile hears of its planned end (as
    // the responder plans its served tests), not of the run's deadline.
    let _moving = crate::slot::moving(Duration::from_millis(
        request.omit_ms.saturating_add(request.duration_ms),
    ));
    // Nothing the responder's terms ask for may exceed the request: a
    // bigger test would have this side allocate and send without bound.
    verify::check_accepted(&asked, &request).map_err(ProbeError::Protocol)?;
    // A responder of an older release drops the adaptive request it does
    // not know from its echo: the test then runs its whole maximum, and
    // says so, rather than fail.
    // The notes are printed and exported: a responder's are few and
    // held to the rule for its strings.
    if clamped.len() > MAX_NOTES {
        return Err(ProbeError::Protocol(format!(
            "the responder sent {} notes of what it cut down, more than {MAX_NOTES}",
            clamped.len()
        )));
    }
    for note in &clamped {
        text::check(TextKind::Note, note)
            .map_err(|e| ProbeError::Protocol(format!("the responder's accepted: {e}")))?;
    }
    let mut clamped = clamped;
    let mut compared = asked.clone();
    // A responder that does not know the progress reports drops the ask:
    // the probe then judges the receiver's figures at the end only.
    if let (Some(c), Some(a)) = (compared.adaptive.as_mut(), request.adaptive.as_ref()) {
        c.receiver_progress = a.receiver_progress;
    }
    if asked.adaptive.is_some() && request.adaptive.is_none() {
        compared.adaptive = None;
        clamped.push(format!(
            "adaptive duration: the responder does not support it; the probe ran its whole maximum of {}",
            crate::units::format_duration(Duration::from_millis(request.duration_ms))
        ));
    }
    // A responder that changed the test without saying so (an older or a
    // broken one) must not pass its figures off as those asked for.
    if clamped.is_empty() && request != compared {
        clamped.push("the responder changed the test without saying which limit applied".into());
    }
    if token.is_empty() || token.len() > 64 {
        return Err(ProbeError::Protocol(
            "the responder accepted the test without a usable token, and no secret was set to derive one"
                .into(),
        ));
    }
    if let Some(notes) = spec.clamp_notes.as_ref().filter(|_| !clamped.is_empty()) {
        (notes.0)(&clamped);
    }
    for limit in &clamped {
        // Debug only: the result carries the clamp (the CLI's `note:` line,
        // serve's pathprobe_probe_clamped), and a WARN besides says it twice.
        tracing::debug!(target = %target, %limit, "the responder cut the test down to its limits");
    }

    let side = TestSide::new(End::Prober, &request, &token, spec.affinity, addr.ip())
        .with_intervals(spec.interval_events.clone())
        .with_progress(spec.moved.clone())
        .with_zerocopy(spec.zerocopy);
    let kind = crate::kinds::of(request.kind);
    let sockets = match (kind.transport(), kind.connection_per_transaction()) {
        (Transport::Tcp, false) => {
            let sockets =
                tcp::open_streams(addr, spec.bind, &side.tcp, side.stream_count(), &token, t)
                    .await?;
            expect_ready(&mut control, t).await?;
            sockets
        }
        // No connection before the start: each transaction makes its own.
        (Transport::Tcp, true) => {
            expect_ready(&mut control, t).await?;
            vec![(
                0,
                DataSocket::Connections(Connections::Dial(Dialer {
                    addr,
                    bind: spec.bind,
                    token: token.clone(),
                    options: side.tcp.clone(),
                    rate_limit: limits.max_connections_per_second,
                })),
            )]
        }
        (Transport::Udp, _) => {
            let socks = udp::open_flows(
                addr,
                spec.bind,
                side.stream_count(),
                udp::buffer_size(request.window, side.flow_bitrate()),
                request.tos,
            )?;
            udp::announce_flows(&socks, &token, expect_ready(&mut control, t)).await?;
            socks
                .into_iter()
                .enumerate()
                .map(|(id, s)| (id as u32, DataSocket::Udp(s)))
                .collect()
        }
    };
    // The first TCP data stream's address: a trace of the path after the
    // probe follows this flow (see `ProbeResult::data_source`).
    let data_source = sockets.iter().find_map(|(_, s)| match s {
        DataSocket::Tcp(t) => t.local_addr().ok(),
        _ => None,
    });
    let plan = side.plan.clone();
    let running = side
        .spawn(sockets)
        .map_err(|e| ProbeError::io("starting stream threads", e))?;
    let stop = running.stop.clone();
    // An adaptive test: this side samples, decides the end, and tells the
    // responder (through `end_tx`) which span the figures cover.
    let adaptive = plan.adaptive.clone().zip(request.adaptive);
    let (end_tx, end_rx) = tokio::sync::oneshot::channel::<TestEnd>();
    // The responder's progress reports, from the control connection to the
    // rule; bounded, and a report that finds the channel full is dropped
    // (the next one carries the count so far).
    let reports_on = request.adaptive.is_some_and(|a| a.receiver_progress);
    let (report_tx, report_rx) = tokio::sync::mpsc::channel::<Progress>(64);
    // The responder sends one report per 100 ms of the test at most; a
    // few more are read past the maximum (the end crossing them), then
    // the next one is a protocol error.
    let reports_allowed = request.duration_ms / (PROGRESS_INTERVAL_US / 1000) + 64;
    // Before `Start` leaves: no responder's gate opens earlier.
    let start_sent = Instant::now();
    control.send(&Message::Start, t).await?;
    let started = Instant::now();
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
        + plan.omit.as_secs_f64();
    let results_timeout = plan.omit + plan.duration + DRAIN_GRACE + Duration::from_secs(5) + t;
    let has_end = adaptive.is_some();
    let remote = async {
        // The responder says nothing before `End` but an error, or its
        // progress reports when asked. A peek (unlike a read) loses
        // nothing when the end's word wins the race, and then the whole
        // frame is read. (Readiness alone would not do: tokio keeps it from
        // the handshake's last read.)
        let mut end_rx = has_end.then_some(end_rx);
        let mut reports = 0u64;
        loop {
            let mut byte = [0u8; 1];
            tokio::select! {
                end = async {
                    match end_rx.as_mut() {
                        Some(rx) => rx.await,
                        None => std::future::pending().await,
                    }
                }, if end_rx.is_some() => {
                    end_rx = None;
                    if let Ok(end) = end {
                        if let Err(e) = control.send(&Message::End(end), t).await {
                            stop.stop();
                            return Err(e);
                        }
                    }
                    continue;
                }
                _ = control.stream().peek(&mut byte) => {}
            }
            let msg = control
                .recv_max(results_timeout, crate::protocol::MAX_FRAME_LEN)
                .await;
            if let (Ok(Message::Progress(p)), true) = (&msg, reports_on) {
                reports += 1;
                if reports <= reports_allowed {
                    // Full: the rule is behind; the next report has the
                    // count so far.
                    let _ = report_tx.try_send(*p);
                    continue;
                }
            }
            if msg.is_err() {
                stop.stop();
            }
            return msg;
        }
    };
    let local = async {
        let finish = running.finish();
        let Some((run, asked)) = adaptive else {
            return (finish.await, None);
        };
        tokio::pin!(finish);
        // This side's samples come from a thread of its own, each read
        // just after the count moved (engine::adaptive); without one, from
        // a tick here, read when it comes.
        let (sample_tx, mut sample_rx) = tokio::sync::mpsc::channel::<Sample>(16);
        let sampler = if reports_on {
            None
        } else {
            run.spawn_sampler(sample_tx)
                .inspect_err(
                    |e| tracing::debug!(error = %e, "no sampling thread; samples on a tick"),
                )
                .ok()
        };
        let ticking = !reports_on && sampler.is_none();
        // Without the handshake's clock stamps (an older responder), the
        // round trip is not known: a quarter second of slack then.
        let rtt = clock.map_or(0.25, |c| 2.0 * c.uncertainty_seconds);
        let mut control =
            AdaptiveControl::new(run, &asked, plan.duration, sends_datagrams, start_sent, rtt);
        let mut tick = tokio::time::interval(crate::engine::adaptive::SAMPLE_INTERVAL);
        let mut end_tx = Some(end_tx);
        // A slot's end (the mesh's): the test ends then, reported cut.
        let cut = async {
            match spec.cut_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(cut);
        let mut report_rx = report_rx;
        let local = loop {
            tokio::select! {
                out = &mut finish => break out,
                // The receiver's reports replace this side's own samples.
                Some(p) = report_rx.recv(), if reports_on && !control.decided() => control.report(p),
                Some(s) = sample_rx.recv(), if !control.decided() => control.take(s),
                _ = tick.tick(), if ticking && !control.decided() => control.sample(),
                _ = &mut cut, if !control.decided() => control.cut(),
            }
            if let Some(end) = control.take_end() {
                if let Some(tx) = end_tx.take() {
                    let _ = tx.send(end);
                }
            }
        };
        // The streams ended before a decision (the peer, a failure): the
        // responder still waits for the word.
        if let Some(end) = control.ended_without_decision() {
            if let Some(tx) = end_tx.take() {
                let _ = tx.send(end);
            }
        }
        (local, Some(control))
    };
    let ((local, adaptive), remote) = tokio::join!(local, remote);
    let local = match local {
        Ok(local) => local,
        // A responder that went away breaks the data streams and the
        // control connection together, and which one this side notices
        // first is a race. The control connection's account (closed,
        // reset, or the responder's own error message) says why; the
        // broken stream only says that something did.
        Err(e) => {
            return Err(match remote {
                Ok(msg @ Message::Error { .. }) => refusal(msg, "results"),
                Err(ce) if ProbeError::aborted_by_peer(&ce) => ce.into(),
                _ => ProbeError::io("local streams", std::io::Error::other(e)),
            })
        }
    };
    let remote = match remote? {
        Message::Results(stats) => *stats,
        msg @ Message::Error { .. } => return Err(refusal(msg, "results")),
        other => {
            return Err(ProbeError::Protocol(format!(
                "expected results, got {}",
                describe(&other)
            )))
        }
    };
    // The responder cut its figures to the adaptive span on `End`; this
    // side's are still whole.
    let span_start = adaptive.as_ref().map_or(0.0, |c| c.span_start());
    verify::check_results_over(&request, &local, &remote, span_start)
        .map_err(ProbeError::Protocol)?;
    tracing::debug!(elapsed = ?started.elapsed(), "probe finished");
    // Both ends' figures cover the estimate's span: the responder cut its
    // own on `End`, this side cuts its now (after the checks, which hold
    // each end's figures to the other's whole count).
    let mut local = local;
    let outcome = adaptive.map(|c| c.finish(&mut local, &remote));
    let ctx = ProbeContext {
        bitrate_clamped: request.bitrate != asked.bitrate,
        // What was asked, beside what ran (`duration_seconds`) and why
        // (`clamped`): a clamp must not rewrite the question.
        requested_seconds: asked.duration_ms as f64 / 1000.0,
        rr: plan.rr,
        ..ProbeContext::of_run(&request, &plan, target, local_addr, addr, timestamp)
    };
    let mut result = ProbeResult::combine(ctx, &local, &remote);
    result.clamped = clamped;
    result.protocol_version = Some(version);
    result.peer_clock = clock;
    result.adaptive = outcome.map(|mut a| {
        // The figure printed, exported and stored is the receivers' over
        // the span: it must confirm the estimate, or nothing is precise.
        a.hold_to_headline(
            result
                .directions
                .iter()
                .map(|d| d.throughput_bits_per_second)
                .sum(),
        );
        a
    });
    result.data_source = data_source;
    Ok(result)
}

/// Longest the reads of one sample may take before it is skipped.
const SAMPLE_SPREAD: Duration = Duration::from_micros(300);

/// The prober's half of an adaptive test: samples the delivered bytes,
/// runs the stopping rule, and ends the test (engine/adaptive.rs).
struct AdaptiveControl {
    run: AdaptiveRun,
    estimator: Estimator,
    asked: AdaptiveRequest,
    max: Duration,
    decided: Option<(StopReason, f64)>,
    /// The `End` to send, once decided and not yet taken.
    pending: Option<TestEnd>,
    sent: bool,
    /// This side sends datagrams: the receiver's figures over the span
    /// are the ones the estimate must agree with.
    check_receiver: bool,
    /// When this side sent `Start`: the responder's start gate, the zero
    /// of its reports' times, cannot have opened before.
    start_sent: Instant,
    /// How far ahead of this side's time since `start_sent` a receiver's
    /// report may be: the handshake's round trip and a little for
    /// scheduling, which no honest report needs (it is timed from later).
    report_slack: f64,
    /// Reports refused for a time ahead of that.
    refused_reports: u64,
}

/// Slack on a receiver's report time beyond the handshake's round trip:
/// two hosts' wake-ups.
const REPORT_SLACK: f64 = 0.02;

impl AdaptiveControl {
    fn new(
        run: AdaptiveRun,
        asked: &AdaptiveRequest,
        max: Duration,
        check_receiver: bool,
        start_sent: Instant,
        handshake_rtt: f64,
    ) -> AdaptiveControl {
        AdaptiveControl {
            run,
            estimator: Estimator::new(asked, max),
            asked: *asked,
            max,
            decided: None,
            pending: None,
            sent: false,
            check_receiver,
            start_sent,
            report_slack: handshake_rtt.clamp(0.0, 1.0) + REPORT_SLACK,
            refused_reports: 0,
        }
    }

    fn decided(&self) -> bool {
        self.decided.is_some()
    }

    fn elapsed(&self) -> f64 {
        self.run.origin().map_or(0.0, |o| o.elapsed().as_secs_f64())
    }

    fn sample(&mut self) {
        let s = self.run.sample();
        self.take(s);
    }

    /// Takes one of this side's samples.
    fn take(&mut self, s: Sample) {
        let Some(origin) = self.run.origin() else {
            return;
        };
        let t = s.at.saturating_duration_since(origin).as_secs_f64();
        // A sample whose reads were held up (this thread descheduled on a
        // busy host) is not known to the moment: at 20 Mbit/s a
        // millisecond is 1% of an interval's bytes. The next one will do.
        if s.spread > SAMPLE_SPREAD && t < self.max.as_secs_f64() {
            return;
        }
        tracing::trace!(t, bytes = s.bytes, slow_start = ?s.slow_start, "adaptive sample");
        if let Step::Stop(reason) = self.estimator.push(t, s.bytes, s.slow_start) {
            self.decide(reason, t);
        } else if let Some(rate) = self.estimator.settled_rate() {
            // Start-up is over: the senders keep little unsent, so that
            // the end, when it comes, stops the bytes soon.
            self.run.limit_unsent(rate);
        }
    }

    /// Takes the responder's count: the rule runs on what arrived, timed
    /// by the responder's own clock (from its start gate), so that the
    /// control connection's delay does not enter the rates. But the test's
    /// length is judged by this side's clock: a report timed ahead of what
    /// this side has seen (plus the handshake's round trip) is refused and
    /// counted, so that a responder's fast clock cannot end the test
    /// before its minimum, and the end is recorded at this side's time.
    fn report(&mut self, p: Progress) {
        let t = p.at_us as f64 / 1e6;
        let now = self.start_sent.elapsed().as_secs_f64();
        tracing::trace!(t, now, bytes = p.bytes, "adaptive receiver report");
        if t > now + self.report_slack {
            self.refused_reports += 1;
            if self.refused_reports == 1 {
                tracing::debug!(
                    report_seconds = t,
                    elapsed_seconds = now,
                    "a receiver's progress report is ahead of this side's clock: refused"
                );
            }
            return;
        }
        // Within the slack, never past this side's own time: the minimum
        // and maximum are judged by this clock.
        if let Step::Stop(reason) = self.estimator.push(t.min(now), p.bytes, None) {
            let at = self.elapsed();
            self.decide(reason, at);
        }
    }

    /// Ends the test where it stands: its slot is over.
    fn cut(&mut self) {
        let t = self.elapsed();
        self.decide(StopReason::Cut, t);
    }

    fn decide(&mut self, reason: StopReason, t: f64) {
        self.run.end();
        // The streams' own closes must not wait on this side's clones.
        self.run.release_sockets();
        self.decided = Some((reason, t));
        self.pending = Some(TestEnd {
            span_start_us: (self.span_start() * 1e6) as u64,
            reason,
            span_end_us: self.span_end().map(|e| (e * 1e6) as u64),
        });
    }

    /// Where the estimate's span ends: both ends' figures stop there, so
    /// that the bytes still crossing after the decision do not count.
    fn span_end(&self) -> Option<f64> {
        self.estimator
            .estimate()
            .map(|e| e.span_start_seconds + e.span_seconds)
    }

    /// Where the figures' span starts: the estimate's, or the whole test
    /// when there is none.
    fn span_start(&self) -> f64 {
        self.estimator
            .estimate()
            .map_or(0.0, |e| e.span_start_seconds)
    }

    fn take_end(&mut self) -> Option<TestEnd> {
        let end = self.pending.take()?;
        self.sent = true;
        Some(end)
    }

    /// The `End` of a test whose streams ended first: at the maximum, or
    /// cut short.
    fn ended_without_decision(&mut self) -> Option<TestEnd> {
        if self.sent {
            return None;
        }
        let t = self.elapsed();
        let reason = if t + 0.05 >= self.max.as_secs_f64() {
            StopReason::MaxDuration
        } else {
            StopReason::Cut
        };
        self.decide(reason, t);
        self.take_end()
    }

    /// Cuts this side's figures to the span and reports how it went.
    /// `remote` is the responder's figures, already cut to the span.
    fn finish(
        self,
        local: &mut crate::engine::stats::SideStats,
        remote: &crate::engine::stats::SideStats,
    ) -> AdaptiveOutcome {
        let bytes = local.streams.iter().map(|s| s.bytes).sum();
        let (reason, elapsed) = self.decided.unwrap_or((StopReason::Cut, self.elapsed()));
        self.run.cut(
            local,
            (self.span_start() * 1e6) as u64,
            self.span_end().map(|e| (e * 1e6) as u64),
        );
        // What the receiver got over the span, when this side sent
        // datagrams: an estimate it does not confirm is not precise,
        // whatever the rule said (a sender judging its own steady rate
        // over a bottleneck that drops a third of it).
        let receiver = self.check_receiver.then(|| received_rate(remote)).flatten();
        let confirmed = match (receiver, self.estimator.estimate()) {
            (Some(got), Some(e)) => receiver_agrees(got, e.bits_per_second, self.asked.precision()),
            (Some(_), None) => false,
            (None, _) => !self.check_receiver,
        };
        AdaptiveOutcome {
            stop_reason: reason,
            converged: reason == StopReason::Converged && self.estimator.converged() && confirmed,
            precision: self.asked.precision(),
            min_duration_seconds: self.asked.min_duration_ms as f64 / 1000.0,
            max_duration_seconds: self.max.as_secs_f64(),
            estimate: self.estimator.estimate(),
            elapsed_seconds: elapsed,
            bytes,
            responder_agreed: true,
            receiver_bits_per_second: receiver,
            best_half_width_at_max_bits_per_second: (reason == StopReason::OutOfReach)
                .then(|| self.estimator.reachable_half_width())
                .flatten(),
            progress_reports_refused: self.refused_reports,
        }
    }
}

/// The rate a side's streams had over their cut span: bytes over the
/// longest stream's seconds (streams run side by side).
fn received_rate(side: &crate::engine::stats::SideStats) -> Option<f64> {
    let bytes: u64 = side.streams.iter().map(|s| s.bytes).sum();
    let seconds = side.streams.iter().map(|s| s.seconds).fold(0.0, f64::max);
    (seconds > 0.0).then(|| bytes as f64 * 8.0 / seconds)
}

/// Whether the receiver's figure over the span confirms the estimate to
/// the asked precision.
fn receiver_agrees(received: f64, estimate: f64, precision: f64) -> bool {
    estimate > 0.0 && (received / estimate - 1.0).abs() <= precision
}

async fn expect_ready(control: &mut Control<TcpStream>, t: Duration) -> Result<(), ProbeError> {
    match control.recv(t).await {
        Ok(Message::Ready) => Ok(()),
        Ok(other) => Err(refusal(other, "ready")),
        Err(ControlError::Timeout(after)) => Err(ProbeError::Timeout {
            stage: "waiting for the responder to see every data stream",
            after,
        }),
        Err(e) => Err(e.into()),
    }
}

/// The error for a port that accepted the control connection but did not
/// answer as a responder does.
fn not_a_responder(detail: String) -> ProbeError {
    ProbeError::Protocol(format!(
        "the port accepted a connection but did not answer as a pathprobe responder (is it iperf3, or another service? `pathprobe respond` listens on {DEFAULT_PORT} by default): {detail}"
    ))
}

/// A short description of an unexpected message for an error: a hostile
/// peer's message can be large, and is not repeated whole.
fn describe(msg: &Message) -> String {
    let mut s = format!("{msg:?}");
    if s.len() > 200 {
        let mut cut = 200;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// A peer's string cut short for a message.
fn describe_str(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// The most notes of what a responder cut down that one `Accepted` may
/// carry: one per limit it has.
const MAX_NOTES: usize = 16;

/// Turns an unexpected reply into the error it stands for. The sentence
/// of a refusal or an error is shown and logged, so it is held to the
/// rule for a peer's strings: one that breaks it is a protocol error.
fn refusal(msg: Message, expected: &str) -> ProbeError {
    if let Message::Busy { message, .. }
    | Message::Rejected { message, .. }
    | Message::Error { message } = &msg
    {
        if let Err(e) = text::check(TextKind::Message, message) {
            return ProbeError::Protocol(format!("the responder's refusal or error: {e}"));
        }
    }
    match msg {
        Message::Busy {
            retry_after_ms,
            message,
        } => ProbeError::Busy {
            retry_after: Duration::from_millis(retry_after_ms),
            message,
        },
        Message::Rejected {
            reason: RejectReason::VersionMismatch,
            message,
        } => ProbeError::VersionMismatch(message),
        Message::Rejected { reason, message } => ProbeError::Rejected { reason, message },
        Message::Error { message } => ProbeError::Aborted(message),
        other => ProbeError::Protocol(format!("expected {expected}, got {}", describe(&other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stats::{SideStats, StreamStats};

    fn side(streams: &[(u64, f64)]) -> SideStats {
        let mut s = SideStats::default();
        for (id, &(bytes, seconds)) in streams.iter().enumerate() {
            s.streams.push(StreamStats {
                id: id as u32,
                bytes,
                seconds,
                ..Default::default()
            });
        }
        s
    }

    #[test]
    fn the_received_rate_is_the_streams_bytes_over_the_span() {
        // Two streams side by side over 0.5 s: 2 MB in all, 32 Mbit/s.
        let got = received_rate(&side(&[(1_000_000, 0.5), (1_000_000, 0.49)])).unwrap();
        assert!((got - 32e6).abs() < 1.0, "{got}");
        assert_eq!(received_rate(&side(&[])), None);
        assert_eq!(received_rate(&side(&[(10, 0.0)])), None);
    }

    #[test]
    fn a_sender_estimate_the_receiver_does_not_confirm_is_refused() {
        // The bench's case: 300 Mbit/s sent steadily, 194 arrived.
        assert!(!receiver_agrees(194e6, 300e6, 0.01));
        assert!(receiver_agrees(99.5e6, 100e6, 0.01));
        assert!(receiver_agrees(100.5e6, 100e6, 0.01));
        assert!(!receiver_agrees(98.9e6, 100e6, 0.01));
        assert!(!receiver_agrees(1.0, 0.0, 0.01));
    }
}
