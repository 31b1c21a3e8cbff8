//! Connect/request/response (`tcp_crr`, netperf's TCP_CRR): every
//! transaction is a TCP connection of its own. The prober creates a socket,
//! connects, writes the test's `DataHello` and the request in one write,
//! reads the whole response and closes; the responder, handed each
//! connection by its accept loop once the hello named the test, reads the
//! request, writes the response and waits for the prober's close before
//! closing its own end.
//!
//! Figures: connection set-up time (connect() called to connect()
//! returned: SYN out to SYN-ACK in, as the client sees it) and the whole
//! transaction (socket created to the last response byte read), each in a
//! histogram allocated before the test as `tcp_rr`'s; connections begun,
//! established and failed by reason ([`CrrFailure`]).
//!
//! Who closes first decides where TIME_WAIT lands. Here the prober does:
//! a responder serves many probers and must not hold state for all of
//! them (netperf has its server close first, which puts TIME_WAIT there).
//! The prober's ephemeral ports bound how many connections it can make to
//! one responder per TIME_WAIT period (60 s): Linux reuses a TIME_WAIT port
//! for a new outgoing connection on loopback (tcp_tw_reuse's default 2),
//! elsewhere only with tcp_tw_reuse=1. A test that runs out of ports counts
//! one `no_local_port` failure and stops opening connections, as every
//! further attempt would fail the same way; the port of its end-of-test
//! connection is bound before the first transaction, so that it can still
//! say it is done. A source address (`-B`) takes no port of its own
//! ([`bind_source`]), so it changes none of this. No SO_LINGER 0 on a good
//! connection: an RST per transaction is not what applications do, and a
//! firewall would count it. The responder resets only connections it gives
//! up on (past their deadline, or sending more than the test's request).
//!
//! The rate is bounded by the responder: it announces
//! `max_connections_per_second` in its welcome, the prober paces its
//! connection starts to it, and the responder's door for the test resets
//! those beyond it (see `responder::door`).

pub mod kind;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};

use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::engine::connections::{Arrival, Arrivals, Dialer};
use crate::engine::datapath::{StreamContext, ThreadMeter, POLL_INTERVAL};
use crate::engine::histogram::{new_histogram, record, summarize};
use crate::engine::stats::StreamStats;
use crate::engine::tcp_socket::{apply_options, bind_source, TcpOptions};
use crate::protocol::crr::{
    CrrFailure, CrrFailures, CrrStats, CONNECTION_DEADLINE, END_STREAM, TRANSACTION_STREAM,
};
use crate::protocol::latency::LatencyStats;
use crate::protocol::rr::RrStats;
use crate::protocol::{encode_frame, Message};

/// Largest read either end makes at once.
const READ_BUFFER: usize = 256 * 1024;
/// How long the prober's end-of-test connection may take to connect, and
/// the responder waits for it to close: it is a courtesy that saves the
/// responder its grace, not a measurement.
const END_DEADLINE: Duration = Duration::from_millis(500);

/// The reason a socket call's error stands for.
pub fn failure_of(e: &std::io::Error) -> CrrFailure {
    if e.kind() == ErrorKind::UnexpectedEof {
        return CrrFailure::Closed;
    }
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => CrrFailure::Refused,
        // A blocking connect past SO_SNDTIMEO returns EINPROGRESS.
        Some(libc::ETIMEDOUT | libc::EAGAIN | libc::EINPROGRESS) => CrrFailure::Timeout,
        Some(libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED) => CrrFailure::Reset,
        Some(libc::EADDRNOTAVAIL | libc::EADDRINUSE) => CrrFailure::NoLocalPort,
        Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::ENETDOWN | libc::EHOSTDOWN) => {
            CrrFailure::Unreachable
        }
        _ => match e.kind() {
            ErrorKind::TimedOut | ErrorKind::WouldBlock => CrrFailure::Timeout,
            ErrorKind::ConnectionRefused => CrrFailure::Refused,
            ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted => {
                CrrFailure::Reset
            }
            _ => CrrFailure::Other,
        },
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Keeps connection starts at least `1 / rate` apart. A late start does
/// not let the next ones catch up: a burst would run into the responder's
/// door, which allows the rate, not the average.
#[derive(Debug, Clone)]
struct Spacing {
    gap: Option<Duration>,
    next: Option<Instant>,
}

