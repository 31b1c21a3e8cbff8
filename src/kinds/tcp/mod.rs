//! TCP throughput: the sending and receiving loops of a TCP stream, and the
//! socket set-up both ends apply (window, congestion control, TOS, pacing).
//!
//! It also opens the prober's data connections ([`open_streams`]).
//!
//! The sender writes for the planned time, then half-closes and waits for
//! the receiver to read everything and close. Only then does it read
//! TCP_INFO, so that retransmits of the last flight are counted too.

pub mod kind;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use socket2::SockRef;

pub use crate::engine::datapath::prepare_blocking;
use crate::engine::datapath::{
    DataSocket, IntervalMeter, Mark, StreamContext, ThreadMeter, POLL_INTERVAL,
};
use crate::engine::error::ProbeError;
use crate::engine::pacing::Pacer;
use crate::engine::stats::{StreamStats, TcpIoMode, TcpLimits, TcpStats};
pub use crate::engine::tcp_socket::{apply_options, TcpOptions};
use crate::engine::tcpinfo::{self, TcpInfo};
use crate::engine::zerocopy::{self, PayloadFile};
use crate::protocol::{encode_frame, Message};

/// Errors by which a kernel or socket refuses a copy-free call outright,
/// rather than failing the connection: the stream goes on copying.
fn is_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    )
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// TCP_INFO's retransmit counter, the mark of a sender's intervals.
fn total_retrans(stream: &TcpStream) -> Option<u64> {
    TcpInfo::read(stream)
        .ok()
        .map(|i| u64::from(i.total_retrans))
}

fn record_buffers(stream: &TcpStream, stats: &mut StreamStats) {
    let sock = SockRef::from(stream);
    stats.send_buffer_bytes = sock.send_buffer_size().unwrap_or(0) as u64;
    stats.receive_buffer_bytes = sock.recv_buffer_size().unwrap_or(0) as u64;
    stats.congestion = tcpinfo::congestion(stream);
}

/// The sender's limits over the window: the time accounting as deltas
/// between `open` and `close`, the rest as read at `close`. A field either
/// reading lacks (an older kernel) is unknown.
pub fn sender_limits(open: Option<&TcpInfo>, close: Option<&TcpInfo>) -> Option<TcpLimits> {
    let close = close?;
    let delta = |f: fn(&TcpInfo) -> Option<u64>| -> Option<u64> {
        Some(f(close)?.saturating_sub(f(open?)?))
    };
    let seconds = |us: Option<u64>| us.map(|us| us as f64 / 1e6);
    Some(TcpLimits {
        busy_seconds: seconds(delta(|i| i.busy_time_us)),
        rwnd_limited_seconds: seconds(delta(|i| i.rwnd_limited_us)),
        sndbuf_limited_seconds: seconds(delta(|i| i.sndbuf_limited_us)),
        delivery_rate_bits_per_second: close.delivery_rate.map(|r| r as f64 * 8.0),
        delivery_rate_app_limited: close.delivery_rate_app_limited,
        bytes_retrans: delta(|i| i.bytes_retrans),
        notsent_bytes: close.notsent_bytes.map(u64::from),
        ..TcpLimits::default()
    })
}

