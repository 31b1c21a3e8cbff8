//! The prober's side of a test against a stock iperf3 server (`iperf3 -s`,
//! 3.12 and later), through iperf3's own protocol.
//!
//! Only the conversation differs from a native probe: the cookie, the state
//! bytes and the JSON exchanges of [`crate::protocol::iperf3`]. The data
//! path is the native one: the same [`TestSide`], stream threads and TCP
//! and UDP loops (with iperf3's UDP header, [`UdpWire::Iperf3`]), so the
//! local figures are measured exactly as in any probe. The server's figures
//! come from its results: its received bytes, UDP loss and jitter, and its
//! process CPU. What a stock server does not tell (host CPU, interrupts,
//! softirqs, its kernel release) is left unknown in the result, not zero.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::spec::{FlowDirection, Kind, ProbeSpec};
use super::target::Target;
use super::{verify, ProbeError};
use crate::analysis::result::{ProbeContext, ProbeResult};
use crate::engine::datapath::{DataSocket, UdpWire, DRAIN_GRACE};
use crate::engine::stats::{Role, SideStats, StreamStats, TcpStats, UdpReceiveStats, UdpSendStats};
use crate::kinds::kind::Transport;
use crate::kinds::side::{End, TestSide};
use crate::kinds::{tcp, udp};
use crate::protocol::iperf3::{
    self, check_json_len, encode_json_len, errors, make_cookie, Params, Results, State,
    StreamResult, COOKIE_LEN, MAX_RESULTS_LEN,
};
use crate::protocol::{Direction, RejectReason, TestRequest};

/// How long a busy iperf3 server is left alone before the next try: it
/// gives no hint, and its tests last 10 s by default.
pub const BUSY_RETRY: Duration = Duration::from_secs(10);

/// iperf3's stream ids: 1, then 3, 4, 5... (2 is never used).
pub fn stream_id(index: usize) -> i64 {
    if index == 0 {
        1
    } else {
        index as i64 + 2
    }
}

/// The stream index of an iperf3 stream id, if it is one of `count`.
pub fn stream_index(id: i64, count: usize) -> Option<usize> {
    let index = match id {
        1 => 0,
        id if id >= 3 => (id - 2) as usize,
        _ => return None,
    };
    (index < count).then_some(index)
}

/// The parameters pathprobe sends for `request`.
pub fn params_for(request: &TestRequest) -> Params {
    let udp = crate::kinds::of(request.kind).transport() == Transport::Udp;
    let streams = i64::from(request.streams.max(1));
    let ms = |ms: u64| ms.div_ceil(1000) as i64;
    Params {
        tcp: (!udp).then_some(true),
        udp: udp.then_some(true),
        omit: ms(request.omit_ms),
        time: ms(request.duration_ms),
        parallel: streams,
        len: Some(i64::from(request.length)),
        // iperf3's bandwidth is per stream.
        bandwidth: (request.bitrate > 0).then(|| (request.bitrate / streams as u64) as i64),
        pacing_timer: Some(1000),
        window: request.window.map(i64::from),
        reverse: (request.direction == Direction::Receive).then_some(true),
        bidirectional: (request.direction == Direction::Bidir).then_some(true),
        tos: request.tos.map(i64::from),
        congestion: request.congestion.clone(),
        client_version: Some(format!("pathprobe-{}", env!("CARGO_PKG_VERSION"))),
        ..Params::default()
    }
}

/// The test as iperf3 runs it: whole seconds of time and omit.
fn iperf3_request(spec: &ProbeSpec) -> Result<TestRequest, ProbeError> {
    let mut request = spec.to_request();
    let whole = |d: Duration| d.subsec_nanos() == 0;
    if !whole(spec.duration) || !whole(spec.omit) {
        return Err(ProbeError::BadArgument(
            "iperf3 takes -t and -O in whole seconds".into(),
        ));
    }
    if crate::kinds::of(request.kind).transport() == Transport::Udp
        && !(16..=65_507).contains(&request.length)
    {
        return Err(ProbeError::BadArgument(format!(
            "iperf3's UDP datagrams are 16 to 65507 bytes, got {}",
            request.length
        )));
    }
    if spec.remote_affinity.is_some() {
        return Err(ProbeError::BadArgument(
            "an iperf3 server cannot be pinned from here (-A n,m)".into(),
        ));
    }
    if spec.secret.is_some() {
        return Err(ProbeError::BadArgument(
            "a shared secret is pathprobe's; iperf3 servers do not know it".into(),
        ));
    }
    request.affinity = None;
    Ok(request)
}

