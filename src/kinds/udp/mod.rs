//! UDP throughput: a smoothly paced, batched sender and a batched receiver
//! that accounts loss, reordering, duplicates and jitter.
//!
//! The sender batches with UDP GSO (one message carries up to 64 datagrams,
//! each with its own header, and one syscall up to 8 messages) where the
//! kernel has it, sendmmsg elsewhere,
//! and paces so that a batch is never larger than what is due, nor than
//! the rate's share of the pacer's shortest sleep ([`udp_io::burst_limit`]).
//! The receiver reads coalesced GRO buffers where the kernel has UDP_GRO,
//! recvmmsg elsewhere, with kernel receive timestamps, so jitter reflects
//! when datagrams arrived, not when a batch was read (docs/UDP.md).
//!
//! It also opens the prober's flows ([`open_flows`]) and announces them to
//! the responder with hello datagrams ([`announce_flows`]).

pub mod kind;

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::engine::accounting::UdpAccount;
use crate::engine::datapath::{
    IntervalMeter, Mark, StreamContext, ThreadMeter, UdpWire, POLL_INTERVAL,
};
use crate::engine::error::ProbeError;
use crate::engine::pacing::Pacer;
use crate::engine::stats::{StreamStats, UdpSendStats};
use crate::engine::udp_io::{self, RecvBatch, RecvMode, SendMode};
use crate::protocol::iperf3;
use crate::protocol::udp::{
    self, hello_datagram, UdpHeader, FLAG_FIN, FLAG_HELLO, FLAG_OMIT, HEADER_LEN,
};

/// FIN datagrams sent at the end, so that one survives a lossy path.
const FIN_COPIES: u32 = 8;
/// Shortest sleep between paced batches. Waking for every datagram at high
/// rates costs more CPU than the sending itself; batches this far apart are
/// still far smoother than a timer-driven sender's millisecond bursts. It
/// is also the quantum of the burst limit: one send carries at most what
/// the rate makes due in this time.
pub const MIN_SLEEP: Duration = Duration::from_micros(100);
/// Socket buffer size asked for on UDP data sockets at least (the kernel
/// doubles it). Large buffers keep a short stall of the receiving thread
/// from turning into loss.
pub const UDP_BUFFER: usize = 8 << 20;
/// The most asked for by [`buffer_size`]: the kernel books up to twice
/// this for one flow's socket, and only while its reader lags.
pub const UDP_BUFFER_MAX: usize = 32 << 20;
/// How long a stall of the receiving thread the buffer should absorb at
/// the flow's rate. At 20 Gbit/s on loopback, 8 MiB (about 4 ms of paced
/// GSO sends, whose small packets cost more buffer than their payload)
/// lost 0.02-0.08% in 2 runs of 6; 32 MiB lost nothing in 8 of 8.
const BUFFER_TIME: Duration = Duration::from_millis(16);

/// How far before this side's start the receiver's window may open, for
/// datagrams the sender sent before this side read the start message.
const MAX_EARLY_START: Duration = Duration::from_secs(1);

/// Longest a paced receiver lets datagrams gather in its socket after a
/// read that emptied it (see [`gather_time`]).
pub const MAX_GATHER: Duration = Duration::from_micros(500);

/// How long a receiver of a flow at `bits_per_second` of `len`-byte
/// datagrams, with `rcvbuf` bytes of socket buffer (as the kernel reports
/// it, twice what was asked), sleeps after a read that emptied the socket,
/// so that its next read takes many buffers at once. A reader blocked in
/// `recvmmsg` is woken for every packet the sender hands over, up to ten
/// thousand times a second for a paced GSO sender; each wake is a
/// scheduler round trip, and on a VM an IPI, which costs more than the
/// read. Arrival times come from the kernel's stamps, so reading late
/// changes no figure. `None` (block as before) when the flow is unpaced
/// (its receiver is never ahead for long), when fewer than 4 datagrams
/// would gather (waking for each costs little), or when the buffer would
/// hold less than 8 such sleeps' worth: at most 1/8 of the buffer's
/// payload room (half of `rcvbuf`) gathers.
pub fn gather_time(bits_per_second: u64, len: usize, rcvbuf: usize) -> Option<Duration> {
    if bits_per_second == 0 {
        return None;
    }
    let ns_per_byte = 8e9 / bits_per_second as f64;
    let gap = len.max(1) as f64 * ns_per_byte;
    let buffer = (rcvbuf / 2) as f64 * ns_per_byte;
    let gather = (MAX_GATHER.as_nanos() as f64).min(buffer / 8.0);
    (gather >= 4.0 * gap && gather >= 50_000.0).then(|| Duration::from_nanos(gather as u64))
}