/// The sending loop.
pub fn send(mut stream: TcpStream, ctx: &StreamContext, stats: &mut StreamStats) {
    let Some(start) = ctx.gate.wait() else { return };
    let plan = &ctx.plan;
    let window_start = start + plan.omit;
    let end = window_start + plan.duration;
    // Paced, writes are small enough to come about every 10 ms, so that
    // the socket buffer never holds more than the rate allows: otherwise the
    // sender would queue seconds of data and the test would overrun its time.
    let chunk = if plan.bitrate_per_stream > 0 {
        // At most one write of the test's length, at least a segment (or
        // the whole length, when that is smaller than a segment).
        ((plan.bitrate_per_stream / 8 / 100) as usize)
            .max(1448)
            .min(plan.length.max(1) as usize)
    } else {
        plan.length as usize
    };
    let buf: Vec<u8> = (0..chunk).map(|i| (i % 251) as u8).collect();
    // Copy-free: each write is a sendfile of the same in-memory file, the
    // same length as the buffer, so pacing and byte counts are unchanged.
    // By default only across a link (engine::zerocopy).
    let mut file = if plan
        .zerocopy
        .sends_copy_free(zerocopy::stream_on_this_host(&stream))
    {
        PayloadFile::new(&buf)
            .inspect_err(
                |e| tracing::debug!(stream = stats.id, error = %e, "no memfd; TCP sends copy"),
            )
            .ok()
    } else {
        None
    };
    let mut pacer = Pacer::new(plan.bitrate_per_stream, chunk as u32);
    let mut meter = ThreadMeter::default();
    let mut intervals = IntervalMeter::new(ctx, stats, Mark::Retransmits);
    let mut bytes = 0u64;
    let mut bytes_at_open = 0u64;
    let mut retrans_at_open = 0u32;
    let mut info_at_open: Option<TcpInfo> = None;
    let mut last_write = start;
    // An adaptive test's log of this stream's bytes, for the cut.
    let mut log = ctx.recorder(stats.id, start);
    loop {
        if pacer.is_paced() && pacer.due(Instant::now() - start, 1) == 0 {
            let wait = (start + pacer.next_due()).saturating_duration_since(Instant::now());
            std::thread::sleep(wait.min(POLL_INTERVAL));
            if ctx.stop.is_stopped() || ctx.ended() || Instant::now() >= end {
                break;
            }
            continue;
        }
        let now = Instant::now();
        if !meter.is_open() && now >= window_start {
            meter.open(now);
            bytes_at_open = bytes;
            info_at_open = TcpInfo::read(&stream).ok();
            retrans_at_open = info_at_open.map_or(0, |i| i.total_retrans);
            if let Some(iv) = intervals.as_mut() {
                iv.open(now);
                iv.mark_base(u64::from(retrans_at_open));
            }
        }
        if now >= end || ctx.stop.is_stopped() || ctx.ended() {
            break;
        }
        let limit = plan.send_limit.as_ref().filter(|_| meter.is_open());
        if limit.is_some_and(|l| l.remaining() == 0) {
            break;
        }
        meter.syscall();
        let wrote = match &file {
            Some(f) => f.send_to(&stream),
            None => stream.write(&buf),
        };
        match wrote {
            Ok(n) => {
                if let Some(l) = limit {
                    l.add(n as u64);
                }
                bytes += n as u64;
                ctx.progress.add(n as u64);
                last_write = Instant::now();
                if let Some(log) = log.as_mut() {
                    log.record(last_write, bytes - bytes_at_open);
                }
                pacer.sent(1);
                if let Some(iv) = intervals.as_mut() {
                    if iv.due(last_write) {
                        iv.roll(last_write, total_retrans(&stream));
                    }
                    if meter.is_open() {
                        iv.add(n as u64, 0);
                    }
                }
            }
            Err(e) if is_timeout(&e) => {
                if let Some(iv) = intervals.as_mut() {
                    let now = Instant::now();
                    if iv.due(now) {
                        iv.roll(now, total_retrans(&stream));
                    }
                }
            }
            Err(e) if file.is_some() && is_unsupported(&e) => {
                tracing::debug!(stream = stats.id, error = %e, "sendfile refused; TCP sends copy");
                file = None;
            }
            Err(e) => {
                tracing::debug!(stream = stats.id, error = %e, "TCP send ended");
                break;
            }
        }
    }
    if plan.send_limit.is_some() && meter.is_open() {
        // A test bounded by bytes or blocks (a stock iperf3 client's `-n`
        // or `-k`): the count is written, not delivered, and the socket
        // still holds what the path has not yet taken (1 MB and more with
        // an autotuned buffer). The span ends once the receiver has
        // acknowledged all of it, as iperf3's own server's does (it ends
        // at the client's TEST_END, which comes once the client has read
        // everything): ended at the last write, `-R -k 100` through a 200
        // Mbit/s bottleneck read 212 Mbit/s. A client that ends the test
        // first (`-k` counts its reads, which may each be short of a
        // block) has not had what the socket still holds: those bytes are
        // not this span's.
        let (at, held) = delivered(&stream, ctx, end);
        last_write = at;
        bytes = bytes.saturating_sub(held).max(bytes_at_open);
    }
    stats.tcp_io = Some(if file.is_some() {
        TcpIoMode::Sendfile
    } else {
        TcpIoMode::Write
    });
    // The window ends at the last write: what limited the flow is read
    // here, before the drain, whose idle tail would dilute it.
    meter.close();
    let info_at_close = TcpInfo::read(&stream).ok();
    stats.tcp_limits = sender_limits(info_at_open.as_ref(), info_at_close.as_ref());
    let opened = meter.opened_at().unwrap_or(start);
    stats.bytes = bytes - bytes_at_open;
    stats.seconds = last_write.saturating_duration_since(opened).as_secs_f64();
    if let Some(log) = log {
        log.finish(last_write, stats.bytes);
    }
    // Half-close, then wait for the receiver to drain and close, so that
    // TCP_INFO covers the whole transfer.
    let _ = stream.shutdown(Shutdown::Write);
    let mut sink = [0u8; 64];
    loop {
        match stream.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if is_timeout(&e) && !ctx.stop.is_stopped() => {}
            Err(_) => break,
        }
    }
    meter.finish(stats);
    record_buffers(&stream, stats);
    if let Some(iv) = intervals {
        stats.intervals = iv.finish(last_write, total_retrans(&stream));
    }
    if let Ok(info) = TcpInfo::read(&stream) {
        stats.tcp = Some(TcpStats {
            retransmits: info.total_retrans.saturating_sub(retrans_at_open) as u64,
            rtt_seconds: info.rtt_us as f64 / 1e6,
            rttvar_seconds: info.rttvar_us as f64 / 1e6,
            min_rtt_seconds: info.min_rtt_us.unwrap_or(0) as f64 / 1e6,
            mss_bytes: info.snd_mss,
            cwnd_bytes: info.snd_cwnd as u64 * info.snd_mss as u64,
        });
    }
}