impl Spacing {
    fn new(rate: u32) -> Spacing {
        Spacing {
            gap: (rate > 0).then(|| Duration::from_nanos(1_000_000_000u64.div_ceil(rate.into()))),
            next: None,
        }
    }

    /// How long until the next start is allowed, from `now`.
    fn wait(&self, now: Instant) -> Duration {
        self.next
            .map_or(Duration::ZERO, |n| n.saturating_duration_since(now))
    }

    /// A connection started at `now`.
    fn started(&mut self, now: Instant) {
        self.next = self.gap.map(|g| now + g);
    }
}

/// One transaction as the prober saw it.
#[derive(Debug)]
struct Outcome {
    /// connect() call to its return, when it succeeded.
    connect: Option<Duration>,
    /// The whole transaction, or why it failed.
    result: Result<Duration, CrrFailure>,
    /// Request and response payload bytes moved (the hello not counted).
    written: u64,
    read: u64,
}

/// The prober's transactions: one connection each, one at a time, paced
/// to the responder's rate, until the planned end.
pub fn ask(d: Dialer, ctx: &StreamContext, stats: &mut StreamStats) {
    let Some(rr) = ctx.plan.rr else { return };
    let request_len = rr.request_size.max(1) as usize;
    let response_len = rr.response_size.max(1) as usize;
    let hello = |stream| {
        encode_frame(&Message::DataHello {
            token: d.token.clone(),
            stream,
        })
    };
    let (Ok(mut opening), Ok(end_hello)) = (hello(TRANSACTION_STREAM), hello(END_STREAM)) else {
        return;
    };
    // The hello and the request leave in one write, so one segment with
    // TCP_NODELAY: the transaction is the request, not a handshake of ours.
    opening.resize(opening.len() + request_len, 0x5a);
    let mut buf = vec![0u8; response_len.clamp(64, READ_BUFFER)];
    let mut connect_hist = new_histogram();
    let mut transaction_hist = new_histogram();
    let mut counts = CrrStats {
        rate_limit: d.rate_limit,
        ..CrrStats::default()
    };
    let mut spacing = Spacing::new(d.rate_limit);
    let mut meter = ThreadMeter::default();
    let end_socket = reserve_end(&d);
    let Some(start) = ctx.gate.wait() else { return };
    let window_start = start + ctx.plan.omit;
    let end = window_start + ctx.plan.duration;
    let (mut written, mut read, mut transactions) = (0u64, 0u64, 0u64);
    let mut last = start;
    loop {
        let now = Instant::now();
        if now >= end || ctx.stop.is_stopped() {
            break;
        }
        let wait = spacing.wait(now);
        if !wait.is_zero() {
            std::thread::sleep(wait.min(POLL_INTERVAL));
            continue;
        }
        if !meter.is_open() && now >= window_start {
            meter.open(now);
        }
        spacing.started(now);
        let o = transact(
            &d,
            rr.nodelay,
            &opening,
            request_len,
            response_len,
            &mut buf,
            &mut meter,
        );
        ctx.progress.add(o.written + o.read);
        let out_of_ports = o.result == Err(CrrFailure::NoLocalPort);
        if meter.is_open() {
            counts.connections += 1;
            if let Some(c) = o.connect {
                counts.established += 1;
                record(&mut connect_hist, c);
            }
            match o.result {
                Ok(took) => {
                    transactions += 1;
                    record(&mut transaction_hist, took);
                }
                Err(reason) => counts.failures.add(reason),
            }
            written += o.written;
            read += o.read;
            last = Instant::now();
        }
        if out_of_ports {
            tracing::debug!(stream = stats.id, "tcp_crr: no local port left; stopping");
            break;
        }
    }
    meter.close();
    let opened = meter.opened_at().unwrap_or(last);
    stats.bytes = written;
    stats.seconds = last.saturating_duration_since(opened).as_secs_f64();
    meter.finish(stats);
    counts.connect = summarize(&connect_hist);
    stats.rr = Some(RrStats {
        transactions,
        request_bytes: written,
        response_bytes: read,
        latency: summarize(&transaction_hist),
        udp: None,
        crr: Some(counts),
    });
    if !ctx.stop.is_stopped() {
        say_end(&d, end_socket, &end_hello);
    }
}

