//! One side of one test, built by the same code on both ends: the prober
//! and the responder each describe their side with a [`TestSide`] made from
//! the agreed [`TestRequest`], hand it the connected data sockets, and get
//! back the [`SideStats`] they report.
//!
//! What differs between the ends is only which way each stream runs for
//! them ([`End::role`]) and how the sockets were obtained: the prober
//! connects them (`tcp::open_streams`, `udp::open_flows`), the responder
//! accepts them. A `tcp_crr` stream has no socket of its own but a
//! connection per transaction, which the prober makes and the responder is
//! handed as the test runs ([`tcp_crr::Connections`]). Everything else (the plan, the socket options, the
//! interface and IRQ lookup, the stream threads, the host figures) is here,
//! once. A new kind of test adds its socket preparation to
//! [`TestSide::prepare`] and its loops to its own file, and both ends run it.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::engine::datapath::{
    interval_plan, pin_current_thread, DataSocket, IntervalSink, Plan, Progress, StartGate,
    StopFlag, StreamContext, StreamJob, DRAIN_GRACE, POLL_INTERVAL,
};
use crate::engine::stats::{Role, SideStats, StreamStats};
use crate::engine::tcp_socket::{apply_options, TcpOptions};
use crate::host::{HostDelta, HostSnapshot};
use crate::kinds::kind::{ProbeKind, Transport};
use crate::kinds::udp;
use crate::protocol::model::{stream_layout, FlowDirection};
use crate::protocol::udp::token_id;
use crate::protocol::TestRequest;

/// Which end of the test this side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Prober,
    Responder,
}

impl End {
    /// What this end does on a stream that runs in `direction`, which is
    /// always given as the prober sees it.
    pub fn role(self, direction: FlowDirection) -> Role {
        match (self, direction) {
            (End::Prober, FlowDirection::Send) | (End::Responder, FlowDirection::Receive) => {
                Role::Sender
            }
            (End::Prober, FlowDirection::Receive) | (End::Responder, FlowDirection::Send) => {
                Role::Receiver
            }
        }
    }
}

/// This end's half of an agreed test.
#[derive(Debug, Clone)]
pub struct TestSide {
    pub end: End,
    pub request: TestRequest,
    pub plan: Plan,
    /// What every TCP data socket of the test gets, on both ends.
    pub tcp: TcpOptions,
    /// Stream `i` runs in `layout[i]`, as the prober sees it.
    pub layout: Vec<FlowDirection>,
    /// The interface that carries traffic to the peer, and its IRQs.
    pub interface: Option<String>,
    irqs: Vec<String>,
    /// What cross-traffic accounting needs of the test: its kind, sizes,
    /// and whether the peer is IPv6.
    shape: crate::analysis::cross::TestShape,
    /// Where this side's intervals go as they close (the prober's
    /// `--json-stream`); the responder's travel in its results only.
    pub intervals: Option<IntervalSink>,
    /// The count of bytes this side's streams move, when the caller keeps
    /// one (the byte budget's); a count of the side's own otherwise.
    progress: Option<Progress>,
}

impl TestSide {
    /// This end's side of `request`, run against `peer`. `affinity` is the
    /// CPU for this end's data threads: the prober's own choice, or the one
    /// the prober asked of the responder.
    pub fn new(
        end: End,
        request: &TestRequest,
        token: &str,
        affinity: Option<usize>,
        peer: IpAddr,
    ) -> TestSide {
        let per_stream = request.bitrate / u64::from(request.streams.max(1));
        let interface = crate::host::interface_for_peer(peer);
        let irqs = interface
            .as_deref()
            .map(crate::host::interface_irqs)
            .unwrap_or_default();
        TestSide {
            end,
            request: request.clone(),
            plan: Plan {
                omit: Duration::from_millis(request.omit_ms),
                duration: Duration::from_millis(request.duration_ms),
                length: request.length,
                bitrate_per_stream: per_stream,
                affinity,
                test_id: token_id(token),
                interval: interval_plan(
                    request.interval_ms,
                    request.duration_ms,
                    request.total_streams(),
                ),
                offload: !request.no_offload,
                rr: request
                    .rr
                    .filter(|_| super::of(request.kind).request_response()),
                wire: Default::default(),
                send_limit: None,
                zerocopy: Default::default(),
                adaptive: request.adaptive.map(|_| {
                    crate::engine::adaptive::AdaptiveRun::new(Duration::from_millis(
                        request.duration_ms,
                    ))
                }),
            },
            tcp: TcpOptions {
                window: request.window,
                congestion: request.congestion.clone(),
                tos: request.tos,
                bitrate: per_stream,
            },
            layout: stream_layout(request.direction, request.streams),
            interface,
            irqs,
            shape: crate::analysis::cross::TestShape::new(
                request,
                token,
                peer.to_canonical().is_ipv6(),
            ),
            intervals: None,
            progress: None,
        }
    }

