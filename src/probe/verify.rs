//! What the prober checks of a responder's replies before it believes them.
//!
//! A responder is a peer on the network like any other: an impostor at the
//! target's address, a broken build, or a relay can send any bytes. So the
//! terms in `Accepted` may only ever ask for less than was requested (a
//! bigger test would make the prober allocate and send without bound), and
//! the figures in `Results` must be physically consistent with what this
//! side itself sent and timed: a receiver cannot have read more bytes than
//! were written to it, nor over less time than they took to send.
//!
//! With a shared secret the frames are also sealed (see
//! [`crate::auth::FrameSealer`]), so a relay cannot change them at all;
//! these checks hold either way.

use std::time::Duration;

use super::spec::{stream_layout, FlowDirection};
use crate::engine::datapath::{interval_plan, DRAIN_GRACE, MAX_CPUS_REPORTED};
use crate::engine::stats::{Role, SideStats, StreamStats};
use crate::kinds::side::MAX_CPUS;
use crate::protocol::text::{self, TextKind};
use crate::protocol::TestRequest;

/// Slack on time figures: scheduling, the control round trip, the drain.
const TIME_SLACK: Duration = Duration::from_secs(5);
/// UDP buffer errors one host may report over a window: 10 Mpps for a
/// day, far above anything real.
const MAX_UDP_BUFFER_ERRORS: u64 = 1 << 40;

/// No single stream of any host today carries this much; a figure above it
/// is a forgery or a bug, not a measurement.
const MAX_STREAM_BITS_PER_SECOND: f64 = 10e12;

/// Checks that `agreed` asks for no more than `asked` in any field.
pub fn check_accepted(asked: &TestRequest, agreed: &TestRequest) -> Result<(), String> {
    let changed = |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
        Err(format!(
            "the responder's Accepted changed the {what} from {a:?} to {b:?}, which is not a cut-down of the request"
        ))
    };
    if agreed.kind != asked.kind {
        return changed("kind", &asked.kind, &agreed.kind);
    }
    if agreed.direction != asked.direction {
        return changed("direction", &asked.direction, &agreed.direction);
    }
    if agreed.streams == 0 || agreed.streams > asked.streams {
        return changed("streams", &asked.streams, &agreed.streams);
    }
    if agreed.duration_ms == 0 || agreed.duration_ms > asked.duration_ms {
        return changed("duration_ms", &asked.duration_ms, &agreed.duration_ms);
    }
    if agreed.omit_ms > asked.omit_ms {
        return changed("omit_ms", &asked.omit_ms, &agreed.omit_ms);
    }
    let min_length = crate::kinds::of(agreed.kind).length_bounds().min;
    // Message sizes and burst are the test itself: a responder refuses
    // what it will not run, it does not run another.
    if agreed.rr != asked.rr {
        return changed("request/response shape", &asked.rr, &agreed.rr);
    }
    if agreed.length < min_length || agreed.length > asked.length {
        return changed("length", &asked.length, &agreed.length);
    }
    // 0 is unpaced: a paced request may not become unpaced or faster, an
    // unpaced one may become paced.
    if asked.bitrate > 0 && (agreed.bitrate == 0 || agreed.bitrate > asked.bitrate) {
        return changed("bitrate", &asked.bitrate, &agreed.bitrate);
    }
    let window_ok = match (asked.window, agreed.window) {
        (_, None) => true,
        (Some(a), Some(b)) => b <= a,
        (None, Some(_)) => false,
    };
    if !window_ok {
        return changed("window", &asked.window, &agreed.window);
    }
    // Options the responder may drop but never invent.
    if agreed.congestion.is_some() && agreed.congestion != asked.congestion {
        return changed("congestion", &asked.congestion, &agreed.congestion);
    }
    if agreed.tos.is_some() && agreed.tos != asked.tos {
        return changed("tos", &asked.tos, &agreed.tos);
    }
    if agreed.affinity.is_some() && agreed.affinity != asked.affinity {
        return changed("affinity", &asked.affinity, &agreed.affinity);
    }
    if agreed.interval_ms.is_some() && agreed.interval_ms != asked.interval_ms {
        return changed("interval_ms", &asked.interval_ms, &agreed.interval_ms);
    }
    Ok(())
}

/// Checks the responder's figures for `request` against this side's own.
/// Most warnings a responder may send with its results, and their longest
/// length in bytes: they are shown to the user, so a hostile responder must
/// not flood the terminal or the JSON with them.
pub const MAX_WARNINGS: usize = 8;
pub const MAX_WARNING_LEN: usize = TextKind::Warning.max_len();

/// The responder's warnings must be few, and each held to the rule for a
/// peer's strings: a control character (an ANSI escape, a newline) could
/// forge other output lines.
pub fn check_warnings(warnings: &[String]) -> Result<(), String> {
    if warnings.len() > MAX_WARNINGS {
        return Err(format!(
            "the responder sent {} warnings, more than {MAX_WARNINGS}",
            warnings.len()
        ));
    }
    for w in warnings {
        text::check(TextKind::Warning, w).map_err(|e| format!("the responder's warning: {e}"))?;
    }
    Ok(())
}

