//! Output of `pathprobe probe`: nuttcp-style lines for people, one JSON
//! document for programs.
//!
//! ```text
//! 6348.3594 MB / 10.00 sec = 5322.9641 Mbps 99 %TX 66 %RX 0 retrans 0.19 msRTT
//! 1.1924 MB / 10.00 sec = 1.0002 Mbps 0 %TX 0 %RX 0 / 864 drop/pkt 0.00 %loss 0.021 msJitter
//! ```

#![warn(missing_docs)]

use std::fmt::Write as _;

use serde_json::json;

use crate::probe::result::{DirectionSummary, ProbeResult};
use crate::probe::{FlowDirection, Kind, ProbeError};

const MIB: f64 = 1024.0 * 1024.0;

/// nuttcp's %TX and %RX: the sending and receiving side's data threads.
fn summary_line(r: &ProbeResult, d: &DirectionSummary) -> String {
    let mut line = format!(
        "{:.4} MB / {:.2} sec = {:.4} Mbps {:.0} %TX {:.0} %RX",
        d.bytes as f64 / MIB,
        d.duration_seconds,
        d.throughput_bits_per_second / 1e6,
        d.sender_cpu_utilization * 100.0,
        d.receiver_cpu_utilization * 100.0,
    );
    match r.kind {
        Kind::Tcp => {
            if let Some(t) = &d.tcp {
                let _ = write!(
                    line,
                    " {} retrans {:.2} msRTT",
                    t.retransmits,
                    t.rtt_seconds * 1e3
                );
            }
        }
        Kind::Udp => {
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
        }
    }
    line
}

/// The human-readable result: one line per direction, and with `verbose`
/// per-stream and per-host detail.
pub fn text(r: &ProbeResult, verbose: bool) -> String {
    let mut out = String::new();
    let bidir = r.directions.len() > 1;
    for d in &r.directions {
        if bidir {
            let _ = write!(out, "{:<8} ", d.direction.as_str());
        }
        out.push_str(&summary_line(r, d));
        out.push('\n');
    }
    // Always shown: a figure from a cut-down test must not pass for the
    // one that was asked for.
    for c in &r.clamped {
        let _ = writeln!(out, "note: the responder clamped this test: {c}");
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
        for s in &r.streams {
            let _ = write!(
                out,
                "  stream {:>2} {:<7} {:.4} MB / {:.2} sec = {:.4} Mbps received; sent {:.4} Mbps; sndbuf {} rcvbuf {}",
                s.id,
                s.direction.as_str(),
                s.bytes as f64 / MIB,
                s.seconds,
                s.throughput_bits_per_second / 1e6,
                s.sender_throughput_bits_per_second / 1e6,
                s.send_buffer_bytes,
                s.receive_buffer_bytes,
            );
            if let Some(t) = &s.tcp {
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
            }
            out.push('\n');
        }
        for (name, side) in [("local", &r.local), ("remote", &r.remote)] {
            let _ = writeln!(
                out,
                "  {name:<6} kernel {}, data threads {:.1}% CPU ({:.1}% user, {:.1}% sys), {} syscalls, {} ctx switches; host CPU {:.1}%, {} interrupts ({} on {}), softirq NET_RX {} NET_TX {}",
                side.kernel_release,
                side.cpu_utilization * 100.0,
                side.cpu_user * 100.0,
                side.cpu_system * 100.0,
                side.syscalls,
                side.context_switches,
                side.host_cpu_utilization * 100.0,
                side.interrupts,
                side.interface_interrupts,
                side.interface.as_deref().unwrap_or("?"),
                side.softirq_net_rx,
                side.softirq_net_tx,
            );
        }
    }
    out
}

/// The `-J` document for a result.
pub fn json(r: &ProbeResult) -> String {
    serde_json::to_string_pretty(r)
        .unwrap_or_else(|e| error_json_raw("internal", &e.to_string(), ""))
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
    use crate::probe::result::{ProbeContext, ProbeResult};
    use crate::probe::spec::Direction;
    use crate::probe::stats::{
        Role, SideStats, StreamStats, TcpStats, UdpReceiveStats, UdpSendStats,
    };

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
    fn tcp_line_looks_like_nuttcp() {
        let mut tx = stream(Role::Sender, 6_656_000_000, 9.9);
        tx.tcp = Some(TcpStats {
            retransmits: 0,
            rtt_seconds: 0.00019,
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
            "6347.6562 MB / 10.00 sec = 5324.8000 Mbps 99 %TX 66 %RX 0 retrans 0.19 msRTT\n"
        );
    }

    #[test]
    fn udp_line_reports_loss_from_the_senders_count() {
        let mut tx = stream(Role::Sender, 1448 * 1000, 0.1);
        tx.udp_sent = Some(UdpSendStats { packets: 1000 });
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
            line.ends_with(" 10 / 1000 drop/pkt 1.00 %loss 0.020 msJitter\n"),
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
}