    /// Moves this side's TCP bytes with or without copies (`--zerocopy`).
    pub fn with_zerocopy(mut self, mode: crate::engine::zerocopy::ZeroCopy) -> TestSide {
        self.plan.zerocopy = mode;
        self
    }

    /// Sends this side's intervals to `sink` as they close.
    pub fn with_intervals(mut self, sink: Option<IntervalSink>) -> TestSide {
        self.intervals = sink;
        self
    }

    /// Counts this side's bytes in `progress` too (see
    /// [`crate::probe::ProbeSpec::moved`]).
    pub fn with_progress(mut self, progress: Option<Progress>) -> TestSide {
        self.progress = progress;
        self
    }

    /// Runs UDP streams with `wire`'s header (iperf3's, for its peers).
    pub fn with_wire(mut self, wire: crate::engine::datapath::UdpWire) -> TestSide {
        self.plan.wire = wire;
        self
    }

    /// Stops this side's senders, together, once they have sent `bytes`
    /// after the warm-up (iperf3's `-n`/`-k`, as its server does).
    pub fn with_send_limit(mut self, bytes: Option<u64>) -> TestSide {
        self.plan.send_limit = bytes.map(crate::engine::datapath::SendLimit::new);
        self
    }

    /// Streams the test opens in all.
    pub fn stream_count(&self) -> usize {
        self.layout.len()
    }

    /// Bits per second of one flow of the test (0: unpaced).
    pub fn flow_bitrate(&self) -> u64 {
        self.request.bitrate / u64::from(self.request.streams.max(1))
    }

    /// Applies the test's socket options to a data socket this end did not
    /// configure itself before connecting (every socket on the responder).
    pub fn prepare(&self, socket: &DataSocket, ipv6: bool) -> std::io::Result<()> {
        let kind = super::of(self.request.kind);
        match (kind.transport(), kind.connection_per_transaction(), socket) {
            // TCP_NODELAY of tcp_rr is set by its loops, on both ends.
            (Transport::Tcp, false, DataSocket::Tcp(s)) => {
                apply_options(&socket2::SockRef::from(s), &self.tcp, ipv6)
            }
            (Transport::Udp, _, DataSocket::Udp(s)) => {
                udp::configure_socket(
                    s,
                    udp::buffer_size(self.request.window, self.flow_bitrate()),
                );
                match self.request.tos {
                    Some(tos) => udp::set_tos(s, tos),
                    None => Ok(()),
                }
            }
            // tcp_crr's loops apply the options to every connection.
            (Transport::Tcp, true, DataSocket::Connections(_)) => Ok(()),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "a {} test was handed a data socket of another kind",
                    self.request.kind
                ),
            )),
        }
    }

    /// Starts a thread per stream, each waiting for [`RunningSide::finish`]
    /// to release them. `sockets` holds every stream's socket, by id.
    pub fn spawn(
        self,
        sockets: impl IntoIterator<Item = (u32, DataSocket)>,
    ) -> std::io::Result<RunningSide> {
        let mut jobs = Vec::with_capacity(self.layout.len());
        for (id, socket) in sockets {
            let direction = *self.layout.get(id as usize).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("stream {id} is not part of this test"),
                )
            })?;
            let role = self.end.role(direction);
            // The prober's estimate reads its TCP sockets' own counts.
            if let (Some(a), End::Prober, DataSocket::Tcp(s)) =
                (&self.plan.adaptive, self.end, &socket)
            {
                a.watch_tcp(role, s);
            }
            jobs.push(StreamJob {
                id,
                direction,
                role,
                socket,
            });
        }
        let expected = jobs.len();
        let mut run = SideRun::spawn(
            super::of(self.request.kind),
            jobs,
            self.plan.clone(),
            self.irqs.clone(),
            self.intervals,
            self.progress,
        )?;
        // Loopback carries both ends of the test: nothing to tell apart.
        run.counted = self
            .interface
            .clone()
            .filter(|i| i != "lo")
            .map(|i| (i, self.shape));
        Ok(RunningSide {
            stop: run.stop.clone(),
            progress: run.progress.clone(),
            run,
            expected,
            interface: self.interface,
        })
    }
}

