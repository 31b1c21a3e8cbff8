//! Output of `pathprobe probe`: nuttcp-style lines for people, one JSON
//! document for programs.
//!
//! ```text
//! send     6348.3594 MiB / 10.00 sec = 5322.9641 Mbps 99 %TX 66 %RX 0 retrans 0.19 msRTT limited by sender_cpu (strength 0.99)
//! receive  1.1924 MiB / 10.00 sec = 1.0002 Mbps 0 %TX 0 %RX 0 / 864 drop/pkt 0.00 %loss 0.021 msJitter limited by rate_limit (strength 1.00)
//! ```
//!
//! Each line ends with what limited that direction (docs/DIAGNOSIS.md);
//! `-v` adds the evidence behind it.
//!
//! Every line starts with the way data moved, seen from the prober (`send`
//! is prober to responder, `receive` is `-R`), so that a reverse test never
//! reads as a forward one. Sizes are MiB (2^20 bytes), rates Mbps (10^6
//! bits per second), as nuttcp prints them.

#![warn(missing_docs)]

use std::fmt::Write as _;

use serde_json::json;

use crate::analysis::result::{DirectionSummary, IntervalFigures, ProbeResult};
use crate::engine::datapath::{IntervalEvent, IntervalSink};
use crate::engine::stats::Role;
use crate::probe::{FlowDirection, ProbeError, ProbeSpec};

const MIB: f64 = 1024.0 * 1024.0;

/// nuttcp's %TX and %RX: the sending and receiving side's data threads.
fn summary_line(d: &DirectionSummary) -> String {
    let mut line = format!(
        "{:.4} MiB / {:.2} sec = {:.4} Mbps {:.0} %TX {:.0} %RX",
        d.bytes as f64 / MIB,
        d.duration_seconds,
        d.throughput_bits_per_second / 1e6,
        d.sender_cpu_utilization * 100.0,
        d.receiver_cpu_utilization * 100.0,
    );
    // A direction has TCP or UDP figures only for the kind that measures
    // them (the result sets them), so no kind is named here.
    if let Some(t) = &d.tcp {
        let _ = write!(line, " {} retrans", t.retransmits);
        let _ = match t.rtt_seconds {
            Some(rtt) => write!(line, " {:.2} msRTT", rtt * 1e3),
            // The sender did not say (a stock iperf3 server).
            None => write!(line, " unknown msRTT"),
        };
    }
    if let Some(u) = &d.udp {
        let _ = write!(
            line,
            " {} / {} drop/pkt {:.2} %loss {:.3} msJitter",
            u.packets_lost,
            u.packets_sent,
            u.loss_ratio * 100.0,
            u.jitter_seconds * 1e3
        );
    }
    if let Some(verdict) = &d.diagnosis {
        let _ = write!(line, " limited by {}", verdict.headline());
    }
    line
}

/// `-v`: the evidence behind a direction's verdict, one line per figure,
/// `?` where it is unknown (an older kernel or peer); nothing for a kind
/// without a verdict.
fn evidence_table(d: &DirectionSummary) -> String {
    let Some(verdict) = &d.diagnosis else {
        return String::new();
    };
    let e = &verdict.evidence;
    let pct = |v: Option<f64>| v.map_or("?".to_string(), |v| format!("{:.1}%", v * 100.0));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {} verdict: limited by {}",
        d.direction.as_str(),
        verdict.headline()
    );
    let cands: Vec<String> = verdict
        .candidates
        .iter()
        .map(|c| format!("{} {:.2}", c.limit, c.strength))
        .collect();
    let _ = writeln!(out, "    candidates       {}", cands.join(", "));
    for a in &verdict.advice {
        let _ = writeln!(out, "    advice           {a}");
    }
    for (name, t) in [
        ("sender thread", &e.sender),
        ("receiver thread", &e.receiver),
    ] {
        match t {
            Some(t) => {
                let _ = writeln!(
                    out,
                    "    {name:<16} ran {:.1}%, waited for a CPU {:.1}%, {} preemptions, on CPU {} ({} irq+softirq, {} interface interrupts)",
                    t.run * 100.0,
                    t.wait * 100.0,
                    t.involuntary_switches,
                    t.cpu.map_or("?".into(), |c| c.to_string()),
                    pct(t.cpu_interrupt_share),
                    t.cpu_interface_interrupts.map_or("?".into(), |n| n.to_string()),
                );
            }
            None => {
                let _ = writeln!(out, "    {name:<16} ?");
            }
        }
    }
    if let (Some(softirqs), Some(irqs)) = (e.receiver_net_rx_softirqs, e.receiver_interrupts) {
        // Host-wide: beside the receiving thread's wait and its CPU's
        // interrupt share, what says its CPU was contended.
        let _ = writeln!(
            out,
            "    receiver host    {softirqs} NET_RX softirqs, {irqs} interrupts over the window"
        );
    }
    if d.tcp.is_some() {
        let _ = writeln!(
            out,
            "    tcp sender       busy {}, rwnd-limited {}, sndbuf-limited {}, {} retrans ({} of bytes), rtt/min {}, app-limited {}",
            pct(e.busy),
            pct(e.rwnd_limited),
            pct(e.sndbuf_limited),
            e.retransmits,
            pct(e.retransmit_ratio),
            e.rtt_over_min.map_or("?".into(), |r| format!("{r:.2}")),
            e.delivery_rate_app_limited.map_or("?".into(), |b| b.to_string()),
        );
        let opt = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
        // No real socket has a 0-byte buffer: 0 is a side that did not
        // say (a stock iperf3 server).
        let size = |v: Option<u64>| opt(v.filter(|&b| b > 0));
        let _ = writeln!(
            out,
            "    buffers          sndbuf {}, rcvbuf {}, rcv_space {}",
            size(e.send_buffer_bytes),
            size(e.receive_buffer_bytes),
            opt(e.rcv_space_bytes),
        );
    }
    if e.bitrate_bits_per_second > 0 {
        let _ = writeln!(
            out,
            "    rate cap         {:.3} Mbps{}, sender reached {:.3} Mbps",
            e.bitrate_bits_per_second as f64 / 1e6,
            if e.bitrate_clamped {
                " (clamped by the responder)"
            } else {
                ""
            },
            e.sender_throughput_bits_per_second / 1e6,
        );
    }
    if let Some(l) = e.loss_ratio {
        let _ = writeln!(out, "    udp loss         {:.2}%", l * 100.0);
        let opt = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
        let _ = writeln!(
            out,
            "    udp drops        {} lost, {} dropped at the receiving socket ({} buffers of {:.1} datagrams), receiver RcvbufErrors {}, sender SndbufErrors {}",
            opt(e.lost_datagrams),
            opt(e.socket_drop_datagrams()),
            opt(e.socket_drops),
            e.datagrams_per_buffer.unwrap_or(1.0),
            opt(e.receiver_rcvbuf_errors),
            opt(e.sender_sndbuf_errors),
        );
    }
    out
}

