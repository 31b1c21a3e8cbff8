//! The data path's parts shared by both ends of a test and by every kind:
//! the plan, the start gate that releases all streams of a side at once,
//! the stop flag, the sockets handed to stream threads, and the meter of a
//! thread's CPU over its window, and the interval meter that buckets a
//! stream's figures for `-i`. The threads themselves are started by
//! [`crate::kinds::side`], and run the loops of their kind (`tcp.rs`, `udp.rs`).
//!
//! Streams run on dedicated threads with blocking sockets, not on the async
//! runtime: per-thread CPU accounting (RUSAGE_THREAD) is then exact, and the
//! runtime's scheduling never limits what the path can carry. The protocol
//! side (control connection, tokio) only hands sockets over and collects
//! [`StreamStats`].

use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::engine::stats::{IntervalStats, Role, StreamStats, ThreadSched};
use crate::host::{SchedStat, ThreadUsage};
use crate::protocol::FlowDirection;

/// Time allowed after the planned end for data to drain before streams
/// are stopped. Both ends use it: the responder to bound its run, the
/// prober to bound its wait for the responder's results.
pub const DRAIN_GRACE: Duration = Duration::from_secs(3);

/// How often a blocked data thread wakes to look at the stop flag.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Timing and shape of a test, as both ends run it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub omit: Duration,
    pub duration: Duration,
    pub length: u32,
    /// Bits per second for each stream; 0 is unpaced.
    pub bitrate_per_stream: u64,
    pub affinity: Option<usize>,
    /// Carried in every UDP datagram so that strays are ignored.
    pub test_id: u32,
    /// Interval reports, when asked for.
    pub interval: Option<IntervalPlan>,
    /// UDP: use GSO and GRO where the kernel has them (docs/UDP.md).
    pub offload: bool,
    /// A request/response test's shape: its streams run the `tcp_rr` loops.
    pub rr: Option<crate::protocol::rr::RrParams>,
    /// Whose datagram header UDP streams carry.
    pub wire: UdpWire,
    /// What this side's senders move together after the warm-up before
    /// they stop, if anything (an iperf3 client's `-n`/`-k`).
    pub send_limit: Option<SendLimit>,
    /// TCP: move bytes without copying them where the kernel allows it
    /// (this end's own setting; see [`crate::engine::zerocopy`]).
    pub zerocopy: crate::engine::zerocopy::ZeroCopy,
    /// An adaptive test's shared state: senders also stop when
    /// it says the test ended, and streams log their bytes for the cut.
    pub adaptive: Option<crate::engine::adaptive::AdaptiveRun>,
}

/// The header and end-of-stream rules of a UDP stream: pathprobe's own
/// (test id, omit flag, FIN datagrams), or iperf3's (clock and sequence
/// only; the end is said on the control connection).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UdpWire {
    #[default]
    Pathprobe,
    Iperf3 {
        /// `--udp-counters-64bit`: a 64-bit sequence.
        counters64: bool,
    },
}

/// Most interval records one side keeps over all its streams. They travel
/// in the responder's `Results` frame, which must stay under the frame
/// limit together with every stream's own figures: with many streams the
/// room left is smaller (see [`record_budget`]).
pub const MAX_INTERVAL_RECORDS: usize = 1000;
/// An interval record, and a stream's own figures, at their longest in
/// JSON (every integer at 20 digits, every float at 17 and more).
const RECORD_BYTES: usize = 160;
const STREAM_BYTES: usize = 720;

/// How many interval records fit in a `Results` frame beside the figures
/// of `total_streams` streams, with room for the side's own.
fn record_budget(total_streams: u32) -> usize {
    crate::protocol::MAX_FRAME_LEN
        .saturating_sub(16 << 10)
        .saturating_sub(total_streams as usize * STREAM_BYTES)
        / RECORD_BYTES
}
/// Shortest interval, as iperf3's: shorter ones measure the scheduler.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// How a test's streams are bucketed into intervals: both ends derive it
/// from the agreed request with [`interval_plan`], so their buckets line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalPlan {
    pub length: Duration,
    /// Intervals per stream at most; the last absorbs whatever arrives
    /// after the planned end (a receiver's drain).
    pub count: usize,
}

