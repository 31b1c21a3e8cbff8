//! Adaptive duration: a throughput test that stops once its
//! figure is known to the asked precision, instead of after a fixed time.
//!
//! The parts, none of which names a kind:
//!
//! - [`AdaptiveRun`]: what one side's stream threads share with whoever
//!   decides the end: the end flag the senders obey, the bytes delivered so
//!   far (read from TCP_INFO on the prober, counted by UDP loops), and each
//!   stream's log of (time, bytes), from which both ends cut their figures
//!   to the span the estimate covers ([`AdaptiveRun::cut`]).
//! - [`Estimator`]: the stopping rule, pure arithmetic over samples of
//!   delivered bytes taken every [`SAMPLE_INTERVAL`] (unit-tested on
//!   synthetic flows).
//!
//! ## The rule, and why it is sound
//!
//! Start-up is left out: the span starts once every TCP sender has left
//! its first slow start (TCP_INFO's `snd_ssthresh` is no longer the
//! kernel's infinite) and the last 100 ms interval's rate is within 10% of
//! the one before (the loss that ended slow start recovered), or once the
//! rate has stopped changing (two intervals in a row each within 10% of
//! the one before: a paced UDP flow's first samples, a TCP flow whose
//! window never filled).
//!
//! Samples are taken just after the delivered count moves
//! ([`AdaptiveRun::sample_at_step`]): a shaped flow's count moves in
//! steps, and a count read at an arbitrary moment would put up to a step
//! of noise at each end of every interval.
//!
//! Over the span, the 100 ms rates are grouped into `k` batches of equal
//! length (5 to 19 of them; batch means). The estimate is the span's bytes
//! over its time, which is the mean of the batch rates. Its 95% interval
//! is `t(k-1) · s / √k`, `s` the batches' standard deviation: the batch-
//! means confidence interval of simulation output analysis, valid when
//! batches are long next to the flow's own correlation time (a tbf or a
//! NIC's rate varies within milliseconds; batches are 100 ms or more). The
//! probe converges when that half-width is within the asked precision of
//! the estimate, the minimum duration has passed, and the span's first and
//! second halves agree within the precision too.
//!
//! A probe that cannot converge stops early, `out_of_reach`: once the
//! span has ten batches and a quarter of the maximum has passed, the rule
//! asks what the interval could be at the maximum if it narrowed as one
//! over the square root of the time, from the smallest spread any
//! batching of the span shows; wider than three times the precision, and
//! the rest of the probe would only cost bytes ([`Estimator::best_at_max`],
//! docs/ADAPTIVE.md).
//!
//! ## Where it is not
//!
//! A rate that changes during the probe (a competing flow arrives, a
//! shaper's rate changes) violates the stationarity the interval assumes.
//! The halves test catches a step: when the halves differ by more than the
//! precision and by more than three standard errors of their difference,
//! the older half is dropped and the span starts again, so a probe either
//! converges on the rate at its end or reaches its maximum and says
//! `max_duration`, not converged, never a figure in between presented as
//! precise. A drift slower than the halves test sees, or a periodic rate
//! with a period longer than the batches (a long-RTT sawtooth that empties
//! the bottleneck queue), can still pass for converged: the interval is
//! then too narrow. Those are the bench's cases (docs/ADAPTIVE.md).

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::engine::stats::{Role, SideStats};
use crate::engine::tcpinfo::{TcpInfo, INFINITE_SSTHRESH};
use crate::protocol::adaptive::{AdaptiveRequest, StopReason};

/// How often the prober samples the delivered bytes.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// The precision unless asked otherwise: 1% of the estimate.
pub const DEFAULT_PRECISION: f64 = 0.01;
/// The shortest and longest adaptive probe unless asked otherwise.
pub const DEFAULT_MIN_DURATION: Duration = Duration::from_millis(500);
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(5);
/// Fewest 100 ms intervals after start-up before the interval is judged.
const MIN_INTERVALS: usize = 5;
/// Batches the span is grouped into once it has twice as many intervals.
const TARGET_BATCHES: usize = 10;
/// Growth per interval below which the start-up is over.
const GROWTH: f64 = 0.10;
/// The out-of-reach stop: judged only once the span has this many
/// batches, and once this share of the maximum has passed, so that a
/// first few noisy batches never cut a flow that settles later.
const REACH_MIN_BATCHES: usize = 10;
const REACH_MIN_SHARE: f64 = 0.25;
/// How far out of reach the precision must be: the interval the maximum
/// could give at best, on the optimistic law, is wider than this many
/// times the precision. The margin absorbs what the law does not promise
/// (a batch spread that shrinks faster than independent samples', as a
/// periodic rate's does, and a spread estimated from few batches).
const REACH_MARGIN: f64 = 3.0;
/// The 95% quantile the optimistic law assumes at the maximum: the normal
/// one, below any t quantile the rule will actually use.
const Z95: f64 = 1.96;
/// Most points a stream's log keeps: the spacing grows with the test's
/// length so that a long one stays within it.
const LOG_POINTS: u64 = 2048;
/// Finest spacing of a stream's log.
const LOG_SPACING: Duration = Duration::from_millis(5);
/// Unsent data an adaptive sender keeps, in time at the flow's rate, and
/// its bounds in bytes per socket (a write is 128 KiB).
const UNSENT_TIME: Duration = Duration::from_millis(20);
const MIN_UNSENT: u32 = 64 * 1024;
const MAX_UNSENT: u32 = 32 * 1024 * 1024;
/// How often the sampler re-reads the count while it waits for it to move.
const STEP_POLL: Duration = Duration::from_micros(100);
/// Widest pair of reads that times a step of the count: the step's moment
/// is known to within it.
const STEP_BRACKET: Duration = Duration::from_micros(300);
/// Longest the sampler waits for a step; a count that does not move in
/// this long (a stalled or very slow flow) is read as it is.
const STEP_WAIT: Duration = Duration::from_millis(20);

/// Two-sided 95% quantiles of Student's t for 1 to 30 degrees of freedom.
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

fn t95(df: usize) -> f64 {
    T95.get(df.saturating_sub(1)).copied().unwrap_or(1.96)
}

/// One stream's (microseconds since the side's start, bytes so far).
type Log = Vec<(u64, u64)>;