/// The socket of the prober's last connection, bound before the first
/// transaction so that its port is kept: a test that ran out of ports can
/// still tell the responder it is over, rather than have it take the
/// silence for a prober gone.
fn reserve_end(d: &Dialer) -> Option<Socket> {
    let sock = Socket::new(
        Domain::for_address(d.addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .ok()?;
    let ip = d.bind.unwrap_or(match d.addr {
        SocketAddr::V4(_) => IpAddr::from([0u8; 4]),
        SocketAddr::V6(_) => IpAddr::from([0u16; 8]),
    });
    sock.bind(&SocketAddr::new(ip, 0).into()).ok()?;
    Some(sock)
}

/// The prober's last connection, which tells the responder its
/// transactions are over; a failure only costs the responder its grace.
fn say_end(d: &Dialer, sock: Option<Socket>, end_hello: &[u8]) {
    let Some(sock) = sock else { return };
    if sock.connect_timeout(&d.addr.into(), END_DEADLINE).is_err() {
        return;
    }
    let mut stream: TcpStream = sock.into();
    let _ = stream.set_write_timeout(Some(END_DEADLINE));
    let _ = stream.write_all(end_hello);
    // Closing first, as every transaction does.
}

/// One transaction: socket, connect, hello and request, whole response,
/// close.
fn transact(
    d: &Dialer,
    nodelay: bool,
    opening: &[u8],
    request_len: usize,
    response_len: usize,
    buf: &mut [u8],
    meter: &mut ThreadMeter,
) -> Outcome {
    let began = Instant::now();
    let deadline = began + CONNECTION_DEADLINE;
    let mut out = Outcome {
        connect: None,
        result: Err(CrrFailure::Other),
        written: 0,
        read: 0,
    };
    let failed = |mut out: Outcome, e: &std::io::Error| {
        out.result = Err(failure_of(e));
        out
    };
    meter.syscall();
    let sock = match Socket::new(
        Domain::for_address(d.addr),
        Type::STREAM,
        Some(Protocol::TCP),
    ) {
        Ok(s) => s,
        Err(e) => return failed(out, &e),
    };
    if nodelay {
        meter.syscall();
        let _ = sock.set_tcp_nodelay(true);
    }
    if let Err(e) = apply_options(&SockRef::from(&sock), &d.options, d.addr.is_ipv6()) {
        return failed(out, &e);
    }
    if let Some(ip) = d.bind {
        if let Err(e) = bind_source(&SockRef::from(&sock), ip) {
            return failed(out, &e);
        }
    }
    // SO_SNDTIMEO bounds a blocking connect too (it then returns
    // EINPROGRESS), at one system call rather than poll's four; the
    // response's first read is bounded by SO_RCVTIMEO, later ones by what
    // is left of the deadline.
    meter.syscall();
    meter.syscall();
    if let Err(e) = sock
        .set_write_timeout(Some(CONNECTION_DEADLINE))
        .and_then(|()| sock.set_read_timeout(Some(CONNECTION_DEADLINE)))
    {
        return failed(out, &e);
    }
    meter.syscall();
    let t = Instant::now();
    let connected = sock.connect(&d.addr.into());
    let set_up = t.elapsed();
    if let Err(e) = connected {
        return failed(out, &e);
    }
    out.connect = Some(set_up);
    let mut stream: TcpStream = sock.into();
    meter.syscall();
    if let Err(e) = stream.write_all(opening) {
        return failed(out, &e);
    }
    out.written = request_len as u64;
    let mut left = response_len;
    while left > 0 {
        meter.syscall();
        let n = left.min(buf.len());
        match stream.read(&mut buf[..n]) {
            Ok(0) => {
                out.result = Err(CrrFailure::Closed);
                return out;
            }
            Ok(n) => {
                left -= n;
                out.read += n as u64;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return failed(out, &e),
        }
        if left > 0 {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                out.result = Err(CrrFailure::Timeout);
                return out;
            }
            meter.syscall();
            let _ = stream.set_read_timeout(Some(remaining));
        }
    }
    out.result = Ok(began.elapsed());
    // The prober closes first, so TIME_WAIT is its own (see the module's
    // note); the responder is waiting for this FIN.
    meter.syscall();
    drop(stream);
    out
}

/// Closes `stream` with an RST (SO_LINGER 0): for a connection the
/// responder gives up on, so that it leaves no TIME_WAIT behind, however
/// many a hostile client opens.
pub fn abort(stream: TcpStream) {
    let _ = SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}

/// What the responder's thread needs to answer one connection.
struct Answerer<'a> {
    ctx: &'a StreamContext,
    nodelay: bool,
    options: &'a TcpOptions,
    request_len: usize,
    response: Vec<u8>,
    buf: Vec<u8>,
}

impl Answerer<'_> {
    /// Reads the request, writes the response, and waits for the prober
    /// to close, all within [`CONNECTION_DEADLINE`]; returns the bytes read
    /// and written. A connection that fails is reset.
    fn serve(
        &mut self,
        mut stream: TcpStream,
        meter: &mut ThreadMeter,
    ) -> (Result<(), CrrFailure>, u64, u64) {
        let deadline = Instant::now() + CONNECTION_DEADLINE;
        let (mut read, mut written) = (0u64, 0u64);
        let outcome = self.exchange(&mut stream, deadline, meter, &mut read, &mut written);
        match outcome {
            Ok(()) => {
                // The prober closed first: this close is the passive one.
                meter.syscall();
                drop(stream);
            }
            Err(_) => abort(stream),
        }
        (outcome, read, written)
    }

    fn exchange(
        &mut self,
        stream: &mut TcpStream,
        deadline: Instant,
        meter: &mut ThreadMeter,
        read: &mut u64,
        written: &mut u64,
    ) -> Result<(), CrrFailure> {
        // The accept loop made the socket blocking, with reads and writes
        // that wake every POLL_INTERVAL to look at the deadline and the
        // stop flag.
        if self.nodelay {
            meter.syscall();
            let _ = stream.set_nodelay(true);
        }
        // Only the TOS needs the family, which costs a getpeername.
        let ipv6 =
            self.options.tos.is_some() && stream.peer_addr().map(|a| a.is_ipv6()).unwrap_or(false);
        apply_options(&SockRef::from(&*stream), self.options, ipv6).map_err(|e| failure_of(&e))?;
        let ctx = self.ctx;
        let waited = |e: &std::io::Error| -> Result<(), CrrFailure> {
            if !is_timeout(e) {
                Err(failure_of(e))
            } else if Instant::now() >= deadline || ctx.stop.is_stopped() {
                Err(CrrFailure::Timeout)
            } else {
                Ok(())
            }
        };
        let mut left = self.request_len;
        while left > 0 {
            meter.syscall();
            let n = left.min(self.buf.len());
            match stream.read(&mut self.buf[..n]) {
                Ok(0) => return Err(CrrFailure::Closed),
                Ok(n) => {
                    left -= n;
                    *read += n as u64;
                }
                Err(e) => waited(&e)?,
            }
        }
        let mut at = 0;
        while at < self.response.len() {
            meter.syscall();
            match stream.write(&self.response[at..]) {
                Ok(0) => return Err(CrrFailure::Closed),
                Ok(n) => {
                    at += n;
                    *written += n as u64;
                }
                Err(e) => waited(&e)?,
            }
        }
        // The prober's FIN: anything else is more than the test's request.
        loop {
            meter.syscall();
            match stream.read(&mut self.buf[..1]) {
                Ok(0) => return Ok(()),
                Ok(_) => return Err(CrrFailure::Invalid),
                // A prober that resets after reading its response has had
                // its transaction.
                Err(e) if failure_of(&e) == CrrFailure::Reset => return Ok(()),
                Err(e) => waited(&e)?,
            }
        }
    }
}