/// Read size of a TCP receiver: large reads, each woken for only when that
/// much is queued, keep the receiver from making the sender pay a wake-up
/// per arriving segment. On loopback, waking per segment held a single
/// stream 10% below iperf3's figure. 128 KiB (two 64 KiB loopback
/// segments) is enough for that, and a larger mark costs a sender that
/// feeds several streams from one thread, as the stock iperf3 client
/// does: its data then sits in four receive queues at once. Against the
/// stock client, 4 runs of 3 s each, alternating: -P 4 15.4 Gbit/s at
/// 128 KiB against 13.9 at 512 KiB, -P 1 17.8 against 16.5; pathprobe's
/// own client 17.7 / 15.9 (1 stream) and 27.2 / 27.5 (4).
const RECEIVE_BUFFER: usize = 128 * 1024;

/// Wakes the reader only once `bytes` are queued, or at EOF, or when the
/// read timeout passes. The kernel caps the mark at half a locked receive
/// buffer, so a small --window cannot stall the stream.
fn set_low_water_mark(stream: &TcpStream, bytes: usize) {
    let mark = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: an int option on an open socket.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(stream),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&mark as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// When everything written to `stream` had been acknowledged: polls the
/// bytes the socket still holds (unsent and unacknowledged) every
/// [`DELIVERY_POLL`], until there are none, the test is stopped, or its
/// planned end passes. The moment is known to within a poll; with it,
/// what the socket still held then (0 once all was acknowledged).
fn delivered(stream: &TcpStream, ctx: &StreamContext, end: Instant) -> (Instant, u64) {
    loop {
        let now = Instant::now();
        let mut held: libc::c_int = 0;
        // SAFETY: TIOCOUTQ writes one int through the pointer, on an open
        // socket.
        let rc = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(stream),
                libc::TIOCOUTQ,
                &mut held as *mut libc::c_int,
            )
        };
        if rc != 0 {
            return (now, 0);
        }
        if held <= 0 || ctx.stop.is_stopped() || now >= end {
            return (now, u64::try_from(held).unwrap_or(0));
        }
        std::thread::sleep(DELIVERY_POLL);
    }
}

/// How often [`delivered`] looks: a millisecond is 0.1% of a 1 s span.
const DELIVERY_POLL: Duration = Duration::from_millis(1);

/// Bytes that reached the socket and are not read yet (SIOCINQ, which is
/// FIONREAD on Linux); `None` where the kernel does not say.
fn queued_bytes(stream: &TcpStream) -> Option<u64> {
    let mut queued: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, on an open socket.
    let rc = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(stream),
            libc::FIONREAD,
            &mut queued as *mut libc::c_int,
        )
    };
    (rc == 0).then(|| u64::try_from(queued).unwrap_or(0))
}