/// Socket buffer to ask for on a flow of `bits_per_second` (0: unpaced):
/// the `window` when the test sets one, else what the rate moves in
/// [`BUFFER_TIME`], within [`UDP_BUFFER`] and [`UDP_BUFFER_MAX`]. An
/// unpaced flow gets the most: its receiver, counting runs without copying
/// them, is faster than its sender, and loses only what arrives while a
/// shared CPU holds it off; at 135 Gbit/s across veth, 8 MiB lost 0.11%
/// (median of 5 runs), where iperf3 3.21 `--gsro` at half the rate lost
/// nothing (docs/PERFORMANCE.md).
pub fn buffer_size(window: Option<u32>, bits_per_second: u64) -> usize {
    if let Some(w) = window {
        return w as usize;
    }
    if bits_per_second == 0 {
        return UDP_BUFFER_MAX;
    }
    let by_rate = bits_per_second as f64 / 8.0 * BUFFER_TIME.as_secs_f64();
    (by_rate as usize).clamp(UDP_BUFFER, UDP_BUFFER_MAX)
}

fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Sizes the socket buffers to `bytes` (see [`buffer_size`]); as root,
/// beyond net.core.[rw]mem_max.
pub fn configure_socket(sock: &UdpSocket, bytes: usize) {
    let want = bytes.min(i32::MAX as usize) as libc::c_int;
    let fd = sock.as_raw_fd();
    for (force, plain) in [
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
    ] {
        // SAFETY: an int option on an open socket.
        unsafe {
            let set = |opt| {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&want as *const libc::c_int).cast(),
                    4,
                )
            };
            if set(force) != 0 {
                set(plain);
            }
        }
    }
    let _ = sock.set_read_timeout(Some(POLL_INTERVAL));
    let _ = sock.set_write_timeout(Some(POLL_INTERVAL));
}

/// Sets the TOS / traffic class of a UDP socket.
pub fn set_tos(sock: &UdpSocket, tos: u8) -> std::io::Result<()> {
    let s = socket2::SockRef::from(sock);
    if sock.local_addr()?.is_ipv6() {
        s.set_tclass_v6(tos as u32)
    } else {
        s.set_tos_v4(tos as u32)
    }
}

fn set_timer_slack() {
    // Sleeps between paced batches are short; the default 50 µs slack would
    // make every one of them late and the pacing lumpy.
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
}

fn record_buffers(sock: &UdpSocket, stats: &mut StreamStats) {
    let s = socket2::SockRef::from(sock);
    stats.send_buffer_bytes = s.send_buffer_size().unwrap_or(0) as u64;
    stats.receive_buffer_bytes = s.recv_buffer_size().unwrap_or(0) as u64;
}

