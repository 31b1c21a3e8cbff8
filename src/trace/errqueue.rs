//! The socket side of a trace: one probe packet with a chosen TTL on the
//! probe's own flow, and the ICMP error it earns read back from the
//! socket's error queue (`IP_RECVERR`, as tracepath does). No raw sockets,
//! so no privilege: the kernel matches the ICMP error to the socket whose
//! flow the quoted header names, which is also what makes the trace follow
//! the probe's 5-tuple through ECMP.

use std::io;
use std::mem::{size_of, zeroed, MaybeUninit};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::proto::Proto;

/// What one probe packet earned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Answer {
    /// A router's time-exceeded, from `from`, after `rtt`.
    Hop { from: IpAddr, rtt: Duration },
    /// The destination answered (a TCP SYN-ACK or RST, or an ICMP
    /// unreachable): the trace is over at this TTL.
    Reached { from: IpAddr, rtt: Duration },
    /// Another ICMP error (e.g. network unreachable from a router): the
    /// flow cannot go further.
    Unreachable { from: IpAddr, rtt: Duration },
    /// Nothing within the probe's timeout. Not loss: routers rate-limit
    /// and deprioritise the ICMP they generate.
    Silent,
}

fn new_socket(proto: Proto, dst: SocketAddr) -> io::Result<Socket> {
    let (ty, p) = match proto {
        Proto::Udp => (Type::DGRAM, Protocol::UDP),
        Proto::Tcp => (Type::STREAM, Protocol::TCP),
    };
    let sock = Socket::new(Domain::for_address(dst), ty, Some(p))?;
    sock.set_nonblocking(true)?;
    // The probe's socket has just closed; its port may still be held by
    // a lingering socket of ours.
    sock.set_reuse_address(true)?;
    let fd = sock.as_raw_fd();
    let on: libc::c_int = 1;
    if dst.is_ipv4() {
        setsockopt(fd, libc::SOL_IP, libc::IP_RECVERR, on)?;
    } else {
        setsockopt(fd, libc::SOL_IPV6, libc::IPV6_RECVERR, on)?;
    }
    Ok(sock)
}