/// Opens a receiver's window now: the instant it opens at, and the bytes
/// then queued in the socket, which arrived before it and do not count.
///
/// A receiver can start after its sender (its side read the start message
/// late, on a loaded host): meanwhile the sender's bytes queue here, up to
/// the receive window. Counted over a window that opens later, they would
/// read as a rate never sent: 1.5 s of 8 Mbit/s, begun 400 ms before the
/// receiver, read as 10.7 Mbit/s. UDP moves its window back to the
/// kernel's receive stamps; TCP's are no good for that (a read is stamped
/// with the latest segment it took, and the queue merges segments under
/// the newest stamp), but the byte count is exact: what is queued when the
/// window opens arrived before it, and everything read after that arrived
/// after it. One ioctl per stream, once. A kernel that will not say
/// counts the queue, as before. What this cannot undo: a queue that filled
/// the receive window stalled the sender, and what it then held back
/// arrives in the window as fast as its pacing lets it (docs/JSON.md).
fn open_window(stream: &TcpStream) -> (Instant, u64) {
    let queued = queued_bytes(stream).unwrap_or(0);
    (Instant::now(), queued)
}

/// The receiving loop: reads until the sender half-closes.
pub fn receive(mut stream: TcpStream, ctx: &StreamContext, stats: &mut StreamStats) {
    let Some(start) = ctx.gate.wait() else { return };
    let window_start = start + ctx.plan.omit;
    let read_size = (ctx.plan.length as usize).max(RECEIVE_BUFFER);
    // Nothing looks at a TCP stream's payload, so a copy-free receiver
    // lets the kernel drop it (MSG_TRUNC) and holds no buffer.
    let mut discard = ctx.plan.zerocopy.receives_copy_free();
    let mut buf = if discard {
        Vec::new()
    } else {
        vec![0u8; read_size]
    };
    let mut meter = ThreadMeter::default();
    let mut intervals = IntervalMeter::new(ctx, stats, Mark::None);
    // Every byte read so far, warm-up included.
    let mut bytes = 0u64;
    // Bytes that arrived before the window opened (read during the warm-up,
    // or queued when it opened): the first this many read do not count.
    let mut excluded = 0u64;
    let mut last_read = start;
    if ctx.plan.omit.is_zero() {
        let (at, queued) = open_window(&stream);
        excluded = queued;
        last_read = at;
        meter.open(at);
        set_low_water_mark(&stream, read_size);
        if let Some(iv) = intervals.as_mut() {
            iv.open(at);
        }
    }
    let mut log = ctx.recorder(stats.id, start);
    loop {
        meter.syscall();
        let read = if discard {
            zerocopy::discard(&stream, read_size)
        } else {
            stream.read(&mut buf)
        };
        match read {
            Ok(0) => break,
            Ok(n) => {
                let mut now = Instant::now();
                let counted_before = bytes.saturating_sub(excluded);
                bytes += n as u64;
                ctx.progress.add(n as u64);
                if !meter.is_open() && now >= window_start {
                    // This read's bytes came before it returned, so before
                    // the window: they are excluded with the queue.
                    let (at, queued) = open_window(&stream);
                    excluded = bytes + queued;
                    now = at;
                    meter.open(at);
                    // Reads returned promptly during the warm-up, so the
                    // window starts within a segment of the boundary.
                    set_low_water_mark(&stream, read_size);
                    if let Some(iv) = intervals.as_mut() {
                        iv.open(at);
                    }
                }
                let counted = bytes.saturating_sub(excluded);
                last_read = now;
                if let Some(log) = log.as_mut() {
                    // What had arrived by now, not what was read: a read
                    // returns once its low-water mark has gathered (128 KiB,
                    // 21 ms at 50 Mbit/s) or when the thread gets a CPU, so
                    // the read count trails the arrivals by what the socket
                    // holds. A cut from such a count starts behind and ends
                    // on a last read that took everything: the figure read
                    // the socket's backlog above the path's rate.
                    if log.due(now) {
                        log.record(now, counted + queued_bytes(&stream).unwrap_or(0));
                    }
                }
                if let Some(iv) = intervals.as_mut() {
                    if iv.due(now) {
                        iv.roll(now, None);
                    }
                    if meter.is_open() {
                        iv.add(counted - counted_before.min(counted), 0);
                    }
                }
            }
            Err(e) if is_timeout(&e) => {
                if ctx.stop.is_stopped() {
                    break;
                }
                if let Some(iv) = intervals.as_mut() {
                    let now = Instant::now();
                    if iv.due(now) {
                        iv.roll(now, None);
                    }
                }
            }
            Err(e) if discard && is_unsupported(&e) => {
                tracing::debug!(stream = stats.id, error = %e, "MSG_TRUNC refused; TCP reads copy");
                discard = false;
                buf = vec![0u8; read_size];
            }
            Err(e) => {
                tracing::debug!(stream = stats.id, error = %e, "TCP receive ended");
                break;
            }
        }
    }
    stats.tcp_io = Some(if discard {
        TcpIoMode::Discard
    } else {
        TcpIoMode::Read
    });
    let opened = meter.opened_at().unwrap_or(last_read);
    stats.bytes = bytes.saturating_sub(excluded);
    stats.seconds = last_read.saturating_duration_since(opened).as_secs_f64();
    if let Some(log) = log {
        log.finish(last_read, stats.bytes);
    }
    meter.finish(stats);
    stats.tcp_limits = TcpInfo::read(&stream).ok().map(|i| TcpLimits {
        rcv_space_bytes: i.rcv_space.map(u64::from),
        rcv_rtt_seconds: i.rcv_rtt_us.map(|us| f64::from(us) / 1e6),
        ..TcpLimits::default()
    });
    record_buffers(&stream, stats);
    if let Some(iv) = intervals {
        stats.intervals = iv.finish(last_read, None);
    }
    // Closing tells the sender that everything arrived. An adaptive
    // prober may still hold a clone of the socket for its TCP_INFO, which
    // would keep a plain close from sending the FIN.
    if ctx.plan.adaptive.is_some() {
        let _ = stream.shutdown(Shutdown::Both);
    }
    drop(stream);
}