/// What one side's streams share for an adaptive test.
#[derive(Debug, Clone)]
pub struct AdaptiveRun(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    ended: AtomicBool,
    /// Bytes counted by the loops themselves (UDP).
    delivered: AtomicU64,
    /// The prober's clones of its TCP data sockets, read for TCP_INFO.
    tcp: Mutex<Vec<(Role, TcpStream)>>,
    logs: Mutex<Vec<(u32, Log)>>,
    spacing_us: u64,
    /// When the side's start gate opened: the logs' and samples' zero.
    origin: OnceLock<Instant>,
}

/// What the delivered bytes were at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When the counts were read: the middle of the reads.
    pub at: Instant,
    /// How long the reads took: a thread descheduled while reading (a
    /// loaded host) makes the moment uncertain by that much.
    pub spread: Duration,
    pub bytes: u64,
    /// Whether a TCP sender is still in its first slow start; `None`
    /// when this side sends no TCP stream it can read.
    pub slow_start: Option<bool>,
}

impl AdaptiveRun {
    /// The shared state of a test that runs at most `max`.
    pub fn new(max: Duration) -> AdaptiveRun {
        let spacing = (max.as_micros() as u64 / LOG_POINTS).max(LOG_SPACING.as_micros() as u64);
        AdaptiveRun(Arc::new(Shared {
            ended: AtomicBool::new(false),
            delivered: AtomicU64::new(0),
            tcp: Mutex::new(Vec::new()),
            logs: Mutex::new(Vec::new()),
            spacing_us: spacing,
            origin: OnceLock::new(),
        }))
    }

    /// Tells the side's senders to stop, as at the planned end.
    pub fn end(&self) {
        self.0.ended.store(true, Ordering::Relaxed);
    }

    pub fn is_ended(&self) -> bool {
        self.0.ended.load(Ordering::Relaxed)
    }

    /// Marks the start gate's opening, the zero of every log.
    pub fn set_origin(&self, at: Instant) {
        let _ = self.0.origin.set(at);
    }

    pub fn origin(&self) -> Option<Instant> {
        self.0.origin.get().copied()
    }