/// The intervals for a test of `duration_ms` over `total_streams` streams,
/// `interval_ms` asked: at least [`MIN_INTERVAL`] long, and coarsened
/// until the side's records fit [`MAX_INTERVAL_RECORDS`] and the results
/// frame. `None` when none
/// were asked for (or too many streams leave no room for any).
pub fn interval_plan(
    interval_ms: Option<u64>,
    duration_ms: u64,
    total_streams: u32,
) -> Option<IntervalPlan> {
    let asked = interval_ms.filter(|&ms| ms > 0)?;
    let records = MAX_INTERVAL_RECORDS.min(record_budget(total_streams));
    let per_stream = (records / total_streams.max(1) as usize) as u64;
    if per_stream == 0 {
        return None;
    }
    let duration = duration_ms.max(1);
    let mut ms = asked.max(MIN_INTERVAL.as_millis() as u64);
    if duration.div_ceil(ms) > per_stream {
        ms = duration.div_ceil(per_stream);
    }
    Some(IntervalPlan {
        length: Duration::from_millis(ms),
        count: duration.div_ceil(ms) as usize,
    })
}

/// One closed interval of one local stream, as it happens.
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalEvent {
    pub stream: u32,
    pub direction: FlowDirection,
    pub role: Role,
    pub interval: IntervalStats,
}

/// Where a side's stream threads send their intervals as they close
/// (`--json-stream`). Sending never blocks a data thread; a receiver that
/// went away is ignored.
#[derive(Debug, Clone)]
pub struct IntervalSink(pub mpsc::Sender<IntervalEvent>);

impl PartialEq for IntervalSink {
    /// Sinks carry no figures: two specs differing only in where their
    /// events go ask for the same test.
    fn eq(&self, _: &IntervalSink) -> bool {
        true
    }
}

/// What an interval's `mark` counts: a counter the loop reads at each
/// interval's end, whose growth over the interval is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Bytes only (a TCP receiver).
    None,
    /// Bytes and datagrams (a UDP sender).
    Datagrams,
    /// TCP_INFO's total retransmits: their growth is `retransmits`.
    Retransmits,
    /// One past the highest UDP sequence seen: its growth less the
    /// datagrams received is `lost`.
    SequenceSpan,
}

/// Buckets one stream's bytes into the plan's intervals. It lives on the
/// data thread and only exists when intervals were asked for, so a test
/// without them pays one branch per read or write. Between interval ends
/// it adds two integers; at an end it closes the bucket (and the loop reads
/// its mark).
#[derive(Debug)]
pub struct IntervalMeter {
    plan: IntervalPlan,
    mark: Mark,
    origin: Option<Instant>,
    /// When the bucket in progress ends; `None` once it is the last.
    next_edge: Option<Instant>,
    index: usize,
    bytes: u64,
    packets: u64,
    mark_base: Option<u64>,
    records: Vec<IntervalStats>,
    sink: Option<(IntervalSink, u32, FlowDirection, Role)>,
}

impl IntervalMeter {
    /// A meter for the stream `stats` describes, if the plan has intervals.
    pub fn new(ctx: &StreamContext, stats: &StreamStats, mark: Mark) -> Option<IntervalMeter> {
        let plan = ctx.plan.interval?;
        let sink = match (&ctx.intervals, stats.direction, stats.role) {
            (Some(sink), Some(d), Some(r)) => Some((sink.clone(), stats.id, d, r)),
            _ => None,
        };
        Some(IntervalMeter {
            plan,
            mark,
            origin: None,
            next_edge: None,
            index: 0,
            bytes: 0,
            packets: 0,
            mark_base: None,
            records: Vec::with_capacity(plan.count.min(MAX_INTERVAL_RECORDS)),
            sink,
        })
    }

    /// Starts interval 0 at `at`, the start of the stream's window (once).
    pub fn open(&mut self, at: Instant) {
        if self.origin.is_none() {
            self.origin = Some(at);
            self.next_edge = (self.plan.count > 1).then(|| at + self.plan.length);
        }
    }

    /// The mark's value at the start of the bucket in progress, if not yet
    /// known (the first datagram's sequence, the retransmits at open).
    pub fn mark_base(&mut self, value: u64) {
        self.mark_base.get_or_insert(value);
    }

    /// Whether the bucket in progress has ended by `now`: the caller then
    /// reads its mark and calls [`IntervalMeter::roll`].
    #[inline]
    pub fn due(&self, now: Instant) -> bool {
        self.next_edge.is_some_and(|edge| now >= edge)
    }

