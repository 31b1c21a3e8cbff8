//! The prober's side of a test: connect, agree the test, open the data
//! connections or UDP flows, run the local streams, and combine the local
//! figures with those the responder reports.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::net::{TcpSocket, TcpStream};

use super::datapath::{DataSocket, Plan, SideRun, StreamJob};
use super::result::{ProbeContext, ProbeResult};
use super::spec::{stream_layout, FlowDirection, Kind, ProbeSpec};
use super::stats::{Role, SideStats};
use super::tcp::{apply_options, prepare_blocking, TcpOptions};
use super::ProbeError;
use crate::control::{read_message, read_message_max, write_message};
use crate::protocol::message::{token_id, Hello};
use crate::protocol::udp::hello_datagram;
use crate::protocol::{encode_frame, Message, RejectReason, DEFAULT_PORT};

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

async fn resolve(target: &Target, bind: Option<IpAddr>) -> Result<Vec<SocketAddr>, ProbeError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(|e| ProbeError::Resolve {
            target: target.host.clone(),
            message: e.to_string(),
        })?
        // With a bind address, only peers of the same family can be reached.
        .filter(|a| bind.is_none_or(|b| b.is_ipv4() == a.is_ipv4()))
        .collect();
    if addrs.is_empty() {
        return Err(ProbeError::Resolve {
            target: target.host.clone(),
            message: "no usable address".into(),
        });
    }
    Ok(addrs)
}

fn connect_error(addr: SocketAddr, e: std::io::Error) -> ProbeError {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => ProbeError::Refused {
            addr: addr.to_string(),
        },
        K::TimedOut => ProbeError::Timeout {
            stage: "connecting",
            after: Duration::ZERO,
        },
        _ => ProbeError::Unreachable {
            addr: addr.to_string(),
            message: e.to_string(),
        },
    }
}

async fn connect_tcp(
    addr: SocketAddr,
    spec: &ProbeSpec,
    opts: Option<&TcpOptions>,
) -> Result<TcpStream, ProbeError> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| ProbeError::Io(format!("socket: {e}")))?;
    if let Some(ip) = spec.bind {
        sock.bind(SocketAddr::new(ip, 0))
            .map_err(|e| ProbeError::BadArgument(format!("cannot bind to {ip}: {e}")))?;
    }
    if let Some(opts) = opts {
        apply_options(&socket2::SockRef::from(&sock), opts, addr.is_ipv6())
            .map_err(|e| ProbeError::BadArgument(e.to_string()))?;
    }
    match tokio::time::timeout(spec.connect_timeout, sock.connect(addr)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(connect_error(addr, e)),
        Err(_) => Err(ProbeError::Timeout {
            stage: "connecting",
            after: spec.connect_timeout,
        }),
    }
}