/// Every string of the responder's `Results` held to the one rule for a
/// peer's strings (see [`crate::protocol::text`]), each to its kind's
/// length: the release, the interface, each stream's congestion control,
/// the warnings, the fingerprint. They are shown on the terminal, in
/// label values, on pages and in logs, so one that breaks the rule
/// refuses the whole result.
pub fn check_strings(remote: &SideStats) -> Result<(), String> {
    check_warnings(&remote.warnings)?;
    text::check(TextKind::Release, &remote.kernel_release)
        .map_err(|e| format!("the responder's results: {e}"))?;
    if let Some(i) = &remote.interface {
        text::check(TextKind::Interface, i).map_err(|e| format!("the responder's results: {e}"))?;
    }
    for s in &remote.streams {
        if let Some(c) = &s.congestion {
            text::check(TextKind::Congestion, c)
                .map_err(|e| format!("the responder's stream {}: {e}", s.id))?;
        }
    }
    if let Some(f) = &remote.fingerprint {
        f.check()
            .map_err(|e| format!("the responder's host fingerprint: {e}"))?;
    }
    Ok(())
}

pub fn check_results(
    request: &TestRequest,
    local: &SideStats,
    remote: &SideStats,
) -> Result<(), String> {
    check_results_over(request, local, remote, 0.0)
}

/// [`check_results`] for an adaptive test whose figures the responder
/// cut to a span that starts `span_start` seconds into this side's
/// streams (the span this side chose and sent in `End`). This side's
/// figures are still whole, so the span's time is what the responder's
/// window is held to, not the whole test's: a test that converged at
/// 1.7 s over a span from 1.1 s has the responder receive over 0.6 s.
pub fn check_results_over(
    request: &TestRequest,
    local: &SideStats,
    remote: &SideStats,
    span_start: f64,
) -> Result<(), String> {
    check_strings(remote)?;
    let layout = stream_layout(request.direction, request.streams);
    let max_seconds = (Duration::from_millis(request.omit_ms.saturating_add(request.duration_ms))
        + DRAIN_GRACE
        + TIME_SLACK)
        .as_secs_f64();
    if remote.streams.len() > layout.len() {
        return Err(format!(
            "the responder reported {} streams for a test of {}",
            remote.streams.len(),
            layout.len()
        ));
    }
    let mut seen = vec![false; layout.len()];
    for s in &remote.streams {
        let id = s.id as usize;
        let Some(&direction) = layout.get(id) else {
            return Err(format!(
                "the responder reported stream {id}, which this test does not have"
            ));
        };
        if std::mem::replace(&mut seen[id], true) {
            return Err(format!("the responder reported stream {id} twice"));
        }
        // The responder receives what the prober sends, and the reverse.
        let role = match direction {
            FlowDirection::Send => Role::Receiver,
            FlowDirection::Receive => Role::Sender,
        };
        if s.direction.is_some_and(|d| d != direction) || s.role.is_some_and(|r| r != role) {
            return Err(format!(
                "the responder reported stream {id} as {:?} {:?}; it is {direction:?}, and the responder's role in it is {role:?}",
                s.direction, s.role
            ));
        }
        check_stream_figures(s, max_seconds).map_err(|e| format!("stream {id}: {e}"))?;
        check_intervals(request, s, max_seconds).map_err(|e| format!("stream {id}: {e}"))?;
        if role == Role::Receiver {
            let sent = local.streams.iter().find(|l| l.id == s.id);
            check_received_against_sent(request, s, sent, span_start)
                .map_err(|e| format!("stream {id}: {e}"))?;
        } else {
            let got = local.streams.iter().find(|l| l.id == s.id);
            check_sent_against_received(request, s, got, span_start)
                .map_err(|e| format!("stream {id}: {e}"))?;
        }
    }
    check_sent_against_rate(request, remote)?;
    let h = &remote.host;
    for (name, v) in [
        ("cpu_utilization", h.cpu_utilization),
        ("cpu_user", h.cpu_user),
        ("cpu_system", h.cpu_system),
    ] {
        if !(0.0..=1.0 + 1e-9).contains(&v) {
            return Err(format!(
                "the responder's host {name} is {v}, not a fraction"
            ));
        }
    }
    if h.cpus.len() > MAX_CPUS {
        return Err(format!("the responder reported {} CPUs", h.cpus.len()));
    }
    for c in &h.cpus {
        for (name, v) in [
            ("busy", c.busy),
            ("irq", c.irq),
            ("softirq", c.softirq),
            ("steal", c.steal),
        ] {
            if !(0.0..=1.0 + 1e-9).contains(&v) {
                return Err(format!(
                    "the responder's CPU {} {name} is {v}, not a fraction",
                    c.cpu
                ));
            }
        }
    }
    if let Some(u) = &h.udp_buffer_errors {
        // Host-wide, so other sockets' drops count too; but no host drops
        // this many datagrams in one window, and a figure this large would
        // swamp every ratio the verdict takes.
        if u.receive.max(u.send) > MAX_UDP_BUFFER_ERRORS {
            return Err(format!(
                "the responder's host reported {} UDP buffer errors",
                u.receive.max(u.send)
            ));
        }
    }
    // The kernel keeps tcp_rmem in an int.
    if h.tcp_rmem_max.max(h.tcp_wmem_max).unwrap_or(0) > i32::MAX as u64 {
        return Err(format!(
            "the responder's tcp_rmem/tcp_wmem max is {:?}/{:?}",
            h.tcp_rmem_max, h.tcp_wmem_max
        ));
    }
    if let Some(t) = &h.cpu_throttle {
        // The verdict reads the throttled share as the side's CPU demand;
        // a forged one must not pass for it.
        let quota_ok = t.quota_cpus.is_none_or(|q| q.is_finite() && q > 0.0);
        if t.throttled_periods > t.periods
            || !t.throttled_seconds.is_finite()
            || t.throttled_seconds < 0.0
            || !quota_ok
        {
            return Err(format!(
                "the responder's CPU cgroup figures are impossible: {t:?}"
            ));
        }
    }
    Ok(())
}