    /// Closes every bucket that ended by `now` (empty ones too: a stall
    /// shows as intervals of 0). `mark` is the counter's value now.
    pub fn roll(&mut self, now: Instant, mark: Option<u64>) {
        while let Some(edge) = self.next_edge.filter(|&e| now >= e) {
            let end = (self.index + 1) as f64 * self.plan.length.as_secs_f64();
            self.close(end, mark);
            self.index += 1;
            self.next_edge = (self.index + 1 < self.plan.count).then(|| edge + self.plan.length);
        }
    }

    /// Counts bytes (and datagrams) into the bucket in progress.
    #[inline]
    pub fn add(&mut self, bytes: u64, packets: u64) {
        self.bytes += bytes;
        self.packets += packets;
    }

    fn close(&mut self, end: f64, mark: Option<u64>) {
        let record = self.record(end, mark);
        self.bytes = 0;
        self.packets = 0;
        self.mark_base = mark.or(self.mark_base);
        if let Some((sink, stream, direction, role)) = &self.sink {
            let _ = sink.0.send(IntervalEvent {
                stream: *stream,
                direction: *direction,
                role: *role,
                interval: record.clone(),
            });
        }
        self.records.push(record);
    }

    fn record(&self, end: f64, mark: Option<u64>) -> IntervalStats {
        let start = self.index as f64 * self.plan.length.as_secs_f64();
        let grew = match (mark, self.mark_base) {
            (Some(now), Some(base)) => now.saturating_sub(base),
            _ => 0,
        };
        let udp = matches!(self.mark, Mark::Datagrams | Mark::SequenceSpan);
        IntervalStats {
            start,
            end: end.max(start),
            bytes: self.bytes,
            packets: udp.then_some(self.packets),
            lost: (self.mark == Mark::SequenceSpan).then(|| grew.saturating_sub(self.packets)),
            retransmits: (self.mark == Mark::Retransmits).then_some(grew),
        }
    }

    /// Closes the bucket in progress at `last`, the stream's last read or
    /// write, and returns every interval. A bucket that began after the
    /// last byte is left out (its retransmits go to the one before).
    pub fn finish(mut self, last: Instant, mark: Option<u64>) -> Vec<IntervalStats> {
        let Some(origin) = self.origin else {
            return Vec::new();
        };
        let end = last.saturating_duration_since(origin).as_secs_f64();
        let start = self.index as f64 * self.plan.length.as_secs_f64();
        if self.bytes == 0 && end <= start && !self.records.is_empty() {
            let late = self.record(end, mark).retransmits;
            if let (Some(prev), Some(late)) = (self.records.last_mut(), late) {
                *prev.retransmits.get_or_insert(0) += late;
            }
        } else {
            self.close(end, mark);
        }
        self.records
    }
}

#[derive(Debug)]
enum GateState {
    Closed,
    Open(Instant),
    Aborted,
}

/// Releases every stream thread of one side at the same instant.
#[derive(Debug, Clone)]
pub struct StartGate(Arc<(Mutex<GateState>, Condvar)>);

impl Default for StartGate {
    fn default() -> Self {
        StartGate(Arc::new((Mutex::new(GateState::Closed), Condvar::new())))
    }
}

impl StartGate {
    /// Opens the gate; the instant is the start of the test on this side.
    pub fn open(&self) -> Instant {
        let now = Instant::now();
        self.set(GateState::Open(now));
        now
    }

    /// Releases waiting threads without starting the test.
    pub fn abort(&self) {
        self.set(GateState::Aborted);
    }

    fn set(&self, state: GateState) {
        let (lock, cvar) = &*self.0;
        let mut guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*guard, GateState::Closed) {
            *guard = state;
        }
        cvar.notify_all();
    }

    /// Waits for the start; `None` if the test was aborted first.
    pub fn wait(&self) -> Option<Instant> {
        let (lock, cvar) = &*self.0;
        let mut guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match *guard {
                GateState::Open(t) => return Some(t),
                GateState::Aborted => return None,
                GateState::Closed => guard = cvar.wait(guard).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }
}

/// Tells stream threads to stop early (deadline passed, peer gone, shutdown).
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    pub fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Makes a data socket blocking, with timeouts so that its thread can look
/// at the stop flag.
pub fn prepare_blocking(stream: &TcpStream) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(POLL_INTERVAL))?;
    stream.set_write_timeout(Some(POLL_INTERVAL))?;
    Ok(())
}