    /// Counts bytes a loop moved (UDP: sent or received).
    pub fn add_delivered(&self, bytes: u64) {
        self.0.delivered.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Keeps a clone of a TCP data socket whose TCP_INFO [`Self::sample`]
    /// reads: the kernel's count of bytes acknowledged (sender) or
    /// received (receiver) is exact at any moment, where a loop's own
    /// count moves a write or a low-water-mark read at a time.
    pub fn watch_tcp(&self, role: Role, stream: &TcpStream) {
        if let Ok(clone) = stream.try_clone() {
            lock(&self.0.tcp).push((role, clone));
        }
    }

    /// Keeps about [`UNSENT_TIME`] of `bytes_per_second` (the flow's rate
    /// once start-up is over) unsent in each watched sending socket,
    /// through TCP_NOTSENT_LOWAT. Once the end is decided the senders stop
    /// writing, but what their sockets hold still crosses the path: with
    /// the autotuned send buffer that was about 1 MB, 0.4 s of a 20 Mbit/s
    /// flow after a 0.8 s probe, half again its bytes. The data in
    /// flight (the window) is not touched, so the rate is not either, as
    /// long as the writer comes back within that time.
    pub fn limit_unsent(&self, bytes_per_second: f64) {
        let tcp = lock(&self.0.tcp);
        let senders = tcp.iter().filter(|(r, _)| *r == Role::Sender).count();
        if senders == 0 || !bytes_per_second.is_finite() {
            return;
        }
        let each = (bytes_per_second * UNSENT_TIME.as_secs_f64() / senders as f64)
            .clamp(MIN_UNSENT as f64, MAX_UNSENT as f64) as libc::c_int;
        for (_, s) in tcp.iter().filter(|(r, _)| *r == Role::Sender) {
            // SAFETY: an int option on an open socket; a failure leaves
            // the socket as it was, which only costs bytes.
            unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(s),
                    libc::IPPROTO_TCP,
                    libc::TCP_NOTSENT_LOWAT,
                    (&each as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }

    /// Lets the watched sockets go, so that a stream's close is its own.
    pub fn release_sockets(&self) {
        lock(&self.0.tcp).clear();
    }

    /// The bytes delivered so far and the senders' slow start.
    pub fn sample(&self) -> Sample {
        let before = Instant::now();
        let mut bytes = self.0.delivered.load(Ordering::Relaxed);
        let (mut senders, mut in_slow_start) = (0u32, 0u32);
        for (role, s) in lock(&self.0.tcp).iter() {
            let Ok(info) = TcpInfo::read(s) else { continue };
            match role {
                Role::Sender => {
                    // What arrived: the cumulative acknowledgment, and the
                    // segments selectively acknowledged beyond a hole. The
                    // first alone stalls for a round trip at each loss
                    // (until the retransmission fills the hole) and then
                    // jumps: a sample taken in the stall moves bytes from
                    // one interval to the next, which at 20 Mbit/s with a
                    // 26 ms queue is up to a quarter of an interval.
                    bytes += info.bytes_acked.unwrap_or(0)
                        + u64::from(info.sacked) * u64::from(info.snd_mss);
                    senders += 1;
                    in_slow_start += u32::from(info.snd_ssthresh >= INFINITE_SSTHRESH);
                }
                Role::Receiver => bytes += info.bytes_received.unwrap_or(0),
            }
        }
        let spread = before.elapsed();
        Sample {
            at: before + spread / 2,
            spread,
            bytes,
            slow_start: (senders > 0).then_some(in_slow_start > 0),
        }
    }

    /// The count read just after it moved, and when it moved.
    ///
    /// A shaped flow's count does not grow smoothly: it moves in steps (a
    /// shaper's timer releasing what its tokens allow, interrupt
    /// coalescing and GRO, ACKs covering several segments). A count read
    /// at an arbitrary moment is behind the flow by up to one step, so a
    /// 100 ms interval's bytes are off by up to a step at each end: at 20
    /// Mbit/s through the lab's tbf the steps were about 12 KB, and the
    /// 100 ms rates alternated between -2% and +3.5% of the truth while
    /// the rate itself was steady. Just after a step, the count is the
    /// bytes delivered by that moment (to within one packet), so rates
    /// between such samples are the flow's. The step is found by reading
    /// every [`STEP_POLL`] until the count moves, for at most
    /// [`STEP_WAIT`]; a flow whose count moves between every two reads
    /// (a fast one) is sampled at once. Blocking: for a sampling thread.
    pub fn sample_at_step(&self) -> Sample {
        let first = self.sample();
        let mut prev = first;
        loop {
            std::thread::sleep(STEP_POLL);
            let s = self.sample();
            let gap = s.at.saturating_duration_since(prev.at);
            if s.bytes != prev.bytes && gap + (s.spread + prev.spread) / 2 <= STEP_BRACKET {
                return Sample {
                    at: prev.at + gap / 2,
                    spread: gap + (s.spread + prev.spread) / 2,
                    ..s
                };
            }
            if s.at.saturating_duration_since(first.at) >= STEP_WAIT {
                return s;
            }
            prev = s;
        }
    }

    /// Samples this side every [`SAMPLE_INTERVAL`] from its start gate, on
    /// a thread of its own (the reads of [`Self::sample_at_step`] sleep
    /// for tenths of a millisecond, which an async task cannot), and
    /// sends each sample on `tx` until the side ends or `tx`'s receiver is
    /// gone. A full channel drops a sample: the next has the count so far.
    pub fn spawn_sampler(
        &self,
        tx: tokio::sync::mpsc::Sender<Sample>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let run = self.clone();
        std::thread::Builder::new()
            .name("pp-adaptive".into())
            .spawn(move || {
                let origin = loop {
                    if run.is_ended() || tx.is_closed() {
                        return;
                    }
                    match run.origin() {
                        Some(o) => break o,
                        None => std::thread::sleep(Duration::from_millis(1)),
                    }
                };
                let mut next = origin + SAMPLE_INTERVAL;
                loop {
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    }
                    if run.is_ended() || tx.is_closed() {
                        return;
                    }
                    let _ = tx.try_send(run.sample_at_step());
                    // A thread held up past a tick samples once, not in a
                    // burst.
                    next = (next + SAMPLE_INTERVAL).max(Instant::now() + SAMPLE_INTERVAL / 2);
                }
            })
    }

    /// A log for stream `id`, whose zero is `origin` (its gate's opening).
    pub fn recorder(&self, id: u32, origin: Instant) -> Recorder {
        Recorder {
            run: self.clone(),
            id,
            origin,
            next_us: 0,
            points: vec![(0, 0)],
        }
    }

    /// Cuts `side`'s stream figures to the estimate's span, from
    /// `span_start_us` to `span_end_us` (or each stream's last byte, when
    /// no end is given or the stream ended before it): bytes and seconds,
    /// from its log. Streams without a log keep theirs. Intervals and loss
    /// keep the whole test.
    ///
    /// Why the span's end and not the last byte: once the end is decided
    /// the senders stop, but what their sockets hold and what the
    /// bottleneck queued still arrives, and a receiver's last read takes
    /// whatever its socket had gathered. Those are a fixed amount of bytes
    /// whose time is not the span's; over a span of half a second they
    /// put the figure 4% above what the path carried.
    pub fn cut(&self, side: &mut SideStats, span_start_us: u64, span_end_us: Option<u64>) {
        let logs = lock(&self.0.logs);
        for s in &mut side.streams {
            let Some((_, log)) = logs.iter().find(|(id, _)| *id == s.id) else {
                continue;
            };
            let Some(&(last_us, last_bytes)) = log.last() else {
                continue;
            };
            let (end_us, end_bytes) = match span_end_us {
                Some(e) if e < last_us => (e, bytes_at(log, e)),
                _ => (last_us, last_bytes),
            };
            let from = bytes_at(log, span_start_us);
            s.bytes = end_bytes.saturating_sub(from);
            s.seconds = end_us.saturating_sub(span_start_us) as f64 / 1e6;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A stream's bytes at `t_us`, linear between the log's points.
fn bytes_at(log: &[(u64, u64)], t_us: u64) -> u64 {
    let i = log.partition_point(|&(t, _)| t <= t_us);
    match (i.checked_sub(1).and_then(|j| log.get(j)), log.get(i)) {
        (Some(&(t0, b0)), Some(&(t1, b1))) if t1 > t0 => {
            let f = (t_us - t0) as f64 / (t1 - t0) as f64;
            b0 + ((b1.saturating_sub(b0)) as f64 * f) as u64
        }
        (Some(&(_, b0)), _) => b0,
        (None, _) => 0,
    }
}

/// One stream's log of (time, bytes), kept by its data thread: a point at
/// most every few milliseconds, bounded in number.
#[derive(Debug)]
pub struct Recorder {
    run: AdaptiveRun,
    id: u32,
    origin: Instant,
    next_us: u64,
    points: Log,
}

impl Recorder {
    /// Whether a point at `now` would be kept: a loop whose count costs a
    /// system call asks first.
    pub fn due(&self, now: Instant) -> bool {
        let t = now.saturating_duration_since(self.origin).as_micros() as u64;
        t >= self.next_us && (self.points.len() as u64) < LOG_POINTS * 2
    }

    /// Notes that `bytes` had moved by `now`.
    pub fn record(&mut self, now: Instant, bytes: u64) {
        if !self.due(now) {
            return;
        }
        let t = now.saturating_duration_since(self.origin).as_micros() as u64;
        self.points.push((t, bytes));
        self.next_us = t + self.run.0.spacing_us;
    }

    /// The stream's last byte, at `last`: the end of its span.
    pub fn finish(mut self, last: Instant, bytes: u64) {
        let t = last.saturating_duration_since(self.origin).as_micros() as u64;
        // Points are in time order; a last one earlier than a recorded one
        // (never, short of a clock bug) replaces nothing.
        if self.points.last().is_none_or(|&(pt, _)| pt <= t) {
            self.points.push((t, bytes));
        }
        let points = std::mem::take(&mut self.points);
        lock(&self.run.0.logs).push((self.id, points));
    }
}

/// The estimate of an adaptive probe, with its uncertainty.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub bits_per_second: f64,
    /// Half-width of the 95% interval.
    pub half_width_bits_per_second: f64,
    /// When the span the estimate covers began, after the test's start.
    pub span_start_seconds: f64,
    pub span_seconds: f64,
    /// 100 ms intervals and batches the interval was taken over.
    pub intervals: usize,
    pub batches: usize,
    /// Times the span started again after a change of rate.
    pub restarts: u32,
}

impl Estimate {
    /// The half-width as a share of the estimate (1 when there is none).
    pub fn relative_half_width(&self) -> f64 {
        if self.bits_per_second > 0.0 {
            self.half_width_bits_per_second / self.bits_per_second
        } else {
            1.0
        }
    }
}

/// What the estimator says after a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Continue,
    Stop(StopReason),
}

/// The stopping rule over one probe's samples (see the module's doc).
#[derive(Debug, Clone)]
pub struct Estimator {
    precision: f64,
    min_seconds: f64,
    max_seconds: f64,
    /// (seconds since the start, bytes delivered).
    points: Vec<(f64, u64)>,
    /// Index of the point where the span starts, once start-up is over.
    start: Option<usize>,
    calm: usize,
    restarts: u32,
    last: Option<Estimate>,
    converged: bool,
    /// The narrowest half-width (bytes/s) the span could have by the
    /// maximum, on the optimistic law, once judged.
    reachable: Option<f64>,
    /// Whether the precision is out of reach by the maximum (see
    /// [`Estimator::reachable_half_width`]).
    out_of_reach: bool,
    /// Whether the out-of-reach stop is on (off only to compare the rule
    /// with and without it in tests).
    judge_reach: bool,
}

/// Most samples kept: an hour at 100 ms.
const MAX_POINTS: usize = 36_000;

impl Estimator {
    pub fn new(request: &AdaptiveRequest, max: Duration) -> Estimator {
        Estimator {
            precision: request.precision(),
            min_seconds: request.min_duration_ms as f64 / 1000.0,
            max_seconds: max.as_secs_f64(),
            points: Vec::new(),
            start: None,
            calm: 0,
            restarts: 0,
            last: None,
            converged: false,
            reachable: None,
            out_of_reach: false,
            judge_reach: true,
        }
    }

    /// The rule without its out-of-reach stop: what a probe would do if
    /// it ran on to its maximum.
    #[cfg(test)]
    fn without_reach(mut self) -> Estimator {
        self.judge_reach = false;
        self
    }

    /// The narrowest half-width of the 95% interval, bits per second, the
    /// maximum could have given at best: set once the out-of-reach rule
    /// has judged the span.
    pub fn reachable_half_width(&self) -> Option<f64> {
        self.reachable.map(|h| h * 8.0)
    }

    /// The latest estimate, if the span has enough intervals for one.
    pub fn estimate(&self) -> Option<Estimate> {
        self.last
    }

    /// The last interval's rate, bytes per second, once start-up is over.
    pub fn settled_rate(&self) -> Option<f64> {
        let n = self.points.len();
        (self.start.is_some() && n >= 2).then(|| self.rate(n - 2, n - 1))
    }

    /// Whether the latest estimate met the precision.
    pub fn converged(&self) -> bool {
        self.converged
    }

    fn rate(&self, a: usize, b: usize) -> f64 {
        let (ta, ba) = self.points[a];
        let (tb, bb) = self.points[b];
        if tb > ta {
            bb.saturating_sub(ba) as f64 / (tb - ta)
        } else {
            0.0
        }
    }

    /// Takes the sample `delivered` bytes at `t` seconds after the start.
    pub fn push(&mut self, t: f64, delivered: u64, slow_start: Option<bool>) -> Step {
        if self.points.len() >= MAX_POINTS
            || self
                .points
                .last()
                .is_some_and(|&(pt, pb)| t <= pt || delivered < pb)
        {
            // A sample out of order is a caller's bug; too many, a test
            // far past any maximum: neither may grow memory.
            return self.deadline(t);
        }
        self.points.push((t, delivered));
        let n = self.points.len();
        if self.start.is_none() && n >= 2 {
            let r = self.rate(n - 2, n - 1);
            // Within the growth of the interval before, either way: a
            // rate still growing is start-up, and so is one that fell
            // (the loss that ended slow start, a retransmission timeout
            // after its overshoot, which left the link idle for 200 ms in
            // one lab run at 20 Mbit/s and kept the probe from converging
            // when the span began before it).
            let calm = n >= 3 && {
                let p = self.rate(n - 3, n - 2);
                p > 0.0 && r > 0.0 && (r / p - 1.0).abs() <= GROWTH
            };
            self.calm = if calm { self.calm + 1 } else { 0 };
            let started = match slow_start {
                // A TCP sender out of slow start, once its rate settled.
                Some(false) => self.calm >= 1,
                // Still in slow start (a window that never filled), or no
                // TCP sender: once the rate stopped changing.
                Some(true) | None => self.calm >= 2,
            };
            if started {
                self.start = Some(n - 1);
            }
        }
        self.evaluate();
        if self.converged && t >= self.min_seconds {
            return Step::Stop(StopReason::Converged);
        }
        if self.out_of_reach && t >= self.min_seconds && t < self.max_seconds {
            return Step::Stop(StopReason::OutOfReach);
        }
        self.deadline(t)
    }

    fn deadline(&self, t: f64) -> Step {
        if t >= self.max_seconds {
            Step::Stop(StopReason::MaxDuration)
        } else {
            Step::Continue
        }
    }

    fn evaluate(&mut self) {
        self.converged = false;
        self.out_of_reach = false;
        let Some(start) = self.start else { return };
        let last = self.points.len() - 1;
        let n = last - start;
        if n < MIN_INTERVALS {
            return;
        }
        let b = (n / TARGET_BATCHES).max(1);
        let k = n / b;
        let from = last - k * b;
        let batches: Vec<f64> = (0..k)
            .map(|j| self.rate(from + j * b, from + (j + 1) * b))
            .collect();
        let est = self.rate(from, last);
        let mean = batches.iter().sum::<f64>() / k as f64;
        let var = batches.iter().map(|y| (y - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
        let sd = var.sqrt();
        let half = t95(k - 1) * sd / (k as f64).sqrt();
        let h = k / 2;
        let first = self.rate(from, from + h * b);
        let second = self.rate(from + (k - h) * b, last);
        let diff = (second - first).abs();
        let diff_se = sd * (2.0 / h as f64).sqrt();
        let tolerance = self.precision * est;
        if diff > tolerance && diff > 3.0 * diff_se {
            // The rate changed: what came before the second half no
            // longer describes the path.
            self.start = Some(from + (k - h) * b);
            self.restarts += 1;
            self.evaluate();
            return;
        }
        self.last = Some(Estimate {
            bits_per_second: est * 8.0,
            half_width_bits_per_second: half * 8.0,
            span_start_seconds: self.points[from].0,
            span_seconds: self.points[last].0 - self.points[from].0,
            intervals: k * b,
            batches: k,
            restarts: self.restarts,
        });
        self.converged = est > 0.0 && half <= tolerance && diff <= tolerance;
        let t = self.points[last].0;
        if self.judge_reach
            && !self.converged
            && est > 0.0
            && k >= REACH_MIN_BATCHES
            && t >= REACH_MIN_SHARE * self.max_seconds
        {
            let best = self.best_at_max(from, last);
            self.reachable = Some(best);
            self.out_of_reach = best > REACH_MARGIN * tolerance;
        }
    }

    /// The half-width (bytes/s) the interval would have at the maximum if
    /// it narrowed as fast as it can for a stationary flow: as one over
    /// the square root of the intervals it covers.
    ///
    /// The flow's own spread is read as the long-run standard deviation
    /// of one interval, `σ_b = √b · sd(rates of batches of b intervals)`,
    /// at every batch length `b` that still gives two batches, and the
    /// smallest is taken: for independent intervals every `b` gives about
    /// the same, for a flow whose intervals are correlated (a lossy TCP
    /// flow's) the larger `b` give more and the smallest is the most
    /// hopeful, and for a periodic rate a batch that spans whole periods
    /// gives almost nothing, which keeps such a flow from being cut (with
    /// only batches of at least five, a rate swinging every 0.3 to 0.4 s
    /// that the rule's own batches of 0.3 or 0.4 s later average out was
    /// cut in simulation). The maximum's interval would then be
    /// `z · σ / √n_max`, `n_max` the intervals the span would hold at the
    /// maximum, with the normal quantile in place of any t quantile:
    /// every choice errs towards reaching.
    fn best_at_max(&self, from: usize, last: usize) -> f64 {
        let n = last - from;
        let span = self.points[last].0 - self.points[from].0;
        if n == 0 || span <= 0.0 {
            return f64::INFINITY;
        }
        let remaining = (self.max_seconds - self.points[last].0).max(0.0);
        let n_max = n as f64 * (span + remaining) / span;
        let sigma = (1..=n / 2)
            .map(|b| {
                // Two passes rather than a vector: every b is read at
                // every sample, n·ln(n) rates in all.
                let k = n / b;
                let from = last - k * b;
                let batch = |j: usize| self.rate(from + j * b, from + (j + 1) * b);
                let mean = (0..k).map(batch).sum::<f64>() / k as f64;
                let var = (0..k).map(|j| (batch(j) - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
                (b as f64 * var).sqrt()
            })
            .fold(f64::INFINITY, f64::min);
        Z95 * sigma / n_max.sqrt()
    }
}

/// How an adaptive probe went, for its result (JSON `adaptive`, `-v`,
/// metrics).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AdaptiveOutcome {
    pub stop_reason: StopReason,
    /// Whether the estimate met the precision; a probe that did not
    /// converge reports its last estimate with `converged: false`.
    pub converged: bool,
    pub precision: f64,
    pub min_duration_seconds: f64,
    pub max_duration_seconds: f64,
    /// The estimate, when the span had enough intervals for one.
    pub estimate: Option<Estimate>,
    /// From the start gate to the end decided, and what this side moved
    /// (both directions, its own count) in that time.
    pub elapsed_seconds: f64,
    pub bytes: u64,
    /// Whether the responder cut its figures to the same span (a
    /// responder of an older release runs the whole maximum).
    pub responder_agreed: bool,
    /// What the receivers got over the span (the probe's headline): a
    /// probe whose estimate it does not confirm to the precision is not
    /// converged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver_bits_per_second: Option<f64>,
    /// A probe stopped `out_of_reach`: the half-width of the 95% interval
    /// the maximum could have given at best (more than three times the
    /// precision), which is why it stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_half_width_at_max_bits_per_second: Option<f64>,
    /// The receiver's progress reports dropped because their time was
    /// ahead of this side's clock (plus the handshake's round trip): a
    /// responder whose clock runs fast. Absent when none were.
    #[serde(skip_serializing_if = "is_zero")]
    pub progress_reports_refused: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl AdaptiveOutcome {
    /// Holds the probe's headline, the receivers' bytes over the
    /// estimate's span (both directions' for `--bidir`, as the rule
    /// judged them summed), to the estimate: a gap wider than the
    /// precision makes the probe not converged, whatever the rule said,
    /// since the figure a user reads is not the one the rule proved. The
    /// headline is kept as `receiver_bits_per_second`, which the text
    /// line then names.
    pub fn hold_to_headline(&mut self, headline: f64) {
        if !(headline.is_finite() && headline > 0.0) {
            return;
        }
        self.receiver_bits_per_second = Some(headline);
        let agrees = self.estimate.is_some_and(|e| {
            e.bits_per_second > 0.0 && (headline / e.bits_per_second - 1.0).abs() <= self.precision
        });
        if !agrees {
            self.converged = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(precision_ppm: u32) -> AdaptiveRequest {
        AdaptiveRequest {
            min_duration_ms: 500,
            precision_ppm,
            receiver_progress: false,
        }
    }

    /// Feeds a flow whose rate (bytes/s) at time t is `rate(t)` every
    /// 100 ms, until the estimator stops or `max` passes.
    fn run(
        est: &mut Estimator,
        rate: impl Fn(f64) -> f64,
        slow_start_until: f64,
    ) -> (StopReason, f64) {
        let mut bytes = 0.0;
        let mut t = 0.0;
        est.push(0.0, 0, Some(true));
        loop {
            // Integrate in 1 ms steps.
            for _ in 0..100 {
                bytes += rate(t) * 0.001;
                t += 0.001;
            }
            if let Step::Stop(r) = est.push(t, bytes as u64, Some(t < slow_start_until)) {
                return (r, t);
            }
            assert!(t < 100.0, "never stopped");
        }
    }

    /// A steady 25 MB/s flow with a doubling start-up and a small wobble.
    fn steady(t: f64) -> f64 {
        let base = 25e6;
        if t < 0.3 {
            base * (t / 0.3).powi(3)
        } else {
            base * (1.0 + 0.002 * (t * 37.0).sin())
        }
    }

    #[test]
    fn a_steady_flow_converges_soon_after_start_up_on_its_rate() {
        let mut e = Estimator::new(&request(10_000), Duration::from_secs(5));
        let (reason, t) = run(&mut e, steady, 0.3);
        assert_eq!(reason, StopReason::Converged);
        let est = e.estimate().unwrap();
        let err = (est.bits_per_second / 8.0 - 25e6).abs() / 25e6;
        assert!(err < 0.005, "error {err}");
        // Start-up (0.3 s) + five intervals, not the 5 s maximum.
        assert!((0.75..1.2).contains(&t), "stopped at {t}");
        assert!(est.relative_half_width() <= 0.01);
        assert!(est.span_start_seconds >= 0.3, "{est:?}");
    }

    #[test]
    fn the_minimum_duration_holds_a_converged_probe() {
        let mut e = Estimator::new(
            &AdaptiveRequest {
                min_duration_ms: 2000,
                precision_ppm: 10_000,
                receiver_progress: false,
            },
            Duration::from_secs(5),
        );
        let (reason, t) = run(&mut e, steady, 0.3);
        assert_eq!(reason, StopReason::Converged);
        assert!((2.0..2.15).contains(&t), "stopped at {t}");
    }

    /// Uniform noise in [0, 1) for the 100 ms slot holding `t` (a fixed
    /// pseudo-random sequence).
    fn slot_noise(t: f64) -> f64 {
        let k = (t * 10.0) as u64;
        let x = k
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((x >> 33) % 1000) as f64 / 1000.0
    }

    #[test]
    fn a_noisy_flow_within_reach_runs_to_its_maximum_and_says_so() {
        // ±8% of noise from one 100 ms interval to the next: 1% is not
        // reached in 5 s, but about ±2% is, within three times the
        // precision, so the rule runs on to the maximum.
        let mut e = Estimator::new(&request(10_000), Duration::from_secs(5));
        let noisy = |t: f64| 25e6 * (0.92 + 0.16 * slot_noise(t));
        let (reason, t) = run(&mut e, noisy, 0.0);
        assert_eq!(reason, StopReason::MaxDuration, "stopped at {t}");
        assert!(t >= 5.0);
        assert!(!e.converged());
        let rel = e.estimate().unwrap().relative_half_width();
        assert!((0.01..0.03).contains(&rel), "{rel}");
    }

    #[test]
    fn a_noisy_flow_out_of_reach_stops_early_and_says_so() {
        // ±30% of noise: 1% would take minutes. Judged once a quarter of
        // the 3 s maximum has passed and the span has ten batches.
        let mut e = Estimator::new(&request(10_000), Duration::from_secs(3));
        let noisy = |t: f64| 25e6 * (0.7 + 0.6 * slot_noise(t));
        let (reason, t) = run(&mut e, noisy, 0.0);
        assert_eq!(reason, StopReason::OutOfReach);
        assert!((0.75..1.5).contains(&t), "stopped at {t}");
        assert!(!e.converged());
        let est = e.estimate().unwrap();
        assert!(est.batches >= REACH_MIN_BATCHES, "{est:?}");
        let best = e.reachable_half_width().unwrap();
        assert!(best > 3.0 * 0.01 * est.bits_per_second, "{best} {est:?}");
        // The best the maximum could give is narrower than the interval
        // now, but not narrow enough.
        assert!(best < est.half_width_bits_per_second, "{best} {est:?}");
    }

    #[test]
    fn a_rate_change_mid_probe_ends_at_the_new_rate_or_not_converged() {
        // 25 MB/s, then 12.5 MB/s; the minimum duration (2 s) keeps the
        // probe running across the change, wherever it falls.
        for change_at in [0.6, 0.9, 1.5, 1.95] {
            let mut e = Estimator::new(
                &AdaptiveRequest {
                    min_duration_ms: 2000,
                    precision_ppm: 10_000,
                    receiver_progress: false,
                },
                Duration::from_secs(5),
            );
            let step = move |t: f64| if t < change_at { steady(t) } else { 12.5e6 };
            let (reason, t) = run(&mut e, step, 0.3);
            let est = e.estimate().unwrap();
            let rate = est.bits_per_second / 8.0;
            match reason {
                StopReason::Converged => {
                    let err = (rate - 12.5e6).abs() / 12.5e6;
                    assert!(err < 0.01, "change at {change_at}, stop at {t}: {est:?}");
                    assert!(est.span_start_seconds >= change_at - 1e-9, "{est:?}");
                }
                other => assert!(!e.converged(), "{other:?} {est:?}"),
            }
        }
    }

    #[test]
    fn a_stall_after_slow_start_is_left_out_of_the_span() {
        // Slow start ends at 0.2 s with a retransmission timeout: the link
        // is idle until 0.45 s, then steady (a lab run at 20 Mbit/s). A
        // span that began when slow start ended held the stall, and the
        // probe ran to its maximum, not converged.
        let mut e = Estimator::new(&request(10_000), Duration::from_secs(5));
        let stalled = |t: f64| {
            if (0.25..0.45).contains(&t) {
                0.0
            } else {
                steady(t)
            }
        };
        let (reason, t) = run(&mut e, stalled, 0.2);
        assert_eq!(reason, StopReason::Converged, "stopped at {t}");
        let est = e.estimate().unwrap();
        assert!(est.span_start_seconds >= 0.45, "{est:?}");
        assert!(t < 1.5, "stopped at {t}");
        let err = (est.bits_per_second / 8.0 - 25e6).abs() / 25e6;
        assert!(err < 0.005, "error {err}");
    }

    #[test]
    fn the_count_is_read_just_after_it_moves() {
        // A count that moves 20,000 bytes every 4 ms, from a thread of its
        // own. A read at an arbitrary moment is behind the step it shows
        // by anything up to 4 ms (2 ms on average); one just after a step
        // is behind it by no more than the step's own lateness.
        let run = AdaptiveRun::new(Duration::from_secs(5));
        let origin = Instant::now();
        let stepper = {
            let run = run.clone();
            std::thread::spawn(move || {
                for i in 1..=150u32 {
                    let at = origin + Duration::from_millis(4) * i;
                    std::thread::sleep(at.saturating_duration_since(Instant::now()));
                    run.add_delivered(20_000);
                }
            })
        };
        // How long after its scheduled moment the step a sample shows
        // came, milliseconds.
        let behind = |s: &Sample| {
            let k = (s.bytes / 20_000) as u32;
            s.at.saturating_duration_since(origin).as_secs_f64() * 1e3 - 4.0 * f64::from(k)
        };
        let mut lags = Vec::new();
        for i in 0..20u64 {
            // Sampling moments out of phase with the steps.
            std::thread::sleep(Duration::from_micros(9_000 + 700 * i));
            let s = run.sample_at_step();
            assert!(s.spread <= STEP_WAIT, "{s:?}");
            if s.spread <= STEP_BRACKET {
                // A step cannot be seen before its moment.
                assert!(behind(&s) >= -0.2, "{s:?}: {}", behind(&s));
                lags.push(behind(&s));
            }
        }
        stepper.join().unwrap();
        lags.sort_by(f64::total_cmp);
        assert!(lags.len() >= 10, "too few steps timed: {lags:?}");
        assert!(lags[lags.len() / 2] < 1.0, "{lags:?}");
    }

    #[test]
    fn bytes_between_log_points_are_interpolated() {
        let log = vec![(0, 0), (1000, 100), (3000, 300)];
        assert_eq!(bytes_at(&log, 0), 0);
        assert_eq!(bytes_at(&log, 500), 50);
        assert_eq!(bytes_at(&log, 2000), 200);
        assert_eq!(bytes_at(&log, 9000), 300);
    }

    #[test]
    fn a_side_is_cut_to_the_span_from_its_logs() {
        let run = AdaptiveRun::new(Duration::from_secs(5));
        let origin = Instant::now();
        let mut rec = run.recorder(0, origin);
        for ms in (0..=1000u64).step_by(10) {
            rec.record(origin + Duration::from_millis(ms), ms * 1000);
        }
        rec.finish(origin + Duration::from_millis(1000), 1_000_000);
        let mut side = SideStats::default();
        side.streams.push(crate::engine::stats::StreamStats {
            id: 0,
            bytes: 1_000_000,
            seconds: 1.0,
            ..Default::default()
        });
        run.cut(&mut side, 400_000, None);
        let s = &side.streams[0];
        assert!((s.seconds - 0.6).abs() < 1e-9, "{}", s.seconds);
        assert!((s.bytes as i64 - 600_000).abs() <= 1000, "{}", s.bytes);
    }

    /// The span's end, when given, ends the figure there: the bytes that
    /// arrive after it (a receiver's last read gathering what its socket
    /// held, the senders' sockets and the bottleneck's queue draining) are
    /// not the estimate's. Here 100 KB arrive at once at the last byte,
    /// 50 ms after the end: to the last byte the figure reads 6.6 Mbit/s
    /// over 0.65 s, +10% on the flow's 6 Mbit/s; over the span it is the
    /// flow's own. An end past the last byte is the last byte.
    #[test]
    fn the_cut_ends_at_the_spans_end_not_at_the_last_byte() {
        let run = AdaptiveRun::new(Duration::from_secs(5));
        let origin = Instant::now();
        let mut rec = run.recorder(0, origin);
        for ms in (0..=1000u64).step_by(10) {
            rec.record(origin + Duration::from_millis(ms), ms * 750);
        }
        rec.finish(origin + Duration::from_millis(1050), 850_000);
        let stream = |bytes, seconds| crate::engine::stats::StreamStats {
            id: 0,
            bytes,
            seconds,
            ..Default::default()
        };
        let rate = |s: &crate::engine::stats::StreamStats| s.bytes as f64 * 8.0 / s.seconds;
        let mut to_last = SideStats::default();
        to_last.streams.push(stream(850_000, 1.05));
        run.cut(&mut to_last, 400_000, None);
        assert!(
            rate(&to_last.streams[0]) > 6.5e6,
            "{:?}",
            to_last.streams[0]
        );
        let mut to_end = SideStats::default();
        to_end.streams.push(stream(850_000, 1.05));
        run.cut(&mut to_end, 400_000, Some(1_000_000));
        let s = &to_end.streams[0];
        assert!((s.seconds - 0.6).abs() < 1e-9, "{}", s.seconds);
        assert!((rate(s) / 6e6 - 1.0).abs() < 0.002, "{}", rate(s));
        let mut past = SideStats::default();
        past.streams.push(stream(850_000, 1.05));
        run.cut(&mut past, 400_000, Some(2_000_000));
        assert_eq!(past.streams[0].bytes, 850_000 - 300_000);
        assert!((past.streams[0].seconds - 0.65).abs() < 1e-9);
    }

    /// A deterministic generator (splitmix64): every run of a test sees
    /// the same flows.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// Uniform in [a, b).
        fn range(&mut self, a: f64, b: f64) -> f64 {
            a + (b - a) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }

        /// Standard normal (Box-Muller).
        fn normal(&mut self) -> f64 {
            let u = self.range(1e-12, 1.0);
            let v = self.range(0.0, 1.0);
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }

    /// A simulated flow: a start-up ramp, then a base rate with noise
    /// that holds for a slot and is correlated from slot to slot (AR(1)),
    /// and a periodic swing (a sawtooth's fundamental).
    struct Flow {
        base: f64,
        startup: f64,
        slot: f64,
        noise: Vec<f64>,
        amplitude: f64,
        period: f64,
        phase: f64,
        sawtooth: bool,
    }

    /// The flow's parameters, not its noise (hundreds of numbers).
    impl std::fmt::Debug for Flow {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "base {:.1e} B/s, start-up {} s, slot {} s, noise sd {:.3} (first {:+.3}), {} swing {:.2} every {:.3} s",
                self.base,
                self.startup,
                self.slot,
                sd(&self.noise),
                self.noise[0],
                if self.sawtooth { "sawtooth" } else { "sine" },
                self.amplitude,
                self.period
            )
        }
    }

    fn sd(x: &[f64]) -> f64 {
        let m = x.iter().sum::<f64>() / x.len() as f64;
        (x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
    }

    impl Flow {
        /// `sd` the noise's standard deviation per slot (a share of the
        /// base), `phi` its correlation from one slot to the next.
        fn new(rng: &mut Rng, base: f64, startup: f64, slot: f64, sd: f64, phi: f64) -> Flow {
            let slots = (8.0 / slot) as usize + 2;
            let mut x = sd * rng.normal();
            let innovation = sd * (1.0 - phi * phi).sqrt();
            let noise = (0..slots)
                .map(|_| {
                    x = phi * x + innovation * rng.normal();
                    x
                })
                .collect();
            Flow {
                base,
                startup,
                slot,
                noise,
                amplitude: 0.0,
                period: 1.0,
                phase: 0.0,
                sawtooth: false,
            }
        }

        fn rate(&self, t: f64) -> f64 {
            if t < self.startup {
                return self.base * (t / self.startup).powi(3);
            }
            let n = self.noise[((t / self.slot) as usize).min(self.noise.len() - 1)];
            let angle = 2.0 * std::f64::consts::PI * t / self.period + self.phase;
            let swing = self.amplitude
                * if self.sawtooth {
                    // A window's growth and halving: a ramp up, a drop.
                    2.0 * (angle / (2.0 * std::f64::consts::PI)).fract() - 1.0
                } else {
                    angle.sin()
                };
            self.base * (1.0 + n + swing).max(0.02)
        }
    }

    /// TCP at 1000 Mbit/s through tbf with 0.5% loss, as the lab saw it
    /// (docs/ADAPTIVE.md): cubic at about a third of the rate, whose
    /// 100 ms rates vary by 31.6% with a lag-1 autocorrelation of 0.34.
    fn lossy_gigabit(rng: &mut Rng) -> Flow {
        Flow::new(rng, 36e6, 0.3, 0.1, 0.316, 0.34)
    }

    #[test]
    fn noisy_flows_that_cannot_reach_the_precision_stop_early_out_of_reach() {
        let mut rng = Rng(27);
        let (mut stops, mut widths) = (Vec::new(), Vec::new());
        for _ in 0..20 {
            let flow = lossy_gigabit(&mut rng);
            // Without the rule they run to their maximum, not converged:
            // the precision really is out of reach.
            let mut plain = Estimator::new(&request(10_000), DEFAULT_MAX_DURATION).without_reach();
            let (reason, _) = run(&mut plain, |t| flow.rate(t), flow.startup);
            assert_eq!(reason, StopReason::MaxDuration, "{flow:?}");
            let plain_width = plain.estimate().unwrap().relative_half_width();
            assert!(plain_width > 0.01, "{plain_width}");

            let mut e = Estimator::new(&request(10_000), DEFAULT_MAX_DURATION);
            let (reason, t) = run(&mut e, |t| flow.rate(t), flow.startup);
            assert_eq!(reason, StopReason::OutOfReach, "stopped at {t}: {flow:?}");
            assert!(!e.converged());
            let est = e.estimate().unwrap();
            let best = e.reachable_half_width().unwrap() / est.bits_per_second;
            assert!(best > 0.03, "{best}");
            widths.push((plain_width, best));
            stops.push(t);
        }
        // What the maximum really gave (without the rule) was on average
        // no narrower than the law's hope: the law was optimistic. (One
        // flow's hope is read from ten batches and varies.)
        let mean = |f: fn(&(f64, f64)) -> f64| widths.iter().map(f).sum::<f64>() / 20.0;
        let (real, hoped) = (mean(|w| w.0), mean(|w| w.1));
        eprintln!("half-width at the maximum {real:.3}, hoped {hoped:.3}");
        assert!(real > hoped, "{real} against {hoped}");
        stops.sort_by(f64::total_cmp);
        eprintln!("out_of_reach stops (s): {stops:.2?}");
        // Judged from a quarter of the 5 s maximum on, once the span has
        // ten batches (1 s): every flow was cut at its first judgement,
        // most by 2 s. The start of the span is what varies: a TCP span
        // starts at the first interval within 10% of the one before,
        // which a rate that swings by 30% meets late (the last two spans
        // began at 1.7 and 3.4 s).
        assert!(stops.iter().all(|t| (1.25..4.5).contains(t)), "{stops:?}");
        assert!(stops[9] < 1.85 && stops[17] < 2.2, "{stops:?}");
    }

    #[test]
    fn flows_that_converge_without_the_rule_converge_at_the_same_moment_with_it() {
        // Flows of every sort that converge: quiet or noisy, with
        // correlated noise, with a periodic swing of 0.12 to 2.5 s, some
        // to a tight precision, and some converging only near the maximum.
        const FLOWS: usize = 2400;
        let mut rng = Rng(2027);
        let (mut converged, mut late, mut cut_elsewhere, mut periodic) = (0, 0, 0, 0);
        for i in 0..FLOWS {
            let slot = [0.01, 0.02, 0.05, 0.1][i % 4];
            let sd = rng.range(0.0, 0.25) * rng.range(0.0, 1.0);
            let phi = rng.range(0.0, 0.7);
            let mut flow = Flow::new(&mut rng, rng_rate(i), rng_startup(i), slot, sd, phi);
            if i % 2 == 0 {
                flow.amplitude = rng.range(0.0, 0.4);
                flow.period = rng.range(0.12, 2.5);
                flow.phase = rng.range(0.0, 6.3);
                flow.sawtooth = i % 8 == 0;
            }
            let ppm = [10_000, 10_000, 5_000, 20_000][(i / 4) % 4];
            let mut plain = Estimator::new(&request(ppm), DEFAULT_MAX_DURATION).without_reach();
            let (plain_reason, plain_t) = run(&mut plain, |t| flow.rate(t), flow.startup);
            let mut e = Estimator::new(&request(ppm), DEFAULT_MAX_DURATION);
            let (reason, t) = run(&mut e, |t| flow.rate(t), flow.startup);
            if plain_reason == StopReason::Converged {
                assert_eq!(
                    (reason, t),
                    (plain_reason, plain_t),
                    "flow {i} ({ppm} ppm) cut, where it converged at {plain_t:.2} s: {flow:?}"
                );
                assert_eq!(e.estimate(), plain.estimate());
                converged += 1;
                late += usize::from(plain_t >= 2.0);
                periodic += usize::from(flow.amplitude > 0.05);
            } else if reason == StopReason::OutOfReach {
                cut_elsewhere += 1;
            }
        }
        eprintln!(
            "{converged} of {FLOWS} flows converge ({late} after 2 s, {periodic} with a swing over 5%), all at the same moment with the rule; the rule cut {cut_elsewhere} of the others"
        );
        // The sample must hold what the rule could get wrong.
        assert!(converged >= 600, "{converged}");
        assert!(late >= 200, "{late}");
        assert!(periodic >= 60, "{periodic}");
        assert!(cut_elsewhere >= 500, "{cut_elsewhere}");
    }

    /// Base rates from 20 to 1000 Mbit/s, in bytes per second.
    fn rng_rate(i: usize) -> f64 {
        [2.5e6, 25e6, 36e6, 125e6][(i / 16) % 4]
    }

    /// Start-ups of 0.1 to 0.6 s.
    fn rng_startup(i: usize) -> f64 {
        [0.1, 0.3, 0.45, 0.6][(i / 64) % 4]
    }

    #[test]
    fn out_of_order_samples_change_nothing() {
        let mut e = Estimator::new(&request(10_000), Duration::from_secs(5));
        assert_eq!(e.push(0.0, 0, None), Step::Continue);
        assert_eq!(e.push(0.1, 100, None), Step::Continue);
        assert_eq!(e.push(0.05, 200, None), Step::Continue);
        assert_eq!(e.push(0.2, 50, None), Step::Continue);
        assert_eq!(e.points.len(), 2);
        assert_eq!(e.push(6.0, 50, None), Step::Stop(StopReason::MaxDuration));
    }
}