/// Every figure finite, non-negative, and within the test's time.
fn check_stream_figures(s: &StreamStats, max_seconds: f64) -> Result<(), String> {
    let mut times = vec![
        ("seconds", s.seconds),
        ("cpu_user_seconds", s.cpu_user_seconds),
        ("cpu_system_seconds", s.cpu_system_seconds),
    ];
    if let Some(t) = &s.tcp {
        times.extend([
            ("rtt_seconds", t.rtt_seconds),
            ("rttvar_seconds", t.rttvar_seconds),
            ("min_rtt_seconds", t.min_rtt_seconds),
        ]);
    }
    if let Some(u) = &s.udp_received {
        times.push(("jitter_seconds", u.jitter_seconds));
        // SO_RXQ_OVFL is a 32-bit count.
        if u.socket_drops.unwrap_or(0) > u64::from(u32::MAX) {
            return Err(format!(
                "{:?} datagrams dropped at the socket",
                u.socket_drops
            ));
        }
        // Each counted buffer brought at least one counted datagram.
        if u.buffers.unwrap_or(0) > u.packets {
            return Err(format!(
                "{:?} buffers for {} datagrams received",
                u.buffers, u.packets
            ));
        }
    }
    if let Some(t) = &s.sched {
        times.extend([
            ("run_seconds", t.run_seconds),
            ("wait_seconds", t.wait_seconds),
        ]);
        if t.cpus.len() > MAX_CPUS_REPORTED {
            return Err(format!("{} CPUs for one data thread", t.cpus.len()));
        }
    }
    if let Some(l) = &s.tcp_limits {
        for (name, v) in [
            ("busy_seconds", l.busy_seconds),
            ("rwnd_limited_seconds", l.rwnd_limited_seconds),
            ("sndbuf_limited_seconds", l.sndbuf_limited_seconds),
            ("rcv_rtt_seconds", l.rcv_rtt_seconds),
        ] {
            times.extend(v.map(|v| (name, v)));
        }
        if let Some(r) = l.delivery_rate_bits_per_second {
            if !r.is_finite() || !(0.0..=MAX_STREAM_BITS_PER_SECOND).contains(&r) {
                return Err(format!("delivery rate {r} is not a rate"));
            }
        }
    }
    for (name, v) in times {
        if !v.is_finite() || v < 0.0 || v > max_seconds {
            return Err(format!("{name} is {v}, outside 0 to {max_seconds} s"));
        }
    }
    if s.cpu_user_seconds + s.cpu_system_seconds > max_seconds {
        return Err("the data thread used more CPU than the test lasted".into());
    }
    if s.bytes > 0 {
        let floor = s.seconds.max(0.001);
        if s.bytes as f64 * 8.0 / floor > MAX_STREAM_BITS_PER_SECOND {
            return Err(format!(
                "{} bytes in {} s is beyond any stream's rate",
                s.bytes, s.seconds
            ));
        }
    }
    Ok(())
}

/// A stream's intervals: no more than the agreed plan makes (two spare),
/// every time finite and within the test, in order, and adding up to no
/// more than the stream's own totals. Otherwise a responder could have the
/// prober hold and print any number of them, or show a rate the stream's
/// totals do not carry.
fn check_intervals(request: &TestRequest, s: &StreamStats, max_seconds: f64) -> Result<(), String> {
    if s.intervals.is_empty() {
        return Ok(());
    }
    let most = interval_plan(
        request.interval_ms,
        request.duration_ms,
        request.total_streams(),
    )
    .map_or(0, |p| p.count + 2);
    if s.intervals.len() > most {
        return Err(format!(
            "{} intervals, where the test makes at most {most}",
            s.intervals.len()
        ));
    }
    let mut previous_end = 0.0f64;
    let (mut bytes, mut packets, mut retransmits) = (0u64, 0u64, 0u64);
    for (k, i) in s.intervals.iter().enumerate() {
        for (name, v) in [("start", i.start), ("end", i.end)] {
            if !v.is_finite() || v < 0.0 || v > max_seconds {
                return Err(format!(
                    "interval {k}'s {name} is {v}, outside 0 to {max_seconds} s"
                ));
            }
        }
        // A little slack for rounding between an end and the next start.
        if i.end < i.start || i.start + 1e-6 < previous_end {
            return Err(format!(
                "interval {k} runs from {} to {} s, after one ending at {previous_end} s",
                i.start, i.end
            ));
        }
        previous_end = i.end;
        bytes = bytes.saturating_add(i.bytes);
        packets = packets.saturating_add(i.packets.unwrap_or(0));
        retransmits = retransmits.saturating_add(i.retransmits.unwrap_or(0));
        if i.lost.unwrap_or(0) > u64::from(u32::MAX) {
            return Err(format!("interval {k} lost {:?} datagrams", i.lost));
        }
    }
    // Honest intervals add up to the totals exactly; one write's worth of
    // slack covers a boundary.
    let slack = u64::from(request.length);
    if bytes > s.bytes.saturating_add(slack) {
        return Err(format!(
            "its intervals add up to {bytes} bytes, the stream to {}",
            s.bytes
        ));
    }
    let total_packets = s
        .udp_received
        .as_ref()
        .map(|u| u.packets)
        .or(s.udp_sent.as_ref().map(|u| u.packets))
        .unwrap_or(0);
    if packets > total_packets.saturating_add(1) {
        return Err(format!(
            "its intervals add up to {packets} datagrams, the stream to {total_packets}"
        ));
    }
    // The sender reads TCP_INFO once more after its last interval.
    let total_retransmits = s.tcp.as_ref().map_or(0, |t| t.retransmits);
    if retransmits > total_retransmits.saturating_add(64) {
        return Err(format!(
            "its intervals add up to {retransmits} retransmits, the stream to {total_retransmits}"
        ));
    }
    Ok(())
}