/// Why a connection attempt failed, as the prober reports it.
pub(crate) fn connect_error(addr: SocketAddr, e: std::io::Error) -> ProbeError {
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
            source: e,
        },
    }
}

/// Connects a TCP socket from `bind` (if given) to `addr`, with `opts` set
/// before the connect so that the window scale is negotiated for them.
pub(crate) async fn connect(
    addr: SocketAddr,
    bind: Option<IpAddr>,
    opts: Option<&TcpOptions>,
    timeout: Duration,
) -> Result<tokio::net::TcpStream, ProbeError> {
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(|e| ProbeError::io("socket", e))?;
    // So that a trace of the path can bind this connection's port once it
    // is closed (TIME_WAIT) and follow its flow: a bind to a
    // port held by a TIME_WAIT socket needs SO_REUSEADDR on both, and the
    // connect after it takes over the 4-tuple when timestamps were on.
    // Connect's own choice of an ephemeral port is not changed by it.
    sock.set_reuseaddr(true)
        .map_err(|e| ProbeError::io("socket", e))?;
    // A plain bind, not `bind_source`: a trace can take over a port a
    // bind() took, and not one connect() chose (its bucket stays the
    // connect's). A probe opens a few connections, not tcp_crr's
    // thousands.
    if let Some(ip) = bind {
        sock.bind(SocketAddr::new(ip, 0))
            .map_err(|e| ProbeError::BadArgument(format!("cannot bind to {ip}: {e}")))?;
    }
    if let Some(opts) = opts {
        apply_options(&SockRef::from(&sock), opts, addr.is_ipv6())
            .map_err(|e| ProbeError::BadArgument(e.to_string()))?;
    }
    match tokio::time::timeout(timeout, sock.connect(addr)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(connect_error(addr, e)),
        Err(_) => Err(ProbeError::Timeout {
            stage: "connecting",
            after: timeout,
        }),
    }
}

/// The prober's `count` TCP data connections: each opened with the test's
/// options and announced by a `DataHello` carrying the token, then handed
/// over as blocking sockets for the stream threads.
pub(crate) async fn open_streams(
    addr: SocketAddr,
    bind: Option<IpAddr>,
    opts: &TcpOptions,
    count: usize,
    token: &str,
    timeout: Duration,
) -> Result<Vec<(u32, DataSocket)>, ProbeError> {
    let mut sockets = Vec::with_capacity(count);
    for id in 0..count as u32 {
        let mut s = connect(addr, bind, Some(opts), timeout).await?;
        let hello = encode_frame(&Message::DataHello {
            token: token.to_string(),
            stream: id,
        })
        .map_err(|e| ProbeError::Protocol(e.to_string()))?;
        tokio::time::timeout(timeout, tokio::io::AsyncWriteExt::write_all(&mut s, &hello))
            .await
            .map_err(|_| ProbeError::Timeout {
                stage: "opening data connections",
                after: timeout,
            })?
            .map_err(|e| ProbeError::io("data connection", e))?;
        let s = s
            .into_std()
            .map_err(|e| ProbeError::io("data connection", e))?;
        prepare_blocking(&s).map_err(|e| ProbeError::io("data connection", e))?;
        sockets.push((id, DataSocket::Tcp(s)));
    }
    Ok(sockets)
}