/// Resets every connection still queued for a test that has ended.
fn drain(rx: &Receiver<Arrival>) {
    while let Ok(a) = rx.try_recv() {
        abort(a.into_stream());
    }
}

/// The responder's loop: answers the connections its door hands over, one
/// at a time, until the prober's end connection or the side's stop.
pub fn answer(a: Arrivals, ctx: &StreamContext, stats: &mut StreamStats) {
    let rx = a.rx.into_inner().unwrap_or_else(|p| p.into_inner());
    let Some(rr) = ctx.plan.rr else {
        drain(&rx);
        return;
    };
    let request_len = rr.request_size.max(1) as usize;
    let mut answerer = Answerer {
        ctx,
        nodelay: rr.nodelay,
        options: &a.options,
        request_len,
        response: vec![0xa5u8; rr.response_size.max(1) as usize],
        buf: vec![0u8; request_len.clamp(64, READ_BUFFER)],
    };
    let mut meter = ThreadMeter::default();
    let Some(start) = ctx.gate.wait() else {
        drain(&rx);
        return;
    };
    let window_start = start + ctx.plan.omit;
    let mut counts = CrrStats::default();
    let (mut read, mut written, mut answered) = (0u64, 0u64, 0u64);
    let mut last = start;
    while !ctx.stop.is_stopped() {
        let arrival = match rx.recv_timeout(POLL_INTERVAL) {
            Ok(arrival) => arrival,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let stream = match arrival {
            Arrival::Transaction(s) => s,
            Arrival::End(s) => {
                // Nothing follows the hello; the prober closes at once.
                let _ = s.set_read_timeout(Some(END_DEADLINE));
                let _ = (&s).read(&mut [0u8; 1]);
                break;
            }
        };
        let now = Instant::now();
        if !meter.is_open() && now >= window_start {
            meter.open(now);
        }
        let (outcome, r, w) = answerer.serve(stream, &mut meter);
        ctx.progress.add(r + w);
        if meter.is_open() {
            counts.connections += 1;
            match outcome {
                Ok(()) => {
                    answered += 1;
                    last = Instant::now();
                }
                Err(reason) => counts.failures.add(reason),
            }
            read += r;
            written += w;
        }
    }
    meter.close();
    drain(&rx);
    counts.over_limit = a.over_limit.load(Ordering::Relaxed);
    let opened = meter.opened_at().unwrap_or(last);
    stats.bytes = read;
    stats.seconds = last.saturating_duration_since(opened).as_secs_f64();
    meter.finish(stats);
    stats.rr = Some(RrStats {
        transactions: answered,
        request_bytes: read,
        response_bytes: written,
        latency: None,
        udp: None,
        crr: Some(counts),
    });
}

/// A `tcp_crr` probe's connection figures, from both ends: part of its
/// `rr` summary.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct CrrSummary {
    /// Connections the prober began in the measured window, and those
    /// whose connect() completed.
    pub connections_attempted: u64,
    pub connections_established: u64,
    /// Established connections per second over the prober's window.
    pub connections_per_second: f64,
    /// Connection set-up time (connect() called to returned), seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect: Option<LatencyStats>,
    /// Transactions that failed, in all and by reason.
    pub failed: u64,
    pub failures: CrrFailures,
    /// The rate the prober held its connection starts to (the responder's
    /// `max_connections_per_second`); 0 for none.
    pub connection_rate_limit: u32,
    /// The responder's word: connections its data thread took in its
    /// window, those it answered, those that failed there by reason, and
    /// those its door reset over the test's rate, count or queue.
    pub remote_connections: u64,
    pub remote_answered: u64,
    pub remote_failed: u64,
    pub remote_failures: CrrFailures,
    pub remote_over_limit: u64,
}