/// A side whose stream threads exist and wait at the start gate.
pub struct RunningSide {
    run: SideRun,
    /// Stops the streams early (peer gone, test interrupted).
    pub stop: StopFlag,
    /// Bytes this side's streams have moved so far.
    pub progress: Progress,
    expected: usize,
    interface: Option<String>,
}

/// A side whose data path failed: a stream thread ended without figures
/// (it panicked, or would not stop). Its other figures would understate the
/// test, so none are reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the data path failed: {missing} of {expected} streams gave no figures")]
pub struct DataPathFailed {
    pub missing: usize,
    pub expected: usize,
}

impl RunningSide {
    /// Releases the streams, waits until they end (at most [`DRAIN_GRACE`]
    /// past the planned end), and returns what this side measured.
    pub async fn finish(self) -> Result<SideStats, DataPathFailed> {
        let expected = self.expected;
        let warnings = self.run.warnings.clone();
        let (streams, host) = self.run.run(DRAIN_GRACE).await;
        let warnings = std::mem::take(&mut *warnings.lock().unwrap_or_else(|p| p.into_inner()));
        if streams.len() < expected {
            return Err(DataPathFailed {
                missing: expected - streams.len(),
                expected,
            });
        }
        Ok(SideStats {
            streams,
            host,
            kernel_release: crate::host::kernel_release(),
            fingerprint: Some(crate::host::read_fingerprint(self.interface.as_deref())),
            interface: self.interface,
            warnings,
        })
    }

    /// Longest the side may go without moving a byte before its peer is
    /// taken to have stopped taking part: a few seconds, or a few of the
    /// plan's own gaps between writes when it is paced slower than that.
    pub fn stall_limit(&self) -> Duration {
        let plan = &self.run.plan;
        let gap = if plan.bitrate_per_stream > 0 {
            Duration::from_secs_f64(
                (f64::from(plan.length) * 8.0 / plan.bitrate_per_stream as f64).min(3600.0),
            )
        } else {
            Duration::ZERO
        };
        STALL_LIMIT.max(gap * 4)
    }
}

/// See [`RunningSide::stall_limit`].
pub const STALL_LIMIT: Duration = Duration::from_secs(3);

/// Starts one thread for `job`; its figures arrive on the returned channel.
/// What a side could not do as asked, one sentence each, for
/// [`SideStats::warnings`].
pub type Warnings = Arc<Mutex<Vec<String>>>;

