//! The prober's side of a test: connect, agree the test, open the data
//! connections or UDP flows, run the local streams, and combine the local
//! figures with those the responder reports.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::net::TcpStream;

use super::datapath::{DataSocket, DRAIN_GRACE};
use super::result::{ProbeContext, ProbeResult};
use super::side::{End, TestSide};
use super::spec::{IpFamily, Kind, ProbeSpec};
use super::tcp_crr::{Connections, Dialer};
use super::{tcp, udp, verify, ProbeError};
use crate::auth::{self, Nonce};
use crate::control::{Control, ControlError};
use crate::protocol::message::{now_us, software, span, ClockOffset, Hello, HelloAuth, Limits};
use crate::protocol::{Message, RejectReason, DEFAULT_PORT};

/// Where to probe: a host name or address, and the responder's port.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    pub host: String,
    pub port: u16,
}

impl Target {
    /// Parses `host`, `host:port`, `a.b.c.d:port`, `::1`, `[::1]:port`.
    pub fn parse(s: &str, default_port: u16) -> Result<Target, ProbeError> {
        let bad = || {
            ProbeError::BadArgument(format!(
                "target {s:?}: expected host, host:port, or [ipv6]:port"
            ))
        };
        let s = s.trim();
        if s.is_empty() {
            return Err(bad());
        }
        if let Some(rest) = s.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad())?,
                None if after.is_empty() => default_port,
                None => return Err(bad()),
            };
            return Ok(Target {
                host: host.to_string(),
                port,
            });
        }
        if s.parse::<IpAddr>().is_ok() {
            return Ok(Target {
                host: s.to_string(),
                port: default_port,
            });
        }
        match s.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') && !host.is_empty() => Ok(Target {
                host: host.to_string(),
                port: port.parse().map_err(|_| bad())?,
            }),
            Some(_) => Err(bad()),
            None => Ok(Target {
                host: s.to_string(),
                port: default_port,
            }),
        }
    }

    pub fn from_addr(addr: SocketAddr) -> Target {
        Target {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl Default for Target {
    fn default() -> Self {
        Target {
            host: "127.0.0.1".into(),
            port: DEFAULT_PORT,
        }
    }
}

pub(crate) async fn resolve(
    target: &Target,
    bind: Option<IpAddr>,
    family: Option<IpFamily>,
) -> Result<Vec<SocketAddr>, ProbeError> {
    // The family -4/-6 or a bind address holds the probe to; both given
    // must agree.
    let (family, holder) = match (family, bind) {
        (Some(f), Some(b)) if !f.matches(b) => {
            return Err(ProbeError::BadArgument(format!(
                "{} asks for {}, but the bind address {b} is {}",
                f.flag(),
                f.as_str(),
                IpFamily::of(b).as_str()
            )))
        }
        (Some(f), _) => (Some(f), f.flag().to_string()),
        (None, Some(b)) => (Some(IpFamily::of(b)), format!("the bind address {b}")),
        (None, None) => (None, String::new()),
    };
    if let (Some(f), Ok(ip)) = (family, target.host.parse::<IpAddr>()) {
        if !f.matches(ip) {
            return Err(ProbeError::BadArgument(format!(
                "{holder} asks for {}, but {ip} is an {} address",
                f.as_str(),
                IpFamily::of(ip).as_str()
            )));
        }
    }
    let resolve_error = |source| ProbeError::Resolve {
        target: target.host.clone(),
        source,
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(resolve_error)?
        .filter(|a| family.is_none_or(|f| f.matches(a.ip())))
        .collect();
    if addrs.is_empty() {
        let what = match family {
            Some(f) => format!("no {} address", f.as_str()),
            None => "no usable address".to_string(),
        };
        return Err(resolve_error(std::io::Error::other(what)));
    }
    Ok(addrs)
}

/// The longest a whole probe may take: its measured time and warm-up, the
/// drain, and an allowance for set-up and tear-down of two control
/// timeouts and two seconds. Each stage has its own timeout too, but a
/// peer answering each one just in time (or dribbling) would otherwise
/// stretch a 1 s test to tens of seconds (issue 23).
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
    } = handshake(&mut control, spec).await?;
    tracing::debug!(target = %target, version, clock_offset = ?clock, "handshake done");
    let asked = spec.to_request();
    control.send(&Message::Request(asked.clone()), t).await?;
    let (token, request, clamped) = match control.recv(t).await? {
        Message::Accepted {
            token,
            request: agreed,
            clamped,
        } => (derived_token.unwrap_or(token), agreed, clamped),
        other => return Err(refusal(other, "accepted")),
    };
    // Nothing the responder's terms ask for may exceed the request: a
    // bigger test would have this side allocate and send without bound.
    verify::check_accepted(&asked, &request).map_err(ProbeError::Protocol)?;
    // A responder that changed the test without saying so (an older or a
    // broken one) must not pass its figures off as those asked for.
    let clamped = if clamped.is_empty() && request != asked {
        vec!["the responder changed the test without saying which limit applied".to_string()]
    } else {
        clamped.into_iter().take(16).collect()
    };
    if token.is_empty() || token.len() > 64 {
        return Err(ProbeError::Protocol(
            "the responder accepted the test without a usable token, and no secret was set to derive one"
                .into(),
        ));
    }
    for limit in &clamped {
        // Debug only: the result carries the clamp (the CLI's `note:` line,
        // serve's pathprobe_probe_clamped), and a WARN besides says it twice.
        tracing::debug!(target = %target, %limit, "the responder cut the test down to its limits");
    }

    let side = TestSide::new(End::Prober, &request, &token, spec.affinity, addr.ip())
        .with_intervals(spec.interval_events.clone());
    let sockets = match request.kind {
        Kind::Tcp | Kind::TcpRr => {
            let sockets =
                tcp::open_streams(addr, spec.bind, &side.tcp, side.stream_count(), &token, t)
                    .await?;
            expect_ready(&mut control, t).await?;
            sockets
        }
        // No connection before the start: each transaction makes its own.
        Kind::TcpCrr => {
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
        Kind::Udp | Kind::UdpRr => {
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
    let plan = side.plan.clone();
    let running = side
        .spawn(sockets)
        .map_err(|e| ProbeError::io("starting stream threads", e))?;
    let stop = running.stop.clone();
    control.send(&Message::Start, t).await?;
    let started = Instant::now();
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
        + plan.omit.as_secs_f64();
    let results_timeout = plan.omit + plan.duration + DRAIN_GRACE + Duration::from_secs(5) + t;
    let remote = async {
        let msg = control
            .recv_max(results_timeout, crate::protocol::MAX_FRAME_LEN)
            .await;
        if msg.is_err() {
            stop.stop();
        }
        msg
    };
    let (local, remote) = tokio::join!(running.finish(), remote);
    let local = match local {
        Ok(local) => local,
        // A responder that went away breaks the data streams and the
        // control connection together, and which one this side notices
        // first is a race. The control connection's account (closed,
        // reset, or the responder's own error message) says why; the
        // broken stream only says that something did.
        Err(e) => {
            return Err(match remote {
                Ok(Message::Error { message }) => ProbeError::Aborted(message),
                Err(ce) if ProbeError::aborted_by_peer(&ce) => ce.into(),
                _ => ProbeError::io("local streams", std::io::Error::other(e)),
            })
        }
    };
    let remote = match remote? {
        Message::Results(stats) => *stats,
        Message::Error { message } => return Err(ProbeError::Aborted(message)),
        other => {
            return Err(ProbeError::Protocol(format!(
                "expected results, got {}",
                describe(&other)
            )))
        }
    };
    verify::check_results(&request, &local, &remote).map_err(ProbeError::Protocol)?;
    tracing::debug!(elapsed = ?started.elapsed(), "probe finished");
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
    Ok(result)
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

/// Turns an unexpected reply into the error it stands for.
fn refusal(msg: Message, expected: &str) -> ProbeError {
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

    #[test]
    fn targets_parse_like_users_write_them() {
        let t = |s| Target::parse(s, 5301).unwrap();
        assert_eq!(
            t("10.0.0.1"),
            Target {
                host: "10.0.0.1".into(),
                port: 5301
            }
        );
        assert_eq!(
            t("10.0.0.1:9000"),
            Target {
                host: "10.0.0.1".into(),
                port: 9000
            }
        );
        assert_eq!(
            t("::1"),
            Target {
                host: "::1".into(),
                port: 5301
            }
        );
        assert_eq!(
            t("[::1]:7"),
            Target {
                host: "::1".into(),
                port: 7
            }
        );
        assert_eq!(
            t("[fe80::1]"),
            Target {
                host: "fe80::1".into(),
                port: 5301
            }
        );
        assert_eq!(
            t("db.example:80"),
            Target {
                host: "db.example".into(),
                port: 80
            }
        );
        assert_eq!(
            t("db.example"),
            Target {
                host: "db.example".into(),
                port: 5301
            }
        );
        for bad in ["", "host:port", "[::1", "[::1]x", "a:b:c:zz"] {
            assert!(Target::parse(bad, 1).is_err(), "{bad}");
        }
        assert_eq!(t("[::1]:7").to_string(), "[::1]:7");
    }
}
