//! UDP socket I/O with the kernel's offloads, for the loops in `udp.rs`.
//!
//! Send: with `UDP_SEGMENT` (GSO) one message carries up to [`MAX_SEGMENTS`]
//! datagrams of the same length laid end to end, each with its own header;
//! the kernel (or the NIC) cuts them apart. What is due beyond one message
//! goes as up to [`GSO_MESSAGES`] such messages in one `sendmmsg`
//! ([`send_gso`]), so a fast sender makes one call where it made several.
//! Without GSO, `sendmmsg` hands over the batch as separate datagrams.
//!
//! Receive: with `UDP_GRO` the kernel may deliver several datagrams of one
//! flow as one buffer, with their segment size in a control message;
//! [`segments`] cuts it back into datagrams. Without it, `recvmmsg` reads
//! up to [`BATCH`] datagrams per call. Either way `SO_RXQ_OVFL` reports the
//! socket's drop count with every buffer, so datagrams the socket dropped
//! for lack of room are counted as such.
//!
//! Which mode is used is decided at socket set-up (the socket option is
//! accepted or not) and, for GSO, by the first send: a route whose device
//! cannot checksum GSO packets fails it, and the sender falls back.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use crate::protocol::udp::{run_count, UdpHeader, FLAG_FIN, FLAG_HELLO, RUN_LEN};

/// Datagrams per syscall at most, in either mode. It is also below every
/// kernel's `UDP_MAX_SEGMENTS` (64 before Linux 6.9, 128 since).
pub const BATCH: usize = 64;
/// Largest GSO send: the payload of one IPv6 packet, less its headers.
pub const GSO_MAX_BYTES: usize = 65_000;
/// Segments in one GSO message at most.
pub const MAX_SEGMENTS: usize = BATCH;
/// GSO messages per `sendmmsg` at most: an unpaced sender of 1400 B
/// datagrams hands over 8 × 64 KB per call instead of making 8 calls.
/// Each call's syscall entry, socket lock and route lookup are paid once
/// per message either way; what this saves is the calls.
pub const GSO_MESSAGES: usize = 8;
/// Buffer for one GRO read: the largest coalesced packet.
const GRO_BUFFER: usize = 65_536;
/// GRO buffers per recvmmsg call: 8 of 64 KiB each.
const GRO_BATCH: usize = 8;
/// Room for the timestamp, GRO and drop-count control messages.
const CONTROL_LEN: usize = 128;

pub use crate::protocol::model::{UdpReceiveMode as RecvMode, UdpSendMode as SendMode};

fn set_int(sock: &UdpSocket, level: libc::c_int, opt: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: an int option on an open socket.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Sets `UDP_SEGMENT` to `segment` bytes (0 turns GSO off); whether the
/// kernel took it.
pub fn set_gso(sock: &UdpSocket, segment: u32) -> bool {
    set_int(
        sock,
        libc::SOL_UDP,
        libc::UDP_SEGMENT,
        segment.min(i32::MAX as u32) as libc::c_int,
    )
}

/// Turns `UDP_GRO` on; whether the kernel took it.
pub fn enable_gro(sock: &UdpSocket) -> bool {
    set_int(sock, libc::SOL_UDP, libc::UDP_GRO, 1)
}

/// Asks for the kernel's receive timestamp and drop count with every read.
pub fn enable_rx_cmsgs(sock: &UdpSocket) {
    set_int(sock, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
    set_int(sock, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1);
}

/// Datagrams of `len` bytes in one GSO message at most: [`MAX_SEGMENTS`],
/// and [`GSO_MAX_BYTES`] in all.
pub fn gso_segments(len: usize) -> usize {
    MAX_SEGMENTS.min(GSO_MAX_BYTES / len.max(1)).max(1)
}

/// Datagrams per call for a sender at `bits_per_second` (0: unpaced) of
/// `len`-byte datagrams, in either mode: what the rate makes due in
/// `quantum` (the pacer's shortest sleep), at least 1, at most [`BATCH`]
/// or, with GSO, [`GSO_MESSAGES`] messages of [`gso_segments`]. A sender
/// woken late catches up in calls of this size, so no burst handed to the
/// kernel at once is longer than the rate's `quantum` worth.
pub fn burst_limit(
    bits_per_second: u64,
    len: usize,
    quantum: std::time::Duration,
    gso: bool,
) -> usize {
    let cap = if gso {
        gso_segments(len) * GSO_MESSAGES
    } else {
        BATCH
    };
    if bits_per_second == 0 {
        return cap;
    }
    let per_quantum = bits_per_second as f64 * quantum.as_secs_f64() / (len.max(1) as f64 * 8.0);
    (per_quantum.floor() as usize).clamp(1, cap)
}

/// Whether a failed GSO send means this path cannot take GSO at all (so
/// the sender should fall back), rather than a full buffer or an ICMP error.
pub fn gso_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::EMSGSIZE)
    )
}