fn io_err(context: &'static str) -> impl Fn(std::io::Error) -> ProbeError {
    move |e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => ProbeError::Aborted(format!(
            "the iperf3 server closed the control connection while {context}"
        )),
        _ => ProbeError::io(context, e),
    }
}

async fn timed<T>(
    t: Duration,
    stage: &'static str,
    f: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, ProbeError> {
    match tokio::time::timeout(t, f).await {
        Ok(r) => r.map_err(io_err(stage)),
        Err(_) => Err(ProbeError::Timeout { stage, after: t }),
    }
}

/// Reads one state byte, turning iperf3's refusals into their errors.
async fn read_state(
    control: &mut TcpStream,
    t: Duration,
    stage: &'static str,
) -> Result<State, ProbeError> {
    let b = timed(t, stage, control.read_u8()).await?;
    match State::from_byte(b) {
        State::AccessDenied => Err(ProbeError::Busy {
            retry_after: BUSY_RETRY,
            message: "the iperf3 server is busy running a test".into(),
        }),
        State::ServerError => {
            let code = timed(t, stage, control.read_i32()).await?;
            // 3.12 to 3.18 send no errno after an authentication failure.
            let errno = tokio::time::timeout(t, control.read_i32())
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(0);
            Err(server_error(code, errno))
        }
        State::ServerTerminate => Err(ProbeError::Aborted(
            "the iperf3 server was terminated".into(),
        )),
        s => Ok(s),
    }
}

/// The error for a SERVER_ERROR trailer.
pub fn server_error(code: i32, errno: i32) -> ProbeError {
    let mut message = iperf3::error_text(code);
    if errno > 0 && errno < 4096 {
        message.push_str(&format!(": {}", std::io::Error::from_raw_os_error(errno)));
    }
    let reason = match code {
        errors::IEACCESSDENIED => {
            return ProbeError::Busy {
                retry_after: BUSY_RETRY,
                message,
            }
        }
        errors::IEAUTHTEST => RejectReason::AuthRequired,
        1..=40 => RejectReason::Limit,
        _ => return ProbeError::Aborted(format!("iperf3 server error {code}: {message}")),
    };
    ProbeError::Rejected { reason, message }
}

async fn read_json(control: &mut TcpStream, t: Duration, max: u32) -> Result<Vec<u8>, ProbeError> {
    let mut prefix = [0u8; 4];
    timed(
        t,
        "reading the iperf3 server's results",
        control.read_exact(&mut prefix),
    )
    .await?;
    let len = check_json_len(prefix, max).map_err(|e| ProbeError::Protocol(e.to_string()))?;
    let mut body = vec![0u8; len];
    timed(
        t,
        "reading the iperf3 server's results",
        control.read_exact(&mut body),
    )
    .await?;
    Ok(body)
}

async fn write_all(control: &mut TcpStream, t: Duration, bytes: &[u8]) -> Result<(), ProbeError> {
    timed(t, "writing to the iperf3 server", control.write_all(bytes)).await
}

async fn write_json(control: &mut TcpStream, t: Duration, body: &[u8]) -> Result<(), ProbeError> {
    let mut msg = encode_json_len(body.len()).to_vec();
    msg.extend_from_slice(body);
    write_all(control, t, &msg).await
}

/// Runs one probe of `spec` against the iperf3 server at `target`.
pub async fn probe(target: &Target, spec: &ProbeSpec) -> Result<ProbeResult, ProbeError> {
    spec.validate().map_err(|e| ProbeError::BadArgument(e.0))?;
    spec.check_local()
        .map_err(|e| ProbeError::BadArgument(e.0))?;
    let request = iperf3_request(spec)?;
    let addrs = super::target::resolve(target, spec.bind, spec.family).await?;
    let mut last = None;
    for addr in addrs {
        match tcp::connect(addr, spec.bind, None, spec.connect_timeout).await {
            Ok(control) => return run_test(control, addr, target, spec, &request).await,
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| ProbeError::BadArgument("no address to probe".into())))
}

async fn run_test(
    mut control: TcpStream,
    addr: SocketAddr,
    target: &Target,
    spec: &ProbeSpec,
    request: &TestRequest,
) -> Result<ProbeResult, ProbeError> {
    let _ = control.set_nodelay(true);
    let t = spec.connect_timeout;
    let local_addr = control
        .local_addr()
        .map_err(|e| ProbeError::io("control connection", e))?;
    let mut random = [0u8; 36];
    getrandom::fill(&mut random).map_err(|e| ProbeError::io("cookie", std::io::Error::other(e)))?;
    let cookie = make_cookie(&random);
    write_all(&mut control, t, &cookie).await?;
    let result = converse(
        &mut control,
        addr,
        local_addr,
        target,
        spec,
        request,
        &cookie,
    )
    .await;
    if result.is_err() {
        // iperf3's own client says IPERF_DONE when it fails after
        // connecting, so the server ends the test at once.
        let _ = tokio::time::timeout(
            Duration::from_millis(200),
            control.write_all(&[State::IperfDone.byte()]),
        )
        .await;
    }
    result
}

async fn converse(
    control: &mut TcpStream,
    addr: SocketAddr,
    local_addr: SocketAddr,
    target: &Target,
    spec: &ProbeSpec,
    request: &TestRequest,
    cookie: &[u8; COOKIE_LEN],
) -> Result<ProbeResult, ProbeError> {
    let t = spec.connect_timeout;
    match read_state(control, t, "waiting for the iperf3 server to ask for parameters").await {
        Ok(State::ParamExchange) => {}
        Ok(other) => {
            return Err(ProbeError::Protocol(format!(
                "the port is not an iperf3 server: it answered the cookie with {other:?}"
            )))
        }
        Err(ProbeError::Timeout { after, .. }) => {
            return Err(ProbeError::Protocol(format!(
                "the port accepted a connection but did not answer as an iperf3 server within {after:?}"
            )))
        }
        Err(e) => return Err(e),
    }
    write_json(control, t, &params_for(request).encode()).await?;
    match read_state(
        control,
        t,
        "waiting for the iperf3 server to create streams",
    )
    .await?
    {
        State::CreateStreams => {}
        other => {
            return Err(ProbeError::Protocol(format!(
                "expected CREATE_STREAMS from the iperf3 server, got {other:?}"
            )))
        }
    }
    let counters64 = false;
    let side = TestSide::new(End::Prober, request, "", spec.affinity, addr.ip())
        .with_wire(UdpWire::Iperf3 { counters64 })
        .with_intervals(spec.interval_events.clone())
        .with_progress(spec.moved.clone())
        .with_zerocopy(spec.zerocopy);
    let count = side.stream_count();
    let kind = crate::kinds::of(request.kind);
    if !kind.iperf3() {
        return Err(ProbeError::BadArgument(format!(
            "{} needs a pathprobe responder: iperf3 has no request/response test",
            request.kind
        )));
    }
    let sockets = match kind.transport() {
        Transport::Tcp => open_tcp_streams(addr, spec, &side, count, cookie).await?,
        Transport::Udp => open_udp_streams(addr, spec, request, count, t).await?,
    };
    let plan = side.plan.clone();
    let running = side
        .spawn(sockets)
        .map_err(|e| ProbeError::io("starting stream threads", e))?;
    let stop = running.stop.clone();
    let stage = "waiting for the iperf3 server to start the test";
    match read_state(control, t, stage).await? {
        State::TestStart => {}
        other => {
            return Err(ProbeError::Protocol(format!(
                "expected TEST_START from the iperf3 server, got {other:?}"
            )))
        }
    }
    match read_state(control, t, stage).await? {
        State::TestRunning => {}
        other => {
            return Err(ProbeError::Protocol(format!(
                "expected TEST_RUNNING from the iperf3 server, got {other:?}"
            )))
        }
    }
    let started = Instant::now();
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
        + plan.omit.as_secs_f64();
    let end = started + plan.omit + plan.duration;
    // The control side of the test: nothing may arrive before the end but
    // an error; at the end, TEST_END, and the server stops and closes the
    // data connections before it asks for results.
    let ending = async {
        let r = async {
            match tokio::time::timeout_at(end.into(), read_state(control, t, "the test")).await {
                Err(_) => {}
                Ok(Err(e)) => return Err(e),
                Ok(Ok(s)) => {
                    return Err(ProbeError::Protocol(format!(
                        "the iperf3 server sent {s:?} during the test"
                    )))
                }
            }
            write_all(control, t, &[State::TestEnd.byte()]).await?;
            let wait = DRAIN_GRACE + t;
            match read_state(control, wait, "waiting for the iperf3 server's results").await? {
                State::ExchangeResults => Ok(()),
                other => Err(ProbeError::Protocol(format!(
                    "expected EXCHANGE_RESULTS from the iperf3 server, got {other:?}"
                ))),
            }
        }
        .await;
        // Senders have stopped and the server closed its sockets; UDP
        // receivers have no end of their own.
        stop.stop();
        r
    };
    let (local, ended) = tokio::join!(running.finish(), ending);
    ended?;
    let local = local.map_err(|e| ProbeError::io("local streams", std::io::Error::other(e)))?;
    write_json(control, t, &local_results(request, &local).encode()).await?;
    let body = read_json(control, t, MAX_RESULTS_LEN).await?;
    let theirs = Results::decode(&body)
        .map_err(|e| ProbeError::Protocol(format!("the iperf3 server's results: {e}")))?;
    match read_state(control, t, "waiting for the iperf3 server to finish").await? {
        State::DisplayResults => {}
        other => {
            return Err(ProbeError::Protocol(format!(
                "expected DISPLAY_RESULTS from the iperf3 server, got {other:?}"
            )))
        }
    }
    // Anything the server writes after IPERF_DONE is ignored (3.21 sends
    // a stale error there).
    let _ = write_all(control, t, &[State::IperfDone.byte()]).await;
    let _ = control.shutdown().await;
    let remote = remote_side(request, &local, &theirs).map_err(ProbeError::Protocol)?;
    verify::check_results(request, &local, &remote).map_err(ProbeError::Protocol)?;
    // A stock server paces as asked: it has no clamp to report.
    let ctx = ProbeContext::of_run(request, &plan, target, local_addr, addr, timestamp);
    let mut result = ProbeResult::combine(ctx, &local, &remote);
    result.remote.mark_unknown_host();
    Ok(result)
}

/// TCP data connections, opened one after another as iperf3 requires,
/// each announced by the cookie.
async fn open_tcp_streams(
    addr: SocketAddr,
    spec: &ProbeSpec,
    side: &TestSide,
    count: usize,
    cookie: &[u8; COOKIE_LEN],
) -> Result<Vec<(u32, DataSocket)>, ProbeError> {
    let t = spec.connect_timeout;
    let mut sockets = Vec::with_capacity(count);
    for id in 0..count as u32 {
        let mut s = tcp::connect(addr, spec.bind, Some(&side.tcp), t).await?;
        write_all(&mut s, t, cookie).await?;
        let s = s
            .into_std()
            .map_err(|e| ProbeError::io("data connection", e))?;
        tcp::prepare_blocking(&s).map_err(|e| ProbeError::io("data connection", e))?;
        sockets.push((id, DataSocket::Tcp(s)));
    }
    Ok(sockets)
}

/// UDP flows, each opened by iperf3's connect datagram and its reply, one
/// after another. A reverse flow may see data before the reply.
async fn open_udp_streams(
    addr: SocketAddr,
    spec: &ProbeSpec,
    request: &TestRequest,
    count: usize,
    t: Duration,
) -> Result<Vec<(u32, DataSocket)>, ProbeError> {
    let buffer = udp::buffer_size(
        request.window,
        request.bitrate / u64::from(request.streams.max(1)),
    );
    let socks = udp::open_flows(addr, spec.bind, count, buffer, request.tos)?;
    let mut out = Vec::with_capacity(count);
    for (id, s) in socks.into_iter().enumerate() {
        let s = tokio::task::spawn_blocking(move || udp_connect(s, t))
            .await
            .map_err(|e| ProbeError::io("UDP connect", std::io::Error::other(e)))??;
        out.push((id as u32, DataSocket::Udp(s)));
    }
    Ok(out)
}

fn udp_connect(s: UdpSocket, t: Duration) -> Result<UdpSocket, ProbeError> {
    let deadline = Instant::now() + t;
    s.send(&iperf3::UDP_CONNECT)
        .map_err(|e| ProbeError::io("UDP connect", e))?;
    let mut buf = [0u8; 65_536];
    // The socket has a short read timeout (for the data loops); poll it up
    // to the deadline.
    while Instant::now() < deadline {
        match s.recv(&mut buf) {
            Ok(4) if iperf3::is_udp_reply(&buf[..4]) => return Ok(s),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                return Err(tcp::connect_error(
                    s.peer_addr().unwrap_or(([0, 0, 0, 0], 0).into()),
                    e,
                ))
            }
        }
    }
    Err(ProbeError::Timeout {
        stage: "waiting for the iperf3 server's UDP connect reply",
        after: t,
    })
}