/// A connected data socket handed to a stream thread.
#[derive(Debug)]
pub enum DataSocket {
    Tcp(TcpStream),
    Udp(UdpSocket),
    /// `tcp_crr`: no socket of its own, but a connection per transaction,
    /// made by the prober or handed over by the responder's accept loop.
    Connections(crate::engine::connections::Connections),
}

/// One stream to run on this side.
#[derive(Debug)]
pub struct StreamJob {
    pub id: u32,
    pub direction: FlowDirection,
    pub role: Role,
    pub socket: DataSocket,
}

/// Everything a stream thread needs besides its socket.
#[derive(Debug, Clone)]
pub struct StreamContext {
    pub plan: Plan,
    pub gate: StartGate,
    pub stop: StopFlag,
    /// Bytes moved by every stream of this side so far, warm-up included:
    /// a side that sees it stand still knows the peer stopped taking part.
    pub progress: Progress,
    /// Where closed intervals go as they happen, if anywhere.
    pub intervals: Option<IntervalSink>,
}

impl StreamContext {
    /// Whether an adaptive test's end was decided: senders stop as at
    /// the planned end.
    pub fn ended(&self) -> bool {
        self.plan.adaptive.as_ref().is_some_and(|a| a.is_ended())
    }

    /// A log of stream `id`'s bytes for an adaptive test's cut.
    pub fn recorder(&self, id: u32, origin: Instant) -> Option<crate::engine::adaptive::Recorder> {
        self.plan.adaptive.as_ref().map(|a| a.recorder(id, origin))
    }

    /// Counts bytes for an adaptive test's estimate (UDP loops).
    pub fn delivered(&self, bytes: u64) {
        if let Some(a) = &self.plan.adaptive {
            a.add_delivered(bytes);
        }
    }
}

/// A side's running count of bytes moved, shared by its stream threads.
#[derive(Debug, Clone, Default)]
pub struct Progress(Arc<std::sync::atomic::AtomicU64>);

impl PartialEq for Progress {
    /// Where a side counts its bytes is no part of the test asked for
    /// (a [`crate::probe::ProbeSpec`] may name the counter).
    fn eq(&self, _: &Progress) -> bool {
        true
    }
}