/// One interval line of a stream or of a direction's sum, in the summary
/// line's style: the receiver's bytes and rate, the sender's retransmits
/// (TCP) or the receiver's drops (UDP).
fn interval_line(label: &str, f: &IntervalFigures) -> String {
    let mut line = format!(
        "{:<8} {label:<9} {:.2}-{:.2} sec {:.4} MiB / {:.2} sec = {:.4} Mbps",
        f.direction.map_or("", FlowDirection::as_str),
        f.start,
        f.end,
        f.bytes as f64 / MIB,
        f.end - f.start,
        f.bits_per_second / 1e6,
    );
    if let Some(n) = f.retransmits {
        let _ = write!(line, " {n} retrans");
    }
    if let (Some(packets), Some(lost)) = (f.packets, f.lost) {
        let _ = write!(line, " {lost} / {} drop/pkt", packets.saturating_add(lost));
    }
    if f.measured_by == Role::Sender {
        // No receiver's count for this interval (a stock iperf3 server
        // reports none): these bytes were written, not known to arrive.
        line.push_str(" (sender's count)");
    }
    line
}

/// The human-readable result: with intervals, one line per interval and
/// stream (and per direction a `sum` line when it has several streams);
/// then one line per direction; and with `verbose` per-stream and per-host
/// detail.
pub fn text(r: &ProbeResult, verbose: bool) -> String {
    let mut out = interval_lines(r);
    out.push_str(&text_without_intervals(r, verbose, true));
    out
}

/// The end of a test whose local intervals [`LiveIntervals`] printed as
/// they closed: the intervals again only if the responder's results added
/// figures this host could not print live (the receiver's bytes of a
/// forward test, the sender's retransmits of a `-R` one), under a heading
/// that says so; then the summary. The clamp notes are left out when
/// `clamp_noted`: [`LiveIntervals`] printed them before the first interval.
pub fn text_after_live(r: &ProbeResult, verbose: bool, clamp_noted: bool) -> String {
    let mut out = String::new();
    if responder_added_intervals(r) {
        out.push_str("intervals with the responder's figures:\n");
        out.push_str(&interval_lines(r));
    }
    out.push_str(&text_without_intervals(r, verbose, !clamp_noted));
    out
}

/// Whether the combined intervals hold figures from the far end: a
/// receiver's count where this host sent, a sender's where it received.
fn responder_added_intervals(r: &ProbeResult) -> bool {
    r.intervals
        .iter()
        .flat_map(|i| &i.streams)
        .any(|f| match f.direction {
            Some(FlowDirection::Send) => f.measured_by == Role::Receiver,
            Some(FlowDirection::Receive) => f.sender_bytes.is_some(),
            None => false,
        })
}

/// The `note:` lines of the limits a responder applied.
fn clamp_lines(clamped: &[String]) -> String {
    let mut out = String::new();
    for c in clamped {
        let _ = writeln!(out, "note: the responder clamped this test: {c}");
    }
    out
}

fn interval_lines(r: &ProbeResult) -> String {
    let mut out = String::new();
    for i in &r.intervals {
        for f in &i.streams {
            let label = format!("stream {}", f.id.unwrap_or(0));
            out.push_str(&interval_line(&label, f));
            out.push('\n');
        }
        for sum in &i.sums {
            let streams = i
                .streams
                .iter()
                .filter(|f| f.direction == sum.direction)
                .count();
            if streams > 1 {
                out.push_str(&interval_line("sum", sum));
                out.push('\n');
            }
        }
    }
    out
}

fn text_without_intervals(r: &ProbeResult, verbose: bool, clamp_notes: bool) -> String {
    let mut out = String::new();
    // Always shown, and before the figures, so that no one reads a
    // cut-down test's figures as the one asked for before seeing why.
    if clamp_notes {
        out.push_str(&clamp_lines(&r.clamped));
    }
    match (r.rr(), r.udp_rr()) {
        // A request/response test's headline is its transactions and
        // their latency, not a direction's throughput.
        (Some(rr), _) => out.push_str(&rr_lines(r.kind.as_str(), rr, r.crr())),
        (None, Some(u)) => out.push_str(&udp_rr_lines(u)),
        (None, None) => {
            for d in &r.directions {
                let _ = write!(out, "{:<8} ", d.direction.as_str());
                out.push_str(&summary_line(d));
                out.push('\n');
            }
        }
    }
    if let Some(a) = &r.adaptive {
        out.push_str(&adaptive_line(a));
    }
    for w in &r.warnings {
        let _ = writeln!(out, "note: the responder {w}");
    }
    if verbose {
        let _ = writeln!(
            out,
            "  target {} ({}), local {}, {} {} for {:.2} s after {:.2} s omitted",
            r.target,
            r.remote_address,
            r.local_address,
            r.kind,
            r.direction,
            r.requested_seconds,
            r.omit_seconds
        );
        if let Some(line) = peer_line(r) {
            let _ = writeln!(out, "{line}");
        }
        // Counts and sizes no real run reports as 0: 0 is a peer that
        // did not say (a stock iperf3 server).
        let known = |v: u64| match v {
            0 => "unknown".to_string(),
            v => v.to_string(),
        };
        for s in &r.streams {
            let _ = write!(
                out,
                "  stream {:>2} {:<7} {:.4} MiB / {:.2} sec = {:.4} Mbps received; sent {:.4} Mbps; sndbuf {} rcvbuf {}",
                s.id,
                s.direction.as_str(),
                s.bytes as f64 / MIB,
                s.seconds,
                s.throughput_bits_per_second / 1e6,
                s.sender_throughput_bits_per_second / 1e6,
                known(s.send_buffer_bytes),
                known(s.receive_buffer_bytes),
            );
            if let Some(t) = s.tcp.as_ref().filter(|t| t.mss_bytes == 0) {
                // A sender that reports retransmits only (a stock iperf3
                // server): its path figures are unknown, not 0.
                let _ = write!(
                    out,
                    "; {} retrans, rtt, mss and cwnd unknown, {}",
                    t.retransmits,
                    s.congestion.as_deref().unwrap_or("?")
                );
            } else if let Some(t) = &s.tcp {
                let _ = write!(
                    out,
                    "; {} retrans, rtt {:.3} ms (var {:.3}, min {:.3}), mss {}, cwnd {}, {}",
                    t.retransmits,
                    t.rtt_seconds * 1e3,
                    t.rttvar_seconds * 1e3,
                    t.min_rtt_seconds * 1e3,
                    t.mss_bytes,
                    t.cwnd_bytes,
                    s.congestion.as_deref().unwrap_or("?")
                );
            }
            if let Some(u) = &s.udp {
                let _ = write!(
                    out,
                    "; {}/{} lost, {} out of order, {} duplicated, jitter {:.3} ms",
                    u.packets_lost,
                    u.packets_sent,
                    u.packets_out_of_order,
                    u.packets_duplicated,
                    u.jitter_seconds * 1e3
                );
                let _ = write!(
                    out,
                    "; send {}, receive {} ({} coalesced, {} packets dropped at the socket)",
                    u.send_mode.unwrap_or("?"),
                    u.receive_mode.unwrap_or("?"),
                    u.packets_coalesced,
                    u.packets_dropped_at_socket
                );
            }
            out.push('\n');
        }
        for (name, side) in [("local", &r.local), ("remote", &r.remote)] {
            let unknown = || "unknown".to_string();
            let count = |v: Option<u64>| v.map_or_else(unknown, |v| v.to_string());
            let _ = writeln!(
                out,
                "  {name:<6} kernel {}, data threads {:.1}% CPU ({:.1}% user, {:.1}% sys), {} syscalls, {} ctx switches; host CPU {}, {} interrupts ({} on {}), softirq NET_RX {} NET_TX {}",
                if side.kernel_release.is_empty() { "unknown" } else { &side.kernel_release },
                side.cpu_utilization * 100.0,
                side.cpu_user * 100.0,
                side.cpu_system * 100.0,
                known(side.syscalls),
                known(side.context_switches),
                side
                    .host_cpu_utilization
                    .map_or_else(unknown, |c| format!("{:.1}%", c * 100.0)),
                count(side.interrupts),
                count(side.interface_interrupts),
                side.interface.as_deref().unwrap_or("?"),
                count(side.softirq_net_rx),
                count(side.softirq_net_tx),
            );
            if let Some(c) = &side.cross_traffic {
                let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
                let _ = writeln!(
                    out,
                    "  {name:<6} cross traffic on {}: {:.3} MiB received, {:.3} MiB sent beyond this test's own (the interface moved {:.3} MiB in, {:.3} MiB out)",
                    side.interface.as_deref().unwrap_or("?"),
                    mib(c.other_received),
                    mib(c.other_sent),
                    mib(c.received),
                    mib(c.sent),
                );
            }
        }
        for d in &r.directions {
            // Copy-free or not (--zerocopy), as each end ran.
            if let Some(t) = d
                .tcp
                .as_ref()
                .filter(|t| t.send_mode.is_some() || t.receive_mode.is_some())
            {
                let _ = writeln!(
                    out,
                    "  {} TCP I/O: send {}, receive {}",
                    d.direction.as_str(),
                    t.send_mode.unwrap_or("?"),
                    t.receive_mode.unwrap_or("?")
                );
            }
        }
        for d in &r.directions {
            out.push_str(&evidence_table(d));
        }
    }
    out
}