/// The responder cannot have received more than this side sent, nor in
/// much less time than the sending took. Bytes written before this side's
/// warm-up ended may still arrive inside the receiver's window, so with a
/// warm-up the bound allows the socket buffers' worth on top.
fn check_received_against_sent(
    request: &TestRequest,
    received: &StreamStats,
    sent: Option<&StreamStats>,
    span_start: f64,
) -> Result<(), String> {
    let Some(sent) = sent else {
        // Our sender produced no figures (its thread failed): nothing it
        // sent can be vouched for, so nothing received can be believed.
        return if received.bytes == 0 {
            Ok(())
        } else {
            Err("the responder reports data on a stream this side never measured sending".into())
        };
    };
    let slack = if request.omit_ms > 0 {
        sent.send_buffer_bytes
            .saturating_mul(2)
            .saturating_add(received.receive_buffer_bytes.min(256 << 20))
            .saturating_add(4 << 20)
    } else {
        0
    };
    if received.bytes > sent.bytes.saturating_add(slack) {
        return Err(format!(
            "the responder reports receiving {} bytes; this side sent {}",
            received.bytes, sent.bytes
        ));
    }
    if let (Some(r), Some(s)) = (&received.udp_received, &sent.udp_sent) {
        let slack_packets = if request.omit_ms > 0 {
            slack / u64::from(request.length.max(1))
        } else {
            0
        };
        if r.packets > s.packets.saturating_add(slack_packets) {
            return Err(format!(
                "the responder reports receiving {} datagrams; this side sent {}",
                r.packets, s.packets
            ));
        }
    }
    // Received bytes were sent over at least most of the sender's window;
    // a much shorter receiver window would inflate the throughput.
    let sent_seconds = (sent.seconds - span_start).max(0.0);
    if received.bytes > 0 && sent_seconds > 0.2 && received.seconds < sent_seconds * 0.5 - 0.1 {
        return Err(format!(
            "the responder reports receiving over {} s what took {} s to send",
            received.seconds, sent_seconds
        ));
    }
    Ok(())
}

/// How far a paced sender may run ahead of its agreed rate: pacing is
/// checked per tick and a window's edges are fuzzy, but never by half.
const PACED_RATE_MARGIN: f64 = 1.25;
/// A paced sender's burst on top of its rate, per stream: a few pacing
/// ticks of 64 KiB writes or GSO batches.
const PACED_BURST_BYTES: u64 = 1 << 20;

/// The most bytes a sender paced at `request.bitrate` (summed over the
/// direction) can have written in the test's time, or `None` if unpaced.
fn paced_bytes_bound(request: &TestRequest, streams: u64) -> Option<u64> {
    if request.bitrate == 0 || request.rr.is_some() {
        return None;
    }
    let seconds = Duration::from_millis(request.omit_ms.saturating_add(request.duration_ms))
        .as_secs_f64()
        + 1.0;
    let bytes = request.bitrate as f64 / 8.0 * seconds * PACED_RATE_MARGIN;
    Some((bytes as u64).saturating_add(PACED_BURST_BYTES.saturating_mul(streams.max(1))))
}

/// What the responder says it sent cannot be more than this side can
/// bound: no more than the agreed rate allows over the test's time (summed
/// over its sending streams, since the rate is the direction's), and no
/// faster than that rate over the sender's own window. Otherwise a peer
/// could claim a billion datagrams sent for the 1,760 that arrived and
/// make the prober report 99.9998% loss, or a sender rate of terabits.
fn check_sent_against_rate(request: &TestRequest, remote: &SideStats) -> Result<(), String> {
    let senders: Vec<&StreamStats> = remote
        .streams
        .iter()
        .filter(|s| s.role == Some(Role::Sender))
        .collect();
    let Some(most) = paced_bytes_bound(request, senders.len() as u64) else {
        return Ok(());
    };
    let len = u64::from(request.length.max(1));
    let bytes: u64 = senders.iter().fold(0u64, |a, s| a.saturating_add(s.bytes));
    let packets: u64 = senders
        .iter()
        .filter_map(|s| s.udp_sent.as_ref())
        .fold(0u64, |a, u| a.saturating_add(u.packets));
    if bytes > most {
        return Err(format!(
            "the responder reports sending {bytes} bytes; at the agreed {} bit/s the test allows at most {most}",
            request.bitrate
        ));
    }
    let most_packets = most / len + 64 * senders.len() as u64;
    if packets > most_packets {
        return Err(format!(
            "the responder reports sending {packets} datagrams; at the agreed {} bit/s and {len} bytes the test allows at most {most_packets}",
            request.bitrate
        ));
    }
    for s in &senders {
        // Over a short window a burst is most of the figure; over half a
        // second a sender faster than the whole direction's rate is not
        // the paced sender agreed on.
        if s.seconds >= 0.5 {
            let bps = s.bytes as f64 * 8.0 / s.seconds;
            let cap = request.bitrate as f64 * PACED_RATE_MARGIN
                + PACED_BURST_BYTES as f64 * 8.0 / s.seconds;
            if bps > cap {
                return Err(format!(
                    "stream {}: the responder reports sending at {bps:.0} bit/s, over the agreed {} bit/s",
                    s.id, request.bitrate
                ));
            }
        }
    }
    Ok(())
}