impl Progress {
    pub fn add(&self, bytes: u64) {
        self.0.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A count of bytes that one side's senders share and stop at: iperf3's
/// server sends what a `-n` or `-k` client asked for, and no more. Each
/// sender checks it before a write and adds what it wrote, so together
/// they send at least the count (the client waits for all of it), and at
/// most a write a stream over.
#[derive(Debug, Clone)]
pub struct SendLimit {
    bytes: u64,
    sent: Arc<std::sync::atomic::AtomicU64>,
}

impl SendLimit {
    pub fn new(bytes: u64) -> SendLimit {
        SendLimit {
            bytes,
            sent: Arc::default(),
        }
    }
    /// Bytes still to send.
    pub fn remaining(&self) -> u64 {
        self.bytes.saturating_sub(self.sent.load(Ordering::Relaxed))
    }
    pub fn add(&self, bytes: u64) {
        self.sent.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// Measures CPU, context switches and syscalls of one thread over a window
/// that opens when the warm-up ends, and the scheduler's account of it:
/// run and wait time (from [`ThreadMeter::open`] to [`ThreadMeter::close`])
/// and the CPUs it ran on, sampled every [`CPU_SAMPLE_EVERY`] syscalls.
#[derive(Debug, Default)]
pub struct ThreadMeter {
    opened: Option<(Instant, ThreadUsage, Option<SchedStat>)>,
    closed: Option<(ThreadUsage, Option<SchedStat>)>,
    pub syscalls: u64,
    /// (CPU, samples) pairs, at most [`MAX_CPUS_SEEN`] of them.
    cpus: Vec<(u32, u32)>,
}

/// A vDSO call every this many syscalls costs nothing measurable next to
/// the syscalls themselves.
pub const CPU_SAMPLE_EVERY: u64 = 64;
/// A thread that wandered over more CPUs than this is reported by the
/// ones it ran on most among the first seen.
const MAX_CPUS_SEEN: usize = 16;
/// CPUs a stream reports, most often first.
pub const MAX_CPUS_REPORTED: usize = 4;

impl ThreadMeter {
    pub fn is_open(&self) -> bool {
        self.opened.is_some()
    }

    /// Opens the window at `at` (if not open yet) and resets the syscall count.
    pub fn open(&mut self, at: Instant) {
        if self.opened.is_none() {
            self.opened = Some((at, ThreadUsage::current(), SchedStat::current()));
            self.syscalls = 0;
            self.sample_cpu();
        }
    }

    /// Counts one syscall of the data loop, sampling the CPU now and then.
    pub fn syscall(&mut self) {
        self.syscalls += 1;
        if self.syscalls.is_multiple_of(CPU_SAMPLE_EVERY) && self.opened.is_some() {
            self.sample_cpu();
        }
    }

    fn sample_cpu(&mut self) {
        let Some(cpu) = crate::host::current_cpu() else {
            return;
        };
        if let Some((_, n)) = self.cpus.iter_mut().find(|(c, _)| *c == cpu) {
            *n = n.saturating_add(1);
        } else if self.cpus.len() < MAX_CPUS_SEEN {
            self.cpus.push((cpu, 1));
        }
    }

    /// Ends the scheduler's window here (a sender's last write), before
    /// whatever the thread does after it (waiting for the drain).
    pub fn close(&mut self) {
        if self.opened.is_some() && self.closed.is_none() {
            self.sample_cpu();
            self.closed = Some((ThreadUsage::current(), SchedStat::current()));
        }
    }

    pub fn opened_at(&self) -> Option<Instant> {
        self.opened.map(|(t, _, _)| t)
    }

    /// Fills the usage fields of `stats` with what this thread used since the window opened.
    pub fn finish(&mut self, stats: &mut StreamStats) {
        stats.syscalls = self.syscalls;
        self.close();
        if let Some((_, before, sched_before)) = self.opened {
            let used = ThreadUsage::current().since(&before);
            stats.cpu_user_seconds = used.user.as_secs_f64();
            stats.cpu_system_seconds = used.system.as_secs_f64();
            stats.context_switches = used.voluntary_switches + used.involuntary_switches;
            if let (Some((usage_end, Some(end))), Some(start)) = (self.closed, sched_before) {
                let d = end.since(&start);
                let mut cpus = self.cpus.clone();
                cpus.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                stats.sched = Some(ThreadSched {
                    run_seconds: d.run.as_secs_f64(),
                    wait_seconds: d.wait.as_secs_f64(),
                    involuntary_switches: usage_end.since(&before).involuntary_switches,
                    cpus: cpus
                        .into_iter()
                        .take(MAX_CPUS_REPORTED)
                        .map(|(c, _)| c)
                        .collect(),
                });
            }
        }
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks against its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(std::io::Error::other(format!("CPU {cpu} is out of range")));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// What the kinds' stream tests share: a plan, a context around it, and a
/// sender and receiver run on threads of their own, as a side runs them.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::engine::stats::Role;
    use crate::protocol::model::FlowDirection;

    /// 1.5 s of 1000 B at 8 Mbit/s, no warm-up, nothing else asked for;
    /// tests change what they are about.
    pub fn plan() -> Plan {
        Plan {
            omit: Duration::ZERO,
            duration: Duration::from_millis(1500),
            length: 1000,
            bitrate_per_stream: 8_000_000,
            affinity: None,
            test_id: 7,
            interval: None,
            offload: false,
            rr: None,
            wire: UdpWire::Pathprobe,
            send_limit: None,
            zerocopy: Default::default(),
            adaptive: None,
        }
    }

    /// A closed gate and nothing moved yet, for `plan`.
    pub fn context(plan: Plan) -> StreamContext {
        StreamContext {
            plan,
            gate: StartGate::default(),
            stop: StopFlag::default(),
            progress: Progress::default(),
            intervals: None,
        }
    }

    /// One end's stream loop: `tcp::send`, `udp::receive` and the like.
    pub type Loop<S> = fn(S, &StreamContext, &mut StreamStats);

    /// Runs `send` on `tx` and `receive` on `rx`, each on a thread, and
    /// returns (sender's, receiver's) figures. The receiver's gate opens
    /// first, or `late` after the sender's (a receiver that read the
    /// start late).
    pub fn run_pair<T: Send + 'static, R: Send + 'static>(
        (tx, send): (T, Loop<T>),
        (rx, receive): (R, Loop<R>),
        (send_ctx, recv_ctx): (StreamContext, StreamContext),
        late: Duration,
    ) -> (StreamStats, StreamStats) {
        let recv_gate = recv_ctx.gate.clone();
        let receiver = std::thread::spawn(move || {
            let mut stats = StreamStats {
                direction: Some(FlowDirection::Receive),
                role: Some(Role::Receiver),
                ..StreamStats::default()
            };
            receive(rx, &recv_ctx, &mut stats);
            stats
        });
        if late.is_zero() {
            recv_gate.open();
        }
        let sender = std::thread::spawn(move || {
            let mut stats = StreamStats {
                direction: Some(FlowDirection::Send),
                role: Some(Role::Sender),
                ..StreamStats::default()
            };
            send_ctx.gate.open();
            send(tx, &send_ctx, &mut stats);
            stats
        });
        if !late.is_zero() {
            std::thread::sleep(late);
            recv_gate.open();
        }
        (sender.join().unwrap(), receiver.join().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(interval: Option<IntervalPlan>, sink: Option<IntervalSink>) -> StreamContext {
        let plan = Plan {
            duration: Duration::from_secs(2),
            bitrate_per_stream: 0,
            test_id: 0,
            interval,
            offload: true,
            ..testing::plan()
        };
        StreamContext {
            intervals: sink,
            ..testing::context(plan)
        }
    }

    fn stats(role: Role) -> StreamStats {
        StreamStats {
            id: 3,
            direction: Some(FlowDirection::Send),
            role: Some(role),
            ..StreamStats::default()
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_plan_bounds_the_records_and_both_ends_agree() {
        assert_eq!(interval_plan(None, 2000, 1), None);
        assert_eq!(interval_plan(Some(0), 2000, 1), None);
        let p = interval_plan(Some(500), 2000, 1).unwrap();
        assert_eq!((p.length, p.count), (500 * MS, 4));
        // A partial last interval is one more.
        assert_eq!(interval_plan(Some(600), 2000, 1).unwrap().count, 4);
        // Too short an interval is raised to the minimum...
        let p = interval_plan(Some(1), 2000, 1).unwrap();
        assert_eq!((p.length, p.count), (MIN_INTERVAL, 20));
        // ...and too many for the frame are coarsened until they fit.
        let p = interval_plan(Some(100), 3_600_000, 16).unwrap();
        assert!(p.count * 16 <= MAX_INTERVAL_RECORDS, "{p:?}");
        assert!(p.count >= 60, "{p:?}");
        // The most streams a prober asks for (128 each way) still get one.
        assert_eq!(interval_plan(Some(100), 3_600_000, 256).unwrap().count, 1);
        assert_eq!(interval_plan(Some(100), 60_000, 5000), None);
        // Longer than the test: one interval.
        assert_eq!(interval_plan(Some(10_000), 2000, 1).unwrap().count, 1);
    }

    #[test]
    fn the_most_intervals_a_side_can_make_fit_in_a_results_frame() {
        use crate::protocol::{encode_frame, Message, SideStats, TcpStats, UdpReceiveStats};
        for streams in [1u32, 16, 128, 256, 300] {
            let Some(plan) = interval_plan(Some(1), 3_600_000, streams) else {
                assert!(streams > 256, "{streams} streams get no intervals");
                continue;
            };
            // Every figure as long as it can print.
            let record = IntervalStats {
                start: 1_234.567_890_123_456_7,
                end: 1_234.667_890_123_456_7,
                bytes: u64::MAX,
                packets: Some(u64::MAX),
                lost: Some(u64::MAX),
                retransmits: Some(u64::MAX),
            };
            let stream = StreamStats {
                id: u32::MAX,
                direction: Some(FlowDirection::Receive),
                role: Some(Role::Receiver),
                bytes: u64::MAX,
                seconds: 3_600.123_456_789_012_3,
                syscalls: u64::MAX,
                cpu_user_seconds: 3_600.123_456_789_012_3,
                cpu_system_seconds: 3_600.123_456_789_012_3,
                context_switches: u64::MAX,
                send_buffer_bytes: u64::MAX,
                receive_buffer_bytes: u64::MAX,
                congestion: Some("x".repeat(15)),
                tcp: Some(TcpStats::default()),
                udp_received: Some(UdpReceiveStats::default()),
                intervals: vec![record; plan.count],
                ..StreamStats::default()
            };
            let side = SideStats {
                streams: vec![stream; streams as usize],
                kernel_release: "x".repeat(256),
                interface: Some("x".repeat(15)),
                ..SideStats::default()
            };
            let frame = encode_frame(&Message::Results(Box::new(side)));
            assert!(frame.is_ok(), "{streams} streams: {frame:?}");
        }
    }

    #[test]
    fn no_meter_without_intervals() {
        assert!(IntervalMeter::new(&ctx(None, None), &stats(Role::Sender), Mark::None).is_none());
    }

    #[test]
    fn bytes_land_in_the_interval_they_moved_in_and_add_up() {
        let (tx, rx) = mpsc::channel();
        let plan = interval_plan(Some(500), 2000, 1);
        let c = ctx(plan, Some(IntervalSink(tx)));
        let mut m = IntervalMeter::new(&c, &stats(Role::Receiver), Mark::None).unwrap();
        let t0 = Instant::now();
        m.open(t0);
        let mut total = 0;
        // (time in ms, bytes): nothing moves between 500 and 1000 ms, and
        // the drain after the planned end (2000 ms) goes to the last.
        for (at, n) in [
            (0, 10),
            (499, 20),
            (500, 40),
            (1000, 80),
            (1700, 5),
            (2600, 7),
        ] {
            let now = t0 + at * MS;
            if m.due(now) {
                m.roll(now, None);
            }
            m.add(n, 0);
            total += n;
        }
        // Closed intervals went out before the stream ended.
        let live: Vec<IntervalEvent> = rx.try_iter().collect();
        assert_eq!(live.len(), 3, "{live:?}");
        assert_eq!(live[0].stream, 3);
        assert_eq!(live[0].role, Role::Receiver);
        let got = m.finish(t0 + 2600 * MS, None);
        let bytes: Vec<u64> = got.iter().map(|i| i.bytes).collect();
        assert_eq!(bytes, [30, 40, 80, 12]);
        assert_eq!(bytes.iter().sum::<u64>(), total);
        let edges: Vec<(f64, f64)> = got.iter().map(|i| (i.start, i.end)).collect();
        assert_eq!(edges, [(0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.6)]);
        assert!(got
            .iter()
            .all(|i| i.packets.is_none() && i.retransmits.is_none()));
        assert_eq!(
            rx.try_iter().count(),
            1,
            "the last interval is sent at the end"
        );
    }

    #[test]
    fn a_stall_shows_as_empty_intervals_and_an_early_end_as_a_short_last() {
        let c = ctx(interval_plan(Some(500), 2000, 1), None);
        let mut m = IntervalMeter::new(&c, &stats(Role::Sender), Mark::None).unwrap();
        let t0 = Instant::now();
        m.open(t0);
        m.add(100, 0);
        // The loop wakes on a timeout at 1.2 s with nothing moved since.
        let now = t0 + 1200 * MS;
        assert!(m.due(now));
        m.roll(now, None);
        let got = m.finish(t0 + 1300 * MS, None);
        let got: Vec<(f64, f64, u64)> = got.iter().map(|i| (i.start, i.end, i.bytes)).collect();
        assert_eq!(got, [(0.0, 0.5, 100), (0.5, 1.0, 0), (1.0, 1.3, 0)]);
    }

    #[test]
    fn marks_become_retransmits_and_udp_loss() {
        let c = ctx(interval_plan(Some(1000), 2000, 1), None);
        let t0 = Instant::now();
        let mut tcp = IntervalMeter::new(&c, &stats(Role::Sender), Mark::Retransmits).unwrap();
        tcp.open(t0);
        tcp.mark_base(7);
        tcp.add(1, 0);
        tcp.roll(t0 + 1000 * MS, Some(9));
        tcp.add(1, 0);
        let got = tcp.finish(t0 + 2000 * MS, Some(14));
        let r: Vec<Option<u64>> = got.iter().map(|i| i.retransmits).collect();
        assert_eq!(r, [Some(2), Some(5)]);

        let mut udp = IntervalMeter::new(&c, &stats(Role::Receiver), Mark::SequenceSpan).unwrap();
        udp.open(t0);
        // Sequences 100..110 seen as 8 datagrams; then 110..120 as all 10.
        udp.mark_base(100);
        udp.add(8 * 1000, 8);
        udp.roll(t0 + 1000 * MS, Some(110));
        udp.add(10 * 1000, 10);
        let got = udp.finish(t0 + 1900 * MS, Some(120));
        let r: Vec<(Option<u64>, Option<u64>)> = got.iter().map(|i| (i.packets, i.lost)).collect();
        assert_eq!(r, [(Some(8), Some(2)), (Some(10), Some(0))]);
    }
}