fn setsockopt(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: `v` lives across the call and its size is passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_ttl(sock: &Socket, dst: SocketAddr, ttl: u8) -> io::Result<()> {
    if dst.is_ipv4() {
        sock.set_ttl_v4(u32::from(ttl))
    } else {
        sock.set_unicast_hops_v6(u32::from(ttl))
    }
}

/// A UDP socket on the probe's flow, reused for every TTL of one trace
/// (UDP has no state to tear down between probes). Returns the socket and
/// whether it has the requested source port.
pub(super) fn udp_flow(src: Option<SocketAddr>, dst: SocketAddr) -> io::Result<(Socket, bool)> {
    let sock = new_socket(Proto::Udp, dst)?;
    let matched = bind_flow_port(&sock, src)?;
    sock.connect(&dst.into())?;
    Ok((sock, matched))
}

/// Binds `src` when given. A source port that is busy falls back to the
/// address alone (an ephemeral port): the trace then runs, but is not
/// bound to the probe's flow, which the caller reports.
fn bind_flow_port(sock: &Socket, src: Option<SocketAddr>) -> io::Result<bool> {
    let Some(src) = src else {
        return Ok(true);
    };
    match sock.bind(&src.into()) {
        Ok(()) => Ok(true),
        Err(e) if src.port() != 0 && e.raw_os_error() == Some(libc::EADDRINUSE) => {
            let any = SocketAddr::new(src.ip(), 0);
            sock.bind(&any.into())?;
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// One UDP probe at `ttl` on `sock` (from [`udp_flow`]).
pub(super) fn udp_probe(
    sock: &Socket,
    dst: SocketAddr,
    ttl: u8,
    seq: u32,
    timeout: Duration,
) -> io::Result<Answer> {
    drain(sock.as_raw_fd());
    set_ttl(sock, dst, ttl)?;
    // A payload that no responder reads as a hello: it is counted and
    // dropped as a stray datagram if it reaches one.
    let mut payload = [0u8; 16];
    payload[..8].copy_from_slice(b"pptrace\0");
    payload[8..12].copy_from_slice(&seq.to_be_bytes());
    payload[12] = ttl;
    let sent = Instant::now();
    if let Err(e) = sock.send(&payload) {
        // An error an earlier ICMP left pending on the socket: clear it
        // and send again, once.
        let _ = sock.take_error();
        drain(sock.as_raw_fd());
        if sock.send(&payload).is_err() {
            return Err(e);
        }
    }
    let deadline = sent + timeout;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(Answer::Silent);
        }
        if !wait(sock.as_raw_fd(), libc::POLLERR, deadline - now)? {
            return Ok(Answer::Silent);
        }
        let rtt = sent.elapsed();
        if let Some(a) = read_error(sock.as_raw_fd(), dst, rtt)? {
            let _ = sock.take_error();
            return Ok(a);
        }
        let _ = sock.take_error();
    }
}

/// One TCP probe at `ttl`: a SYN from a fresh socket on the flow. A
/// router's time-exceeded lands in the error queue; the destination
/// answers with a SYN-ACK (connected) or a RST (refused). The socket is
/// closed with a RST, so the destination keeps no connection and we keep
/// no TIME_WAIT.
pub(super) fn tcp_probe(
    src: Option<SocketAddr>,
    dst: SocketAddr,
    ttl: u8,
    timeout: Duration,
) -> io::Result<(Answer, bool, Option<SocketAddr>)> {
    let sock = new_socket(Proto::Tcp, dst)?;
    let matched = bind_flow_port(&sock, src)?;
    let local = local_of(&sock);
    set_ttl(&sock, dst, ttl)?;
    let _ = sock.set_linger(Some(Duration::ZERO));
    let sent = Instant::now();
    match sock.connect(&dst.into()) {
        Ok(()) => {
            let a = Answer::Reached {
                from: dst.ip(),
                rtt: sent.elapsed(),
            };
            return Ok((a, matched, local));
        }
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) && src.is_some() => {
            // The probe's connection still holds this 4-tuple (TIME_WAIT):
            // trace from an ephemeral port instead, and say so.
            let unbound = src.map(|s| SocketAddr::new(s.ip(), 0));
            let (a, _, local) = tcp_probe(unbound, dst, ttl, timeout)?;
            return Ok((a, false, local));
        }
        Err(e) => return Err(e),
    }
    // After connect: an ephemeral port is only chosen by connect.
    let local = local_of(&sock).or(local);
    let fd = sock.as_raw_fd();
    // One wait: the socket becomes writable (connected), or errs (an ICMP
    // or a RST), or the timeout passes.
    if !wait(fd, libc::POLLOUT | libc::POLLERR, timeout)? {
        return Ok((Answer::Silent, matched, local));
    }
    let rtt = sent.elapsed();
    if let Some(a) = read_error(fd, dst, rtt)? {
        return Ok((a, matched, local));
    }
    let answer = match sock.take_error()? {
        None => Answer::Reached {
            from: dst.ip(),
            rtt,
        },
        Some(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => Answer::Reached {
            from: dst.ip(),
            rtt,
        },
        // An error without an ICMP in the queue (e.g. a timeout of the
        // kernel's own): nothing learnt from this probe.
        Some(_) => Answer::Silent,
    };
    Ok((answer, matched, local))
}

/// Polls `fd` for `events`; false on timeout.
fn wait(fd: RawFd, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    loop {
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r >= 0 {
            return Ok(r > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Empties the error queue: late answers to an earlier probe must not be
/// read as answers to the next one.
fn drain(fd: RawFd) {
    for _ in 0..64 {
        match recv_err(fd) {
            Ok(Some(_)) => continue,
            _ => break,
        }
    }
}

/// One queued ICMP error, classified; `None` when the queue is empty or
/// holds something else (a local error).
fn read_error(fd: RawFd, dst: SocketAddr, rtt: Duration) -> io::Result<Option<Answer>> {
    let Some(err) = recv_err(fd)? else {
        return Ok(None);
    };
    let v6 = err.origin == libc::SO_EE_ORIGIN_ICMP6;
    let (time_exceeded, unreachable) = if v6 { (3, 1) } else { (11, 3) };
    let Some(from) = err.offender else {
        return Ok(None);
    };
    Ok(Some(if err.icmp_type == time_exceeded {
        Answer::Hop { from, rtt }
    } else if err.icmp_type == unreachable && same_host(from, dst.ip()) {
        Answer::Reached { from, rtt }
    } else {
        Answer::Unreachable { from, rtt }
    }))
}

fn same_host(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

struct QueuedError {
    origin: u8,
    icmp_type: u8,
    offender: Option<IpAddr>,
}

/// `recvmsg(MSG_ERRQUEUE)`: the extended error and the ICMP sender's
/// address from the control message.
fn recv_err(fd: RawFd) -> io::Result<Option<QueuedError>> {
    let mut data = [0u8; 64];
    // u64 for the alignment cmsg headers need.
    let mut control = [0u64; 64];
    let mut name = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is valid; every pointer set below
    // outlives the call and comes with its length.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = name.as_mut_ptr() as *mut libc::c_void;
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` describes buffers valid for their stated lengths.
    let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: recvmsg filled `msg`, whose control buffer lives here.
    let first = unsafe { crate::engine::error_queue::extended_errors(&msg) }.next();
    Ok(Some(match first {
        Some(e)
            if e.err.ee_origin == libc::SO_EE_ORIGIN_ICMP
                || e.err.ee_origin == libc::SO_EE_ORIGIN_ICMP6 =>
        {
            QueuedError {
                origin: e.err.ee_origin,
                icmp_type: e.err.ee_type,
                offender: e.offender,
            }
        }
        Some(e) => QueuedError {
            origin: e.err.ee_origin,
            icmp_type: 0,
            offender: None,
        },
        None => QueuedError {
            origin: 0,
            icmp_type: 0,
            offender: None,
        },
    }))
}

/// A local socket address, for reporting the flow the trace used.
pub(super) fn local_of(sock: &Socket) -> Option<SocketAddr> {
    sock.local_addr().ok().and_then(|a: SockAddr| a.as_socket())
}
