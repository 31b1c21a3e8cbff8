//! Isochronous UDP round trips (`udp_rr`, in the spirit of irtt): the prober
//! sends a request of a fixed length at every tick of a fixed interval; the
//! responder answers each new request once, at once, with a reply of the
//! same length that echoes the request's sequence, numbers itself, and
//! says when the request arrived and when the reply left
//! ([`crate::protocol::udp_rr`]).
//!
//! The prober's figures: the round trip less the responder's processing
//! time, in a histogram allocated before the test; IPDV (RFC 3393) of each
//! direction's one-way delay between consecutive sequence numbers, in
//! which the two hosts' clock offset cancels; loss by direction (requests
//! the responder never saw are upstream loss, replies it sent that never
//! came back downstream); duplicates and late (reordered) datagrams in
//! each direction. One-way delay itself needs synchronised clocks, which
//! nothing here declares: it is reported as not measured.
//!
//! Both ends take arrival times from the kernel (SO_TIMESTAMPNS), so that
//! neither end's wake-up latency counts as the path's: the responder's is
//! in its processing time, the prober's is not in the round trip.
//!
//! Hostile peers: both ends keep one bit (the prober also a send time) per
//! request, sized from the agreed test before it starts; a datagram of
//! another length or test, a reply to a request never sent, and any copy
//! is ignored and counted. A reply's times can only move its own
//! processing time, which is held within its round trip; the responder's
//! counts are held between what this side saw and what it sent.

pub mod kind;

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

use crate::engine::datapath::{StreamContext, ThreadMeter, POLL_INTERVAL};
use crate::engine::histogram::{new_histogram, record, summarize};
use crate::engine::stats::StreamStats;
use crate::engine::udp_io::{self, RecvBatch, RecvMode};
use crate::protocol::latency::LatencyStats;
use crate::protocol::rr::{RrParams, RrStats};
use crate::protocol::udp::{UdpHeader, FLAG_FIN, FLAG_HELLO, FLAG_OMIT, HEADER_LEN};
use crate::protocol::udp_rr::{packet_count, Reply, UdpRrStats, FLAG_REPLY, MIN_LENGTH};

/// FIN datagrams the prober sends at the end, so that one survives loss
/// (cross-traffic accounting allows for them).
pub(crate) const FIN_COPIES: u32 = 8;
/// Shortest and longest wait for the last replies after the last request:
/// three times the longest round trip seen, within these.
const MIN_LINGER: Duration = Duration::from_millis(200);
const MAX_LINGER: Duration = Duration::from_secs(2);

fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A bit per request sequence, allocated once.
struct Seen(Vec<u64>);

impl Seen {
    fn new(count: usize) -> Seen {
        Seen(vec![0; count.div_ceil(64)])
    }
    /// Marks `seq`; whether it was marked already.
    fn mark(&mut self, seq: usize) -> bool {
        let (word, bit) = (seq / 64, 1u64 << (seq % 64));
        let was = self.0[word] & bit != 0;
        self.0[word] |= bit;
        was
    }
}

/// Waits up to `timeout` until the socket is readable.
fn readable_within(sock: &UdpSocket, timeout: Duration) -> bool {
    let mut fd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd and a valid timespec, no signal mask.
    let rc = unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
    rc > 0
}

fn send_interval(rr: &RrParams) -> Duration {
    Duration::from_micros(rr.interval_us.max(crate::protocol::udp_rr::MIN_INTERVAL_US))
}

/// Requests the agreed test sends at most, which both ends size their
/// per-request state by.
fn capacity(ctx: &StreamContext, rr: &RrParams) -> usize {
    let total = (ctx.plan.omit + ctx.plan.duration).as_millis() as u64;
    packet_count(total, rr.interval_us.max(1)).unwrap_or(crate::protocol::udp_rr::MAX_PACKETS)
        as usize
}

/// What the prober keeps of the last reply counted, for IPDV.
#[derive(Clone, Copy)]
struct LastReply {
    seq: u64,
    up_owd: i64,
    down_owd: i64,
}