/// The sending loop: paced datagrams until the planned end, then FINs.
pub fn send(sock: UdpSocket, ctx: &StreamContext, stats: &mut StreamStats) {
    let plan = &ctx.plan;
    let len = plan.length as usize;
    let mut mode = if plan.offload && udp_io::set_gso(&sock, plan.length) {
        SendMode::Gso
    } else {
        SendMode::Sendmmsg
    };
    let mut batch = udp_io::burst_limit(
        plan.bitrate_per_stream,
        len,
        MIN_SLEEP,
        mode == SendMode::Gso,
    );
    // Datagrams per GSO message, whose first marks a run (0: no runs).
    let mut runs = if mode == SendMode::Gso && len >= udp::RUN_LEN {
        udp_io::gso_segments(len)
    } else {
        0
    };
    // Room for the larger of the two modes' calls, for a fallback to sendmmsg.
    let mut buf = vec![0u8; len * udp_io::BATCH.max(udp_io::burst_limit(0, len, MIN_SLEEP, true))];
    // Whether a GSO send has gone through: until one has, a failure that
    // says the path cannot take GSO switches to sendmmsg for good.
    let mut gso_proven = false;
    set_timer_slack();
    let Some(start) = ctx.gate.wait() else { return };
    let window_start = start + plan.omit;
    let end = window_start + plan.duration;
    let mut pacer = Pacer::new(plan.bitrate_per_stream, plan.length);
    let mut meter = ThreadMeter::default();
    let mut intervals = IntervalMeter::new(ctx, stats, Mark::Datagrams);
    let mut seq = 0u64;
    let mut measured = 0u64;
    let mut last_send = start;
    let mut log = ctx.recorder(stats.id, start);
    loop {
        let now = Instant::now();
        if now >= end || ctx.stop.is_stopped() || ctx.ended() {
            break;
        }
        if !meter.is_open() && now >= window_start {
            meter.open(now);
            if let Some(iv) = intervals.as_mut() {
                iv.open(now);
            }
        }
        if let Some(iv) = intervals.as_mut() {
            if iv.due(now) {
                iv.roll(now, None);
            }
        }
        let mut n = pacer.due(now - start, batch as u64) as usize;
        // A full batch, or what the byte limit leaves.
        let mut want = batch;
        let limit = plan.send_limit.as_ref().filter(|_| meter.is_open());
        if let Some(l) = limit {
            match l.remaining().div_ceil(len.max(1) as u64) {
                0 => break,
                left => {
                    let left = left.min(usize::MAX as u64) as usize;
                    n = n.min(left);
                    want = want.min(left);
                }
            }
        }
        if n < want {
            // Wait for a full batch. Sending whatever is due as soon as it
            // is due degenerates, once a send takes longer than the gap
            // between datagrams (5 Gbit/s of 1400 B: 2.2 us), into sends
            // of 2-3 datagrams back to back that never sleep: 165 000
            // sends a second where 11 000 of 44 carry the same bytes.
            // One datagram per send (slow rates) keeps the shortest sleep.
            let next = start + pacer.due_after(want as u64);
            let mut wait = next.saturating_duration_since(Instant::now());
            if batch == 1 {
                wait = wait.max(MIN_SLEEP);
            }
            std::thread::sleep(wait.min(POLL_INTERVAL));
            continue;
        }
        let flags = if meter.is_open() { 0 } else { FLAG_OMIT };
        let send_ns = realtime_ns();
        for i in 0..n {
            let at = &mut buf[i * len..];
            match plan.wire {
                UdpWire::Pathprobe => {
                    UdpHeader {
                        flags,
                        test_id: plan.test_id,
                        seq: seq + i as u64,
                        send_ns,
                    }
                    .write(at);
                    // Each GSO message's first datagram says how many
                    // follow it in sequence, so that a receiver may count
                    // them without reading them (protocol::udp, FLAG_RUN).
                    if runs > 0 && i % runs == 0 {
                        udp::write_run(at, (n - i).min(runs) as u16);
                    }
                }
                // iperf3 numbers datagrams from 1 and marks no warm-up:
                // its receiver tells the omit period by its own clock.
                UdpWire::Iperf3 { counters64 } => {
                    iperf3::UdpHeader::from_ns(send_ns, seq + i as u64 + 1).write(at, counters64)
                }
            }
        }
        meter.syscall();
        let sent = match mode {
            SendMode::Gso => match udp_io::send_gso(&sock, &buf, len, n) {
                Ok(k) => {
                    gso_proven = true;
                    k
                }
                Err(e) if !gso_proven && udp_io::gso_unsupported(&e) => {
                    tracing::debug!(stream = stats.id, error = %e, "UDP GSO refused; sendmmsg");
                    udp_io::set_gso(&sock, 0);
                    mode = SendMode::Sendmmsg;
                    runs = 0;
                    batch = udp_io::burst_limit(plan.bitrate_per_stream, len, MIN_SLEEP, false);
                    0
                }
                Err(e) => {
                    if !transient(&e) {
                        tracing::debug!(stream = stats.id, error = %e, "UDP send failed");
                    }
                    0
                }
            },
            _ => match udp_io::sendmmsg(&sock, &mut buf, len, n) {
                Ok(k) => k,
                Err(e) => {
                    if !transient(&e) {
                        tracing::debug!(stream = stats.id, error = %e, "UDP send failed");
                    }
                    0
                }
            },
        };
        if sent == 0 {
            // A full buffer or an ICMP error from an earlier datagram; the
            // pacer keeps the rate when sending resumes.
            std::thread::yield_now();
            continue;
        }
        pacer.sent(sent as u64);
        if let Some(l) = limit {
            l.add(sent as u64 * len as u64);
        }
        ctx.progress.add(sent as u64 * len as u64);
        ctx.delivered(sent as u64 * len as u64);
        seq += sent as u64;
        if meter.is_open() {
            measured += sent as u64;
            if let Some(iv) = intervals.as_mut() {
                iv.add(sent as u64 * len as u64, sent as u64);
            }
        }
        last_send = Instant::now();
        if let Some(log) = log.as_mut() {
            log.record(last_send, measured * len as u64);
        }
    }
    let opened = meter.opened_at().unwrap_or(last_send);
    stats.bytes = measured * len as u64;
    if let Some(log) = log {
        log.finish(last_send, stats.bytes);
    }
    stats.seconds = last_send.saturating_duration_since(opened).as_secs_f64();
    stats.udp_sent = Some(UdpSendStats {
        packets: measured,
        mode: Some(mode),
    });
    if let Some(iv) = intervals {
        stats.intervals = iv.finish(last_send, None);
    }
    meter.finish(stats);
    record_buffers(&sock, stats);
    if plan.wire != UdpWire::Pathprobe {
        // iperf3's end is TEST_END on the control connection.
        return;
    }
    let mut fin = [0u8; HEADER_LEN];
    UdpHeader {
        flags: FLAG_FIN,
        test_id: plan.test_id,
        seq: measured,
        send_ns: realtime_ns(),
    }
    .write(&mut fin);
    if mode == SendMode::Gso {
        // A FIN is shorter than the segment size; GSO would still take it,
        // but keep it a plain datagram.
        udp_io::set_gso(&sock, 0);
    }
    for _ in 0..FIN_COPIES {
        let _ = sock.send(&fin);
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock
            | ErrorKind::TimedOut
            | ErrorKind::Interrupted
            | ErrorKind::ConnectionRefused
    ) || e.raw_os_error() == Some(libc::ENOBUFS)
}