impl CrrSummary {
    /// The prober's stream (`local`) with the responder's, over the
    /// prober's window of `seconds`.
    pub fn combine(
        local: Option<&StreamStats>,
        remote: Option<&StreamStats>,
        seconds: f64,
    ) -> CrrSummary {
        let rr = |s: Option<&StreamStats>| s.and_then(|s| s.rr.clone()).unwrap_or_default();
        let (l, r) = (rr(local), rr(remote));
        let (lc, rc) = (l.crr.unwrap_or_default(), r.crr.unwrap_or_default());
        CrrSummary {
            connections_attempted: lc.connections,
            connections_established: lc.established,
            connections_per_second: crate::engine::stats::ratio(lc.established as f64, seconds),
            connect: lc.connect,
            failed: lc.failures.total(),
            failures: lc.failures,
            connection_rate_limit: lc.rate_limit,
            remote_connections: rc.connections,
            remote_answered: r.transactions,
            remote_failed: rc.failures.total(),
            remote_failures: rc.failures,
            remote_over_limit: rc.over_limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_errors_name_their_reason() {
        let os = |code| std::io::Error::from_raw_os_error(code);
        for (code, want) in [
            (libc::ECONNREFUSED, CrrFailure::Refused),
            (libc::ETIMEDOUT, CrrFailure::Timeout),
            (libc::EAGAIN, CrrFailure::Timeout),
            (libc::EINPROGRESS, CrrFailure::Timeout),
            (libc::ECONNRESET, CrrFailure::Reset),
            (libc::EPIPE, CrrFailure::Reset),
            (libc::EADDRNOTAVAIL, CrrFailure::NoLocalPort),
            (libc::ENETUNREACH, CrrFailure::Unreachable),
            (libc::EHOSTUNREACH, CrrFailure::Unreachable),
            (libc::EMFILE, CrrFailure::Other),
        ] {
            assert_eq!(failure_of(&os(code)), want, "errno {code}");
        }
        let eof = std::io::Error::from(ErrorKind::UnexpectedEof);
        assert_eq!(failure_of(&eof), CrrFailure::Closed);
        let timed = std::io::Error::from(ErrorKind::TimedOut);
        assert_eq!(failure_of(&timed), CrrFailure::Timeout);
    }

    #[test]
    fn starts_keep_their_spacing_without_catching_up() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut s = Spacing::new(1000);
        assert_eq!(s.wait(t0), Duration::ZERO);
        s.started(t0);
        assert_eq!(s.wait(t0), ms);
        assert_eq!(s.wait(t0 + ms / 2), ms / 2);
        // A start 10 ms late does not make the next ones due at once.
        s.started(t0 + 10 * ms);
        assert_eq!(s.wait(t0 + 10 * ms), ms);
        // An odd rate rounds its gap up, so never goes over the rate.
        let mut odd = Spacing::new(3);
        odd.started(t0);
        assert_eq!(odd.wait(t0), Duration::from_nanos(333_333_334));
        let mut none = Spacing::new(0);
        none.started(t0);
        assert_eq!(none.wait(t0), Duration::ZERO);
    }

    fn stream(rr: RrStats) -> StreamStats {
        StreamStats {
            seconds: 2.0,
            rr: Some(rr),
            ..StreamStats::default()
        }
    }

    #[test]
    fn the_summary_takes_each_end_at_its_word_and_divides_by_nothing_safely() {
        let mut failures = CrrFailures::default();
        failures.add(CrrFailure::Reset);
        let local = stream(RrStats {
            transactions: 99,
            crr: Some(CrrStats {
                connections: 100,
                established: 100,
                failures,
                rate_limit: 500,
                ..CrrStats::default()
            }),
            ..RrStats::default()
        });
        let remote = stream(RrStats {
            transactions: 98,
            crr: Some(CrrStats {
                connections: 99,
                over_limit: 7,
                failures: CrrFailures {
                    timeout: 1,
                    ..CrrFailures::default()
                },
                ..CrrStats::default()
            }),
            ..RrStats::default()
        });
        let s = CrrSummary::combine(Some(&local), Some(&remote), 2.0);
        assert_eq!(
            (s.connections_attempted, s.connections_established),
            (100, 100)
        );
        assert_eq!(s.connections_per_second, 50.0);
        assert_eq!((s.failed, s.failures.reset), (1, 1));
        assert_eq!(s.connection_rate_limit, 500);
        assert_eq!((s.remote_connections, s.remote_answered), (99, 98));
        assert_eq!((s.remote_failed, s.remote_over_limit), (1, 7));
        let empty = CrrSummary::combine(None, None, 0.0);
        assert_eq!(empty.connections_per_second, 0.0);
        assert_eq!(empty.failed, 0);
    }
}
