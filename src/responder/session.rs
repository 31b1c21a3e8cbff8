//! One control session on the responder: handshake, admission against the
//! limits, collecting the data connections, running the responder's side of
//! the test and reporting its figures.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::{PendingTest, ResponderCounters, Shared};
use crate::control::{read_message, write_message, ControlError};
use crate::probe::datapath::{DataSocket, Plan, SideRun, StreamJob};
use crate::probe::spec::{stream_layout, FlowDirection, Kind};
use crate::probe::stats::{Role, SideStats};
use crate::probe::tcp::{apply_options, TcpOptions};
use crate::protocol::message::{check_hello, new_token, software, token_id, Hello, Welcome};
use crate::protocol::{Message, RejectReason, TestRequest};

/// Time allowed after the planned end for data to drain before streams are stopped.
pub const DRAIN_GRACE: Duration = Duration::from_secs(3);

pub(super) async fn run(mut control: TcpStream, peer: SocketAddr, hello: Hello, shared: &Shared) {
    let _ = control.set_nodelay(true);
    let config = shared.config();
    let timeout = config.idle_timeout;
    let counters = &shared.counters;
    if let Err((reason, message)) = check_hello(&hello) {
        ResponderCounters::inc(&counters.rejected_version);
        tracing::info!(%peer, %message, "prober rejected");
        let _ = write_message(
            &mut control,
            &Message::Rejected { reason, message },
            timeout,
        )
        .await;
        return;
    }
    let welcome = Welcome {
        version: crate::protocol::PROTOCOL_VERSION,
        software: software(),
        limits: config.limits(),
        auth: None,
    };
    if write_message(&mut control, &Message::Welcome(welcome), timeout)
        .await
        .is_err()
    {
        return;
    }
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
    if let Err(message) = check_limits(&request, &config) {
        ResponderCounters::inc(&counters.rejected_limit);
        tracing::info!(%peer, %message, "test refused");
        let _ = write_message(
            &mut control,
            &Message::Rejected {
                reason: RejectReason::Limit,
                message,
            },
            timeout,
        )
        .await;
        return;
    }
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
    let ok = match run_test(&mut control, peer, &request, shared).await {
        Ok(()) => {
            ResponderCounters::inc(&counters.tests_succeeded);
            true
        }
        Err(e) => {
            ResponderCounters::inc(&counters.tests_failed);
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
    // Free the slot before waiting for the prober to hang up, so that its
    // next probe, perhaps already on the way, is not told "busy".
    drop(slot);
    tracing::debug!(%peer, ok, "test finished");
    if ok {
        let _ = read_message(&mut control, Duration::from_secs(2)).await;
    }
}

fn count_control_error(shared: &Shared, e: &ControlError) {
    match e {
        ControlError::Timeout(_) => ResponderCounters::inc(&shared.counters.timeouts),
        ControlError::Closed => {}
        _ => ResponderCounters::inc(&shared.counters.protocol_errors),
    }
}

/// Refuses a request beyond the responder's limits, saying which.
pub fn check_limits(r: &TestRequest, c: &super::ResponderConfig) -> Result<(), String> {
    let asked = Duration::from_millis(r.duration_ms.saturating_add(r.omit_ms));
    if asked > c.max_duration {
        return Err(format!(
            "duration {:.1} s (with omit) exceeds this responder's maximum of {:.0} s",
            asked.as_secs_f64(),
            c.max_duration.as_secs_f64()
        ));
    }
    if r.duration_ms == 0 {
        return Err("duration must be greater than zero".into());
    }
    if r.streams == 0 || r.streams > c.max_streams {
        return Err(format!(
            "{} streams requested; this responder allows 1 to {}",
            r.streams, c.max_streams
        ));
    }
    if c.max_bitrate > 0 && (r.bitrate == 0 || r.bitrate > c.max_bitrate) {
        let asked = if r.bitrate == 0 {
            "an unlimited rate".to_string()
        } else {
            format!("{} bit/s", r.bitrate)
        };
        return Err(format!(
            "{asked} requested; this responder allows at most {} bit/s",
            c.max_bitrate
        ));
    }
    let len_ok = match r.kind {
        Kind::Udp => (crate::protocol::udp::HELLO_LEN as u32..=65_000).contains(&r.length),
        Kind::Tcp => (1..=16 << 20).contains(&r.length),
    };
    if !len_ok {
        return Err(format!("buffer length {} is out of range", r.length));
    }
    if r.window.is_some_and(|w| w > 256 << 20) {
        return Err("window above 256 MiB".into());
    }
    Ok(())
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
    shared: &Shared,
) -> Result<(), TestError> {
    let timeout = shared.config().idle_timeout;
    let token = new_token();
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
            token: token.clone(),
            request: request.clone(),
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
    shared.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
    let stats = SideStats {
        streams,
        host,
        kernel_release: crate::host::kernel_release(),
        interface,
    };
    write_message(control, &Message::Results(Box::new(stats)), timeout).await?;
    Ok(())
}