/// The receiving loop: until a FIN arrives or the side is told to stop.
pub fn receive(sock: UdpSocket, ctx: &StreamContext, stats: &mut StreamStats) {
    let plan = &ctx.plan;
    udp_io::enable_rx_cmsgs(&sock);
    let mode = if plan.offload && udp_io::enable_gro(&sock) {
        RecvMode::Gro
    } else {
        RecvMode::Recvmmsg
    };
    let mut batch = RecvBatch::new(mode, (plan.length as usize).max(HEADER_LEN));
    if plan.wire == UdpWire::Pathprobe {
        // Runs are counted from their first header, without copying the
        // rest out of the kernel (udp_io::RecvBatch::read_runs).
        batch.read_runs(plan.length as usize, plan.test_id);
    }
    let mut coalesced = 0u64;
    let mut buffers = 0u64;
    let mut drops = 0u32;
    let Some(start) = ctx.gate.wait() else { return };
    let window_start = start + plan.omit;
    let mut meter = ThreadMeter::default();
    let mut intervals = IntervalMeter::new(ctx, stats, Mark::SequenceSpan);
    // One past the highest sequence counted, for the intervals' loss.
    let mut seq_next = 0u64;
    if plan.omit.is_zero() {
        meter.open(start);
        if let Some(iv) = intervals.as_mut() {
            iv.open(start);
        }
    }
    let mut account = UdpAccount::default();
    let mut bytes = 0u64;
    let mut last_arrival = start;
    // When the first counted datagram reached the socket, by the kernel's
    // stamp: a sender whose start came first (its gate opened before this
    // side read the start message, late on a loaded host) has datagrams
    // queued here before this side's window opened, and the window must
    // cover them, or bytes over a short window read as a rate never sent.
    // The earliest stamp of the first second's reads, not the first one's:
    // the kernel turns receive stamping on a moment after the socket asks
    // (a deferred static key, when no other socket of the host has it on),
    // and a datagram that came before is stamped when it is read, so the
    // first in the queue can carry the latest stamp of all.
    let mut first_counted: Option<Instant> = None;
    let mut sender_packets = None;
    let mut log = ctx.recorder(stats.id, start);
    // Bytes already counted toward an adaptive test's estimate.
    let mut counted = 0u64;
    let fd = sock.as_raw_fd();
    let gather = gather_time(
        plan.bitrate_per_stream,
        plan.length as usize,
        socket2::SockRef::from(&sock)
            .recv_buffer_size()
            .unwrap_or(0),
    );
    while sender_packets.is_none() {
        meter.syscall();
        let n = match batch.recv(fd) {
            Ok(n) => n,
            Err(e) if transient(&e) => {
                if ctx.stop.is_stopped() {
                    break;
                }
                if let Some(iv) = intervals.as_mut() {
                    let now = Instant::now();
                    if iv.due(now) {
                        iv.roll(now, Some(seq_next));
                    }
                }
                continue;
            }
            Err(e) => {
                tracing::debug!(stream = stats.id, error = %e, "UDP receive ended");
                break;
            }
        };
        let now = Instant::now();
        if !meter.is_open() && now >= window_start {
            meter.open(now);
        }
        if ctx.stop.is_stopped() && plan.wire != UdpWire::Pathprobe {
            // iperf3's streams end when the control connection says so.
            break;
        }
        if let Some(iv) = intervals.as_mut() {
            if iv.due(now) {
                iv.roll(now, Some(seq_next));
            }
        }
        let fallback_ns = realtime_ns();
        // Bytes of this call's datagrams for the side's progress: added
        // once per call, since an atomic add per datagram was the shared
        // cache line every datagram touched.
        let mut arrived = 0u64;
        for i in 0..n {
            let info = batch.info(i);
            if let Some(d) = info.drops {
                drops = drops.max(d);
            }
            let arrival = info.timestamp_ns.unwrap_or(fallback_ns);
            // The buffer's arrival on the monotonic clock, for the window's
            // end: a reader that gathers reads up to MAX_GATHER late. A
            // stamp over a second old is a step of the realtime clock.
            let ago = Duration::from_nanos(fallback_ns.saturating_sub(arrival));
            let arrived_at = if ago <= MAX_EARLY_START {
                now.checked_sub(ago).unwrap_or(now)
            } else {
                now
            };
            // The kernel stamps a coalesced buffer once: only its first
            // datagram has a known arrival time (docs/UDP.md).
            let mut timed = true;
            let many = info.segment.is_some_and(|s| s < batch.delivered(i));
            let counted_before = account.unique();
            for d in batch.datagrams(i, info.segment) {
                let dgram = d.bytes;
                let (seq, send_ns, omitted) = match plan.wire {
                    UdpWire::Pathprobe => {
                        let Ok(h) = UdpHeader::parse(dgram) else {
                            continue;
                        };
                        if h.test_id != plan.test_id || h.flags & FLAG_HELLO != 0 {
                            continue;
                        }
                        if h.flags & FLAG_FIN != 0 {
                            sender_packets = Some(h.seq);
                            continue;
                        }
                        // A run's datagrams follow its first in sequence.
                        (
                            h.seq.saturating_add(d.run_index),
                            h.send_ns,
                            h.flags & FLAG_OMIT != 0,
                        )
                    }
                    UdpWire::Iperf3 { counters64 } => {
                        // Shorter than a header: the connect reply, or junk.
                        if d.len < 16 {
                            continue;
                        }
                        let Some(h) = iperf3::UdpHeader::parse(dgram, counters64) else {
                            continue;
                        };
                        (h.seq, h.send_ns(), now < window_start)
                    }
                };
                arrived += d.len as u64;
                if omitted {
                    continue;
                }
                let before = account.unique();
                if timed {
                    account.record(seq, send_ns, arrival);
                    timed = false;
                } else {
                    account.record_untimed(seq);
                }
                if account.unique() > before {
                    if first_counted.is_none()
                        || now.saturating_duration_since(start) <= MAX_EARLY_START
                    {
                        first_counted =
                            Some(first_counted.map_or(arrived_at, |t| t.min(arrived_at)));
                    }
                    bytes += d.len as u64;
                    coalesced += u64::from(many);
                    last_arrival = arrived_at;
                    if let Some(iv) = intervals.as_mut() {
                        // Counted datagrams can precede this side's warm-up
                        // end (the sender's clock ran ahead): they open the
                        // window.
                        iv.open(now);
                        iv.mark_base(seq);
                        seq_next = seq_next.max(seq.saturating_add(1));
                        iv.add(d.len as u64, 1);
                    }
                }
            }
            buffers += u64::from(account.unique() > counted_before);
        }
        ctx.progress.add(arrived);
        if let Some(log) = log.as_mut() {
            log.record(last_arrival, bytes);
            ctx.delivered(bytes - counted);
            counted = bytes;
        }
        if let Some(g) = gather.filter(|_| n < batch.capacity() && sender_packets.is_none()) {
            std::thread::sleep(g);
        }
    }
    let opened = meter.opened_at().unwrap_or(window_start);
    // At most a second early: a step of the realtime clock between the
    // kernel's stamp and our read must not stretch the window.
    let opened = first_counted.map_or(opened, |t| {
        t.max(opened.checked_sub(MAX_EARLY_START).unwrap_or(opened))
            .min(opened)
    });
    stats.bytes = bytes;
    if let Some(log) = log {
        log.finish(last_arrival, bytes);
    }
    stats.seconds = last_arrival.saturating_duration_since(opened).as_secs_f64();
    let mut received = account.finish(sender_packets);
    received.mode = Some(mode);
    received.socket_drops = Some(u64::from(
        drops.max(udp_io::socket_drops(&sock).unwrap_or(0)),
    ));
    received.coalesced = (mode == RecvMode::Gro).then_some(coalesced);
    received.buffers = Some(buffers);
    stats.udp_received = Some(received);
    if let Some(iv) = intervals {
        stats.intervals = iv.finish(last_arrival, Some(seq_next));
    }
    meter.finish(stats);
    record_buffers(&sock, stats);
}