/// Starts one thread for `job`; its figures arrive on the returned channel,
/// and what it could not do as asked goes to `warnings` (once per kind).
pub fn spawn_stream(
    kind: &'static dyn ProbeKind,
    job: StreamJob,
    ctx: StreamContext,
    warnings: Warnings,
) -> std::io::Result<oneshot::Receiver<StreamStats>> {
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!("pp-stream-{}", job.id))
        .spawn(move || {
            if let Some(cpu) = ctx.plan.affinity {
                if let Err(e) = pin_current_thread(cpu) {
                    tracing::warn!(cpu, error = %e, "could not pin stream thread");
                    // Sent back to the prober, which would otherwise take
                    // the figures for pinned ones. One line for all streams.
                    let w = format!("could not pin the data threads to CPU {cpu}: {e}");
                    let mut all = warnings.lock().unwrap_or_else(|p| p.into_inner());
                    if !all.contains(&w) {
                        all.push(w);
                    }
                }
            }
            let mut stats = StreamStats {
                id: job.id,
                direction: Some(job.direction),
                role: Some(job.role),
                ..StreamStats::default()
            };
            // A stream that panics gives no figures, and its side reports
            // the failure rather than a test short of a stream.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                kind.run_stream(job.socket, job.role, &ctx, &mut stats)
            }));
            match ran {
                Ok(()) => {
                    let _ = tx.send(stats);
                }
                Err(_) => tracing::error!(stream = job.id, "stream thread panicked"),
            }
        })?;
    Ok(rx)
}

/// The streams of one side, started and gathered together with the host
/// figures over the same window.
pub struct SideRun {
    streams: Vec<oneshot::Receiver<StreamStats>>,
    pub gate: StartGate,
    pub stop: StopFlag,
    pub progress: Progress,
    plan: Plan,
    irqs: Vec<String>,
    /// The interface whose bytes are compared with the test's own, and
    /// what the test's own are made of.
    counted: Option<(String, crate::analysis::cross::TestShape)>,
    /// Filled by the stream threads.
    pub warnings: Warnings,
}

impl SideRun {
    /// Spawns a thread per job; they wait at the gate.
    pub fn spawn(
        kind: &'static dyn ProbeKind,
        jobs: Vec<StreamJob>,
        plan: Plan,
        irqs: Vec<String>,
        intervals: Option<IntervalSink>,
        progress: Option<Progress>,
    ) -> std::io::Result<SideRun> {
        let gate = StartGate::default();
        let stop = StopFlag::default();
        let progress = progress.unwrap_or_default();
        let ctx = StreamContext {
            plan: plan.clone(),
            gate: gate.clone(),
            stop: stop.clone(),
            progress: progress.clone(),
            intervals,
        };
        let mut streams = Vec::with_capacity(jobs.len());
        let warnings = Warnings::default();
        for job in jobs {
            match spawn_stream(kind, job, ctx.clone(), warnings.clone()) {
                Ok(rx) => streams.push(rx),
                Err(e) => {
                    gate.abort();
                    return Err(e);
                }
            }
        }
        Ok(SideRun {
            streams,
            gate,
            stop,
            progress,
            plan,
            irqs,
            counted: None,
            warnings,
        })
    }

    /// Starts the streams and waits until they finish, or until `grace`
    /// after the planned end, when they are told to stop.
    /// Returns the per-stream figures and the host delta over the window.
    pub async fn run(mut self, grace: Duration) -> (Vec<StreamStats>, HostDelta) {
        let start = self.gate.open();
        if let Some(a) = &self.plan.adaptive {
            a.set_origin(start);
        }
        let window_start = start + self.plan.omit;
        tokio::time::sleep_until(window_start.into()).await;
        let before = HostSnapshot::take(&self.irqs).ok();
        let iface_before = self.interface_counters();
        let deadline = window_start + self.plan.duration + grace;
        let mut results = Vec::with_capacity(self.streams.len());
        for mut rx in std::mem::take(&mut self.streams) {
            let got = match tokio::time::timeout_at(deadline.into(), &mut rx).await {
                Ok(r) => r.ok(),
                Err(_) => {
                    // Threads poll the flag every POLL_INTERVAL, so this wait is short.
                    self.stop.stop();
                    tokio::time::timeout(POLL_INTERVAL * 20, rx)
                        .await
                        .ok()
                        .and_then(Result::ok)
                }
            };
            results.extend(got);
        }
        let after = HostSnapshot::take(&self.irqs).ok();
        let iface_after = self.interface_counters();
        let mut host: HostDelta = match (before, after) {
            (Some(b), Some(a)) => b.delta(&a),
            _ => Default::default(),
        };
        keep_relevant_cpus(&mut host, &results);
        if let (Some(b), Some(a), Some((_, shape))) = (iface_before, iface_after, &self.counted) {
            host.interface_bytes = Some(crate::analysis::cross::interface_bytes(
                b, a, &results, shape,
            ));
        }
        (results, host)
    }