/// A `tcp_rr` (or `tcp_crr`) result in netperf's terms: transactions per
/// second, the latency distribution, the rate each way, and CPU per
/// transaction; for `tcp_crr` also connect time and failures by reason.
/// `-v`'s line on the conversation: the protocol version agreed and the
/// responder's clock against this host's.
fn peer_line(r: &ProbeResult) -> Option<String> {
    let version = r.protocol_version?;
    let clock = match r.peer_clock {
        Some(c) => format!(
            "; its clock {:+.3} s from ours (\u{b1} {:.3} s)",
            c.offset_seconds, c.uncertainty_seconds
        ),
        None => "; its clock unknown (it sent no time)".to_string(),
    };
    Some(format!(
        "  protocol version {version} with the responder{clock}"
    ))
}

/// The lines of a transactions summary, led by the kind's name (`tcp_rr`,
/// `tcp_crr`, or another kind with these figures).
fn rr_lines(
    kind: &str,
    rr: &crate::kinds::tcp_rr::RrSummary,
    crr: Option<&crate::kinds::tcp_crr::CrrSummary>,
) -> String {
    let shape = match crr {
        Some(_) => format!(
            "{kind:<8} {} / {} bytes, a connection each",
            rr.request_size, rr.response_size
        ),
        None => format!(
            "{kind:<8} {} / {} bytes, burst {}",
            rr.request_size, rr.response_size, rr.burst
        ),
    };
    let mut out = format!(
        "{shape}: {} transactions / {:.2} sec = {:.1} trans/s; {:.4} Mbps request, {:.4} Mbps response\n",
        rr.transactions,
        rr.seconds,
        rr.transactions_per_second,
        rr.request_bytes_per_second * 8.0 / 1e6,
        rr.response_bytes_per_second * 8.0 / 1e6,
    );
    if let Some(l) = &rr.latency {
        out.push_str(&percentile_line("latency", l));
    }
    let _ = writeln!(
        out,
        "cpu      local {:.3} s = {:.2} us/trans, remote {:.3} s = {:.2} us/trans",
        rr.local_cpu_seconds,
        rr.local_service_demand_microseconds,
        rr.remote_cpu_seconds,
        rr.remote_service_demand_microseconds
    );
    if let Some(c) = crr {
        out.push_str(&crr_lines(c));
    }
    out
}

/// One `-v` line of a latency distribution: `what`, padded to the
/// column, then its percentiles in microseconds.
fn percentile_line(what: &str, l: &crate::protocol::latency::LatencyStats) -> String {
    let us = |s: f64| s * 1e6;
    format!(
        "{what:<9}min {:.1} p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} us (mean {:.1})\n",
        us(l.min),
        us(l.p50),
        us(l.p90),
        us(l.p99),
        us(l.p999),
        us(l.max),
        us(l.mean)
    )
}

/// `tcp_crr`'s own lines: connect time, and every connection accounted for.
fn crr_lines(c: &crate::kinds::tcp_crr::CrrSummary) -> String {
    use crate::protocol::crr::{CrrFailure, CrrFailures};
    let mut out = String::new();
    if let Some(l) = &c.connect {
        out.push_str(&percentile_line("connect", l));
    }
    let reasons = |f: &CrrFailures| -> String {
        let named: Vec<String> = CrrFailure::ALL
            .iter()
            .filter(|r| f.get(**r) > 0)
            .map(|r| format!("{} {}", r.as_str(), f.get(*r)))
            .collect();
        if named.is_empty() {
            "none".into()
        } else {
            named.join(", ")
        }
    };
    let limit = match c.connection_rate_limit {
        0 => String::new(),
        n => format!(" (paced to the responder's {n}/s)"),
    };
    let _ = writeln!(
        out,
        "conns    {} attempted, {} established = {:.1} conn/s{limit}; failed {}: {}",
        c.connections_attempted,
        c.connections_established,
        c.connections_per_second,
        c.failed,
        reasons(&c.failures)
    );
    let _ = writeln!(
        out,
        "remote   {}, {} answered; failed {}: {}; {} turned away over its limits",
        crate::units::plural(c.remote_connections, "connection"),
        c.remote_answered,
        c.remote_failed,
        reasons(&c.remote_failures),
        c.remote_over_limit
    );
    out
}

/// A `udp_rr` result in irtt's terms: loss by direction, the round trip
/// less the responder's processing time, IPDV each way.
fn udp_rr_lines(u: &crate::kinds::udp_rr::UdpRrSummary) -> String {
    let us = |s: f64| s * 1e6;
    let mut out = format!(
        "udp_rr   {} bytes every {:.3} ms: {} sent, {} received; loss upstream {:.2}% ({}), downstream {:.2}% ({}), round trip {:.2}%\n",
        u.length,
        u.interval_seconds * 1e3,
        u.sent,
        u.received,
        u.upstream_loss_percent,
        u.upstream_lost,
        u.downstream_loss_percent,
        u.downstream_lost,
        u.round_trip_loss_percent,
    );
    if let Some(l) = &u.rtt {
        let _ = writeln!(
            out,
            "rtt      min {:.1} p50 {:.1} p90 {:.1} p99 {:.1} max {:.1} us (mean {:.1}), the responder's own processing (mean {:.1} us, max {:.1} us) already taken out",
            us(l.min),
            us(l.p50),
            us(l.p90),
            us(l.p99),
            us(l.max),
            us(l.mean),
            us(u.processing_mean_seconds),
            us(u.processing_max_seconds),
        );
    }
    let ipdv = |l: &Option<crate::protocol::latency::LatencyStats>| match l {
        Some(l) => format!(
            "mean {:.1} p50 {:.1} p99 {:.1} max {:.1} us",
            us(l.mean),
            us(l.p50),
            us(l.p99),
            us(l.max)
        ),
        None => "not measured".to_string(),
    };
    let _ = writeln!(
        out,
        "ipdv     upstream {}; downstream {}",
        ipdv(&u.ipdv_upstream),
        ipdv(&u.ipdv_downstream)
    );
    let _ = writeln!(
        out,
        "order    duplicates upstream {} downstream {}, late upstream {} downstream {}; one-way delay {}",
        u.upstream_duplicates,
        u.downstream_duplicates,
        u.upstream_late,
        u.downstream_late,
        u.one_way_delay
    );
    out
}

