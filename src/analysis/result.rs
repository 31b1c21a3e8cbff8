//! A finished probe: both sides' figures combined into per-stream,
//! per-direction and overall results. This is the shape of `-J` output and
//! what the exporter turns into metrics.
//!
//! Every figure is finite: a ratio with nothing to divide by is 0, never
//! NaN or infinity, so that JSON and Prometheus output stay valid.

use serde::Serialize;

use crate::analysis::diagnosis::{self, Diagnosis, Evidence};
use crate::engine::stats::ratio;
use crate::engine::stats::{IntervalStats, Role, SideStats, StreamStats, TcpStats};
use crate::kinds::figures::KindFigures;
use crate::kinds::kind::Transport;
use crate::protocol::{Direction, FlowDirection, Kind};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProbeResult {
    pub kind: Kind,
    pub direction: Direction,
    pub target: String,
    pub local_address: String,
    pub remote_address: String,
    /// Unix time at which the measured window started.
    pub timestamp_seconds: f64,
    /// Measured time asked for.
    pub requested_seconds: f64,
    pub omit_seconds: f64,
    /// Longest receiver window over the directions.
    pub duration_seconds: f64,
    /// Bytes received, summed over streams and directions.
    pub bytes: u64,
    /// Receiver goodput summed over directions: the headline figure.
    pub throughput_bits_per_second: f64,
    pub sender_bytes: u64,
    pub sender_throughput_bits_per_second: f64,
    pub streams: Vec<StreamSummary>,
    pub directions: Vec<DirectionSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpSummary>,
    /// The probe's kind's own figures: `rr` for `tcp_rr` and `tcp_crr`
    /// (with `rr.crr`), `udp_rr` for `udp_rr`, in the JSON.
    #[serde(flatten)]
    pub figures: KindFigures,
    pub local: SideSummary,
    pub remote: SideSummary,
    /// What the responder cut down to its limits, one sentence each
    /// naming the limit; empty when the test ran as asked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clamped: Vec<String>,
    /// The interval reports' length, when asked for (`-i`), as both ends
    /// ran it (it may be coarser than asked, to bound the records).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<f64>,
    /// Interval reports: the receiver's figures per interval, with the
    /// sender's beside them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<IntervalSummary>,
    /// What the responder could not do as asked (e.g. pin to the `-A`
    /// CPU), one sentence each; empty when it did everything.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What limited the probe: its one direction's verdict, or for bidir
    /// the slower direction's (docs/DIAGNOSIS.md). Absent for the kinds
    /// that have no bottleneck verdict (request/response: see
    /// [`diagnosis::judges`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
    /// The control protocol version the two ends agreed on (native wire
    /// only): during a rolling upgrade, the older end's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<u32>,
    /// The responder's clock against the prober's, from the handshake's
    /// stamps (protocol version 3 on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_clock: Option<crate::protocol::message::ClockOffset>,
    /// An adaptive probe's estimate, its uncertainty, time, bytes and why
    /// it stopped (docs/ADAPTIVE.md). Absent for a fixed one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<crate::engine::adaptive::AdaptiveOutcome>,
    /// This side's address of the first TCP data stream (native TCP
    /// kinds): the flow a trace of the path follows, so that
    /// ECMP hashes the trace onto the member the data took. Not part of
    /// the JSON: it is an ephemeral port, of no use after the fact.
    #[serde(skip)]
    pub data_source: Option<std::net::SocketAddr>,
}

/// One interval of the test: every stream's figures and a sum per direction.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IntervalSummary {
    /// Seconds from the start of the measured window.
    pub start: f64,
    /// The latest end over the streams: the last interval ends with the
    /// receiver's window.
    pub end: f64,
    pub streams: Vec<IntervalFigures>,
    /// One per direction, over its streams.
    pub sums: Vec<IntervalFigures>,
}