    /// The counted interface's counters now, if readable.
    fn interface_counters(&self) -> Option<crate::host::NetDevCounters> {
        let (name, _) = self.counted.as_ref()?;
        crate::host::read_net_dev(name).ok().flatten()
    }
}

/// Most CPUs a side reports: the verdict needs only those its data threads
/// ran on and those that took the interface's interrupts.
pub const MAX_CPUS: usize = 32;

/// Keeps only the CPUs the streams ran on or that took the interface's
/// interrupts.
fn keep_relevant_cpus(host: &mut HostDelta, streams: &[StreamStats]) {
    let used: Vec<u32> = streams
        .iter()
        .filter_map(|s| s.sched.as_ref())
        .flat_map(|s| s.cpus.iter().copied())
        .collect();
    host.cpus
        .retain(|c| used.contains(&c.cpu) || c.interface_interrupts > 0);
    host.cpus.truncate(MAX_CPUS);
}

impl Drop for SideRun {
    fn drop(&mut self) {
        // A run dropped before it started (control failure) must not leave
        // threads waiting at the gate.
        self.gate.abort();
        self.stop.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Direction;
    use crate::protocol::Kind;

    #[test]
    fn the_two_ends_take_opposite_roles_on_every_stream() {
        for d in [FlowDirection::Send, FlowDirection::Receive] {
            assert_ne!(End::Prober.role(d), End::Responder.role(d));
        }
        assert_eq!(End::Prober.role(FlowDirection::Send), Role::Sender);
        assert_eq!(End::Responder.role(FlowDirection::Send), Role::Receiver);
    }

    #[test]
    fn both_ends_plan_the_same_test() {
        let request = TestRequest {
            kind: Kind::Tcp,
            direction: Direction::Bidir,
            duration_ms: 2500,
            omit_ms: 500,
            streams: 2,
            bitrate: 100_000_000,
            length: 1000,
            window: Some(1 << 20),
            congestion: None,
            tos: Some(8),
            affinity: Some(1),
            interval_ms: None,
            no_offload: false,
            rr: None,
            adaptive: None,
        };
        let ip = IpAddr::from([127, 0, 0, 1]);
        let p = TestSide::new(End::Prober, &request, "deadbeef00", None, ip);
        let r = TestSide::new(End::Responder, &request, "deadbeef00", Some(1), ip);
        assert_eq!(p.plan.duration, r.plan.duration);
        assert_eq!(p.plan.omit, Duration::from_millis(500));
        assert_eq!(p.plan.bitrate_per_stream, 50_000_000);
        assert_eq!(p.tcp.bitrate, 50_000_000);
        assert_eq!(p.plan.test_id, 0xdead_beef);
        assert_eq!(r.plan.test_id, 0xdead_beef);
        assert_eq!(p.stream_count(), 4);
        assert_eq!(p.layout, r.layout);
        assert_eq!(r.plan.affinity, Some(1));
        assert_eq!(p.plan.affinity, None);
    }

    #[test]
    fn a_socket_of_the_wrong_kind_or_a_stream_out_of_range_is_an_error() {
        let request = TestRequest {
            kind: Kind::Tcp,
            direction: Direction::Send,
            duration_ms: 100,
            omit_ms: 0,
            streams: 1,
            bitrate: 0,
            length: 1000,
            window: None,
            congestion: None,
            tos: None,
            affinity: None,
            interval_ms: None,
            no_offload: false,
            rr: None,
            adaptive: None,
        };
        let ip = IpAddr::from([127, 0, 0, 1]);
        let side = TestSide::new(End::Responder, &request, "00", None, ip);
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(side.prepare(&DataSocket::Udp(udp), false).is_err());
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(side.spawn([(5, DataSocket::Udp(udp))]).is_err());
    }
}