#[cfg(test)]
mod late_start_tests {
    use super::*;
    use crate::engine::datapath::testing::{context, plan, run_pair};
    use crate::engine::datapath::{IntervalPlan, Plan};
    use std::net::TcpListener;

    const RATE: u64 = 8_000_000;

    fn ctx(omit: Duration, rate: u64) -> StreamContext {
        context(Plan {
            omit,
            length: 128 * 1024,
            bitrate_per_stream: rate,
            interval: Some(IntervalPlan {
                length: Duration::from_millis(500),
                count: 3,
            }),
            ..plan()
        })
    }

    /// A loopback connection with the options a paced test gives both
    /// ends (the kernel's pacing at the rate, default buffers).
    fn pair(window: Option<u32>, rate: u64) -> (TcpStream, TcpStream) {
        let opts = TcpOptions {
            window,
            congestion: None,
            tos: None,
            bitrate: rate,
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (rx, _) = l.accept().unwrap();
        for s in [&tx, &rx] {
            apply_options(&SockRef::from(s), &opts, false).unwrap();
            prepare_blocking(s).unwrap();
        }
        (tx, rx)
    }

    /// Runs a paced sender and a receiver whose gate opens `late` after
    /// the sender's; returns (sender's, receiver's) figures.
    fn run(
        late: Duration,
        omit: Duration,
        window: Option<u32>,
        rate: u64,
    ) -> (StreamStats, StreamStats) {
        let (tx, rx) = pair(window, rate);
        run_pair(
            (tx, send),
            (rx, receive),
            (ctx(omit, rate), ctx(omit, rate)),
            late,
        )
    }

    fn bps(s: &StreamStats) -> f64 {
        s.bytes as f64 * 8.0 / s.seconds
    }

    /// The receiver read the start 400 ms after its sender began (a loaded
    /// host's control task), with a window (`-w 1M`) that holds what came
    /// meanwhile: those 400 KB were queued before its window opened, and do
    /// not count. Before, they were counted over its 1.1 s, and 8 Mbit/s
    /// read as 10.7 (the UDP receiver had the same fault: its late-start
    /// test).
    #[test]
    fn a_receiver_that_starts_late_still_measures_the_senders_rate() {
        let (sent, got) = run(
            Duration::from_millis(400),
            Duration::ZERO,
            Some(1 << 20),
            RATE,
        );
        assert!(
            got.seconds > 0.95 && got.seconds < 1.25,
            "window {} s: the receiver's own, from its start",
            got.seconds
        );
        // 1.1 s of the sender's 1.5 s arrived in the window, not 400 ms' worth.
        assert!(
            got.bytes < sent.bytes - 250_000 && got.bytes > sent.bytes / 2,
            "{} of {} bytes counted",
            got.bytes,
            sent.bytes
        );
        assert!(
            (bps(&got) / RATE as f64 - 1.0).abs() < 0.05,
            "{} bit/s for an {RATE} bit/s sender",
            bps(&got)
        );
        // The intervals cover the same window and the same bytes.
        let intervals: u64 = got.intervals.iter().map(|i| i.bytes).sum();
        assert_eq!(intervals, got.bytes);
        let last = got.intervals.last().unwrap();
        assert!((last.end - got.seconds).abs() < 1e-6, "{last:?}");
    }

    /// Bytes that arrive in the warm-up do not count, nor does the read
    /// that opens the window: the receiver's count is the sender's after
    /// its own warm-up, within a write either way.
    #[test]
    fn a_warm_up_counts_nothing_that_arrived_in_it() {
        let (sent, got) = run(
            Duration::ZERO,
            Duration::from_millis(300),
            Some(1 << 20),
            RATE,
        );
        let write = RATE / 8 / 100;
        assert!(
            got.bytes.abs_diff(sent.bytes) <= write,
            "received {} for {} sent after the warm-up",
            got.bytes,
            sent.bytes
        );
        assert!(
            (bps(&got) / RATE as f64 - 1.0).abs() < 0.05,
            "{} bit/s",
            bps(&got)
        );
        let intervals: u64 = got.intervals.iter().map(|i| i.bytes).sum();
        assert_eq!(intervals, got.bytes);
    }
}