/// A stream the responder sent and this side received: a TCP sender
/// cannot have written much more than arrived (what it wrote is delivered
/// unless the connection broke, which fails the test), and no sender can
/// have sent over a much shorter time than this side took to receive it.
fn check_sent_against_received(
    request: &TestRequest,
    sent: &StreamStats,
    got: Option<&StreamStats>,
    span_start: f64,
) -> Result<(), String> {
    if request.rr.is_some() {
        return Ok(());
    }
    let Some(got) = got else {
        return Ok(());
    };
    if crate::kinds::of(request.kind).transport() == crate::kinds::kind::Transport::Tcp {
        // Bytes in flight at either edge of the window: both socket
        // buffers, and a margin for a window that starts after warm-up.
        let slack = sent
            .send_buffer_bytes
            .min(256 << 20)
            .saturating_mul(2)
            .saturating_add(got.receive_buffer_bytes.min(256 << 20))
            .saturating_add(4 << 20);
        if sent.bytes > got.bytes.saturating_add(slack) {
            return Err(format!(
                "the responder reports sending {} bytes; {} arrived",
                sent.bytes, got.bytes
            ));
        }
    }
    let got_seconds = (got.seconds - span_start).max(0.0);
    if sent.bytes > 0 && got_seconds > 0.2 && sent.seconds < got_seconds * 0.5 - 0.1 {
        return Err(format!(
            "the responder reports sending over {} s what took {} s to arrive",
            sent.seconds, got_seconds
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::model::IntervalStats;
    use crate::protocol::Kind;
    use crate::protocol::{Direction, TcpStats, UdpReceiveStats, UdpSendStats};

    fn asked() -> TestRequest {
        TestRequest {
            kind: Kind::Tcp,
            direction: Direction::Bidir,
            duration_ms: 5000,
            omit_ms: 0,
            streams: 2,
            bitrate: 100_000_000,
            length: 128 * 1024,
            window: Some(1 << 20),
            congestion: Some("cubic".into()),
            tos: Some(8),
            affinity: None,
            interval_ms: None,
            no_offload: false,
            rr: None,
            adaptive: None,
        }
    }

    #[test]
    fn accepted_may_ask_for_less_but_never_more() {
        assert!(check_accepted(&asked(), &asked()).is_ok());
        let less = TestRequest {
            streams: 1,
            duration_ms: 1000,
            bitrate: 1_000_000,
            length: 1000,
            window: None,
            congestion: None,
            tos: None,
            ..asked()
        };
        assert!(check_accepted(&asked(), &less).is_ok());
        let more = [
            TestRequest {
                streams: u32::MAX,
                ..asked()
            },
            TestRequest {
                streams: 0,
                ..asked()
            },
            TestRequest {
                length: 1 << 30,
                ..asked()
            },
            TestRequest {
                omit_ms: u64::MAX,
                ..asked()
            },
            TestRequest {
                duration_ms: 5001,
                ..asked()
            },
            TestRequest {
                bitrate: 0,
                ..asked()
            },
            TestRequest {
                bitrate: 100_000_001,
                ..asked()
            },
            TestRequest {
                window: Some(2 << 20),
                ..asked()
            },
            TestRequest {
                kind: Kind::Udp,
                ..asked()
            },
            TestRequest {
                direction: Direction::Send,
                ..asked()
            },
            TestRequest {
                congestion: Some("bbr".into()),
                ..asked()
            },
            TestRequest {
                affinity: Some(0),
                ..asked()
            },
        ];
        for m in more {
            let e = check_accepted(&asked(), &m).unwrap_err();
            assert!(e.contains("not a cut-down"), "{e}");
        }
        let unpaced = TestRequest {
            bitrate: 0,
            window: None,
            ..asked()
        };
        assert!(check_accepted(
            &unpaced,
            &TestRequest {
                bitrate: 5,
                ..unpaced.clone()
            }
        )
        .is_ok());
        assert!(check_accepted(
            &unpaced,
            &TestRequest {
                window: Some(1),
                ..unpaced.clone()
            }
        )
        .is_err());
    }

    fn stream(id: u32, direction: FlowDirection, role: Role, bytes: u64) -> StreamStats {
        StreamStats {
            id,
            direction: Some(direction),
            role: Some(role),
            bytes,
            seconds: 5.0,
            cpu_user_seconds: 0.5,
            cpu_system_seconds: 2.0,
            send_buffer_bytes: 1 << 20,
            receive_buffer_bytes: 1 << 20,
            tcp: Some(TcpStats {
                rtt_seconds: 0.001,
                ..TcpStats::default()
            }),
            ..StreamStats::default()
        }
    }

    fn sides() -> (TestRequest, SideStats, SideStats) {
        use FlowDirection::*;
        let request = TestRequest {
            direction: Direction::Bidir,
            streams: 1,
            ..asked()
        };
        let local = SideStats {
            streams: vec![
                stream(0, Send, Role::Sender, 60_000_000),
                stream(1, Receive, Role::Receiver, 50_000_000),
            ],
            ..SideStats::default()
        };
        let remote = SideStats {
            streams: vec![
                stream(0, Send, Role::Receiver, 60_000_000),
                stream(1, Receive, Role::Sender, 50_000_000),
            ],
            ..SideStats::default()
        };
        (request, local, remote)
    }

    /// `sides()` with 0.5 s intervals over its 5 s: ten per stream, each
    /// holding a tenth of the stream's bytes.
    fn sides_with_intervals() -> (TestRequest, SideStats, SideStats) {
        let (mut request, local, mut remote) = sides();
        request.duration_ms = 5000;
        request.interval_ms = Some(500);
        for s in &mut remote.streams {
            s.intervals = (0..10)
                .map(|k| IntervalStats {
                    start: k as f64 * 0.5,
                    end: (k + 1) as f64 * 0.5,
                    bytes: s.bytes / 10,
                    retransmits: Some(0),
                    ..IntervalStats::default()
                })
                .collect();
        }
        (request, local, remote)
    }

    #[test]
    fn honest_intervals_pass_and_forged_ones_are_refused() {
        let (request, local, remote) = sides_with_intervals();
        check_results(&request, &local, &remote).unwrap();
        let forge = |f: &dyn Fn(&mut StreamStats)| {
            let mut r = remote.clone();
            f(&mut r.streams[0]);
            check_results(&request, &local, &r).unwrap_err()
        };
        type Forgery = Box<dyn Fn(&mut StreamStats)>;
        let cases: Vec<(&str, Forgery)> = vec![
            (
                "at most 12",
                Box::new(|s| {
                    let extra = s.intervals[9].clone();
                    s.intervals.extend(std::iter::repeat_n(extra, 100_000));
                }),
            ),
            ("end is NaN", Box::new(|s| s.intervals[3].end = f64::NAN)),
            ("start is -1", Box::new(|s| s.intervals[0].start = -1.0)),
            ("after one ending", Box::new(|s| s.intervals.swap(2, 5))),
            (
                "add up to",
                Box::new(|s| s.intervals[4].bytes = u64::MAX / 2),
            ),
            (
                "retransmits",
                Box::new(|s| s.intervals[1].retransmits = Some(1_000_000)),
            ),
        ];
        for (expect, f) in cases {
            let e = forge(&*f);
            assert!(e.contains(expect), "{expect}: {e}");
        }
        // Intervals where none were asked for are refused too.
        let unasked = TestRequest {
            interval_ms: None,
            rr: None,
            ..request.clone()
        };
        assert!(check_results(&unasked, &local, &remote)
            .unwrap_err()
            .contains("at most 0"));
        // A responder may drop the interval, never change it.
        assert!(check_accepted(&request, &unasked).is_ok());
        let changed = TestRequest {
            interval_ms: Some(1),
            ..request.clone()
        };
        assert!(check_accepted(&request, &changed).is_err());
    }

    /// An adaptive test that converged at 1.7 s over a span from 1.1 s:
    /// the responder's figures cover 0.6 s of this side's 1.7 s (seen in
    /// a CI run, refused as a short window before the span was counted).
    /// The span does not let a still shorter window through.
    #[test]
    fn a_window_is_held_to_the_adaptive_span_not_the_whole_test() {
        let (mut request, mut local, mut remote) = sides();
        // Unpaced, so that the rate bound does not speak first.
        request.bitrate = 0;
        for s in &mut local.streams {
            s.seconds = 1.7;
        }
        for s in &mut remote.streams {
            s.seconds = 0.606;
        }
        let e = check_results(&request, &local, &remote).unwrap_err();
        assert!(e.contains("over 0.606 s what took 1.7 s"), "{e}");
        check_results_over(&request, &local, &remote, 1.1).unwrap();
        for s in &mut remote.streams {
            s.seconds = 0.15;
        }
        let e = check_results_over(&request, &local, &remote, 1.1).unwrap_err();
        assert!(e.contains("over 0.15 s"), "{e}");
    }

    #[test]
    fn honest_results_pass() {
        let (request, local, remote) = sides();
        check_results(&request, &local, &remote).unwrap();
        // A responder whose stream thread failed reports fewer streams.
        let fewer = SideStats {
            streams: remote.streams[1..].to_vec(),
            ..remote
        };
        check_results(&request, &local, &fewer).unwrap();
    }

    #[test]
    fn forged_results_are_refused() {
        let (request, local, remote) = sides();
        let forge = |f: &dyn Fn(&mut SideStats)| {
            let mut r = remote.clone();
            f(&mut r);
            check_results(&request, &local, &r).unwrap_err()
        };
        type Forgery = Box<dyn Fn(&mut SideStats)>;
        let cases: Vec<(&str, Forgery)> = vec![
            ("sent 60000000", Box::new(|r| r.streams[0].bytes *= 250)),
            (
                "took 5 s to send",
                Box::new(|r| r.streams[0].seconds = 0.01),
            ),
            (
                "stream 0 twice",
                Box::new(|r| {
                    r.streams.truncate(1);
                    let extra = r.streams[0].clone();
                    r.streams.push(extra);
                }),
            ),
            ("does not have", Box::new(|r| r.streams[1].id = 7)),
            ("role", Box::new(|r| r.streams[0].role = Some(Role::Sender))),
            (
                "seconds is NaN",
                Box::new(|r| r.streams[1].seconds = f64::NAN),
            ),
            (
                "cpu_user_seconds is -1",
                Box::new(|r| r.streams[1].cpu_user_seconds = -1.0),
            ),
            (
                "rtt_seconds is inf",
                Box::new(|r| r.streams[1].tcp.as_mut().unwrap().rtt_seconds = f64::INFINITY),
            ),
            (
                "beyond any stream",
                Box::new(|r| {
                    r.streams[1].bytes = u64::MAX / 2;
                    r.streams[1].seconds = 1.0;
                }),
            ),
            ("not a fraction", Box::new(|r| r.host.cpu_utilization = 3.0)),
        ];
        for (want, f) in cases {
            let e = forge(&*f);
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn udp_datagrams_received_cannot_exceed_those_sent() {
        let (mut request, mut local, mut remote) = sides();
        request.kind = Kind::Udp;
        local.streams[0].udp_sent = Some(UdpSendStats {
            packets: 1000,
            mode: None,
        });
        remote.streams[0].udp_received = Some(UdpReceiveStats {
            packets: 1000,
            ..UdpReceiveStats::default()
        });
        check_results(&request, &local, &remote).unwrap();
        remote.streams[0].udp_received.as_mut().unwrap().packets = 1001;
        let e = check_results(&request, &local, &remote).unwrap_err();
        assert!(e.contains("1001 datagrams"), "{e}");
        remote.streams[0].udp_received.as_mut().unwrap().packets = 1000;
        remote.streams[0]
            .udp_received
            .as_mut()
            .unwrap()
            .socket_drops = Some(u64::MAX);
        let e = check_results(&request, &local, &remote).unwrap_err();
        assert!(e.contains("dropped at the socket"), "{e}");
    }

    /// A sender's counts are held to the agreed rate and
    /// to what arrived, so a claimed 10^9 datagrams for 1,760 received, or
    /// a 4 Tbit/s sender, is refused rather than reported as loss.
    #[test]
    fn sender_counts_beyond_the_agreed_rate_or_what_arrived_are_refused() {
        use FlowDirection::Receive;
        let request = TestRequest {
            kind: Kind::Udp,
            direction: Direction::Receive,
            streams: 1,
            duration_ms: 2000,
            bitrate: 10_000_000,
            length: 1420,
            window: None,
            ..asked()
        };
        let mut got = stream(0, Receive, Role::Receiver, 1760 * 1420);
        got.seconds = 2.0;
        got.tcp = None;
        got.udp_received = Some(UdpReceiveStats {
            packets: 1760,
            ..UdpReceiveStats::default()
        });
        let local = SideStats {
            streams: vec![got],
            ..SideStats::default()
        };
        let mut sent = stream(0, Receive, Role::Sender, 1760 * 1420);
        sent.seconds = 2.0;
        sent.tcp = None;
        sent.udp_sent = Some(UdpSendStats {
            packets: 1760,
            mode: None,
        });
        let honest = SideStats {
            streams: vec![sent],
            ..SideStats::default()
        };
        check_results(&request, &local, &honest).unwrap();
        let mut lie = honest.clone();
        lie.streams[0].udp_sent.as_mut().unwrap().packets = 1_000_000_000;
        let e = check_results(&request, &local, &lie).unwrap_err();
        assert!(e.contains("1000000000 datagrams"), "{e}");
        // 4 Tbit/s over the window.
        let mut lie = honest.clone();
        lie.streams[0].bytes = 1_000_000_000_000;
        let e = check_results(&request, &local, &lie).unwrap_err();
        assert!(e.contains("bytes"), "{e}");
        // The right bytes over a window of a millisecond.
        let mut lie = honest.clone();
        lie.streams[0].seconds = 0.001;
        let e = check_results(&request, &local, &lie).unwrap_err();
        assert!(e.contains("what took 2 s to arrive"), "{e}");
        // Reverse TCP, unpaced: no more written than arrived, give or
        // take the buffers.
        let tcp = TestRequest {
            kind: Kind::Tcp,
            bitrate: 0,
            ..request.clone()
        };
        let mut lie = honest.clone();
        lie.streams[0].udp_sent = None;
        lie.streams[0].bytes = 1 << 40;
        let e = check_results(&tcp, &local, &lie).unwrap_err();
        assert!(e.contains("arrived"), "{e}");
    }

    #[test]
    fn forged_limit_evidence_is_refused() {
        use crate::engine::stats::{CpuLoad, TcpLimits, ThreadSched};
        let (req, local, remote) = sides();
        let mut ok = remote.clone();
        ok.streams[0].sched = Some(ThreadSched {
            run_seconds: 1.0,
            wait_seconds: 0.5,
            involuntary_switches: 3,
            cpus: vec![1],
        });
        ok.streams[0].tcp_limits = Some(TcpLimits {
            rcv_rtt_seconds: Some(0.001),
            ..TcpLimits::default()
        });
        ok.host.cpus = vec![CpuLoad {
            cpu: 1,
            busy: 0.9,
            irq: 0.0,
            softirq: 0.3,
            interface_interrupts: 5,
            steal: 0.0,
        }];
        check_results(&req, &local, &ok).unwrap();
        let forge = |f: &dyn Fn(&mut SideStats)| {
            let mut r = ok.clone();
            f(&mut r);
            check_results(&req, &local, &r)
        };
        assert!(forge(&|r| r.streams[0].sched.as_mut().unwrap().wait_seconds = f64::NAN).is_err());
        assert!(forge(&|r| r.streams[0].sched.as_mut().unwrap().run_seconds = 1e9).is_err());
        assert!(
            forge(&|r| r.streams[0].sched.as_mut().unwrap().cpus = (0..100).collect()).is_err()
        );
        assert!(forge(&|r| r.streams[0]
            .tcp_limits
            .as_mut()
            .unwrap()
            .rwnd_limited_seconds = Some(-1.0))
        .is_err());
        assert!(forge(&|r| r.streams[0]
            .tcp_limits
            .as_mut()
            .unwrap()
            .delivery_rate_bits_per_second = Some(f64::INFINITY))
        .is_err());
        assert!(forge(&|r| r.host.cpus[0].softirq = 7.0).is_err());
        let errors =
            |receive, send| Some(crate::protocol::model::UdpBufferErrors { receive, send });
        assert!(forge(&|r| r.host.udp_buffer_errors = errors(12, 0)).is_ok());
        assert!(forge(&|r| r.host.udp_buffer_errors = errors(u64::MAX, 0)).is_err());
        assert!(forge(&|r| r.host.udp_buffer_errors = errors(0, 1 << 41)).is_err());
        assert!(forge(&|r| r.host.tcp_rmem_max = Some(6_291_456)).is_ok());
        assert!(forge(&|r| r.host.tcp_rmem_max = Some(u64::MAX)).is_err());
        assert!(forge(&|r| r.host.tcp_wmem_max = Some(1 << 40)).is_err());
        let throttle = |periods, throttled, seconds: f64| {
            Some(crate::protocol::model::CpuThrottle {
                periods,
                throttled_periods: throttled,
                throttled_seconds: seconds,
                quota_cpus: Some(0.15),
            })
        };
        assert!(forge(&|r| r.host.cpu_throttle = throttle(10, 11, 0.1)).is_err());
        assert!(forge(&|r| r.host.cpu_throttle = throttle(10, 9, f64::NAN)).is_err());
        assert!(forge(&|r| r.host.cpu_throttle = throttle(10, 9, -1.0)).is_err());
        // A host fingerprint is shown and kept: a forged one is refused.
        let fp = |name: &str, value: &str| {
            Some(crate::protocol::fingerprint::HostFingerprint {
                settings: [(name.to_string(), value.to_string())].into(),
            })
        };
        assert!(forge(&|r| r.fingerprint = fp("kernel", "6.18.44")).is_ok());
        assert!(forge(&|r| r.fingerprint = fp("kernel", "6\x1b[2J")).is_err());
        assert!(forge(&|r| r.fingerprint = fp("kernel", &"9".repeat(10_000))).is_err());
        assert!(forge(&|r| r.host.cpus = vec![CpuLoad::default(); 1000]).is_err());
        // Every string is held to one rule: printable ASCII of its kind's
        // length. Whatever the responder's release, interface and
        // congestion control, a terminal, a label and a log line are safe.
        assert!(forge(&|r| r.kernel_release = "6.1.0-13-amd64".into()).is_ok());
        assert!(forge(&|r| r.kernel_release = "6.1\x1b]0;owned\x07".into()).is_err());
        assert!(forge(&|r| r.kernel_release = "9".repeat(129)).is_err());
        assert!(forge(&|r| r.interface = Some("enp0s31f6".into())).is_ok());
        assert!(forge(&|r| r.interface = Some("eth0\rlevel=error".into())).is_err());
        assert!(forge(&|r| r.interface = Some("e".repeat(100_000))).is_err());
        assert!(forge(&|r| r.streams[0].congestion = Some("bbr".into())).is_ok());
        assert!(forge(&|r| r.streams[0].congestion = Some("cubic\x07".into())).is_err());
        assert!(forge(&|r| r.streams[0].congestion = Some("c".repeat(16))).is_err());
        assert!(forge(&|r| r.warnings = vec!["caf\u{e9}".into()]).is_err());
    }

    #[test]
    fn responder_warnings_are_few_short_and_plain() {
        let ok = vec!["could not pin the data threads to CPU 9: Invalid argument".to_string()];
        assert_eq!(check_warnings(&ok), Ok(()));
        assert_eq!(check_warnings(&vec!["w".to_string(); MAX_WARNINGS]), Ok(()));
        assert_eq!(
            check_warnings(&vec!["w".to_string(); MAX_WARNINGS + 1]).unwrap_err(),
            "the responder sent 9 warnings, more than 8"
        );
        assert!(check_warnings(&["x".repeat(MAX_WARNING_LEN + 1)]).is_err());
        assert!(check_warnings(&["ok\x1b[2Jforged".to_string()]).is_err());
        assert!(check_warnings(&["two\nlines".to_string()]).is_err());
        // And check_results applies it.
        let request = asked();
        let remote = SideStats {
            warnings: vec!["w".to_string(); 100],
            ..SideStats::default()
        };
        assert!(check_results(&request, &SideStats::default(), &remote)
            .unwrap_err()
            .contains("100 warnings"));
    }
}