/// One stream's (or one direction's) figures over an interval.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct IntervalFigures {
    /// The stream; absent on sums.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    pub direction: Option<FlowDirection>,
    pub start: f64,
    pub end: f64,
    /// Whose count `bytes` is: the receiver's when it reported intervals,
    /// else the sender's (a stock iperf3 server sends none, so a forward
    /// test against it only has this host's, the sender's).
    pub measured_by: Role,
    /// Bytes in the interval as `measured_by` counted them, and their rate
    /// over it.
    pub bytes: u64,
    pub bits_per_second: f64,
    /// The sender's own count; `None` when the sender reported no
    /// intervals (a stock iperf3 server sending in a `-R` test).
    pub sender_bytes: Option<u64>,
    pub sender_bits_per_second: Option<f64>,
    /// TCP: segments the sender retransmitted in the interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// UDP: datagrams received, and sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_packets: Option<u64>,
    /// UDP: sequence numbers the receiver saw skipped in the interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
}

impl IntervalFigures {
    /// The same interval and direction with every count at 0 (or unknown
    /// where this one is unknown): the start of a sum.
    pub fn zeroed(&self) -> IntervalFigures {
        IntervalFigures {
            id: None,
            direction: self.direction,
            start: self.start,
            end: self.start,
            measured_by: self.measured_by,
            sender_bytes: self.sender_bytes.map(|_| 0),
            sender_bits_per_second: self.sender_bits_per_second.map(|_| 0.0),
            ..Default::default()
        }
    }

    /// Adds another stream's figures over the same interval to this sum.
    pub fn add(&mut self, f: &IntervalFigures) {
        self.end = self.end.max(f.end);
        // A direction whose streams are counted by different ends (some
        // receivers reported, some not) is the sender's.
        if f.measured_by != self.measured_by {
            self.measured_by = Role::Sender;
        }
        self.bytes += f.bytes;
        self.sender_bytes = add_opt(self.sender_bytes, f.sender_bytes);
        self.retransmits = add_opt(self.retransmits, f.retransmits);
        self.packets = add_opt(self.packets, f.packets);
        self.sender_packets = add_opt(self.sender_packets, f.sender_packets);
        self.lost = add_opt(self.lost, f.lost);
        // Streams' rates add up; each is over its own interval.
        self.bits_per_second += f.bits_per_second;
        self.sender_bits_per_second = match (self.sender_bits_per_second, f.sender_bits_per_second)
        {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
    }
}

fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

/// Interval `k` of one stream, from its receiver's and its sender's records.
fn stream_interval(
    id: u32,
    direction: FlowDirection,
    length: f64,
    k: usize,
    rx: Option<&IntervalStats>,
    tx: Option<&IntervalStats>,
) -> IntervalFigures {
    let start = k as f64 * length;
    let end = rx.or(tx).map_or(start, |i| i.end);
    let rate = |i: &IntervalStats| bits_per_second(i.bytes, i.end - i.start);
    // The receiver's count when it has one; else what the sender knows,
    // said to be the sender's, rather than a receiver's 0.
    let (measured_by, counted) = match (rx, tx) {
        (Some(rx), _) => (Role::Receiver, Some(rx)),
        (None, tx) => (Role::Sender, tx),
    };
    IntervalFigures {
        id: Some(id),
        direction: Some(direction),
        start,
        end,
        measured_by,
        bytes: counted.map_or(0, |i| i.bytes),
        bits_per_second: counted.map_or(0.0, rate),
        sender_bytes: tx.map(|i| i.bytes),
        sender_bits_per_second: tx.map(rate),
        retransmits: tx.and_then(|i| i.retransmits),
        packets: rx.and_then(|i| i.packets),
        sender_packets: tx.and_then(|i| i.packets),
        lost: rx.and_then(|i| i.lost),
    }
}

/// Lines up the streams' interval records by index, the receiver's and the
/// sender's of each stream together, and sums them per direction.
fn combine_intervals(
    length: f64,
    streams: &[(
        u32,
        FlowDirection,
        Option<&StreamStats>,
        Option<&StreamStats>,
    )],
) -> Vec<IntervalSummary> {
    let count = streams
        .iter()
        .flat_map(|(_, _, tx, rx)| [tx, rx])
        .map(|s| s.map_or(0, |s| s.intervals.len()))
        .max()
        .unwrap_or(0);
    (0..count)
        .map(|k| {
            let figures: Vec<IntervalFigures> = streams
                .iter()
                .filter_map(|&(id, dir, tx, rx)| {
                    let rx = rx.and_then(|s| s.intervals.get(k));
                    let tx = tx.and_then(|s| s.intervals.get(k));
                    (rx.is_some() || tx.is_some())
                        .then(|| stream_interval(id, dir, length, k, rx, tx))
                })
                .collect();
            let start = k as f64 * length;
            let mut sums: Vec<IntervalFigures> = Vec::new();
            for f in &figures {
                match sums.iter_mut().find(|s| s.direction == f.direction) {
                    Some(sum) => sum.add(f),
                    None => {
                        let mut sum = IntervalFigures {
                            start,
                            ..f.zeroed()
                        };
                        sum.end = start;
                        sum.add(f);
                        sums.push(sum);
                    }
                }
            }
            IntervalSummary {
                start,
                end: figures.iter().map(|f| f.end).fold(start, f64::max),
                streams: figures,
                sums,
            }
        })
        .collect()
}

/// A count no real run reports as 0, written `null` (unknown) when 0.
fn zero_as_null<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    match v {
        0 => s.serialize_none(),
        v => s.serialize_u64(*v),
    }
}