/// Runs one probe against `target`.
pub async fn probe(target: &Target, spec: &ProbeSpec) -> Result<ProbeResult, ProbeError> {
    spec.validate().map_err(|e| ProbeError::BadArgument(e.0))?;
    let addrs = resolve(target, spec.bind).await?;
    let mut last = None;
    for addr in addrs {
        match connect_tcp(addr, spec, None).await {
            Ok(control) => return run_test(control, addr, target, spec).await,
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one address"))
}

async fn run_test(
    mut control: TcpStream,
    addr: SocketAddr,
    target: &Target,
    spec: &ProbeSpec,
) -> Result<ProbeResult, ProbeError> {
    let _ = control.set_nodelay(true);
    let t = spec.connect_timeout;
    let local_addr = control
        .local_addr()
        .map_err(|e| ProbeError::Io(e.to_string()))?;
    write_message(&mut control, &Message::Hello(Hello::new()), t).await?;
    match read_message(&mut control, t).await? {
        Message::Welcome(_) => {}
        other => return Err(refusal(other, "welcome")),
    }
    let request = spec.to_request();
    write_message(&mut control, &Message::Request(request.clone()), t).await?;
    let (token, request) = match read_message(&mut control, t).await? {
        Message::Accepted {
            token,
            request: agreed,
        } => (token, agreed),
        other => return Err(refusal(other, "accepted")),
    };

    let layout = stream_layout(request.direction, request.streams);
    let per_stream_rate = request.bitrate / request.streams.max(1) as u64;
    let tcp_opts = TcpOptions {
        window: request.window,
        congestion: request.congestion.clone(),
        tos: request.tos,
        bitrate: per_stream_rate,
    };
    let mut jobs = Vec::with_capacity(layout.len());
    match request.kind {
        Kind::Tcp => {
            for (id, &direction) in layout.iter().enumerate() {
                let mut s = connect_tcp(addr, spec, Some(&tcp_opts)).await?;
                let hello = encode_frame(&Message::DataHello {
                    token: token.clone(),
                    stream: id as u32,
                })
                .map_err(|e| ProbeError::Protocol(e.to_string()))?;
                tokio::time::timeout(t, tokio::io::AsyncWriteExt::write_all(&mut s, &hello))
                    .await
                    .map_err(|_| ProbeError::Timeout {
                        stage: "opening data connections",
                        after: t,
                    })?
                    .map_err(|e| ProbeError::Io(format!("data connection: {e}")))?;
                let s = s.into_std().map_err(|e| ProbeError::Io(e.to_string()))?;
                prepare_blocking(&s).map_err(|e| ProbeError::Io(e.to_string()))?;
                jobs.push(StreamJob {
                    id: id as u32,
                    direction,
                    role: role_of(direction),
                    socket: DataSocket::Tcp(s),
                });
            }
            expect_ready(&mut control, t).await?;
        }
        Kind::Udp => {
            let mut socks = Vec::with_capacity(layout.len());
            for _ in &layout {
                let bind = SocketAddr::new(spec.bind.unwrap_or(unspecified(addr)), 0);
                let s = std::net::UdpSocket::bind(bind).map_err(|e| {
                    ProbeError::BadArgument(format!("cannot bind UDP to {bind}: {e}"))
                })?;
                s.connect(addr).map_err(|e| connect_error(addr, e))?;
                super::udp::configure_socket(&s, request.window);
                if let Some(tos) = request.tos {
                    super::udp::set_tos(&s, tos)
                        .map_err(|e| ProbeError::BadArgument(format!("--tos: {e}")))?;
                }
                socks.push(s);
            }
            // Hellos go out until the responder says every flow is known; a
            // lost hello is simply sent again.
            let hellos: Vec<Vec<u8>> = (0..layout.len())
                .map(|i| hello_datagram(&token, i as u32))
                .collect();
            let ready = expect_ready(&mut control, t);
            tokio::pin!(ready);
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            loop {
                tokio::select! {
                    r = &mut ready => { r?; break; }
                    _ = tick.tick() => {
                        for (s, h) in socks.iter().zip(&hellos) {
                            let _ = s.send(h);
                        }
                    }
                }
            }
            for (id, (s, &direction)) in socks.into_iter().zip(&layout).enumerate() {
                jobs.push(StreamJob {
                    id: id as u32,
                    direction,
                    role: role_of(direction),
                    socket: DataSocket::Udp(s),
                });
            }
        }
    }

    let plan = Plan {
        omit: Duration::from_millis(request.omit_ms),
        duration: Duration::from_millis(request.duration_ms),
        length: request.length,
        bitrate_per_stream: per_stream_rate,
        affinity: spec.affinity,
        test_id: token_id(&token),
    };
    let interface = crate::host::interface_for_peer(addr.ip());
    let irqs = interface
        .as_deref()
        .map(crate::host::interface_irqs)
        .unwrap_or_default();
    let side = SideRun::spawn(jobs, plan.clone(), irqs)
        .map_err(|e| ProbeError::Io(format!("starting stream threads: {e}")))?;
    let stop = side.stop.clone();
    write_message(&mut control, &Message::Start, t).await?;
    let started = Instant::now();
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
        + plan.omit.as_secs_f64();
    let grace = crate::responder::DRAIN_GRACE;
    let results_timeout = plan.omit + plan.duration + grace + Duration::from_secs(5) + t;
    let local_run = side.run(grace);
    let remote = async {
        let msg = read_message_max(
            &mut control,
            results_timeout,
            crate::protocol::MAX_FRAME_LEN,
        )
        .await;
        if msg.is_err() {
            stop.stop();
        }
        msg
    };
    let ((streams, host), remote) = tokio::join!(local_run, remote);
    let remote = match remote? {
        Message::Results(stats) => *stats,
        Message::Error { message } => return Err(ProbeError::Aborted(message)),
        other => {
            return Err(ProbeError::Protocol(format!(
                "expected results, got {other:?}"
            )))
        }
    };
    tracing::debug!(elapsed = ?started.elapsed(), "probe finished");
    let local = SideStats {
        streams,
        host,
        kernel_release: crate::host::kernel_release(),
        interface,
    };
    let ctx = ProbeContext {
        kind: request.kind,
        direction: request.direction,
        target: target.to_string(),
        local_address: local_addr.to_string(),
        remote_address: addr.to_string(),
        timestamp_seconds: timestamp,
        requested_seconds: plan.duration.as_secs_f64(),
        omit_seconds: plan.omit.as_secs_f64(),
    };
    Ok(ProbeResult::combine(ctx, &local, &remote))
}

fn unspecified(peer: SocketAddr) -> IpAddr {
    if peer.is_ipv4() {
        IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    }
}

fn role_of(direction: FlowDirection) -> Role {
    match direction {
        FlowDirection::Send => Role::Sender,
        FlowDirection::Receive => Role::Receiver,
    }
}

async fn expect_ready(control: &mut TcpStream, t: Duration) -> Result<(), ProbeError> {
    match read_message(control, t).await {
        Ok(Message::Ready) => Ok(()),
        Ok(other) => Err(refusal(other, "ready")),
        Err(crate::control::ControlError::Timeout(after)) => Err(ProbeError::Timeout {
            stage: "waiting for the responder to see every data stream",
            after,
        }),
        Err(e) => Err(e.into()),
    }
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
        other => ProbeError::Protocol(format!("expected {expected}, got {other:?}")),
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