/// The prober's figures while the test runs.
struct Tally {
    rtt: Histogram<u64>,
    /// The same round trips, the reply's arrival taken when this thread
    /// read it rather than from the kernel's stamp.
    rtt_userspace: Histogram<u64>,
    ipdv_up: Histogram<u64>,
    ipdv_down: Histogram<u64>,
    counts: UdpRrStats,
    processing_sum: f64,
    max_rtt: Duration,
    highest_reply: Option<u64>,
    last: Option<LastReply>,
}

/// The prober's loop: sends on the schedule, times the replies.
pub fn ask(sock: UdpSocket, ctx: &StreamContext, stats: &mut StreamStats) {
    let Some(rr) = ctx.plan.rr else { return };
    let len = (ctx.plan.length.max(MIN_LENGTH)) as usize;
    let interval = send_interval(&rr);
    let cap = capacity(ctx, &rr);
    // Send time (realtime ns) of every request, by sequence.
    let mut sent_at = vec![0u64; cap];
    let mut seen = Seen::new(cap);
    let mut request = vec![0u8; len];
    udp_io::enable_rx_cmsgs(&sock);
    // One byte more than a reply, so that a longer datagram shows as such.
    let mut batch = RecvBatch::new(RecvMode::Recvmmsg, len + 1);
    let mut tally = Tally {
        rtt: new_histogram(),
        rtt_userspace: new_histogram(),
        ipdv_up: new_histogram(),
        ipdv_down: new_histogram(),
        counts: UdpRrStats::default(),
        processing_sum: 0.0,
        max_rtt: Duration::ZERO,
        highest_reply: None,
        last: None,
    };
    let mut meter = ThreadMeter::default();
    let Some(start) = ctx.gate.wait() else { return };
    let window_start = start + ctx.plan.omit;
    let end = window_start + ctx.plan.duration;
    // The first measured request's sequence, once sent.
    let mut first_measured: Option<u64> = None;
    let mut next = 0u64;
    let mut linger_until: Option<Instant> = None;
    let fd = sock.as_raw_fd();
    loop {
        let now = Instant::now();
        if ctx.stop.is_stopped() {
            break;
        }
        let due = start + interval.saturating_mul(next as u32);
        let sending = linger_until.is_none();
        if sending && (due >= end || next as usize >= cap) {
            // The schedule is done: wait a while for the last replies.
            meter.close();
            let linger = (tally.max_rtt * 3).clamp(MIN_LINGER, MAX_LINGER);
            linger_until = Some(now + linger);
            continue;
        }
        if let Some(until) = linger_until {
            let measured = first_measured.map_or(0, |f| next - f);
            if now >= until || tally.counts.received >= measured {
                break;
            }
        }
        if sending && now >= due {
            if due >= window_start && !meter.is_open() {
                meter.open(now);
                first_measured = Some(next);
            }
            let flags = if meter.is_open() { 0 } else { FLAG_OMIT };
            let t0 = realtime_ns();
            UdpHeader {
                flags,
                test_id: ctx.plan.test_id,
                seq: next,
                send_ns: t0,
            }
            .write(&mut request);
            sent_at[next as usize] = t0;
            meter.syscall();
            // A full buffer or an ICMP error: the request is lost to this
            // side, which the responder's count shows as upstream loss.
            if let Err(e) = sock.send(&request) {
                tracing::trace!(stream = stats.id, error = %e, "udp_rr send failed");
            }
            ctx.progress.add(len as u64);
            if meter.is_open() {
                tally.counts.sent += 1;
            }
            next += 1;
            continue;
        }
        let wake = match linger_until {
            Some(until) => until,
            None => due,
        };
        let wait = wake.saturating_duration_since(now).min(POLL_INTERVAL);
        if !readable_within(&sock, wait) {
            continue;
        }
        meter.syscall();
        let n = match batch.recv(fd) {
            Ok(n) => n,
            Err(_) => continue,
        };
        let fallback_ns = realtime_ns();
        for i in 0..n {
            let arrival = batch.info(i).timestamp_ns.unwrap_or(fallback_ns);
            let dgram = batch.buffer(i);
            ctx.progress.add(dgram.len() as u64);
            count_reply(
                dgram,
                (arrival, fallback_ns),
                len,
                ctx.plan.test_id,
                next,
                first_measured,
                &sent_at,
                &mut seen,
                &mut tally,
            );
        }
    }
    let opened = meter.opened_at().unwrap_or(window_start);
    stats.bytes = tally.counts.sent * len as u64;
    stats.seconds = end
        .min(Instant::now())
        .saturating_duration_since(opened)
        .as_secs_f64();
    meter.finish(stats);
    let mut counts = tally.counts;
    counts.ipdv_upstream = summarize(&tally.ipdv_up);
    counts.ipdv_downstream = summarize(&tally.ipdv_down);
    counts.rtt_userspace = summarize(&tally.rtt_userspace);
    counts.processing_mean =
        crate::engine::stats::ratio(tally.processing_sum, counts.received as f64);
    stats.rr = Some(RrStats {
        transactions: counts.received,
        request_bytes: counts.sent * len as u64,
        response_bytes: counts.received * len as u64,
        latency: summarize(&tally.rtt),
        udp: Some(counts),
        crr: None,
    });
    let s = socket2::SockRef::from(&sock);
    stats.send_buffer_bytes = s.send_buffer_size().unwrap_or(0) as u64;
    stats.receive_buffer_bytes = s.recv_buffer_size().unwrap_or(0) as u64;
    let mut fin = [0u8; HEADER_LEN];
    UdpHeader {
        flags: FLAG_FIN,
        test_id: ctx.plan.test_id,
        seq: next,
        send_ns: realtime_ns(),
    }
    .write(&mut fin);
    for _ in 0..FIN_COPIES {
        let _ = sock.send(&fin);
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Counts one datagram that came back to the prober.
#[allow(clippy::too_many_arguments)]
fn count_reply(
    dgram: &[u8],
    (arrival_ns, read_ns): (u64, u64),
    len: usize,
    test_id: u32,
    sent: u64,
    first_measured: Option<u64>,
    sent_at: &[u64],
    seen: &mut Seen,
    tally: &mut Tally,
) {
    let counts = &mut tally.counts;
    let reply = match Reply::parse(dgram, test_id) {
        Some(r) if dgram.len() == len && r.request_seq < sent => r,
        _ => {
            counts.invalid += 1;
            return;
        }
    };
    // A warm-up request's reply: by this side's own record, not the flag.
    match first_measured {
        Some(f) if reply.request_seq >= f => {}
        _ => return,
    }
    if seen.mark(reply.request_seq as usize) {
        counts.duplicates += 1;
        return;
    }
    counts.received += 1;
    match tally.highest_reply {
        Some(h) if reply.reply_seq < h => counts.late += 1,
        _ => tally.highest_reply = Some(reply.reply_seq),
    }
    let t0 = sent_at[reply.request_seq as usize];
    let rtt_raw = arrival_ns.saturating_sub(t0);
    // The responder's word, held within the round trip it is part of.
    let processing = reply.sent_ns.saturating_sub(reply.received_ns).min(rtt_raw);
    let rtt = Duration::from_nanos(rtt_raw - processing);
    record(&mut tally.rtt, rtt);
    let read = read_ns.max(arrival_ns).saturating_sub(t0);
    record(
        &mut tally.rtt_userspace,
        Duration::from_nanos(read - processing.min(read)),
    );
    tally.max_rtt = tally.max_rtt.max(rtt);
    let p = processing as f64 / 1e9;
    tally.processing_sum += p;
    counts.processing_max = counts.processing_max.max(p);
    // One-way delays, each off by the clocks' offset, which cancels in
    // the difference between consecutive requests.
    let up_owd = reply.received_ns.wrapping_sub(t0) as i64;
    let down_owd = arrival_ns.wrapping_sub(reply.sent_ns) as i64;
    if let Some(last) = tally.last {
        if reply.request_seq == last.seq + 1 {
            let d = |a: i64, b: i64| Duration::from_nanos(a.wrapping_sub(b).unsigned_abs());
            record(&mut tally.ipdv_up, d(up_owd, last.up_owd));
            record(&mut tally.ipdv_down, d(down_owd, last.down_owd));
        }
    }
    tally.last = Some(LastReply {
        seq: reply.request_seq,
        up_owd,
        down_owd,
    });
}

/// How far ahead of the agreed schedule the responder still answers: a
/// quarter second of requests that queued on the path or in the socket,
/// and at least this many.
const PACE_BURST: Duration = Duration::from_millis(250);
const PACE_MIN_BURST: u64 = 32;

/// The responder's reply budget: one reply per agreed interval since the
/// test started, plus a burst. An honest prober sends one request per
/// interval, so it never meets the bound; a flooder is answered at the
/// agreed rate and no faster.
struct ReplyPace {
    start: Instant,
    interval_ns: u64,
    burst: u64,
    used: u64,
}

impl ReplyPace {
    fn new(start: Instant, interval: Duration) -> ReplyPace {
        let interval_ns = (interval.as_nanos() as u64).max(1);
        let burst = (PACE_BURST.as_nanos() as u64 / interval_ns).max(PACE_MIN_BURST);
        ReplyPace {
            start,
            interval_ns,
            burst,
            used: 0,
        }
    }

    /// Whether one more reply may go at `now`; takes it from the budget.
    fn allow(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.start).as_nanos() as u64;
        let budget = (elapsed / self.interval_ns).saturating_add(self.burst);
        if self.used >= budget {
            return false;
        }
        self.used += 1;
        true
    }
}

/// The responder's loop: answers every new request of the test once, until
/// the prober's FIN or the side's stop.
pub fn answer(sock: UdpSocket, ctx: &StreamContext, stats: &mut StreamStats) {
    let Some(rr) = ctx.plan.rr else { return };
    let len = (ctx.plan.length.max(MIN_LENGTH)) as usize;
    let cap = capacity(ctx, &rr);
    let mut seen = Seen::new(cap);
    let mut reply = vec![0u8; len];
    udp_io::enable_rx_cmsgs(&sock);
    let mut batch = RecvBatch::new(RecvMode::Recvmmsg, len + 1);
    let mut meter = ThreadMeter::default();
    let Some(start) = ctx.gate.wait() else { return };
    let window_start = start + ctx.plan.omit;
    if ctx.plan.omit.is_zero() {
        meter.open(start);
    }
    let mut pace = ReplyPace::new(start, send_interval(&rr));
    let mut counts = UdpRrStats::default();
    let mut reply_seq = 0u64;
    let mut highest: Option<u64> = None;
    let mut last = start;
    let fd = sock.as_raw_fd();
    let test_id = ctx.plan.test_id;
    'test: loop {
        meter.syscall();
        let n = match batch.recv(fd) {
            Ok(n) => n,
            Err(_) => {
                if ctx.stop.is_stopped() {
                    break;
                }
                continue;
            }
        };
        let now = Instant::now();
        if !meter.is_open() && now >= window_start {
            meter.open(now);
        }
        let fallback_ns = realtime_ns();
        for i in 0..n {
            let received_ns = batch.info(i).timestamp_ns.unwrap_or(fallback_ns);
            let dgram = batch.buffer(i);
            ctx.progress.add(dgram.len() as u64);
            let Ok(h) = UdpHeader::parse(dgram) else {
                counts.invalid += 1;
                continue;
            };
            if h.test_id != test_id {
                counts.invalid += 1;
                continue;
            }
            if h.flags & FLAG_FIN != 0 {
                break 'test;
            }
            // The prober's hellos repeat until it hears the flow is known:
            // the last of them may land here. Not a request, nor junk.
            if h.flags & FLAG_HELLO != 0 && dgram.len() == crate::protocol::udp::HELLO_LEN {
                continue;
            }
            if dgram.len() != len || h.flags & (FLAG_HELLO | FLAG_REPLY) != 0 || h.seq >= cap as u64
            {
                counts.invalid += 1;
                continue;
            }
            // Paced to the agreed rate: a flood of distinct sequences
            // would otherwise be answered as fast as it came, a reflector
            // at many times the rate admission agreed to (and past
            // max_unauthenticated_udp_bitrate). Checked before `seen`, so
            // a request over the rate counts as never received.
            if !pace.allow(Instant::now()) {
                counts.invalid += 1;
                continue;
            }
            if seen.mark(h.seq as usize) {
                counts.duplicates += 1;
                continue;
            }
            let omit = h.flags & FLAG_OMIT != 0;
            if !omit {
                counts.received += 1;
                match highest {
                    Some(top) if h.seq < top => counts.late += 1,
                    _ => highest = Some(h.seq),
                }
            }
            Reply {
                reply_seq,
                request_seq: h.seq,
                received_ns,
                sent_ns: realtime_ns(),
                omit,
            }
            .write(test_id, &mut reply);
            meter.syscall();
            match sock.send(&reply) {
                Ok(_) => {
                    reply_seq += 1;
                    ctx.progress.add(len as u64);
                    if !omit {
                        counts.sent += 1;
                        last = Instant::now();
                    }
                }
                Err(e) => {
                    tracing::trace!(stream = stats.id, error = %e, "udp_rr reply failed");
                }
            }
        }
    }
    let opened = meter.opened_at().unwrap_or(last);
    stats.bytes = counts.received * len as u64;
    stats.seconds = last.saturating_duration_since(opened).as_secs_f64();
    meter.finish(stats);
    stats.rr = Some(RrStats {
        transactions: counts.sent,
        request_bytes: counts.received * len as u64,
        response_bytes: counts.sent * len as u64,
        latency: None,
        udp: Some(counts),
        crr: None,
    });
    let s = socket2::SockRef::from(&sock);
    stats.send_buffer_bytes = s.send_buffer_size().unwrap_or(0) as u64;
    stats.receive_buffer_bytes = s.recv_buffer_size().unwrap_or(0) as u64;
}