/// An adaptive probe's account, always printed: a figure
/// that did not converge must not pass for a precise one.
fn adaptive_line(a: &crate::engine::adaptive::AdaptiveOutcome) -> String {
    let took = format!(
        "took {:.2} s and {:.4} MiB",
        a.elapsed_seconds,
        a.bytes as f64 / (1u64 << 20) as f64
    );
    let Some(e) = &a.estimate else {
        return format!(
            "adaptive: NOT converged ({}): too few samples after start-up for an estimate; {took}\n",
            a.stop_reason
        );
    };
    let figure = format!(
        "{:.4} ± {:.4} Mbps (95%, ±{:.2}%) over {:.2} s from {:.2} s",
        e.bits_per_second / 1e6,
        e.half_width_bits_per_second / 1e6,
        e.relative_half_width() * 100.0,
        e.span_seconds,
        e.span_start_seconds
    );
    if a.converged {
        format!("adaptive: converged: {figure}; {took}\n")
    } else if let Some(best) = a
        .best_half_width_at_max_bits_per_second
        .filter(|_| a.stop_reason == crate::protocol::adaptive::StopReason::OutOfReach)
    {
        // Stopped early: say how far the precision was, so that nobody
        // takes the early stop for a figure that would have come.
        format!(
            "adaptive: NOT converged (out_of_reach): last estimate {figure}; the {:.2} s maximum could have given ±{:.2}% at best, the asked ±{:.2}% out of reach: not precise; {took}\n",
            a.max_duration_seconds,
            best / e.bits_per_second * 100.0,
            a.precision * 100.0
        )
    } else if let Some(got) = a
        .receiver_bits_per_second
        .filter(|got| (got / e.bits_per_second - 1.0).abs() > a.precision)
    {
        // The sender's figure, which the receiver did not confirm: say what
        // arrived rather than let the sender's steady rate pass.
        // The rule's own stop was met on the sender's count: the reason
        // that matters is the receiver's figure.
        let why = match a.stop_reason {
            crate::protocol::adaptive::StopReason::Converged => {
                "the receiver disagrees".to_string()
            }
            other => other.to_string(),
        };
        format!(
            "adaptive: NOT converged ({why}): last estimate {figure}, but the receiver got {:.4} Mbps over the span ({:+.2}%): not precise; {took}\n",
            got / 1e6,
            (got / e.bits_per_second - 1.0) * 100.0
        )
    } else {
        format!(
            "adaptive: NOT converged ({}): last estimate {figure}, short of the asked ±{:.2}%: not precise; {took}\n",
            a.stop_reason,
            a.precision * 100.0
        )
    }
}

/// The `-J` document for a result.
pub fn json(r: &ProbeResult) -> String {
    serde_json::to_string_pretty(r)
        .unwrap_or_else(|e| error_json_raw("internal", &e.to_string(), ""))
}

/// Prints the local streams' intervals on a thread of its own as they
/// close, one event at a time, whatever the async runtime is doing: a data
/// thread only puts the event on a channel.
struct IntervalPrinter {
    sink: Option<IntervalSink>,
    printer: Option<std::thread::JoinHandle<()>>,
    done: std::sync::mpsc::Receiver<()>,
}

impl IntervalPrinter {
    /// `lines` turns one event into what to print (maybe nothing).
    fn start(mut lines: impl FnMut(&IntervalEvent) -> String + Send + 'static) -> IntervalPrinter {
        let (tx, rx) = std::sync::mpsc::channel::<IntervalEvent>();
        let (done_tx, done) = std::sync::mpsc::channel();
        let printer = std::thread::Builder::new()
            .name("pp-intervals".into())
            .spawn(move || {
                for event in rx {
                    print_text(&lines(&event));
                }
                let _ = done_tx.send(());
            })
            .ok();
        IntervalPrinter {
            sink: Some(IntervalSink(tx)),
            printer,
            done,
        }
    }

    /// Waits until every event sent has been printed.
    fn finish(&mut self) {
        self.sink = None;
        // Every stream thread has ended by now and dropped its sink; a
        // wedged one must not hold the output back for ever.
        if self
            .done
            .recv_timeout(std::time::Duration::from_secs(2))
            .is_ok()
        {
            if let Some(p) = self.printer.take() {
                let _ = p.join();
            }
        }
    }
}