/// This side's results, as iperf3 expects them from a client.
pub fn local_results(request: &TestRequest, local: &SideStats) -> Results {
    let window = local.streams.iter().map(|s| s.seconds).fold(0.0, f64::max);
    let user: f64 = local.streams.iter().map(|s| s.cpu_user_seconds).sum();
    let system: f64 = local.streams.iter().map(|s| s.cpu_system_seconds).sum();
    let pct = |x: f64| crate::engine::stats::ratio(x * 100.0, window);
    let sends = local.streams.iter().any(|s| s.role == Some(Role::Sender));
    let mut streams: Vec<StreamResult> = local
        .streams
        .iter()
        .map(|s| stream_result(s, request.kind))
        .collect();
    streams.sort_by_key(|s| s.id);
    Results {
        cpu_util_total: pct(user + system),
        cpu_util_user: pct(user),
        cpu_util_system: pct(system),
        sender_has_retransmits: match (sends, crate::kinds::of(request.kind).transport()) {
            (false, _) => -1,
            (true, Transport::Tcp) => 1,
            (true, Transport::Udp) => 0,
        },
        congestion_used: local.streams.iter().find_map(|s| s.congestion.clone()),
        streams,
        server_output_text: None,
        server_output_json: None,
    }
}

/// One local stream as iperf3's results write it.
pub fn stream_result(s: &StreamStats, kind: Kind) -> StreamResult {
    let sender = s.role == Some(Role::Sender);
    let (packets, errors, jitter) = match (&s.udp_sent, &s.udp_received) {
        (Some(u), _) => (u.packets as i64, 0, 0.0),
        (_, Some(u)) => (
            u.packets.saturating_add(u.lost) as i64,
            u.lost as i64,
            u.jitter_seconds,
        ),
        _ => (0, 0, 0.0),
    };
    StreamResult {
        id: stream_id(s.id as usize),
        bytes: s.bytes.min(i64::MAX as u64) as i64,
        retransmits: match (&s.tcp, sender, crate::kinds::of(kind).bulk()) {
            (Some(t), true, Some(Transport::Tcp)) => t.retransmits as i64,
            _ => -1,
        },
        jitter,
        errors,
        omitted_errors: Some(0),
        packets,
        omitted_packets: Some(0),
        start_time: 0.0,
        end_time: s.seconds,
    }
}