/// Sends `n` datagrams of `len` bytes from `buf` on a socket with
/// `UDP_SEGMENT` set to `len`: one `send` when they fit one GSO message,
/// else one `sendmmsg` of messages of [`gso_segments`] datagrams (the last
/// may hold fewer), at most [`GSO_MESSAGES`] of them. Returns how many
/// datagrams the kernel took: whole messages, so a partial call ends on
/// a message boundary.
pub fn send_gso(sock: &UdpSocket, buf: &[u8], len: usize, n: usize) -> std::io::Result<usize> {
    let per = gso_segments(len);
    let n = n.min(per * GSO_MESSAGES).min(buf.len() / len.max(1));
    if n <= per {
        return sock.send(&buf[..n * len]).map(|_| n);
    }
    let mut iov: [libc::iovec; GSO_MESSAGES] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; GSO_MESSAGES];
    // SAFETY: mmsghdr is plain data; all-zero is a valid value.
    let mut hdrs: [libc::mmsghdr; GSO_MESSAGES] = unsafe { std::mem::zeroed() };
    let messages = n.div_ceil(per);
    for (i, chunk) in buf[..n * len].chunks(per * len).enumerate() {
        iov[i] = libc::iovec {
            // The kernel only reads from a send's buffers.
            iov_base: chunk.as_ptr().cast_mut().cast(),
            iov_len: chunk.len(),
        };
        hdrs[i].msg_hdr.msg_iov = &mut iov[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: the headers point into `iov` and `buf`, alive for the call.
    let r = unsafe { libc::sendmmsg(sock.as_raw_fd(), hdrs.as_mut_ptr(), messages as _, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((r as usize * per).min(n))
}

/// Sends `n` datagrams of `len` bytes from `buf` with one sendmmsg; how
/// many the kernel took.
pub fn sendmmsg(sock: &UdpSocket, buf: &mut [u8], len: usize, n: usize) -> std::io::Result<usize> {
    let n = n.min(BATCH).min(buf.len() / len.max(1));
    let mut iov: [libc::iovec; BATCH] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; BATCH];
    // SAFETY: mmsghdr is plain data; all-zero is a valid value.
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        iov[i] = libc::iovec {
            iov_base: buf[i * len..].as_mut_ptr().cast(),
            iov_len: len,
        };
        hdrs[i].msg_hdr.msg_iov = &mut iov[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: the headers point into `iov` and `buf`, alive for the call.
    let r = unsafe { libc::sendmmsg(sock.as_raw_fd(), hdrs.as_mut_ptr(), n as _, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r as usize)
}

/// Offsets and lengths of the datagrams in a buffer of `len` bytes read
/// with GRO segment size `segment` (0 or absent: one datagram). All but
/// the last are `segment` long; the last may be shorter.
pub fn segments(len: usize, segment: usize) -> impl Iterator<Item = (usize, usize)> {
    let step = if segment == 0 || segment >= len {
        len.max(1)
    } else {
        segment
    };
    (0..len)
        .step_by(step)
        .map(move |off| (off, step.min(len - off)))
}

/// What the kernel said about one buffer read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferInfo {
    /// Receive timestamp (SO_TIMESTAMPNS), ns of the realtime clock.
    pub timestamp_ns: Option<u64>,
    /// GRO segment size, when the buffer holds coalesced datagrams.
    pub segment: Option<usize>,
    /// The socket's drop count when this buffer was queued (SO_RXQ_OVFL);
    /// the kernel leaves the message out while the count is 0.
    pub drops: Option<u32>,
}

/// One datagram of a read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Its bytes; for a datagram of a run, the run's first datagram's
    /// first [`RUN_LEN`] bytes.
    pub bytes: &'a [u8],
    /// Its length.
    pub len: usize,
    /// Its place in a run (0 for the first, and outside runs): its
    /// sequence number is the first's plus this.
    pub run_index: u64,
}

/// Buffers for one recvmmsg call: the messages and their control data.
pub struct RecvBatch {
    data: Vec<u8>,
    slot: usize,
    count: usize,
    control: Vec<u8>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// Runs' reading, when on: see [`RecvBatch::read_runs`].
    runs: Option<Runs>,
    /// Per buffer of the last read: the length of the run it was (0: a
    /// buffer read whole).
    run_of: Vec<u64>,
    pub mode: RecvMode,
}

/// What [`RecvBatch::read_runs`] needs to trust a run, and how it went.
#[derive(Debug, Clone, Copy)]
struct Runs {
    len: usize,
    test_id: u32,
    /// Buffers counted from their runs' first headers.
    hits: u64,
    /// Peeks that found no run, while no run had been found: a sender
    /// that marks no runs (an older pathprobe) stops the peeking.
    misses: u32,
}

/// Peeks without a run, before the first one, after which a receiver
/// stops peeking.
const RUN_MISSES: u32 = 64;

impl RecvBatch {
    /// Buffers for `mode`: 8 of 64 KiB for GRO, 64 of `len` bytes else.
    pub fn new(mode: RecvMode, len: usize) -> Box<RecvBatch> {
        let (slot, count) = match mode {
            RecvMode::Gro => (GRO_BUFFER, GRO_BATCH),
            RecvMode::Recvmmsg | RecvMode::Other => (len.max(1), BATCH),
        };
        let mut b = Box::new(RecvBatch {
            data: vec![0u8; slot * count],
            slot,
            count,
            control: vec![0u8; CONTROL_LEN * count],
            iov: Vec::with_capacity(count),
            // SAFETY: mmsghdr is plain data; all-zero is a valid value.
            hdrs: (0..count).map(|_| unsafe { std::mem::zeroed() }).collect(),
            runs: None,
            run_of: vec![0; count],
            mode,
        });
        for i in 0..count {
            let base = b.data[i * slot..].as_mut_ptr();
            b.iov.push(libc::iovec {
                iov_base: base.cast(),
                iov_len: slot,
            });
        }
        b
    }

    /// Buffers one [`RecvBatch::recv`] reads at most.
    pub fn capacity(&self) -> usize {
        self.count
    }

    /// Reads runs (see [`crate::protocol::udp::FLAG_RUN`]) of test
    /// `test_id`'s `len`-byte datagrams without copying them: each buffer
    /// is first peeked at for its first [`RUN_LEN`] bytes, and one that is
    /// a whole run (the flag, this test, a length that is the run's count
    /// times `len`, cut at `len`) is dropped in the kernel (`MSG_TRUNC`)
    /// and counted from that header; anything else is read whole, as
    /// before. Copying coalesced buffers that nobody reads past the
    /// headers out of the kernel was three quarters of an unpaced
    /// receiver's CPU (docs/PERFORMANCE.md); two calls that copy 26 bytes
    /// cost a fraction of one 64 KB copy. Only with GRO.
    pub fn read_runs(&mut self, len: usize, test_id: u32) {
        if self.mode == RecvMode::Gro && len >= RUN_LEN {
            self.runs = Some(Runs {
                len,
                test_id,
                hits: 0,
                misses: 0,
            });
        }
    }

    /// Buffers counted from their runs' first headers so far.
    pub fn runs_read(&self) -> u64 {
        self.runs.map_or(0, |r| r.hits)
    }

    /// The run a peeked buffer of `total` bytes, cut at `segment`, whose
    /// first bytes are `head`, is: its count, if it is one to trust.
    fn run_in(r: &Runs, head: &[u8], total: usize, segment: Option<usize>) -> Option<u64> {
        let h = UdpHeader::parse(head).ok()?;
        if h.test_id != r.test_id || h.flags & (FLAG_HELLO | FLAG_FIN) != 0 {
            return None;
        }
        let k = usize::from(run_count(head)?);
        let cut = segment == Some(r.len) || (k == 1 && segment.is_none());
        (k >= 1 && cut && k.checked_mul(r.len) == Some(total)).then_some(k as u64)
    }

    /// Peeks at and drops whole runs, up to a batch, waiting for the first
    /// only. `Ok(0)` when the first buffer is no run: the caller reads it
    /// whole.
    fn recv_runs(&mut self, fd: libc::c_int, mut r: Runs) -> std::io::Result<usize> {
        let mut got = 0;
        while got < self.count {
            let base = got * self.slot;
            let mut iov = libc::iovec {
                iov_base: self.data[base..].as_mut_ptr().cast(),
                iov_len: RUN_LEN,
            };
            let h = &mut self.hdrs[got];
            h.msg_hdr.msg_iov = &mut iov;
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = self.control[got * CONTROL_LEN..].as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = CONTROL_LEN as _;
            h.msg_hdr.msg_flags = 0;
            let wait = if got == 0 { 0 } else { libc::MSG_DONTWAIT };
            // SAFETY: the header points at `iov` and into buffers owned by
            // self, all alive for the call; the kernel writes at most
            // RUN_LEN bytes and CONTROL_LEN of control data.
            let total = unsafe {
                libc::recvmsg(fd, &mut h.msg_hdr, libc::MSG_PEEK | libc::MSG_TRUNC | wait)
            };
            h.msg_hdr.msg_iov = std::ptr::null_mut();
            h.msg_hdr.msg_iovlen = 0;
            if total < 0 {
                let e = std::io::Error::last_os_error();
                if got == 0 {
                    self.runs = Some(r);
                    return Err(e);
                }
                break;
            }
            let total = total as usize;
            let head = &self.data[base..base + total.min(RUN_LEN)];
            let segment = self.info(got).segment;
            let Some(k) = Self::run_in(&r, head, total, segment) else {
                r.misses = r.misses.saturating_add(u32::from(r.hits == 0));
                break;
            };
            // SAFETY: with MSG_TRUNC and no buffer, the kernel drops the
            // datagram it just let us peek at and writes nothing.
            let dropped = unsafe {
                libc::recv(
                    fd,
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_TRUNC | libc::MSG_DONTWAIT,
                )
            };
            if dropped < 0 {
                break;
            }
            self.hdrs[got].msg_len = total as libc::c_uint;
            // The reader is the socket's only one, so what was dropped is
            // what was peeked at; were it not, nothing of it is counted.
            self.run_of[got] = if dropped as usize == total {
                k
            } else {
                u64::MAX
            };
            r.hits += 1;
            got += 1;
        }
        if r.hits == 0 && r.misses >= RUN_MISSES {
            self.runs = None;
        } else {
            self.runs = Some(r);
        }
        Ok(got)
    }

    /// Receives up to a batch of buffers, waiting for the first one only.
    pub fn recv(&mut self, fd: libc::c_int) -> std::io::Result<usize> {
        self.run_of.iter_mut().for_each(|k| *k = 0);
        if let Some(r) = self.runs {
            match self.recv_runs(fd, r)? {
                0 => {}
                n => return Ok(n),
            }
        }
        for i in 0..self.count {
            let h = &mut self.hdrs[i];
            h.msg_hdr.msg_iov = &mut self.iov[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = self.control[i * CONTROL_LEN..].as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = CONTROL_LEN as _;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: every header points into buffers owned by self, which
        // outlive the call.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                self.count as _,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// The bytes of buffer `i` (truncated to the slot if the datagram was
    /// longer: only a non-GRO read of an oversized datagram is; a run's
    /// first [`RUN_LEN`] bytes).
    pub fn buffer(&self, i: usize) -> &[u8] {
        let cap = if self.run_of[i] > 0 {
            RUN_LEN
        } else {
            self.slot
        };
        let n = (self.hdrs[i].msg_len as usize).min(cap);
        &self.data[i * self.slot..i * self.slot + n]
    }

    /// Bytes the kernel delivered in buffer `i`: a run's whole length,
    /// though only its head was read.
    pub fn delivered(&self, i: usize) -> usize {
        self.hdrs[i].msg_len as usize
    }

    /// The datagrams of buffer `i`, cut at its GRO segment size `segment`
    /// (see [`segments`]); a run's, from its first header.
    pub fn datagrams(
        &self,
        i: usize,
        segment: Option<usize>,
    ) -> impl Iterator<Item = Datagram<'_>> {
        let buffer = self.buffer(i);
        let (run, len) = match (self.run_of[i], self.runs) {
            (0, _) | (_, None) => (0, 0),
            (u64::MAX, _) => (0, 0),
            (k, Some(r)) => (k, r.len),
        };
        let whole = (run == 0 && self.run_of[i] != u64::MAX).then_some(buffer);
        let cut =
            segments(whole.map_or(0, <[u8]>::len), segment.unwrap_or(0)).map(move |(off, n)| {
                Datagram {
                    bytes: &buffer[off..off + n],
                    len: n,
                    run_index: 0,
                }
            });
        let runs = (0..run).map(move |j| Datagram {
            bytes: buffer,
            len,
            run_index: j,
        });
        cut.chain(runs)
    }

    /// The control messages of buffer `i`.
    pub fn info(&self, i: usize) -> BufferInfo {
        let hdr = &self.hdrs[i].msg_hdr;
        let mut info = BufferInfo::default();
        // SAFETY: the CMSG macros walk the control buffer the kernel filled,
        // bounded by msg_controllen; each payload is read unaligned at the
        // size its type has.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(hdr);
            while !c.is_null() {
                let level = (*c).cmsg_level;
                let kind = (*c).cmsg_type;
                let data = libc::CMSG_DATA(c);
                let payload = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                if level == libc::SOL_SOCKET
                    && kind == libc::SCM_TIMESTAMPNS
                    && payload >= std::mem::size_of::<libc::timespec>()
                {
                    let ts: libc::timespec = std::ptr::read_unaligned(data.cast());
                    info.timestamp_ns =
                        Some((ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64);
                } else if level == libc::SOL_SOCKET && kind == libc::SO_RXQ_OVFL && payload >= 4 {
                    info.drops = Some(std::ptr::read_unaligned(data.cast::<u32>()));
                } else if level == libc::SOL_UDP && kind == libc::UDP_GRO && payload >= 4 {
                    let seg: libc::c_int = std::ptr::read_unaligned(data.cast());
                    info.segment = usize::try_from(seg).ok().filter(|&s| s > 0);
                }
                c = libc::CMSG_NXTHDR(hdr, c);
            }
        }
        info
    }
}

/// The socket's drop count now (SO_MEMINFO's SK_MEMINFO_DROPS), for the
/// drops after the last buffer read, which no control message reports.
pub fn socket_drops(sock: &UdpSocket) -> Option<u32> {
    // SK_MEMINFO_VARS is 9 u32s in every kernel since 4.x; drops is the last.
    const SK_MEMINFO_DROPS: usize = 8;
    let mut info = [0u32; 9];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (r == 0 && len as usize > SK_MEMINFO_DROPS * 4).then_some(info[SK_MEMINFO_DROPS])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn segments_cut_a_coalesced_buffer() {
        let v: Vec<_> = segments(4200, 1400).collect();
        assert_eq!(v, vec![(0, 1400), (1400, 1400), (2800, 1400)]);
        // A shorter last segment, as GRO allows.
        let v: Vec<_> = segments(3000, 1400).collect();
        assert_eq!(v, vec![(0, 1400), (1400, 1400), (2800, 200)]);
        // No segment size, or one as long as the buffer: one datagram.
        assert_eq!(segments(1400, 0).collect::<Vec<_>>(), vec![(0, 1400)]);
        assert_eq!(segments(1000, 1400).collect::<Vec<_>>(), vec![(0, 1000)]);
        assert_eq!(segments(0, 1400).count(), 0);
        // A hostile segment size of 1 still stays within the buffer.
        assert_eq!(segments(10, 1).count(), 10);
    }

    #[test]
    fn burst_is_what_the_rate_makes_due_in_a_quantum() {
        let q = Duration::from_micros(100);
        // 1 Gbit/s of 1400 B: 8.9 datagrams per 100 us.
        assert_eq!(burst_limit(1_000_000_000, 1400, q, true), 8);
        // 100 Mbit/s: less than one, so one datagram per send.
        assert_eq!(burst_limit(100_000_000, 1400, q, true), 1);
        // 20 Gbit/s: 178 due, in 4 GSO messages of 46 (64 KB) or fewer;
        // without GSO, one sendmmsg's 64.
        assert_eq!(burst_limit(20_000_000_000, 1400, q, true), 178);
        assert_eq!(burst_limit(20_000_000_000, 1400, q, false), 64);
        // Unpaced: the largest call, 8 messages of 64 KB.
        assert_eq!(burst_limit(0, 1400, q, true), 8 * 46);
        assert_eq!(burst_limit(0, 100, q, true), 8 * 64);
        assert_eq!(burst_limit(0, 65_000, q, true), 8);
        assert_eq!(burst_limit(0, 1400, q, false), 64);
    }

    /// 150 datagrams of 1000 B go as 3 GSO messages (64, 64, 22) in one
    /// call; every one arrives once, in order, and the count returned is
    /// datagrams, not messages.
    #[test]
    fn send_gso_spreads_a_large_batch_over_messages() {
        let (tx, rx) = loopback_pair();
        configure_rcvbuf(&rx);
        assert!(set_gso(&tx, 1000), "this kernel has UDP_SEGMENT");
        assert_eq!(gso_segments(1000), 64);
        let mut buf = vec![0u8; 1000 * 200];
        for (i, chunk) in buf.chunks_mut(1000).enumerate() {
            chunk[..4].copy_from_slice(&(i as u32).to_be_bytes());
        }
        assert_eq!(send_gso(&tx, &buf, 1000, 150).unwrap(), 150);
        assert_eq!(send_gso(&tx, &buf[150_000..], 1000, 10).unwrap(), 10);
        let mut batch = RecvBatch::new(RecvMode::Recvmmsg, 1000);
        let mut seen = Vec::new();
        while seen.len() < 160 {
            let n = batch.recv(rx.as_raw_fd()).unwrap();
            for i in 0..n {
                let b = batch.buffer(i);
                assert_eq!(b.len(), 1000);
                seen.push(u32::from_be_bytes(b[..4].try_into().unwrap()));
            }
        }
        assert_eq!(seen, (0..160).collect::<Vec<u32>>());
        assert_eq!(socket_drops(&rx), Some(0));
    }

    /// Every datagram of `buf` (`len` bytes each) as pathprobe's header
    /// numbers it, from `first` on, for test 9.
    fn number(buf: &mut [u8], len: usize, first: u64, test_id: u32) {
        for (i, d) in buf.chunks_mut(len).enumerate() {
            UdpHeader {
                flags: 0,
                test_id,
                seq: first + i as u64,
                send_ns: 1,
            }
            .write(d);
        }
    }

    /// Reads until `want` datagrams came; their sequence numbers and how
    /// many buffers were runs.
    fn read_all(rx: &UdpSocket, batch: &mut RecvBatch, want: usize) -> (Vec<u64>, usize) {
        let (mut seqs, mut runs) = (Vec::new(), 0);
        while seqs.len() < want {
            let n = batch.recv(rx.as_raw_fd()).unwrap();
            for i in 0..n {
                let info = batch.info(i);
                runs +=
                    usize::from(batch.buffer(i).len() == RUN_LEN && batch.delivered(i) > RUN_LEN);
                for d in batch.datagrams(i, info.segment) {
                    let h = UdpHeader::parse(d.bytes).unwrap();
                    assert_eq!(d.len, 1400);
                    seqs.push(h.seq + d.run_index);
                }
            }
        }
        (seqs, runs)
    }

    /// A GSO message whose first datagram marks a run of all of it is
    /// counted from that header, without the rest being copied out; a run
    /// that claims more or fewer than came, another test's, and unmarked
    /// datagrams are read whole, so every datagram counts once, as its
    /// own header numbers it.
    #[test]
    fn runs_are_counted_from_their_first_header_and_anything_else_is_read_whole() {
        use crate::protocol::udp::write_run;
        let (tx, rx) = loopback_pair();
        configure_rcvbuf(&rx);
        enable_rx_cmsgs(&rx);
        assert!(
            enable_gro(&rx) && set_gso(&tx, 1400),
            "this kernel has GSO and GRO"
        );
        let mut batch = RecvBatch::new(RecvMode::Gro, 1400);
        batch.read_runs(1400, 9);
        let mut buf = vec![0u8; 1400 * 40];
        // A true run of 40: counted from its head.
        number(&mut buf, 1400, 0, 9);
        write_run(&mut buf, 40);
        tx.send(&buf).unwrap();
        let (seqs, runs) = read_all(&rx, &mut batch, 40);
        assert_eq!(seqs, (0..40).collect::<Vec<u64>>());
        assert_eq!((runs, batch.runs_read()), (1, 1));
        // A run that claims 46 (more than came) and one that claims 3
        // (fewer): read whole, each datagram by its own header, however
        // the rest are numbered.
        for (claim, first) in [(46u16, 40u64), (3, 80)] {
            number(&mut buf, 1400, first, 9);
            // Out of order inside the message: a run would hide it.
            buf[1400 * 5 + 8..1400 * 5 + 16].copy_from_slice(&(first + 1000).to_be_bytes());
            write_run(&mut buf, claim);
            tx.send(&buf).unwrap();
            let (seqs, runs) = read_all(&rx, &mut batch, 40);
            let mut want: Vec<u64> = (first..first + 40).collect();
            want[5] = first + 1000;
            assert_eq!((seqs, runs), (want, 0), "a run claiming {claim}");
        }
        // Another test's run, and an unmarked message: read whole.
        for test_id in [8, 9] {
            number(&mut buf, 1400, 200, test_id);
            if test_id == 8 {
                write_run(&mut buf, 40);
            }
            tx.send(&buf).unwrap();
            let (seqs, runs) = read_all(&rx, &mut batch, 40);
            assert_eq!((seqs.len(), runs), (40, 0));
        }
        // A run of one datagram, sent alone (no GRO segment size).
        set_gso(&tx, 0);
        number(&mut buf[..1400], 1400, 300, 9);
        write_run(&mut buf, 1);
        tx.send(&buf[..1400]).unwrap();
        assert_eq!(read_all(&rx, &mut batch, 1).0, vec![300]);
        assert_eq!(batch.runs_read(), 2);
        assert_eq!(socket_drops(&rx), Some(0));
    }

    /// A sender connected to a receiver on loopback; reads give up after
    /// 2 s, so that a test that lost datagrams fails instead of hanging.
    fn loopback_pair() -> (UdpSocket, UdpSocket) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        (tx, rx)
    }

    fn configure_rcvbuf(sock: &UdpSocket) {
        set_int(sock, libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
    }

    #[test]
    fn gso_and_gro_on_loopback_carry_every_datagram() {
        let (tx, rx) = loopback_pair();
        enable_rx_cmsgs(&rx);
        let gro = enable_gro(&rx);
        let gso = set_gso(&tx, 100);
        let mut buf = vec![0u8; 100 * 10];
        for (i, chunk) in buf.chunks_mut(100).enumerate() {
            chunk[0] = i as u8;
        }
        if gso {
            assert_eq!(tx.send(&buf).unwrap(), 1000);
            set_gso(&tx, 0);
        } else {
            assert_eq!(sendmmsg(&tx, &mut buf, 100, 10).unwrap(), 10);
        }
        let mode = if gro {
            RecvMode::Gro
        } else {
            RecvMode::Recvmmsg
        };
        let mut batch = RecvBatch::new(mode, 100);
        let mut seen = Vec::new();
        let mut buffers = 0;
        while seen.len() < 10 {
            let n = batch.recv(rx.as_raw_fd()).unwrap();
            for i in 0..n {
                buffers += 1;
                let info = batch.info(i);
                assert!(info.timestamp_ns.is_some());
                // The kernel sends the drop count only once it is not 0.
                assert_eq!(info.drops, None);
                let b = batch.buffer(i);
                for (off, len) in segments(b.len(), info.segment.unwrap_or(0)) {
                    assert_eq!(len, 100);
                    seen.push(b[off]);
                }
            }
        }
        assert_eq!(seen, (0..10).collect::<Vec<u8>>());
        if gso && gro {
            // Loopback keeps a GSO send whole up to a GRO socket.
            assert_eq!(buffers, 1);
        }
        assert_eq!(socket_drops(&rx), Some(0));
    }
}