/// `-i` for people: each of this host's intervals printed as it closes
/// (iperf3 users watch them while they change something), in the same
/// line format as the end report, with a `sum` line per direction once all
/// of its streams closed the interval. (A loopback test is a prober and an
/// in-process responder: its lines are the prober's too.)
pub struct LiveIntervals {
    printer: IntervalPrinter,
    /// Whether the clamp notes were printed, at the test's acceptance.
    noted: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl LiveIntervals {
    /// Starts printing for a test of `spec`.
    pub fn start(spec: &ProbeSpec) -> LiveIntervals {
        let streams = spec.streams.max(1) as usize;
        let length = spec.interval.map_or(1.0, |i| i.as_secs_f64()).max(1e-3);
        // Per (direction, interval index): the streams closed so far and
        // their sum. Bounded: an entry goes once its last stream is in.
        let mut pending: std::collections::HashMap<(FlowDirection, u64), (usize, IntervalFigures)> =
            std::collections::HashMap::new();
        let printer = IntervalPrinter::start(move |e| {
            let f = live_figures(e);
            let mut out = interval_line(&format!("stream {}", e.stream), &f);
            out.push('\n');
            if streams > 1 {
                let k = (e.interval.start / length).round() as u64;
                let (n, sum) = pending
                    .entry((e.direction, k))
                    .or_insert_with(|| (0, f.zeroed()));
                *n += 1;
                sum.add(&f);
                if *n >= streams {
                    out.push_str(&interval_line("sum", sum));
                    out.push('\n');
                    pending.remove(&(e.direction, k));
                }
            }
            out
        });
        LiveIntervals {
            printer,
            noted: Default::default(),
        }
    }

    /// Where the local streams send their intervals.
    pub fn sink(&self) -> Option<IntervalSink> {
        self.printer.sink.clone()
    }

    /// Where the prober reports the responder's clamps when it accepts the
    /// test: printed at once, as no interval has closed yet, so the note
    /// stands above the lines it qualifies.
    pub fn clamp_notes(&self) -> crate::probe::spec::ClampNotes {
        let noted = self.noted.clone();
        crate::probe::spec::ClampNotes(std::sync::Arc::new(move |clamped: &[String]| {
            print_text(&clamp_lines(clamped));
            noted.store(true, std::sync::atomic::Ordering::SeqCst);
        }))
    }

    /// Waits until every interval has been printed; says whether the clamp
    /// notes were (so that the end report does not repeat them).
    pub fn finish(mut self) -> bool {
        self.printer.finish();
        self.noted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// One local stream's interval as a report line's figures: whose count it
/// is follows from what this host did on the stream.
fn live_figures(e: &IntervalEvent) -> IntervalFigures {
    let i = &e.interval;
    let rate = crate::engine::stats::ratio(i.bytes as f64 * 8.0, i.end - i.start);
    let sender = e.role == Role::Sender;
    IntervalFigures {
        id: Some(e.stream),
        direction: Some(e.direction),
        start: i.start,
        end: i.end,
        measured_by: e.role,
        bytes: i.bytes,
        bits_per_second: rate,
        sender_bytes: sender.then_some(i.bytes),
        sender_bits_per_second: sender.then_some(rate),
        retransmits: i.retransmits,
        packets: (!sender).then_some(i.packets).flatten(),
        sender_packets: sender.then_some(i.packets).flatten(),
        lost: i.lost,
    }
}

/// `--json-stream`: one JSON object per line, printed as the test runs.
/// [`JsonStream::start`] prints the `start` event and gives the sink the
/// local streams' intervals go to; each is printed as an `interval` event
/// (`"side": "local"`) as it closes; [`JsonStream::end`] prints the
/// responder's intervals as `interval` events (`"side": "remote"`) as soon
/// as its results arrive, then the `end` event, holding the whole `-J`
/// document, or an `error` event.
pub struct JsonStream {
    printer: IntervalPrinter,
}

impl JsonStream {
    /// Prints the `start` event for `spec` against `target`.
    pub fn start(spec: &ProbeSpec, target: &str) -> JsonStream {
        print_line(
            &json!({
                "event": "start",
                "target": target,
                "kind": spec.kind,
                "direction": spec.direction,
                "streams": spec.streams,
                "requested_seconds": spec.duration.as_secs_f64(),
                "omit_seconds": spec.omit.as_secs_f64(),
                "interval_seconds": spec.interval.map(|i| i.as_secs_f64()),
            })
            .to_string(),
        );
        JsonStream {
            printer: IntervalPrinter::start(|e| format!("{}\n", interval_event(e))),
        }
    }

    /// Where the local streams send their intervals.
    pub fn sink(&self) -> Option<IntervalSink> {
        self.printer.sink.clone()
    }

    /// Prints the responder's intervals and the `end` event, after every
    /// interval the local streams sent.
    pub fn end(mut self, outcome: &Result<ProbeResult, ProbeError>) {
        self.printer.finish();
        let event = match outcome {
            Ok(r) => {
                for line in remote_interval_events(r) {
                    print_line(&line);
                }
                json!({ "event": "end", "result": r })
            }
            Err(e) => {
                print_line(&json_stream_error(e));
                return;
            }
        };
        print_line(&event.to_string());
    }
}

/// The responder's own intervals, from the combined result, as `interval`
/// events with `"side": "remote"`: the receiver's count where this host
/// sent, the sender's (with its retransmits) where it received. A far end
/// that reported no intervals (a stock iperf3 server) gives none.
pub fn remote_interval_events(r: &ProbeResult) -> Vec<String> {
    let mut out = Vec::new();
    for f in r.intervals.iter().flat_map(|i| &i.streams) {
        let (role, bytes, rate) = match f.direction {
            Some(FlowDirection::Send) if f.measured_by == Role::Receiver => {
                (Role::Receiver, f.bytes, f.bits_per_second)
            }
            Some(FlowDirection::Receive) => match (f.sender_bytes, f.sender_bits_per_second) {
                (Some(b), Some(bps)) => (Role::Sender, b, bps),
                _ => continue,
            },
            _ => continue,
        };
        let mut v = json!({
            "event": "interval",
            "side": "remote",
            "stream": f.id.unwrap_or(0),
            "direction": f.direction,
            "role": role,
            "start": f.start,
            "end": f.end,
            "bytes": bytes,
            "bits_per_second": rate,
        });
        let extra = match role {
            Role::Receiver => [("packets", f.packets), ("lost", f.lost)],
            Role::Sender => [
                ("retransmits", f.retransmits),
                ("packets", f.sender_packets),
            ],
        };
        for (key, value) in extra {
            if let Some(n) = value {
                v[key] = n.into();
            }
        }
        out.push(v.to_string());
    }
    out
}

/// Writes one line to standard output. A reader that went away (`| head`)
/// ends the output, not the process: println! would panic there.
pub fn print_line(line: &str) {
    print_text(&format!("{line}\n"));
}

/// Writes text to standard output, ignoring a closed pipe (see
/// [`print_line`]).
pub fn print_text(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// The `error` event of `--json-stream`, one line: also for a failure
/// before the test could start.
pub fn json_stream_error(e: &ProbeError) -> String {
    json!({
        "event": "error",
        "error": { "reason": e.reason(), "message": e.to_string(), "hint": e.hint() },
    })
    .to_string()
}

/// One `interval` event of `--json-stream`: a local stream's interval.
pub fn interval_event(e: &IntervalEvent) -> String {
    let i = &e.interval;
    let mut v = json!({
        "event": "interval",
        "side": "local",
        "stream": e.stream,
        "direction": e.direction,
        "role": e.role,
        "start": i.start,
        "end": i.end,
        "bytes": i.bytes,
        "bits_per_second": crate::engine::stats::ratio(i.bytes as f64 * 8.0, i.end - i.start),
    });
    for (key, value) in [
        ("retransmits", i.retransmits),
        ("packets", i.packets),
        ("lost", i.lost),
    ] {
        if let Some(n) = value {
            v[key] = n.into();
        }
    }
    v.to_string()
}

/// The `-J` document for a failure.
pub fn error_json(e: &ProbeError) -> String {
    error_json_raw(e.reason(), &e.to_string(), e.hint())
}

fn error_json_raw(reason: &str, message: &str, hint: &str) -> String {
    let doc = json!({ "error": { "reason": reason, "message": message, "hint": hint } });
    serde_json::to_string_pretty(&doc).unwrap_or_else(|_| "{\"error\":{}}".into())
}

/// The one-line error for people.
pub fn error_text(e: &ProbeError) -> String {
    format!("pathprobe: {e} ({})", e.hint())
}

/// The direction name used in labels and output.
pub fn direction_label(d: FlowDirection) -> &'static str {
    d.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::result::{ProbeContext, ProbeResult};
    use crate::probe::Kind;

    /// The responder's one connection is not "1 connections".
    #[test]
    fn one_remote_connection_reads_in_the_singular() {
        let c = crate::kinds::tcp_crr::CrrSummary {
            remote_connections: 1,
            remote_answered: 1,
            ..Default::default()
        };
        let text = crr_lines(&c);
        assert!(
            text.contains(
                "remote   1 connection, 1 answered; failed 0: none; 0 turned away over its limits\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn percentile_lines_line_up_in_microseconds() {
        let l = crate::protocol::latency::LatencyStats {
            min: 10e-6,
            mean: 25e-6,
            p50: 20e-6,
            p90: 40e-6,
            p99: 80e-6,
            p999: 160e-6,
            max: 320e-6,
            sum: 0.0,
            buckets: Vec::new(),
        };
        assert_eq!(
            percentile_line("connect", &l),
            "connect  min 10.0 p50 20.0 p90 40.0 p99 80.0 p99.9 160.0 max 320.0 us (mean 25.0)\n"
        );
        assert!(percentile_line("latency", &l).starts_with("latency  min 10.0 "));
    }
    use crate::engine::stats::{
        Role, SideStats, StreamStats, TcpStats, UdpReceiveStats, UdpSendStats,
    };
    use crate::probe::spec::Direction;

    fn ctx(kind: Kind, direction: Direction) -> ProbeContext {
        ProbeContext {
            kind,
            direction,
            target: "host:5301".into(),
            local_address: "10.0.0.1:40000".into(),
            remote_address: "10.0.0.2:5301".into(),
            timestamp_seconds: 1.7e9,
            requested_seconds: 10.0,
            omit_seconds: 0.0,
            interval_seconds: None,
            bitrate: 0,
            bitrate_clamped: false,
            rr: None,
        }
    }

    fn stream(role: Role, bytes: u64, cpu: f64) -> StreamStats {
        StreamStats {
            id: 0,
            direction: Some(FlowDirection::Send),
            role: Some(role),
            bytes,
            seconds: 10.0,
            cpu_user_seconds: cpu / 2.0,
            cpu_system_seconds: cpu / 2.0,
            ..Default::default()
        }
    }

    #[test]
    fn a_sender_that_reports_only_retransmits_has_an_unknown_rtt() {
        // A stock iperf3 server in -R: retransmits, and no TCP_INFO.
        let mut tx = stream(Role::Sender, 1_000_000_000, 1.0);
        tx.direction = Some(FlowDirection::Receive);
        tx.tcp = Some(TcpStats {
            retransmits: 3,
            ..Default::default()
        });
        let mut rx = stream(Role::Receiver, 1_000_000_000, 1.0);
        rx.direction = Some(FlowDirection::Receive);
        let local = SideStats {
            streams: vec![rx],
            ..Default::default()
        };
        let remote = SideStats {
            streams: vec![tx],
            ..Default::default()
        };
        let r = ProbeResult::combine(ctx(Kind::Tcp, Direction::Receive), &local, &remote);
        let t = r.tcp.as_ref().unwrap();
        assert_eq!((t.retransmits, t.rtt_seconds, t.mss_bytes), (3, None, None));
        assert!(
            text(&r, false).contains(" 3 retrans unknown msRTT"),
            "{}",
            text(&r, false)
        );
        assert!(
            text(&r, true).contains("rtt, mss and cwnd unknown"),
            "{}",
            text(&r, true)
        );
        let json = serde_json::to_value(&r).unwrap();
        assert!(json["tcp"]["rtt_seconds"].is_null(), "{json}");
        assert!(json["tcp"]["cwnd_bytes"].is_null(), "{json}");
    }

    #[test]
    fn verbose_says_the_protocol_version_and_the_peer_clock() {
        let mut r = ProbeResult::combine(
            ctx(Kind::Tcp, Direction::Send),
            &SideStats::default(),
            &SideStats::default(),
        );
        assert!(!text(&r, true).contains("protocol version"));
        r.protocol_version = Some(2);
        assert!(text(&r, true).contains(
            "  protocol version 2 with the responder; its clock unknown (it sent no time)\n"
        ));
        r.protocol_version = Some(3);
        r.peer_clock = Some(crate::protocol::message::ClockOffset {
            offset_seconds: 30.0004,
            uncertainty_seconds: 0.0002,
        });
        let v = text(&r, true);
        assert!(
            v.contains("  protocol version 3 with the responder; its clock +30.000 s from ours (\u{b1} 0.000 s)\n"),
            "{v}"
        );
        assert!(!text(&r, false).contains("protocol version"));
        let json = json(&r);
        assert!(json.contains(r#""protocol_version": 3"#), "{json}");
        assert!(json.contains(r#""offset_seconds": 30.0004"#), "{json}");
    }

    /// The clamp note came after the figures it qualifies, and
    /// a side that reports no syscalls, kernel or buffers (a stock iperf3
    /// server) read "0 syscalls", "rcvbuf 0", `"kernel_release": ""`.
    #[test]
    fn clamp_note_leads_and_unreported_figures_are_unknown() {
        let mut tx = stream(Role::Sender, 1_000_000, 0.5);
        tx.send_buffer_bytes = 4 << 20;
        let local = SideStats {
            streams: vec![tx],
            kernel_release: "6.1.0".into(),
            ..Default::default()
        };
        // What a stock iperf3 server's results become: no syscalls,
        // kernel or buffer sizes.
        let mut rx = stream(Role::Receiver, 1_000_000, 0.5);
        rx.receive_buffer_bytes = 0;
        let remote = SideStats {
            streams: vec![rx],
            ..Default::default()
        };
        let mut r = ProbeResult::combine(ctx(Kind::Tcp, Direction::Send), &local, &remote);
        r.clamped = vec!["max_duration: duration 3 s clamped to 1 s".into()];
        let out = text(&r, true);
        let note = out.find("note: the responder clamped").expect(&out);
        let figures = out.find("send     ").expect(&out);
        assert!(note < figures, "{out}");
        let remote_line = out
            .lines()
            .find(|l| l.starts_with("  remote kernel"))
            .unwrap();
        assert!(
            remote_line.starts_with("  remote kernel unknown")
                && remote_line.contains("unknown syscalls, unknown ctx switches"),
            "{remote_line}"
        );
        assert!(out.contains("rcvbuf unknown"), "{out}");
        assert!(!out.contains("rcvbuf 0"), "{out}");
        let json: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
        for key in ["kernel_release", "syscalls", "context_switches"] {
            assert!(json["remote"][key].is_null(), "{key}: {}", json["remote"]);
        }
        assert!(json["streams"][0]["receive_buffer_bytes"].is_null());
        // A figure that was reported stays a number.
        assert!(json["streams"][0]["send_buffer_bytes"].is_u64());
    }

    #[test]
    fn tcp_line_looks_like_nuttcp() {
        let mut tx = stream(Role::Sender, 6_656_000_000, 9.9);
        tx.tcp = Some(TcpStats {
            retransmits: 0,
            rtt_seconds: 0.00019,
            mss_bytes: 65483,
            ..Default::default()
        });
        // The sending thread ran 99% of the window: CPU-bound.
        tx.sched = Some(crate::engine::stats::ThreadSched {
            run_seconds: 9.9,
            ..Default::default()
        });
        let local = SideStats {
            streams: vec![tx],
            ..Default::default()
        };
        let remote = SideStats {
            streams: vec![stream(Role::Receiver, 6_656_000_000, 6.6)],
            ..Default::default()
        };
        let r = ProbeResult::combine(ctx(Kind::Tcp, Direction::Send), &local, &remote);
        assert_eq!(
            text(&r, false),
            "send     6347.6562 MiB / 10.00 sec = 5324.8000 Mbps 99 %TX 66 %RX 0 retrans 0.19 msRTT limited by sender_cpu (strength 0.99)\n"
        );
        let verbose = text(&r, true);
        assert!(
            verbose.contains("  send verdict: limited by sender_cpu (strength 0.99)\n"),
            "{verbose}"
        );
        assert!(
            verbose.contains("    sender thread    ran 99.0%, waited for a CPU 0.0%"),
            "{verbose}"
        );
        // Unknown evidence reads as unknown, not as 0.
        assert!(verbose.contains("    receiver thread  ?\n"), "{verbose}");
        assert!(verbose.contains("busy ?, rwnd-limited ?"), "{verbose}");
    }

    #[test]
    fn a_reverse_line_says_receive_and_sizes_are_mib() {
        let mut tx = stream(Role::Sender, 1 << 30, 1.0);
        tx.direction = Some(FlowDirection::Receive);
        let mut rx = stream(Role::Receiver, 1 << 30, 1.0);
        rx.direction = Some(FlowDirection::Receive);
        let r = ProbeResult::combine(
            ctx(Kind::Tcp, Direction::Receive),
            &SideStats {
                streams: vec![rx],
                ..Default::default()
            },
            &SideStats {
                streams: vec![tx],
                ..Default::default()
            },
        );
        let line = text(&r, false);
        // 2^30 bytes are 1024 MiB, and 8 * 2^30 / 10 s = 858.9935 * 10^6 bit/s.
        assert!(
            line.starts_with("receive  1024.0000 MiB / 10.00 sec = 858.9935 Mbps "),
            "{line}"
        );
    }

    #[test]
    fn intervals_print_per_stream_with_a_sum_and_take_the_receivers_bytes() {
        use crate::engine::stats::IntervalStats;
        let iv = |k: u32, bytes: u64, retransmits: Option<u64>| IntervalStats {
            start: f64::from(k) * 0.5,
            end: f64::from(k + 1) * 0.5,
            bytes,
            retransmits,
            ..Default::default()
        };
        let with = |id: u32, role: Role, intervals: Vec<IntervalStats>| StreamStats {
            id,
            intervals,
            ..stream(role, 0, 0.0)
        };
        let mib = 1 << 20;
        let local = SideStats {
            streams: vec![
                with(
                    0,
                    Role::Sender,
                    vec![iv(0, 9 * mib, Some(1)), iv(1, 9 * mib, Some(2))],
                ),
                with(
                    1,
                    Role::Sender,
                    vec![iv(0, 9 * mib, Some(0)), iv(1, 9 * mib, Some(0))],
                ),
            ],
            ..Default::default()
        };
        let remote = SideStats {
            streams: vec![
                with(
                    0,
                    Role::Receiver,
                    vec![iv(0, 8 * mib, None), iv(1, 10 * mib, None)],
                ),
                with(
                    1,
                    Role::Receiver,
                    vec![iv(0, 4 * mib, None), iv(1, 4 * mib, None)],
                ),
            ],
            ..Default::default()
        };
        let mut c = ctx(Kind::Tcp, Direction::Send);
        c.interval_seconds = Some(0.5);
        let r = ProbeResult::combine(c, &local, &remote);
        let out = text(&r, false);
        let lines: Vec<&str> = out.lines().collect();
        // 8 MiB in 0.5 s = 134.2177 Mbps; retransmits are the sender's.
        assert_eq!(
            lines[0],
            "send     stream 0  0.00-0.50 sec 8.0000 MiB / 0.50 sec = 134.2177 Mbps 1 retrans"
        );
        assert_eq!(
            lines[2],
            "send     sum       0.00-0.50 sec 12.0000 MiB / 0.50 sec = 201.3266 Mbps 1 retrans"
        );
        assert!(lines[3].starts_with("send     stream 0  0.50-1.00 sec 10.0000 MiB"));
        assert!(lines[5].ends_with("= 234.8810 Mbps 2 retrans"), "{out}");
        assert!(
            lines[6].starts_with("send     "),
            "then the final line: {out}"
        );
        assert_eq!(lines.len(), 7, "{out}");
        let v: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
        assert_eq!(v["interval_seconds"], 0.5);
        assert_eq!(v["intervals"].as_array().unwrap().len(), 2);
        assert_eq!(v["intervals"][1]["streams"][0]["bytes"], 10 * mib);
        assert_eq!(v["intervals"][1]["streams"][0]["sender_bytes"], 9 * mib);
        assert_eq!(v["intervals"][1]["sums"][0]["bytes"], 14 * mib);
        assert_eq!(v["intervals"][1]["streams"][0]["measured_by"], "receiver");
        // The responder's figures are new to a prober that printed its own
        // live: they come again under a heading, once.
        let after = text_after_live(&r, false, false);
        assert!(
            after.starts_with("intervals with the responder's figures:\n"),
            "{after}"
        );
        assert_eq!(after.lines().count(), 8, "{after}");
        let events = remote_interval_events(&r);
        assert_eq!(events.len(), 4);
        let e: serde_json::Value = serde_json::from_str(&events[2]).unwrap();
        assert_eq!(e["side"], "remote");
        assert_eq!(e["role"], "receiver");
        assert_eq!(e["bytes"], 10 * mib);
    }

    /// A stock iperf3 server reports no intervals. A
    /// forward test's lines read 0 MiB beside the sender's retransmits; they
    /// now carry the sender's count and say so, and a `-R` test's unknown
    /// sender figures are null, not 0.
    #[test]
    fn intervals_without_the_receivers_say_they_are_the_senders() {
        use crate::engine::stats::IntervalStats;
        let mib = 1 << 20;
        let iv = |k: u32, retransmits: Option<u64>, packets: Option<u64>| IntervalStats {
            start: f64::from(k),
            end: f64::from(k + 1),
            bytes: 100 * mib,
            retransmits,
            packets,
            ..Default::default()
        };
        let side = |role: Role, intervals: Vec<IntervalStats>| SideStats {
            streams: vec![StreamStats {
                intervals,
                ..stream(role, 0, 0.0)
            }],
            ..Default::default()
        };
        let c = |kind, direction| ProbeContext {
            interval_seconds: Some(1.0),
            ..ctx(kind, direction)
        };
        let local = side(
            Role::Sender,
            vec![iv(0, Some(620), None), iv(1, Some(3), None)],
        );
        let remote = side(Role::Receiver, Vec::new());
        let r = ProbeResult::combine(c(Kind::Tcp, Direction::Send), &local, &remote);
        let out = text(&r, false);
        assert_eq!(
            out.lines().next().unwrap(),
            "send     stream 0  0.00-1.00 sec 100.0000 MiB / 1.00 sec = 838.8608 Mbps 620 retrans (sender's count)"
        );
        let v: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
        let s0 = &v["intervals"][0]["streams"][0];
        assert_eq!(s0["bytes"], 100 * mib, "{s0}");
        assert_eq!(s0["measured_by"], "sender");
        assert_eq!(s0["sender_bytes"], 100 * mib);
        assert_eq!(v["intervals"][0]["sums"][0]["measured_by"], "sender");
        // Nothing from the far end: no second table, no remote events.
        assert!(!text_after_live(&r, false, false).contains("intervals with"));
        assert!(remote_interval_events(&r).is_empty());

        // UDP forward: the sender's datagrams, no loss known.
        let local = side(Role::Sender, vec![iv(0, None, Some(72_000))]);
        let r = ProbeResult::combine(c(Kind::Udp, Direction::Send), &local, &remote);
        let v: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
        assert_eq!(v["intervals"][0]["streams"][0]["bytes"], 100 * mib);
        assert_eq!(v["intervals"][0]["streams"][0]["sender_packets"], 72_000);
        assert!(text(&r, false)
            .lines()
            .next()
            .unwrap()
            .ends_with("(sender's count)"));

        // -R against a stock server: the receiver is this host, the
        // sender's interval figures are unknown.
        let rev = c(Kind::Tcp, Direction::Receive);
        let mut local = side(Role::Receiver, vec![iv(0, None, None)]);
        local.streams[0].direction = Some(FlowDirection::Receive);
        let mut remote = side(Role::Sender, Vec::new());
        remote.streams[0].direction = Some(FlowDirection::Receive);
        let r = ProbeResult::combine(rev, &local, &remote);
        let v: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
        let s0 = &v["intervals"][0]["streams"][0];
        assert_eq!(s0["measured_by"], "receiver", "{v}");
        assert!(s0["sender_bytes"].is_null(), "{s0}");
        assert!(!text(&r, false).contains("sender's count"));
    }

    #[test]
    fn udp_line_reports_loss_from_the_senders_count() {
        let mut tx = stream(Role::Sender, 1448 * 1000, 0.1);
        tx.udp_sent = Some(UdpSendStats {
            packets: 1000,
            mode: None,
        });
        let mut rx = stream(Role::Receiver, 1448 * 990, 0.1);
        rx.udp_received = Some(UdpReceiveStats {
            packets: 990,
            lost: 10,
            jitter_seconds: 0.00002,
            ..Default::default()
        });
        let r = ProbeResult::combine(
            ctx(Kind::Udp, Direction::Send),
            &SideStats {
                streams: vec![tx],
                ..Default::default()
            },
            &SideStats {
                streams: vec![rx],
                ..Default::default()
            },
        );
        let line = text(&r, false);
        assert!(
            line.ends_with(
                " 10 / 1000 drop/pkt 1.00 %loss 0.020 msJitter limited by network (strength 0.99)\n"
            ),
            "{line}"
        );
        let u = r.udp.as_ref().unwrap();
        assert_eq!(
            (u.packets_sent, u.packets_received, u.packets_lost),
            (1000, 990, 10)
        );
        assert!((u.loss_ratio - 0.01).abs() < 1e-12);
    }

    #[test]
    fn empty_results_stay_finite_in_json() {
        let r = ProbeResult::combine(
            ctx(Kind::Udp, Direction::Bidir),
            &SideStats::default(),
            &SideStats::default(),
        );
        let doc = json(&r);
        assert!(!doc.contains("NaN") && !doc.contains("inf"), "{doc}");
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        assert_eq!(v["udp"]["loss_ratio"], 0.0);
        assert_eq!(v["direction"], "bidir");
        assert_eq!(v["directions"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn errors_are_one_json_document() {
        let e = ProbeError::Refused {
            addr: "127.0.0.1:1".into(),
        };
        let v: serde_json::Value = serde_json::from_str(&error_json(&e)).unwrap();
        assert_eq!(v["error"]["reason"], "refused");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1:1"));
        assert!(error_text(&e).starts_with("pathprobe: connection to 127.0.0.1:1 refused"));
    }

    #[test]
    fn responder_warnings_are_notes_and_in_json() {
        let local = SideStats {
            streams: vec![stream(Role::Sender, 1_000_000, 1.0)],
            ..Default::default()
        };
        let remote = SideStats {
            streams: vec![stream(Role::Receiver, 1_000_000, 1.0)],
            warnings: vec![
                "could not pin the data threads to CPU 7: Invalid argument (os error 22)".into(),
            ],
            ..Default::default()
        };
        let r = ProbeResult::combine(ctx(Kind::Tcp, Direction::Send), &local, &remote);
        assert!(text(&r, false).ends_with(
            "\nnote: the responder could not pin the data threads to CPU 7: Invalid argument (os error 22)\n"
        ));
        let v: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
        assert_eq!(
            v["warnings"][0],
            "could not pin the data threads to CPU 7: Invalid argument (os error 22)"
        );
        // None: no key at all.
        let quiet = ProbeResult::combine(
            ctx(Kind::Tcp, Direction::Send),
            &local,
            &SideStats::default(),
        );
        assert!(!json(&quiet).contains("warnings"));
    }

    #[test]
    fn an_estimate_the_receiver_did_not_confirm_says_what_arrived() {
        use crate::engine::adaptive::{AdaptiveOutcome, Estimate};
        use crate::protocol::adaptive::StopReason;
        let mut a = AdaptiveOutcome {
            stop_reason: StopReason::Converged,
            converged: false,
            precision: 0.01,
            min_duration_seconds: 0.5,
            max_duration_seconds: 5.0,
            estimate: Some(Estimate {
                bits_per_second: 300e6,
                half_width_bits_per_second: 1e6,
                span_start_seconds: 0.2,
                span_seconds: 0.6,
                intervals: 6,
                batches: 6,
                restarts: 0,
            }),
            elapsed_seconds: 0.8,
            bytes: 30_000_000,
            responder_agreed: true,
            receiver_bits_per_second: Some(194e6),
            best_half_width_at_max_bits_per_second: None,
            progress_reports_refused: 0,
        };
        let line = adaptive_line(&a);
        assert!(
            line.starts_with("adaptive: NOT converged (the receiver disagrees)")
                && line.contains("the receiver got 194.0000 Mbps over the span (-35.33%)"),
            "{line}"
        );
        // A receiver that confirms it leaves the line as it was.
        a.converged = true;
        a.receiver_bits_per_second = Some(300.5e6);
        assert!(adaptive_line(&a).starts_with("adaptive: converged: 300.0000"));
    }

    #[test]
    fn an_out_of_reach_stop_says_the_best_the_maximum_could_have_given() {
        use crate::engine::adaptive::{AdaptiveOutcome, Estimate};
        use crate::protocol::adaptive::StopReason;
        let a = AdaptiveOutcome {
            stop_reason: StopReason::OutOfReach,
            converged: false,
            precision: 0.01,
            min_duration_seconds: 0.5,
            max_duration_seconds: 5.0,
            estimate: Some(Estimate {
                bits_per_second: 290e6,
                half_width_bits_per_second: 43.5e6,
                span_start_seconds: 0.3,
                span_seconds: 1.0,
                intervals: 10,
                batches: 10,
                restarts: 0,
            }),
            elapsed_seconds: 1.3,
            bytes: 47_000_000,
            responder_agreed: true,
            receiver_bits_per_second: None,
            best_half_width_at_max_bits_per_second: Some(14.5e6),
            progress_reports_refused: 0,
        };
        let line = adaptive_line(&a);
        assert!(
            line.starts_with("adaptive: NOT converged (out_of_reach): last estimate 290.0000 ± 43.5000 Mbps (95%, ±15.00%)")
                && line.contains("the 5.00 s maximum could have given ±5.00% at best, the asked ±1.00% out of reach: not precise; took 1.30 s"),
            "{line}"
        );
        let v: serde_json::Value = serde_json::to_value(a).unwrap();
        assert_eq!(v["stop_reason"], "out_of_reach");
        assert_eq!(v["converged"], false);
        assert_eq!(v["best_half_width_at_max_bits_per_second"], 14.5e6);
        assert_eq!(v["estimate"]["half_width_bits_per_second"], 43.5e6);
    }
}