/// A text that is empty when unknown, written `null` then.
fn empty_as_null<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
    match v {
        "" => s.serialize_none(),
        v => s.serialize_str(v),
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StreamSummary {
    pub id: u32,
    pub direction: FlowDirection,
    pub bytes: u64,
    pub seconds: f64,
    pub throughput_bits_per_second: f64,
    pub sender_bytes: u64,
    pub sender_seconds: f64,
    pub sender_throughput_bits_per_second: f64,
    /// 0 when the side did not report it (a stock iperf3 server), which
    /// no real socket has: `null` in JSON.
    #[serde(serialize_with = "zero_as_null")]
    pub send_buffer_bytes: u64,
    #[serde(serialize_with = "zero_as_null")]
    pub receive_buffer_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpSummary>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DirectionSummary {
    pub direction: FlowDirection,
    pub duration_seconds: f64,
    pub bytes: u64,
    pub throughput_bits_per_second: f64,
    pub sender_bytes: u64,
    pub sender_throughput_bits_per_second: f64,
    /// Data-thread CPU of the sending side (nuttcp's %TX), fraction of one CPU.
    pub sender_cpu_utilization: f64,
    /// Data-thread CPU of the receiving side (nuttcp's %RX).
    pub receiver_cpu_utilization: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpSummary>,
    /// What limited this direction (docs/DIAGNOSIS.md); absent as for
    /// [`ProbeResult::diagnosis`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TcpSummary {
    pub retransmits: u64,
    /// Mean smoothed RTT over the streams. This and the path figures below
    /// come from the sender's TCP_INFO; they are unknown (`null`) when the
    /// sender is a peer that does not report them, such as a stock iperf3
    /// server in `-R`, never 0.
    pub rtt_seconds: Option<f64>,
    pub rttvar_seconds: Option<f64>,
    pub min_rtt_seconds: Option<f64>,
    pub mss_bytes: Option<u32>,
    /// Summed over streams.
    pub cwnd_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    pub send_buffer_bytes: u64,
    pub receive_buffer_bytes: u64,
    /// How the senders handed bytes to the kernel: "sendfile" (zero copy)
    /// or "write" ("mixed" when streams differ). Absent when no sender
    /// said (a stock iperf3 peer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_mode: Option<&'static str>,
    /// How the receivers took them: "discard" (MSG_TRUNC, zero copy) or
    /// "read" ("mixed" when streams differ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receive_mode: Option<&'static str>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct UdpSummary {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub packets_lost: u64,
    pub packets_out_of_order: u64,
    pub packets_duplicated: u64,
    pub loss_ratio: f64,
    pub jitter_seconds: f64,
    pub sent_bits_per_second: f64,
    pub received_bits_per_second: f64,
    /// How the senders handed datagrams to the kernel ("gso", "sendmmsg";
    /// "mixed" when streams differ). Absent when no sender said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_mode: Option<&'static str>,
    /// How the receivers read ("gro", "recvmmsg", or "mixed").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receive_mode: Option<&'static str>,
    /// Datagrams the receiving sockets dropped for lack of room
    /// (SO_RXQ_OVFL), part of `packets_lost`.
    pub packets_dropped_at_socket: u64,
    /// Datagrams received coalesced with others in one GRO buffer.
    pub packets_coalesced: u64,
}

/// The one mode all `modes` share, "mixed" when they differ.
fn common_mode(mut modes: impl Iterator<Item = &'static str>) -> Option<&'static str> {
    let first = modes.next()?;
    Some(if modes.all(|m| m == first) {
        first
    } else {
        "mixed"
    })
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SideSummary {
    /// Data threads' CPU, user + system, as a fraction of one CPU.
    pub cpu_utilization: f64,
    pub cpu_user: f64,
    pub cpu_system: f64,
    /// 0 when the peer did not report them (a stock iperf3 server): a side
    /// that ran a test made system calls, so 0 is unknown, `null` in JSON.
    #[serde(serialize_with = "zero_as_null")]
    pub context_switches: u64,
    #[serde(serialize_with = "zero_as_null")]
    pub syscalls: u64,
    /// Whole host, busy fraction of all CPUs (/proc/stat). The host
    /// figures are `null` where the peer cannot tell them (a stock iperf3
    /// server): unknown, not zero.
    pub host_cpu_utilization: Option<f64>,
    pub host_cpu_user: Option<f64>,
    pub host_cpu_system: Option<f64>,
    /// Hardware interrupts on the host during the window (/proc/interrupts).
    pub interrupts: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Interrupts of the interface that carried the probe.
    pub interface_interrupts: Option<u64>,
    pub softirq_net_rx: Option<u64>,
    pub softirq_net_tx: Option<u64>,
    /// Empty when unknown; `null` in JSON then.
    #[serde(serialize_with = "empty_as_null")]
    pub kernel_release: String,
    /// What the interface moved during the window beyond this test's own
    /// bytes (cross traffic); absent on loopback and from older peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_traffic: Option<crate::protocol::model::InterfaceBytes>,
    /// The side's settings: kernel, TCP buffer sysctls,
    /// congestion control, qdisc, interface, CPU quota, version. Absent
    /// from older peers and stock iperf3 servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<crate::protocol::fingerprint::HostFingerprint>,
}

impl SideSummary {
    /// Marks the host figures unknown: the peer did not report them.
    pub fn mark_unknown_host(&mut self) {
        self.host_cpu_utilization = None;
        self.host_cpu_user = None;
        self.host_cpu_system = None;
        self.interrupts = None;
        self.interface_interrupts = None;
        self.softirq_net_rx = None;
        self.softirq_net_tx = None;
        self.interface = None;
        self.kernel_release = String::new();
        self.fingerprint = None;
    }
}

fn bits_per_second(bytes: u64, seconds: f64) -> f64 {
    ratio(bytes as f64 * 8.0, seconds)
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    ratio(sum, n as f64)
}

fn side_summary(side: &SideStats) -> SideSummary {
    let window = side.streams.iter().map(|s| s.seconds).fold(0.0, f64::max);
    let user: f64 = side.streams.iter().map(|s| s.cpu_user_seconds).sum();
    let system: f64 = side.streams.iter().map(|s| s.cpu_system_seconds).sum();
    SideSummary {
        cpu_utilization: ratio(user + system, window),
        cpu_user: ratio(user, window),
        cpu_system: ratio(system, window),
        context_switches: side.streams.iter().map(|s| s.context_switches).sum(),
        syscalls: side.streams.iter().map(|s| s.syscalls).sum(),
        host_cpu_utilization: Some(finite(side.host.cpu_utilization)),
        host_cpu_user: Some(finite(side.host.cpu_user)),
        host_cpu_system: Some(finite(side.host.cpu_system)),
        interrupts: Some(side.host.interrupts),
        interface: side.interface.clone(),
        interface_interrupts: Some(side.host.interface_interrupts),
        softirq_net_rx: Some(side.host.softirq_net_rx),
        softirq_net_tx: Some(side.host.softirq_net_tx),
        kernel_release: side.kernel_release.clone(),
        cross_traffic: side.host.interface_bytes,
        fingerprint: side.fingerprint.clone(),
    }
}

fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

fn cpu_of(streams: &[&StreamStats]) -> f64 {
    let window = streams.iter().map(|s| s.seconds).fold(0.0, f64::max);
    ratio(
        streams
            .iter()
            .map(|s| s.cpu_user_seconds + s.cpu_system_seconds)
            .sum(),
        window,
    )
}

fn udp_summary(
    senders: &[&StreamStats],
    receivers: &[&StreamStats],
    sent_bps: f64,
    recv_bps: f64,
) -> UdpSummary {
    let received: Vec<_> = receivers
        .iter()
        .filter_map(|s| s.udp_received.as_ref())
        .collect();
    let sent_packets: u64 = senders
        .iter()
        .filter_map(|s| s.udp_sent.as_ref())
        .map(|u| u.packets)
        .sum();
    let received_packets: u64 = received.iter().map(|u| u.packets).sum();
    // The sender's own count is the truth about what was offered; the
    // receiver's sequence gaps are a fallback when it is missing.
    let lost = if senders.iter().any(|s| s.udp_sent.is_some()) {
        sent_packets.saturating_sub(received_packets)
    } else {
        received.iter().map(|u| u.lost).sum()
    };
    let offered = if sent_packets > 0 {
        sent_packets
    } else {
        received_packets + lost
    };
    UdpSummary {
        packets_sent: sent_packets,
        packets_received: received_packets,
        packets_lost: lost,
        packets_out_of_order: received.iter().map(|u| u.out_of_order).sum(),
        packets_duplicated: received.iter().map(|u| u.duplicates).sum(),
        loss_ratio: ratio(lost as f64, offered as f64),
        jitter_seconds: mean(received.iter().map(|u| u.jitter_seconds)),
        sent_bits_per_second: sent_bps,
        received_bits_per_second: recv_bps,
        send_mode: common_mode(
            senders
                .iter()
                .filter_map(|s| s.udp_sent.as_ref()?.mode)
                .map(|m| m.as_str()),
        ),
        receive_mode: common_mode(received.iter().filter_map(|u| u.mode).map(|m| m.as_str())),
        packets_dropped_at_socket: received.iter().filter_map(|u| u.socket_drops).sum(),
        packets_coalesced: received.iter().filter_map(|u| u.coalesced).sum(),
    }
}

fn tcp_summary(senders: &[&StreamStats], receivers: &[&StreamStats]) -> TcpSummary {
    let infos: Vec<_> = senders.iter().filter_map(|s| s.tcp.as_ref()).collect();
    // A connection always has an MSS: one of 0 is a sender whose TCP_INFO
    // was never read (a stock iperf3 server reports retransmits only).
    let read: Vec<_> = infos.iter().filter(|t| t.mss_bytes > 0).collect();
    let known = !read.is_empty();
    TcpSummary {
        retransmits: infos.iter().map(|t| t.retransmits).sum(),
        rtt_seconds: known.then(|| mean(read.iter().map(|t| t.rtt_seconds))),
        rttvar_seconds: known.then(|| mean(read.iter().map(|t| t.rttvar_seconds))),
        min_rtt_seconds: read.iter().map(|t| t.min_rtt_seconds).reduce(f64::min),
        mss_bytes: read.iter().map(|t| t.mss_bytes).min(),
        cwnd_bytes: known.then(|| read.iter().map(|t| t.cwnd_bytes).sum()),
        congestion: senders.iter().find_map(|s| s.congestion.clone()),
        send_buffer_bytes: senders
            .iter()
            .map(|s| s.send_buffer_bytes)
            .max()
            .unwrap_or(0),
        receive_buffer_bytes: receivers
            .iter()
            .map(|s| s.receive_buffer_bytes)
            .max()
            .unwrap_or(0),
        send_mode: common_mode(senders.iter().filter_map(|s| s.tcp_io).map(|m| m.as_str())),
        receive_mode: common_mode(
            receivers
                .iter()
                .filter_map(|s| s.tcp_io)
                .map(|m| m.as_str()),
        ),
    }
}

/// What is known of the probe besides the two sides' figures.
pub struct ProbeContext {
    pub kind: Kind,
    pub direction: Direction,
    pub target: String,
    pub local_address: String,
    pub remote_address: String,
    pub timestamp_seconds: f64,
    pub requested_seconds: f64,
    pub omit_seconds: f64,
    /// The intervals' length both ends ran, when intervals were asked for.
    pub interval_seconds: Option<f64>,
    /// The paced rate both ends agreed (0: unpaced), and whether the
    /// responder clamped it from the one asked for.
    pub bitrate: u64,
    pub bitrate_clamped: bool,
    /// The request/response shape both ends ran (`tcp_rr`).
    pub rr: Option<crate::protocol::rr::RrParams>,
}

impl ProbeContext {
    /// Whether both ends are on this host: a loopback address, or the
    /// remote address is the local one (the kernel routes it over `lo`).
    pub fn same_host(&self) -> bool {
        let ip = |a: &str| a.parse::<std::net::SocketAddr>().ok().map(|s| s.ip());
        match (ip(&self.local_address), ip(&self.remote_address)) {
            (_, Some(r)) if r.is_loopback() => true,
            (Some(l), Some(r)) => l == r,
            _ => false,
        }
    }

    /// The context of a run of `request` to `target` as both ends planned
    /// it, at Unix time `timestamp_seconds`; the paced rate as asked, not
    /// clamped, and no request/response shape (callers that know better
    /// set them).
    pub fn of_run(
        request: &crate::protocol::TestRequest,
        plan: &crate::engine::datapath::Plan,
        target: &dyn std::fmt::Display,
        local_address: std::net::SocketAddr,
        remote_address: std::net::SocketAddr,
        timestamp_seconds: f64,
    ) -> ProbeContext {
        ProbeContext {
            kind: request.kind,
            direction: request.direction,
            target: target.to_string(),
            local_address: local_address.to_string(),
            remote_address: remote_address.to_string(),
            timestamp_seconds,
            requested_seconds: plan.duration.as_secs_f64(),
            omit_seconds: plan.omit.as_secs_f64(),
            interval_seconds: plan.interval.map(|i| i.length.as_secs_f64()),
            bitrate: request.bitrate,
            bitrate_clamped: false,
            rr: None,
        }
    }
}

impl ProbeResult {
    /// Combines the prober's (`local`) and responder's (`remote`) figures.
    pub fn combine(ctx: ProbeContext, local: &SideStats, remote: &SideStats) -> ProbeResult {
        let mut streams = Vec::new();
        let mut directions = Vec::new();
        let mut interval_streams = Vec::new();
        let (mut all_senders, mut all_receivers) = (Vec::new(), Vec::new());
        // A bulk flow's TCP or UDP summary; a latency kind has its own.
        let bulk = crate::kinds::of(ctx.kind).bulk();
        for &dir in ctx.direction.flows() {
            // On the prober, send-direction streams are senders; on the
            // responder they are receivers.
            let (tx_side, rx_side) = match dir {
                FlowDirection::Send => (local, remote),
                FlowDirection::Receive => (remote, local),
            };
            let pick = |side: &'_ SideStats, role: Role| -> Vec<StreamStats> {
                side.streams
                    .iter()
                    .filter(|s| s.direction == Some(dir) && s.role == Some(role))
                    .cloned()
                    .collect()
            };
            let senders = pick(tx_side, Role::Sender);
            let receivers = pick(rx_side, Role::Receiver);
            let senders_ref: Vec<&StreamStats> = senders.iter().collect();
            let receivers_ref: Vec<&StreamStats> = receivers.iter().collect();
            let mut ids: Vec<u32> = senders
                .iter()
                .chain(receivers.iter())
                .map(|s| s.id)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            for id in ids {
                let tx = senders.iter().find(|s| s.id == id);
                let rx = receivers.iter().find(|s| s.id == id);
                interval_streams.push((id, dir, tx.cloned(), rx.cloned()));
                let bytes = rx.map_or(0, |s| s.bytes);
                let seconds = rx.map_or(0.0, |s| s.seconds);
                let sender_bytes = tx.map_or(0, |s| s.bytes);
                let sender_seconds = tx.map_or(0.0, |s| s.seconds);
                let (tx_v, rx_v): (Vec<_>, Vec<_>) =
                    (tx.into_iter().collect(), rx.into_iter().collect());
                streams.push(StreamSummary {
                    id,
                    direction: dir,
                    bytes,
                    seconds,
                    throughput_bits_per_second: bits_per_second(bytes, seconds),
                    sender_bytes,
                    sender_seconds,
                    sender_throughput_bits_per_second: bits_per_second(
                        sender_bytes,
                        sender_seconds,
                    ),
                    send_buffer_bytes: tx.map_or(0, |s| s.send_buffer_bytes),
                    receive_buffer_bytes: rx.map_or(0, |s| s.receive_buffer_bytes),
                    congestion: tx.and_then(|s| s.congestion.clone()),
                    tcp: tx.and_then(|s| s.tcp.clone()),
                    udp: (bulk == Some(Transport::Udp)).then(|| {
                        udp_summary(
                            &tx_v,
                            &rx_v,
                            bits_per_second(sender_bytes, sender_seconds),
                            bits_per_second(bytes, seconds),
                        )
                    }),
                });
            }
            let bytes: u64 = receivers.iter().map(|s| s.bytes).sum();
            let seconds = receivers.iter().map(|s| s.seconds).fold(0.0, f64::max);
            let sender_bytes: u64 = senders.iter().map(|s| s.bytes).sum();
            let sender_seconds = senders.iter().map(|s| s.seconds).fold(0.0, f64::max);
            let throughput = bits_per_second(bytes, seconds);
            let sender_throughput = bits_per_second(sender_bytes, sender_seconds);
            let udp = (bulk == Some(Transport::Udp))
                .then(|| udp_summary(&senders_ref, &receivers_ref, sender_throughput, throughput));
            let mut evidence = diagnosis::gather(
                ctx.kind,
                ctx.bitrate,
                ctx.bitrate_clamped,
                &senders_ref,
                &receivers_ref,
                &tx_side.host,
                &rx_side.host,
                throughput,
                sender_throughput,
                udp.as_ref().map(|u| u.loss_ratio),
            );
            evidence.same_host = ctx.same_host();
            directions.push(DirectionSummary {
                direction: dir,
                duration_seconds: seconds,
                bytes,
                throughput_bits_per_second: throughput,
                sender_bytes,
                sender_throughput_bits_per_second: sender_throughput,
                sender_cpu_utilization: cpu_of(&senders_ref),
                receiver_cpu_utilization: cpu_of(&receivers_ref),
                tcp: (bulk == Some(Transport::Tcp))
                    .then(|| tcp_summary(&senders_ref, &receivers_ref)),
                udp,
                diagnosis: diagnosis::judges(ctx.kind).then(|| diagnosis::diagnose(&evidence)),
            });
            all_senders.extend(senders);
            all_receivers.extend(receivers);
        }
        // The probe's own TCP/UDP figures pool the streams of every direction.
        let all_senders: Vec<&StreamStats> = all_senders.iter().collect();
        let all_receivers: Vec<&StreamStats> = all_receivers.iter().collect();
        let sent_bps = directions
            .iter()
            .map(|d| d.sender_throughput_bits_per_second)
            .sum();
        let recv_bps = directions
            .iter()
            .map(|d| d.throughput_bits_per_second)
            .sum();
        let tcp = (bulk == Some(Transport::Tcp)).then(|| tcp_summary(&all_senders, &all_receivers));
        let intervals = match ctx.interval_seconds {
            Some(length) => {
                let refs: Vec<_> = interval_streams
                    .iter()
                    .map(|(id, dir, tx, rx)| (*id, *dir, tx.as_ref(), rx.as_ref()))
                    .collect();
                combine_intervals(length, &refs)
            }
            None => Vec::new(),
        };
        let udp = (bulk == Some(Transport::Udp))
            .then(|| udp_summary(&all_senders, &all_receivers, sent_bps, recv_bps));
        let diagnosis = diagnosis::judges(ctx.kind).then(|| {
            directions
                .iter()
                .min_by(|a, b| {
                    a.throughput_bits_per_second
                        .total_cmp(&b.throughput_bits_per_second)
                })
                .and_then(|d| d.diagnosis.clone())
                .unwrap_or_else(|| diagnosis::diagnose(&Evidence::default()))
        });
        ProbeResult {
            kind: ctx.kind,
            direction: ctx.direction,
            target: ctx.target,
            local_address: ctx.local_address,
            remote_address: ctx.remote_address,
            timestamp_seconds: ctx.timestamp_seconds,
            requested_seconds: ctx.requested_seconds,
            omit_seconds: ctx.omit_seconds,
            duration_seconds: directions
                .iter()
                .map(|d| d.duration_seconds)
                .fold(0.0, f64::max),
            bytes: directions.iter().map(|d| d.bytes).sum(),
            throughput_bits_per_second: directions
                .iter()
                .map(|d| d.throughput_bits_per_second)
                .sum(),
            sender_bytes: directions.iter().map(|d| d.sender_bytes).sum(),
            sender_throughput_bits_per_second: directions
                .iter()
                .map(|d| d.sender_throughput_bits_per_second)
                .sum(),
            streams,
            directions,
            tcp,
            udp,
            figures: ctx.rr.map_or(KindFigures::Throughput, |p| {
                crate::kinds::of(ctx.kind).figures(p, local.streams.first(), remote.streams.first())
            }),
            local: side_summary(local),
            remote: side_summary(remote),
            clamped: Vec::new(),
            interval_seconds: ctx.interval_seconds,
            intervals,
            warnings: remote.warnings.clone(),
            diagnosis,
            protocol_version: None,
            peer_clock: None,
            adaptive: None,
            data_source: None,
        }
    }

    /// The request/response figures (`tcp_rr`, `tcp_crr`).
    pub fn rr(&self) -> Option<&crate::kinds::tcp_rr::RrSummary> {
        self.figures.rr()
    }

    /// `tcp_crr`'s connection figures.
    pub fn crr(&self) -> Option<&crate::kinds::tcp_crr::CrrSummary> {
        self.figures.crr()
    }

    /// `udp_rr`'s round-trip figures.
    pub fn udp_rr(&self) -> Option<&crate::kinds::udp_rr::UdpRrSummary> {
        self.figures.udp_rr()
    }

    /// The summary of one direction, if the probe ran it.
    pub fn direction(&self, d: FlowDirection) -> Option<&DirectionSummary> {
        self.directions.iter().find(|x| x.direction == d)
    }
}