/// A `udp_rr` probe's figures, from both ends: the headline of its result.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct UdpRrSummary {
    /// Seconds between requests, and each datagram's UDP payload.
    pub interval_seconds: f64,
    pub length: u32,
    /// Requests the prober sent, and distinct replies it received, in the
    /// measured window.
    pub sent: u64,
    pub received: u64,
    /// Requests the responder never received, and replies it sent that
    /// never came back; each as a percentage of what entered its leg.
    pub upstream_lost: u64,
    pub downstream_lost: u64,
    pub upstream_loss_percent: f64,
    pub downstream_loss_percent: f64,
    /// Round trips that did not complete, in percent of requests sent.
    pub round_trip_loss_percent: f64,
    /// Copies of a datagram already received: requests (seen by the
    /// responder) and replies (seen by the prober).
    pub upstream_duplicates: u64,
    pub downstream_duplicates: u64,
    /// Datagrams that arrived after one sent later (reordered).
    pub upstream_late: u64,
    pub downstream_late: u64,
    /// Round-trip time less the responder's processing time, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt: Option<LatencyStats>,
    /// IPDV (jitter) of each direction, in seconds.
    /// The same, with each reply's arrival taken when the prober's thread
    /// read it (as irtt's client times it) instead of the kernel's receive
    /// stamp: the difference is this host's wake-up latency, not the path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_userspace: Option<LatencyStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipdv_upstream: Option<LatencyStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipdv_downstream: Option<LatencyStats>,
    /// The responder's processing time, as its replies gave it (seconds).
    pub processing_mean_seconds: f64,
    pub processing_max_seconds: f64,
    /// One-way delay needs clocks declared synchronised; none are.
    pub one_way_delay: &'static str,
    /// Datagrams each end ignored as not part of the test.
    pub local_invalid: u64,
    pub remote_invalid: u64,
}

