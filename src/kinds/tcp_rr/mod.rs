//! TCP request/response (`tcp_rr`, netperf's TCP_RR with `-b`): the prober
//! writes requests of a fixed size on one connection, keeping `burst` of
//! them in flight; the responder answers each whole request with a response
//! of a fixed size. The prober times every transaction, from the first byte
//! of its request written to the last byte of its response read, into a
//! histogram allocated before the test starts, so that recording one costs
//! no allocation.
//!
//! Deadlock freedom with large messages and a burst: the prober never
//! blocks in a write. It writes without waiting and, while a request is
//! half written, waits for either direction at once (poll), so it always
//! drains responses; the responder may then write with a blocking call.
//! With every request written, the prober simply blocks in a read, which
//! with 1-byte messages makes a transaction two system calls on each end.

pub mod kind;

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::engine::datapath::{StreamContext, ThreadMeter, POLL_INTERVAL};
use crate::engine::histogram::{new_histogram, record, summarize};
use crate::engine::stats::StreamStats;
use crate::protocol::latency::LatencyStats;
use crate::protocol::rr::RrStats;

/// Largest read either end makes at once: several responses (or requests)
/// of a burst, without holding much memory for large messages.
const READ_BUFFER: usize = 256 * 1024;

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// `write` without waiting (MSG_DONTWAIT), whatever the socket's mode.
fn send_now(stream: &TcpStream, buf: &[u8]) -> std::io::Result<usize> {
    // SAFETY: `buf` is valid for `buf.len()` bytes for the call.
    let n = unsafe {
        libc::send(
            stream.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `read` without waiting (MSG_DONTWAIT).
fn recv_now(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: `buf` is valid and writable for `buf.len()` bytes.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Waits up to `timeout` until the socket is readable, or writable too
/// when `write` is set; returns (readable, writable).
fn wait_for(stream: &TcpStream, write: bool, timeout: Duration) -> (bool, bool) {
    let mut events = libc::POLLIN;
    if write {
        events |= libc::POLLOUT;
    }
    let mut fd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut fd, 1, timeout.as_millis() as libc::c_int) };
    if rc <= 0 {
        return (false, false);
    }
    // An error or hang-up shows as readable: the read then reports it.
    let readable = fd.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0;
    (readable, fd.revents & libc::POLLOUT != 0)
}

fn set_nodelay(stream: &TcpStream, on: bool, stats: &StreamStats) {
    if let Err(e) = stream.set_nodelay(on) {
        tracing::debug!(stream = stats.id, error = %e, "could not set TCP_NODELAY");
    }
}

/// The prober's loop: asks, times each answer.
pub fn ask(mut stream: TcpStream, ctx: &StreamContext, stats: &mut StreamStats) {
    let Some(rr) = ctx.plan.rr else { return };
    set_nodelay(&stream, rr.nodelay, stats);
    let request = vec![0x5au8; rr.request_size.max(1) as usize];
    let response_size = rr.response_size.max(1) as usize;
    let burst = rr.burst.max(1) as usize;
    let mut buf = vec![0u8; response_size.saturating_mul(burst).clamp(64, READ_BUFFER)];
    let mut hist = new_histogram();
    // When each request in flight began; fixed capacity, so no allocation.
    let mut inflight: VecDeque<Instant> = VecDeque::with_capacity(burst);
    let mut meter = ThreadMeter::default();
    let Some(start) = ctx.gate.wait() else { return };
    let window_start = start + ctx.plan.omit;
    let end = window_start + ctx.plan.duration;
    // Bytes of the newest request still to write, and of the oldest
    // response already read.
    let mut unsent = 0usize;
    let mut got = 0usize;
    let (mut written, mut read) = (0u64, 0u64);
    let (mut written_at_open, mut read_at_open) = (0u64, 0u64);
    let mut transactions = 0u64;
    let mut last = start;
    let mut sending = true;
    let mut failed = false;
    loop {
        let now = Instant::now();
        if !meter.is_open() && now >= window_start {
            meter.open(now);
            written_at_open = written;
            read_at_open = read;
        }
        if sending && (now >= end || ctx.stop.is_stopped()) {
            sending = false;
        }
        if ctx.stop.is_stopped() || (!sending && inflight.is_empty() && unsent == 0) {
            break;
        }
        // Fill the burst: each request is written whole before the next.
        while sending && unsent == 0 && inflight.len() < burst {
            inflight.push_back(Instant::now());
            unsent = request.len();
            match write_some(&stream, &request, &mut unsent) {
                Ok(n) => {
                    written += n as u64;
                    ctx.progress.add(n as u64);
                }
                Err(e) => {
                    tracing::debug!(stream = stats.id, error = %e, "tcp_rr write failed");
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            break;
        }
        // Read no more than the responses owed, so that a peer sending
        // unasked bytes cannot pass them off as answers.
        let owed = (inflight.len() * response_size).saturating_sub(got);
        let limit = owed.min(buf.len());
        let n = if unsent > 0 {
            let (readable, writable) = wait_for(&stream, true, POLL_INTERVAL);
            meter.syscalls += 1;
            if writable {
                match write_some(&stream, &request, &mut unsent) {
                    Ok(n) => {
                        written += n as u64;
                        ctx.progress.add(n as u64);
                    }
                    Err(e) => {
                        tracing::debug!(stream = stats.id, error = %e, "tcp_rr write failed");
                        break;
                    }
                }
            }
            if !readable || limit == 0 {
                continue;
            }
            recv_now(&stream, &mut buf[..limit])
        } else if limit == 0 {
            continue;
        } else {
            stream.read(&mut buf[..limit])
        };
        meter.syscalls += 1;
        match n {
            Ok(0) => {
                tracing::debug!(stream = stats.id, "tcp_rr: the responder closed mid-test");
                break;
            }
            Ok(n) => {
                let now = Instant::now();
                read += n as u64;
                ctx.progress.add(n as u64);
                got += n;
                while got >= response_size {
                    let Some(began) = inflight.pop_front() else {
                        break;
                    };
                    got -= response_size;
                    if meter.is_open() {
                        transactions += 1;
                        record(&mut hist, now.saturating_duration_since(began));
                        last = now;
                    }
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(e) => {
                tracing::debug!(stream = stats.id, error = %e, "tcp_rr read failed");
                break;
            }
        }
    }
    let opened = meter.opened_at().unwrap_or(last);
    stats.bytes = written - written_at_open;
    stats.seconds = last.saturating_duration_since(opened).as_secs_f64();
    meter.finish(stats);
    let sock = socket2::SockRef::from(&stream);
    stats.send_buffer_bytes = sock.send_buffer_size().unwrap_or(0) as u64;
    stats.receive_buffer_bytes = sock.recv_buffer_size().unwrap_or(0) as u64;
    stats.rr = Some(RrStats {
        transactions,
        request_bytes: written - written_at_open,
        response_bytes: read - read_at_open,
        latency: summarize(&hist),
        udp: None,
        crr: None,
    });
    // Half-close and wait for the responder to close: it then has read
    // every request and written every response.
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(POLL_INTERVAL));
    let mut sink = [0u8; 4096];
    let drain_until = Instant::now() + crate::engine::datapath::DRAIN_GRACE;
    loop {
        match stream.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if is_timeout(&e) && !ctx.stop.is_stopped() && Instant::now() < drain_until => {}
            Err(_) => break,
        }
    }
}

/// Writes what is left of `request` without waiting; returns the bytes
/// written and lowers `unsent` by as much.
fn write_some(stream: &TcpStream, request: &[u8], unsent: &mut usize) -> std::io::Result<usize> {
    let mut total = 0;
    while *unsent > 0 {
        let from = request.len() - *unsent;
        match send_now(stream, &request[from..]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => {
                *unsent -= n;
                total += n;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

/// Writes all of `buf`, looking at the stop flag at every write timeout;
/// `false` if the test was stopped or the connection failed first.
fn write_all(
    stream: &mut TcpStream,
    buf: &[u8],
    ctx: &StreamContext,
    meter: &mut ThreadMeter,
) -> bool {
    let mut at = 0;
    while at < buf.len() {
        meter.syscalls += 1;
        match stream.write(&buf[at..]) {
            Ok(0) => return false,
            Ok(n) => {
                at += n;
                ctx.progress.add(n as u64);
            }
            Err(e) if is_timeout(&e) => {
                if ctx.stop.is_stopped() {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// The responder's loop: answers every whole request, until the prober
/// half-closes. A prober that stops reading leaves this loop blocked in a
/// write only until the stop flag is set (the session's stall watchdog).
pub fn answer(mut stream: TcpStream, ctx: &StreamContext, stats: &mut StreamStats) {
    let Some(rr) = ctx.plan.rr else { return };
    set_nodelay(&stream, rr.nodelay, stats);
    let request_size = rr.request_size.max(1) as usize;
    let response = vec![0xa5u8; rr.response_size.max(1) as usize];
    let burst = rr.burst.max(1) as usize;
    let mut buf = vec![0u8; request_size.saturating_mul(burst).clamp(64, READ_BUFFER)];
    let mut meter = ThreadMeter::default();
    let Some(start) = ctx.gate.wait() else { return };
    let window_start = start + ctx.plan.omit;
    let mut got = 0usize;
    let (mut read, mut written) = (0u64, 0u64);
    let (mut read_at_open, mut written_at_open) = (0u64, 0u64);
    let mut transactions = 0u64;
    let mut last = start;
    'test: loop {
        meter.syscalls += 1;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let now = Instant::now();
                if !meter.is_open() && now >= window_start {
                    meter.open(now);
                    read_at_open = read;
                    written_at_open = written;
                }
                read += n as u64;
                ctx.progress.add(n as u64);
                got += n;
                while got >= request_size {
                    got -= request_size;
                    if !write_all(&mut stream, &response, ctx, &mut meter) {
                        break 'test;
                    }
                    written += response.len() as u64;
                    if meter.is_open() {
                        transactions += 1;
                        last = Instant::now();
                    }
                }
            }
            Err(e) if is_timeout(&e) => {
                if ctx.stop.is_stopped() {
                    break;
                }
            }
            Err(e) => {
                tracing::debug!(stream = stats.id, error = %e, "tcp_rr answer ended");
                break;
            }
        }
    }
    let opened = meter.opened_at().unwrap_or(last);
    stats.bytes = read - read_at_open;
    stats.seconds = last.saturating_duration_since(opened).as_secs_f64();
    meter.finish(stats);
    let sock = socket2::SockRef::from(&stream);
    stats.send_buffer_bytes = sock.send_buffer_size().unwrap_or(0) as u64;
    stats.receive_buffer_bytes = sock.recv_buffer_size().unwrap_or(0) as u64;
    stats.rr = Some(RrStats {
        transactions,
        request_bytes: read - read_at_open,
        response_bytes: written - written_at_open,
        latency: None,
        udp: None,
        crr: None,
    });
    drop(stream);
}

/// A `tcp_rr` probe's figures, from both ends: the headline of its result.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RrSummary {
    pub request_size: u32,
    pub response_size: u32,
    pub burst: u32,
    pub nodelay: bool,
    /// Transactions the prober completed in the measured window.
    pub transactions: u64,
    /// The prober's window: from its opening to the last response read.
    pub seconds: f64,
    pub transactions_per_second: f64,
    /// Per-transaction latency, in seconds (absent if none completed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyStats>,
    /// Request bytes per second (prober to responder) and response bytes
    /// per second (back), over the prober's window.
    pub request_bytes_per_second: f64,
    pub response_bytes_per_second: f64,
    /// Each end's data thread: CPU seconds (user + system), and CPU per
    /// transaction in microseconds (netperf's service demand).
    pub local_cpu_seconds: f64,
    pub remote_cpu_seconds: f64,
    pub local_service_demand_microseconds: f64,
    pub remote_service_demand_microseconds: f64,
}

impl RrSummary {
    /// Combines the prober's stream (`local`) with the responder's.
    pub fn combine(
        params: crate::protocol::rr::RrParams,
        local: Option<&StreamStats>,
        remote: Option<&StreamStats>,
    ) -> RrSummary {
        use crate::engine::stats::ratio;
        let cpu =
            |s: Option<&StreamStats>| s.map_or(0.0, |s| s.cpu_user_seconds + s.cpu_system_seconds);
        let rr = |s: Option<&StreamStats>| s.and_then(|s| s.rr.clone()).unwrap_or_default();
        let (l, r) = (rr(local), rr(remote));
        let seconds = local.map_or(0.0, |s| s.seconds);
        let (local_cpu, remote_cpu) = (cpu(local), cpu(remote));
        RrSummary {
            request_size: params.request_size,
            response_size: params.response_size,
            burst: params.burst,
            nodelay: params.nodelay,
            transactions: l.transactions,
            seconds,
            transactions_per_second: ratio(l.transactions as f64, seconds),
            latency: l.latency,
            request_bytes_per_second: ratio(l.request_bytes as f64, seconds),
            response_bytes_per_second: ratio(l.response_bytes as f64, seconds),
            local_cpu_seconds: local_cpu,
            remote_cpu_seconds: remote_cpu,
            local_service_demand_microseconds: ratio(local_cpu * 1e6, l.transactions as f64),
            remote_service_demand_microseconds: ratio(remote_cpu * 1e6, r.transactions as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_and_buckets_follow_the_recorded_latencies() {
        let mut h = new_histogram();
        for us in 1..=1000u64 {
            record(&mut h, Duration::from_micros(us));
        }
        let s = summarize(&h).unwrap();
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.002;
        assert!(close(s.min, 1e-6), "{}", s.min);
        assert!(close(s.p50, 500e-6), "{}", s.p50);
        assert!(close(s.p90, 900e-6), "{}", s.p90);
        assert!(close(s.p99, 990e-6), "{}", s.p99);
        assert!(close(s.max, 1000e-6), "{}", s.max);
        assert_eq!(s.buckets.iter().sum::<u64>(), 1000);
        // 1..=10 µs in the first bucket, 11..=25 in the second.
        assert_eq!(&s.buckets[..3], &[10, 15, 25]);
        assert!(close(s.sum, 500.5 * 1000.0 * 1e-6));
        assert!(summarize(&new_histogram()).is_none());
        // Beyond the range counts at the top, not as a panic or a loss.
        record(&mut h, Duration::from_secs(3600));
        assert_eq!(h.len(), 1001);
    }

    #[test]
    fn recording_does_not_grow_the_histogram() {
        let mut h = new_histogram();
        let before = h.distinct_values();
        for ns in [1u64, 999, 10_000_000, 59_000_000_000] {
            record(&mut h, Duration::from_nanos(ns));
        }
        // The counts array is sized at construction: recording in range
        // never resizes (hdrhistogram's auto-resize is off by default).
        assert_eq!(h.distinct_values(), before);
    }
}