/// The server's side of the test, from its results, in the form a
/// responder reports it, for the prober's checks and the result.
pub fn remote_side(
    request: &TestRequest,
    local: &SideStats,
    theirs: &Results,
) -> Result<SideStats, String> {
    let layout = super::spec::stream_layout(request.direction, request.streams);
    for (name, v) in [
        ("cpu_util_total", theirs.cpu_util_total),
        ("cpu_util_user", theirs.cpu_util_user),
        ("cpu_util_system", theirs.cpu_util_system),
    ] {
        // Multi-threaded iperf3 (3.16+) can use several CPUs.
        if !v.is_finite() || !(0.0..=100.0 * 1024.0).contains(&v) {
            return Err(format!(
                "the iperf3 server's {name} is {v}, not a percentage"
            ));
        }
    }
    if theirs.streams.len() > layout.len() {
        return Err(format!(
            "the iperf3 server reported {} streams for a test of {}",
            theirs.streams.len(),
            layout.len()
        ));
    }
    let n = theirs.streams.len().max(1) as f64;
    let mut streams = Vec::with_capacity(theirs.streams.len());
    for r in &theirs.streams {
        let index = stream_index(r.id, layout.len()).ok_or_else(|| {
            format!(
                "the iperf3 server reported stream id {}, which this test does not have",
                r.id
            )
        })?;
        let direction = layout[index];
        let role = match direction {
            FlowDirection::Send => Role::Receiver,
            FlowDirection::Receive => Role::Sender,
        };
        let count = |name: &str, v: i64| -> Result<u64, String> {
            u64::try_from(v).map_err(|_| format!("stream {}: {name} is {v}", r.id))
        };
        let seconds = r.end_time - r.start_time;
        if !seconds.is_finite() || seconds < 0.0 || !r.jitter.is_finite() || r.jitter < 0.0 {
            return Err(format!("stream {}: times are not times", r.id));
        }
        let local_window = local.streams.iter().map(|s| s.seconds).fold(0.0, f64::max);
        let seconds = if seconds > 0.0 { seconds } else { local_window };
        let mut s = StreamStats {
            id: index as u32,
            direction: Some(direction),
            role: Some(role),
            bytes: count("bytes", r.bytes)?,
            seconds,
            // iperf3 reports its process's CPU over the test; it is shared
            // out over the streams, so that their sum is the process's.
            cpu_user_seconds: theirs.cpu_util_user / 100.0 * seconds / n,
            cpu_system_seconds: theirs.cpu_util_system / 100.0 * seconds / n,
            // Held to the rule for a peer's strings by the checks of
            // the results: a server's name that breaks it refuses them.
            congestion: theirs.congestion_used.clone(),
            ..StreamStats::default()
        };
        let omitted_packets = count("omitted_packets", r.omitted_packets.unwrap_or(0))?;
        let omitted_errors = count("omitted_errors", r.omitted_errors.unwrap_or(0))?;
        let packets = count("packets", r.packets)?;
        let errors = count("errors", r.errors)?;
        match (crate::kinds::of(request.kind).bulk(), role) {
            (Some(Transport::Udp), Role::Receiver) => {
                // iperf3's receiver reports the highest sequence seen and
                // the gaps below it, both from the stream's start.
                let span = packets.saturating_sub(omitted_packets);
                let lost = errors.saturating_sub(omitted_errors).min(span);
                s.udp_received = Some(UdpReceiveStats {
                    packets: span - lost,
                    sender_packets: None,
                    lost,
                    out_of_order: 0,
                    duplicates: 0,
                    jitter_seconds: r.jitter,
                    // A stock server does not say how it read, nor what
                    // its socket dropped: unknown, not zero.
                    mode: None,
                    socket_drops: None,
                    coalesced: None,
                    buffers: None,
                });
            }
            (Some(Transport::Udp), Role::Sender) => {
                s.udp_sent = Some(UdpSendStats {
                    packets: packets.saturating_sub(omitted_packets),
                    mode: None,
                });
            }
            (Some(Transport::Tcp), Role::Sender)
                if theirs.sender_has_retransmits == 1 && r.retransmits >= 0 =>
            {
                s.tcp = Some(TcpStats {
                    retransmits: r.retransmits as u64,
                    ..TcpStats::default()
                });
            }
            _ => {}
        }
        streams.push(s);
    }
    Ok(SideStats {
        streams,
        ..SideStats::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(kind: Kind, direction: Direction) -> TestRequest {
        TestRequest {
            kind,
            direction,
            duration_ms: 2000,
            omit_ms: 1000,
            streams: 2,
            bitrate: 100_000_000,
            length: 1400,
            window: None,
            congestion: None,
            tos: Some(0x10),
            affinity: None,
            interval_ms: None,
            no_offload: false,
            rr: None,
            adaptive: None,
        }
    }

    #[test]
    fn stream_ids_skip_two_both_ways() {
        let ids: Vec<i64> = (0..4).map(stream_id).collect();
        assert_eq!(ids, [1, 3, 4, 5]);
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(stream_index(*id, 4), Some(i));
        }
        assert_eq!(stream_index(2, 4), None);
        assert_eq!(stream_index(6, 4), None);
        assert_eq!(stream_index(-1, 4), None);
    }

    #[test]
    fn params_carry_the_test_in_iperf3s_units() {
        let p = params_for(&request(Kind::Udp, Direction::Bidir));
        let text = String::from_utf8(p.encode()).unwrap();
        for want in [
            "\"udp\":true",
            "\"omit\":1",
            "\"time\":2",
            "\"parallel\":2",
            "\"len\":1400",
            "\"bandwidth\":50000000",
            "\"bidirectional\":true",
            "\"TOS\":16",
        ] {
            assert!(text.contains(want), "{want} missing in {text}");
        }
        assert!(!text.contains("tcp") && !text.contains("reverse"), "{text}");
        let tcp = params_for(&TestRequest {
            bitrate: 0,
            ..request(Kind::Tcp, Direction::Receive)
        });
        let text = String::from_utf8(tcp.encode()).unwrap();
        assert!(
            text.contains("\"reverse\":true") && !text.contains("bandwidth"),
            "{text}"
        );
    }

    fn theirs(streams: Vec<StreamResult>) -> Results {
        Results {
            cpu_util_total: 40.0,
            cpu_util_user: 10.0,
            cpu_util_system: 30.0,
            sender_has_retransmits: -1,
            streams,
            ..Results::default()
        }
    }

    #[test]
    fn the_servers_udp_figures_become_loss_after_the_warm_up() {
        let req = request(Kind::Udp, Direction::Send);
        let r = StreamResult {
            id: 3,
            bytes: 1400 * 900,
            jitter: 0.002,
            errors: 12,
            omitted_errors: Some(2),
            packets: 1000,
            omitted_packets: Some(90),
            end_time: 2.0,
            ..StreamResult::default()
        };
        let side = remote_side(&req, &SideStats::default(), &theirs(vec![r])).unwrap();
        let s = &side.streams[0];
        assert_eq!((s.id, s.role), (1, Some(Role::Receiver)));
        let u = s.udp_received.as_ref().unwrap();
        assert_eq!((u.packets, u.lost), (900, 10));
        assert_eq!(u.jitter_seconds, 0.002);
        // The process's CPU, shared over the streams reported.
        assert!((s.cpu_user_seconds - 0.2).abs() < 1e-9);
    }

    #[test]
    fn hostile_results_are_refused() {
        let req = request(Kind::Tcp, Direction::Send);
        let ok = StreamResult {
            id: 1,
            bytes: 10,
            end_time: 2.0,
            ..StreamResult::default()
        };
        assert!(remote_side(&req, &SideStats::default(), &theirs(vec![ok.clone()])).is_ok());
        let bad = [
            StreamResult {
                id: 2,
                ..ok.clone()
            },
            StreamResult {
                bytes: -5,
                ..ok.clone()
            },
            StreamResult {
                end_time: f64::NAN,
                ..ok.clone()
            },
        ];
        for b in bad {
            assert!(
                remote_side(&req, &SideStats::default(), &theirs(vec![b.clone()])).is_err(),
                "{b:?}"
            );
        }
        let many = vec![ok.clone(); 5];
        assert!(remote_side(&req, &SideStats::default(), &theirs(many)).is_err());
        let mut cpu = theirs(vec![ok]);
        cpu.cpu_util_total = -1.0;
        assert!(remote_side(&req, &SideStats::default(), &cpu).is_err());
    }

    #[test]
    fn server_errors_map_to_pathprobes_reasons() {
        assert_eq!(server_error(121, 0).reason(), "busy");
        assert_eq!(server_error(142, 0).reason(), "auth_required");
        assert_eq!(server_error(6, 0).reason(), "rejected");
        assert_eq!(server_error(202, 98).reason(), "aborted");
        assert!(server_error(202, 98)
            .to_string()
            .contains("unable to start stream listener"));
    }
}