/// The prober's `count` UDP flows: sockets bound (to `bind` if given) and
/// connected to the responder, with the test's buffer size and TOS.
pub(crate) fn open_flows(
    addr: SocketAddr,
    bind: Option<IpAddr>,
    count: usize,
    buffer: usize,
    tos: Option<u8>,
) -> Result<Vec<UdpSocket>, ProbeError> {
    let unspecified = if addr.is_ipv4() {
        IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    };
    let mut socks = Vec::with_capacity(count);
    for _ in 0..count {
        let local = SocketAddr::new(bind.unwrap_or(unspecified), 0);
        let s = UdpSocket::bind(local)
            .map_err(|e| ProbeError::BadArgument(format!("cannot bind UDP to {local}: {e}")))?;
        s.connect(addr)
            .map_err(|e| crate::kinds::tcp::connect_error(addr, e))?;
        configure_socket(&s, buffer);
        if let Some(tos) = tos {
            set_tos(&s, tos).map_err(|e| ProbeError::BadArgument(format!("--tos: {e}")))?;
        }
        socks.push(s);
    }
    Ok(socks)
}

/// Sends each flow's hello datagram every 20 ms until `ready` completes (the
/// responder has seen every flow), so that a lost hello is simply sent again.
pub(crate) async fn announce_flows<F>(
    socks: &[UdpSocket],
    token: &str,
    ready: F,
) -> Result<(), ProbeError>
where
    F: std::future::Future<Output = Result<(), ProbeError>>,
{
    let hellos: Vec<Vec<u8>> = (0..socks.len())
        .map(|i| hello_datagram(token, i as u32))
        .collect();
    tokio::pin!(ready);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            r = &mut ready => return r,
            _ = tick.tick() => {
                for (s, h) in socks.iter().zip(&hellos) {
                    let _ = s.send(h);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_grow_with_the_rate_within_bounds_and_a_window_wins() {
        // Unpaced flows get the most, slow ones the least.
        assert_eq!(buffer_size(None, 0), UDP_BUFFER_MAX);
        assert_eq!(buffer_size(None, 1_000_000_000), UDP_BUFFER);
        // 5 Gbit/s for 16 ms is 10 MB.
        assert_eq!(buffer_size(None, 5_000_000_000), 10_000_000);
        // 20 Gbit/s would want 40 MB: capped.
        assert_eq!(buffer_size(None, 20_000_000_000), UDP_BUFFER_MAX);
        assert_eq!(buffer_size(None, u64::MAX), UDP_BUFFER_MAX);
        // -w is the user's word, small or large.
        assert_eq!(buffer_size(Some(65_536), 20_000_000_000), 65_536);
        assert_eq!(buffer_size(Some(u32::MAX), 0), u32::MAX as usize);
    }

    #[test]
    fn a_receiver_gathers_only_fast_paced_flows_within_its_buffer() {
        let us = Duration::from_micros;
        // Unpaced: never.
        assert_eq!(gather_time(0, 1400, 20 << 20), None);
        // 5 Gbit/s with the default buffer (10 MB asked, 20 MB reported):
        // the longest gather, 500 us, a 1/32 of the buffer's 16 ms.
        assert_eq!(gather_time(5_000_000_000, 1400, 20_000_000), Some(us(500)));
        // 100 Mbit/s: a datagram every 112 us, 4.5 in 500 us: gathers.
        assert_eq!(gather_time(100_000_000, 1400, 16 << 20), Some(us(500)));
        // 50 Mbit/s: 2.2 datagrams in 500 us: waking for each is cheap.
        assert_eq!(gather_time(50_000_000, 1400, 16 << 20), None);
        // A small -w: 64 KB of room holds 1.6 ms at 320 Mbit/s, so 1/8 of
        // it, 205 us, gathers; at 5 Gbit/s 1/8 is 13 us: none.
        assert_eq!(
            gather_time(320_000_000, 1400, 128 << 10),
            Some(us(204) + Duration::from_nanos(800))
        );
        assert_eq!(gather_time(5_000_000_000, 1400, 128 << 10), None);
        // 1/8 of 512 KB at 5 Gbit/s.
        assert_eq!(
            gather_time(5_000_000_000, 1400, 1 << 20),
            Some(Duration::from_nanos(104_857))
        );
    }
}

#[cfg(test)]
mod late_start_tests {
    use super::*;
    use crate::engine::datapath::testing::{context, plan, run_pair};

    fn ctx() -> StreamContext {
        context(plan())
    }

    /// A fast paced sender (5 Gbit/s of 1400 B) sends full batches, the
    /// rate's 100 us worth (44 datagrams) each, at the rate asked. Before
    /// it waited for a full batch, it sent whatever was due at once: as a
    /// send takes longer than the 2.24 us between datagrams, that became
    /// sends of a few datagrams back to back (20 a send here, with nobody
    /// reading; 2.7 in a 2 s probe with its receiver), at up to twice the
    /// CPU per GB. Now 44 a send.
    #[test]
    fn a_fast_paced_sender_sends_full_batches_at_the_rate() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        configure_socket(&tx, 4 << 20);
        let mut c = ctx();
        c.plan.length = 1400;
        c.plan.bitrate_per_stream = 5_000_000_000;
        c.plan.duration = Duration::from_millis(400);
        c.plan.offload = true;
        let mut stats = StreamStats::default();
        c.gate.open();
        // Nobody reads `rx`: the sender's own figures are what is tested.
        send(tx, &c, &mut stats);
        let packets = stats.udp_sent.as_ref().unwrap().packets;
        let rate = stats.bytes as f64 * 8.0 / stats.seconds;
        assert!((rate / 5e9 - 1.0).abs() < 0.05, "{rate} bit/s");
        assert!(
            stats.syscalls * 40 < packets,
            "{} sends for {packets} datagrams",
            stats.syscalls
        );
        drop(rx);
    }

    /// A paced flow fast enough for the receiver to gather (200 Mbit/s of
    /// 1000 B datagrams: 12.5 in each 500 us) is read in a few calls, not one
    /// per datagram, and its figures stay exact: every datagram counted
    /// once, none lost, and the window and rate the sender's.
    #[test]
    fn a_gathering_receiver_reads_in_batches_and_counts_exactly() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        rx.connect(tx.local_addr().unwrap()).unwrap();
        configure_socket(&rx, 4 << 20);
        configure_socket(&tx, 1 << 20);
        let fast = || {
            let mut c = ctx();
            c.plan.bitrate_per_stream = 200_000_000;
            c.plan.duration = Duration::from_millis(600);
            c
        };
        let (sent, got) = run_pair((tx, send), (rx, receive), (fast(), fast()), Duration::ZERO);
        let sent_packets = sent.udp_sent.as_ref().unwrap().packets;
        let r = got.udp_received.as_ref().unwrap();
        assert!(sent_packets > 10_000, "{sent_packets} datagrams sent");
        assert_eq!(
            (r.packets, r.lost, r.duplicates, r.out_of_order),
            (sent_packets, 0, 0, 0)
        );
        assert_eq!(got.bytes, sent.bytes);
        // One read per datagram without gathering; 12 gather per sleep.
        assert!(
            got.syscalls * 4 < sent_packets,
            "{} reads for {sent_packets} datagrams",
            got.syscalls
        );
        assert!(
            (got.seconds - sent.seconds).abs() < 0.03,
            "window {} s, the sender's {} s",
            got.seconds,
            sent.seconds
        );
        let rate = got.bytes as f64 * 8.0 / got.seconds;
        assert!((rate / 2e8 - 1.0).abs() < 0.05, "{rate} bit/s");
    }

    /// The receiver read the start 400 ms after the sender began (a loaded
    /// host's control task): the datagrams queued meanwhile are counted,
    /// and so the window covers them. Before, 1.5 s of 8 Mbit/s read as
    /// about 1.1 s at 11 Mbit/s (a CI run once read a 5 s probe as 4.79 s).
    #[test]
    fn a_receiver_that_starts_late_still_measures_the_senders_rate() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        rx.connect(tx.local_addr().unwrap()).unwrap();
        configure_socket(&rx, 4 << 20);
        configure_socket(&tx, 1 << 20);
        let (sent, got) = run_pair(
            (tx, send),
            (rx, receive),
            (ctx(), ctx()),
            Duration::from_millis(400),
        );
        let rate = got.bytes as f64 * 8.0 / got.seconds;
        assert!(got.bytes > 0 && got.bytes as f64 >= 0.95 * sent.bytes as f64);
        assert!(
            got.seconds > 1.4 && got.seconds < 1.7,
            "window {} s for a 1.5 s send",
            got.seconds
        );
        assert!(
            (rate / 8e6 - 1.0).abs() < 0.05,
            "{rate} bit/s for an 8 Mbit/s sender"
        );
    }
}