/// What [`UdpRrSummary::one_way_delay`] says.
pub const ONE_WAY_NOT_MEASURED: &str = "not measured: no synchronised clocks are declared";

impl UdpRrSummary {
    /// Combines the prober's stream (`local`) with the responder's. The
    /// responder's counts are its word: they are held to what is possible
    /// (it cannot have answered more than it was sent, nor fewer replies
    /// than came back), so a lying responder can only move loss between
    /// the directions of requests this side never saw answered.
    pub fn combine(
        params: RrParams,
        length: u32,
        local: Option<&StreamStats>,
        remote: Option<&StreamStats>,
    ) -> UdpRrSummary {
        use crate::engine::stats::ratio;
        let udp = |s: Option<&StreamStats>| {
            s.and_then(|s| s.rr.as_ref())
                .and_then(|r| r.udp.clone())
                .unwrap_or_default()
        };
        let (l, r) = (udp(local), udp(remote));
        let latency = local
            .and_then(|s| s.rr.as_ref())
            .and_then(|r| r.latency.clone());
        let sent = l.sent;
        let received = l.received.min(sent);
        // Requests the responder received and answered.
        let answered = r.sent.min(r.received).clamp(received, sent);
        let upstream_lost = sent - answered;
        let downstream_lost = answered - received;
        let pct = |a: u64, b: u64| ratio(a as f64 * 100.0, b as f64);
        UdpRrSummary {
            interval_seconds: params.interval_us as f64 / 1e6,
            length,
            sent,
            received,
            upstream_lost,
            downstream_lost,
            upstream_loss_percent: pct(upstream_lost, sent),
            downstream_loss_percent: pct(downstream_lost, answered),
            round_trip_loss_percent: pct(sent - received, sent),
            upstream_duplicates: r.duplicates,
            downstream_duplicates: l.duplicates,
            upstream_late: r.late,
            downstream_late: l.late,
            rtt: latency,
            rtt_userspace: l.rtt_userspace,
            ipdv_upstream: l.ipdv_upstream,
            ipdv_downstream: l.ipdv_downstream,
            processing_mean_seconds: l.processing_mean,
            processing_max_seconds: l.processing_max,
            one_way_delay: ONE_WAY_NOT_MEASURED,
            local_invalid: l.invalid,
            remote_invalid: r.invalid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(udp: UdpRrStats) -> StreamStats {
        StreamStats {
            rr: Some(RrStats {
                udp: Some(udp),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn params() -> RrParams {
        RrParams {
            request_size: 64,
            response_size: 64,
            burst: 1,
            nodelay: false,
            interval_us: 10_000,
        }
    }

    #[test]
    fn loss_is_split_by_direction_and_a_lying_responder_is_held_to_the_possible() {
        let local = stream(UdpRrStats {
            sent: 1000,
            received: 980,
            ..Default::default()
        });
        let remote = stream(UdpRrStats {
            sent: 990,
            received: 990,
            ..Default::default()
        });
        let s = UdpRrSummary::combine(params(), 64, Some(&local), Some(&remote));
        assert_eq!((s.upstream_lost, s.downstream_lost), (10, 10));
        assert!((s.upstream_loss_percent - 1.0).abs() < 1e-9);
        assert!((s.downstream_loss_percent - 10.0 / 9.9).abs() < 1e-9);
        assert!((s.round_trip_loss_percent - 2.0).abs() < 1e-9);
        assert_eq!(s.one_way_delay, ONE_WAY_NOT_MEASURED);
        // Claims of more answers than requests, or fewer than came back.
        for claim in [5000, 0] {
            let remote = stream(UdpRrStats {
                sent: claim,
                received: claim,
                ..Default::default()
            });
            let s = UdpRrSummary::combine(params(), 64, Some(&local), Some(&remote));
            assert_eq!(s.upstream_lost + s.downstream_lost, 20);
            assert!(s.upstream_lost <= 20 && s.downstream_lost <= 20);
        }
        // No figures at all: nothing divided by zero.
        let s = UdpRrSummary::combine(params(), 64, None, None);
        assert_eq!(s.upstream_loss_percent, 0.0);
    }

    #[test]
    fn replies_are_paced_to_the_agreed_interval_plus_a_burst() {
        let start = Instant::now();
        let mut pace = ReplyPace::new(start, Duration::from_millis(10));
        // 250 ms of 10 ms intervals: a burst of 32 (the floor) at once.
        let at_once = (0..1000).filter(|_| pace.allow(start)).count();
        assert_eq!(at_once, 32);
        // One second later, 100 more and no more.
        let later = start + Duration::from_secs(1);
        let then = (0..1000).filter(|_| pace.allow(later)).count();
        assert_eq!(then, 100);
    }

    #[test]
    fn replies_are_counted_once_and_forged_ones_are_not_counted() {
        let len = 64usize;
        let mut seen = Seen::new(100);
        let sent_at: Vec<u64> = (0..100u64)
            .map(|i| 1_000_000_000 + i * 10_000_000)
            .collect();
        let mut tally = Tally {
            rtt: new_histogram(),
            rtt_userspace: new_histogram(),
            ipdv_up: new_histogram(),
            ipdv_down: new_histogram(),
            counts: UdpRrStats::default(),
            processing_sum: 0.0,
            max_rtt: Duration::ZERO,
            highest_reply: None,
            last: None,
        };
        let mut buf = vec![0u8; len];
        let mut feed = |seq: u64,
                        reply_seq: u64,
                        rx: u64,
                        tx: u64,
                        arrival: u64,
                        buf: &mut Vec<u8>,
                        tally: &mut Tally| {
            Reply {
                reply_seq,
                request_seq: seq,
                received_ns: rx,
                sent_ns: tx,
                omit: false,
            }
            .write(7, buf);
            count_reply(
                buf,
                (arrival, arrival + 7_000),
                len,
                7,
                50,
                Some(0),
                &sent_at,
                &mut seen,
                tally,
            );
        };
        // Request 0 sent at 1 s, 100 µs each way, 20 µs at the responder
        // (whose clock is 5 s ahead).
        let off = 5_000_000_000u64;
        let t0 = sent_at[0];
        feed(
            0,
            0,
            t0 + 100_000 + off,
            t0 + 120_000 + off,
            t0 + 220_000,
            &mut buf,
            &mut tally,
        );
        let t1 = sent_at[1];
        // Request 1: 150 µs up, 100 µs down: IPDV 50 µs up, 0 down.
        feed(
            1,
            1,
            t1 + 150_000 + off,
            t1 + 170_000 + off,
            t1 + 270_000,
            &mut buf,
            &mut tally,
        );
        let near = |ns: u64, want: u64| ns.abs_diff(want) <= want / 500 + 1;
        assert!(near(tally.ipdv_up.max(), 50_000), "{}", tally.ipdv_up.max());
        assert!(near(tally.ipdv_down.max(), 1), "{}", tally.ipdv_down.max());
        // A copy, a reply to a request never sent, and a
        // processing time longer than the round trip.
        feed(
            1,
            1,
            t1 + 150_000 + off,
            t1 + 170_000 + off,
            t1 + 270_000,
            &mut buf,
            &mut tally,
        );
        feed(60, 2, 0, 0, 0, &mut buf, &mut tally);
        feed(
            2,
            2,
            0,
            u64::MAX,
            sent_at[2] + 300_000,
            &mut buf,
            &mut tally,
        );
        let c = &tally.counts;
        assert_eq!((c.received, c.duplicates, c.invalid), (3, 1, 1));
        assert_eq!(tally.rtt.len(), 3);
        // Round trips 200 and 250 µs after processing, and 0 for the liar.
        assert!(near(tally.rtt.max(), 250_000), "{}", tally.rtt.max());
        assert!(near(tally.rtt.min(), 1), "{}", tally.rtt.min());
        // Wrong length: not a reply of this test.
        let short = vec![0u8; len - 1];
        count_reply(
            &short,
            (0, 0),
            len,
            7,
            50,
            Some(0),
            &sent_at,
            &mut seen,
            &mut tally,
        );
        assert_eq!(tally.counts.invalid, 2);
    }
}
