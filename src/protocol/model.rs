//! The figures and vocabulary that cross the wire: what kind of test, which
//! way data moves, and what each side measured. They live at the bottom of
//! the crate, below the prober, the responder and the host readers, so that
//! the protocol imports nothing above it; those layers re-export them where
//! their callers expect them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Transport of a throughput probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Tcp,
    Udp,
    /// Request/response transactions on one TCP connection (netperf's TCP_RR).
    TcpRr,
    /// Isochronous UDP round trips (irtt's).
    UdpRr,
    /// A new TCP connection per request/response transaction (netperf's
    /// TCP_CRR): connect latency.
    TcpCrr,
}

/// Which way data moves, seen from the prober.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Prober sends, responder receives (iperf3's default).
    Send,
    /// Responder sends (iperf3's `-R`).
    Receive,
    /// Both at once (iperf3's `--bidir`).
    Bidir,
}

/// The direction of one stream, seen from the prober.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowDirection {
    Send,
    Receive,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Udp => "udp",
            Kind::TcpRr => "tcp_rr",
            Kind::UdpRr => "udp_rr",
            Kind::TcpCrr => "tcp_crr",
        }
    }
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Send => "send",
            Direction::Receive => "receive",
            Direction::Bidir => "bidir",
        }
    }

    /// The flow directions a probe in this direction runs.
    pub fn flows(self) -> &'static [FlowDirection] {
        match self {
            Direction::Send => &[FlowDirection::Send],
            Direction::Receive => &[FlowDirection::Receive],
            Direction::Bidir => &[FlowDirection::Send, FlowDirection::Receive],
        }
    }
}

impl FlowDirection {
    pub fn as_str(self) -> &'static str {
        match self {
            FlowDirection::Send => "send",
            FlowDirection::Receive => "receive",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The streams of a test: stream `i` runs in `layout[i]`. For bidir the
/// first half sends and the second half receives.
pub fn stream_layout(direction: Direction, streams: u32) -> Vec<FlowDirection> {
    direction
        .flows()
        .iter()
        .flat_map(|d| std::iter::repeat_n(*d, streams as usize))
        .collect()
}

/// What this side did on a stream. The default, the receiver, is whose
/// figures a report prefers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Sender,
    #[default]
    Receiver,
}

/// One stream's figures on one side, over the measured window (after omit).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamStats {
    pub id: u32,
    pub direction: Option<FlowDirection>,
    pub role: Option<Role>,
    /// Payload bytes written (sender) or read (receiver) in the window.
    pub bytes: u64,
    /// Length of the window: for a sender, until its last write; for a
    /// receiver, until the last byte arrived.
    pub seconds: f64,
    /// Read/write system calls in the window.
    pub syscalls: u64,
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    pub context_switches: u64,
    /// SO_SNDBUF / SO_RCVBUF as the kernel set them.
    pub send_buffer_bytes: u64,
    pub receive_buffer_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_sent: Option<UdpSendStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_received: Option<UdpReceiveStats>,
    /// Request/response figures (`tcp_rr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rr: Option<super::rr::RrStats>,
    /// Per-interval figures, when the test asked for intervals: interval
    /// `k` covers `[k * interval, (k + 1) * interval)` of this stream's
    /// window, the last one stretched to the window's end; their bytes add
    /// up to `bytes`. Absent from older peers' frames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<IntervalStats>,
    /// The scheduler's account of the data thread over the window, for the
    /// bottleneck verdict. Absent from older peers' frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched: Option<ThreadSched>,
    /// TCP_INFO's account of what limited the stream, for the verdict.
    /// Absent from older peers, and field by field on older kernels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_limits: Option<TcpLimits>,
    /// TCP: how this side moved the stream's bytes, copying them or not.
    /// Absent from older peers' frames and from other kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_io: Option<TcpIoMode>,
}

/// How a TCP stream's end moved its bytes through the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpIoMode {
    /// Sender: `write` from a user buffer (one copy per byte).
    Write,
    /// Sender: `sendfile` from an in-memory file (no copy).
    Sendfile,
    /// Receiver: `read` into a user buffer (one copy per byte).
    Read,
    /// Receiver: `recv` with `MSG_TRUNC`, dropped in the kernel (no copy).
    Discard,
    /// A mode a later release added.
    #[serde(other)]
    Other,
}

impl TcpIoMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TcpIoMode::Write => "write",
            TcpIoMode::Sendfile => "sendfile",
            TcpIoMode::Read => "read",
            TcpIoMode::Discard => "discard",
            TcpIoMode::Other => "other",
        }
    }
}

/// A data thread as the scheduler saw it over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadSched {
    /// Time on a CPU (/proc/thread-self/schedstat).
    pub run_seconds: f64,
    /// Time runnable but without a CPU: waiting behind other work on its
    /// run queue, or held back by a cgroup CPU quota.
    pub wait_seconds: f64,
    /// Times it was preempted.
    pub involuntary_switches: u64,
    /// CPUs it was seen on (sampled in its loop), most often first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u32>,
}

/// TCP_INFO figures behind the verdict; each is `None` when the kernel
/// does not report it (see `probe::tcpinfo` for the versions).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpLimits {
    /// Sender, over the window: time with data outstanding, of which time
    /// stalled by the receive window, and time with the send buffer full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rwnd_limited_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sndbuf_limited_seconds: Option<f64>,
    /// Sender, at the window's end: the latest delivery rate sample, and
    /// whether it was application-limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_rate_bits_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_rate_app_limited: Option<bool>,
    /// Sender: bytes retransmitted over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_retrans: Option<u64>,
    /// Sender: bytes written but not yet sent, at the window's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notsent_bytes: Option<u64>,
    /// Receiver: the space receive autotuning aims for, and its RTT estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcv_space_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcv_rtt_seconds: Option<f64>,
}

/// One interval of one stream on one side.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalStats {
    /// Seconds from the start of the stream's measured window.
    pub start: f64,
    pub end: f64,
    /// Payload bytes written (sender) or read (receiver) in the interval.
    pub bytes: u64,
    /// UDP: datagrams sent, or distinct datagrams received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<u64>,
    /// UDP receiver: sequence numbers skipped over in the interval and not
    /// (yet) seen; late arrivals make it an upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
    /// TCP sender: segments retransmitted in the interval (TCP_INFO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
}

/// From TCP_INFO of a sending socket, after the receiver has read everything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpStats {
    /// Segments retransmitted during the window.
    pub retransmits: u64,
    pub rtt_seconds: f64,
    pub rttvar_seconds: f64,
    pub min_rtt_seconds: f64,
    pub mss_bytes: u32,
    /// Congestion window in bytes (segments × MSS).
    pub cwnd_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpSendStats {
    /// Datagrams sent in the window.
    pub packets: u64,
    /// How the sender handed datagrams to the kernel. Absent from older peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<UdpSendMode>,
}

/// How a UDP sender handed datagrams to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UdpSendMode {
    /// UDP_SEGMENT: one send of many datagrams, cut by the kernel or NIC.
    Gso,
    /// sendmmsg: one call of many single-datagram messages.
    Sendmmsg,
    /// A mode a later release added.
    #[serde(other)]
    Other,
}

impl UdpSendMode {
    pub fn as_str(self) -> &'static str {
        match self {
            UdpSendMode::Gso => "gso",
            UdpSendMode::Sendmmsg => "sendmmsg",
            UdpSendMode::Other => "other",
        }
    }
}

/// How a UDP receiver read datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UdpReceiveMode {
    /// UDP_GRO: coalesced buffers, cut back into datagrams.
    Gro,
    /// recvmmsg: one datagram per message.
    Recvmmsg,
    /// A mode a later release added.
    #[serde(other)]
    Other,
}

impl UdpReceiveMode {
    pub fn as_str(self) -> &'static str {
        match self {
            UdpReceiveMode::Gro => "gro",
            UdpReceiveMode::Recvmmsg => "recvmmsg",
            UdpReceiveMode::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpReceiveStats {
    /// Distinct datagrams received in the window.
    pub packets: u64,
    /// Datagrams the sender reported sending (from its FIN), when it arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_packets: Option<u64>,
    /// Lost as seen by the receiver: gaps in the sequence, or the sender's
    /// count minus what arrived when the FIN was seen.
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// RFC 3550 interarrival jitter.
    pub jitter_seconds: f64,
    /// How the receiver read. Absent from older peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<UdpReceiveMode>,
    /// Datagrams the receiving socket dropped for lack of buffer room
    /// (SO_RXQ_OVFL), part of `lost`. Absent from older peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_drops: Option<u64>,
    /// Datagrams that arrived coalesced with others in one GRO buffer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesced: Option<u64>,
    /// Buffers (the kernel's packets) that brought the counted datagrams:
    /// `packets` without GRO, fewer with it. The kernel counts the drops
    /// in `socket_drops` in the same unit, so the two give the datagrams
    /// those drops held. Absent from older peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffers: Option<u64>,
}

/// Everything one side measured during a test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SideStats {
    pub streams: Vec<StreamStats>,
    pub host: HostDelta,
    pub kernel_release: String,
    /// Interface that carried the test on this side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// What this side could not do as asked (e.g. pin its data threads to
    /// the `-A` CPU), one sentence each; the prober shows the responder's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// This side's settings; absent from older peers and from
    /// a stock iperf3 server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<super::fingerprint::HostFingerprint>,
}

/// What happened on the host between two snapshots.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct HostDelta {
    /// Busy fraction of all CPUs together, 0..=1: user, nice, system, irq,
    /// softirq and steal over all time including idle and iowait.
    pub cpu_utilization: f64,
    /// Fraction of all CPU time spent in user and nice.
    pub cpu_user: f64,
    /// Fraction of all CPU time spent in system, irq and softirq.
    pub cpu_system: f64,
    /// Hardware interrupts delivered to CPUs, from /proc/interrupts (see
    /// `crate::host::total_interrupts` for what is counted).
    pub interrupts: u64,
    /// Interrupts on the IRQs given to `HostSnapshot::take`, typically
    /// those of the NIC carrying the probe.
    pub interface_interrupts: u64,
    pub softirq_net_rx: u64,
    pub softirq_net_tx: u64,
    /// The CPUs the data threads ran on and those that took the
    /// interface's interrupts, over the window. Absent from older peers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<CpuLoad>,
    /// The test's interface over the window: all it moved, and what of it
    /// was not this test's (cross traffic). Absent for loopback, when the
    /// interface is unknown, and from older peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface_bytes: Option<InterfaceBytes>,
    /// The host's UDP buffer errors over the window (RcvbufErrors and
    /// SndbufErrors of /proc/net/snmp, IPv4, host-wide). Absent when the
    /// file could not be read, and from older peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_buffer_errors: Option<UdpBufferErrors>,
    /// The host's TCP buffer autotuning limits at the window's end: the
    /// max of net.ipv4.tcp_rmem and tcp_wmem, in bytes, for the advice
    /// on a receive window. Absent when unread, and from older peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_rmem_max: Option<u64>,
    /// The max of net.ipv4.tcp_wmem, for the advice on a send buffer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_wmem_max: Option<u64>,
    /// The CPU cgroup of the side's pathprobe over the window: how often
    /// its quota throttled it. Absent when no CPU cgroup could be read,
    /// and from older peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_throttle: Option<CpuThrottle>,
}

/// A process's CPU cgroup over a window (`cpu.stat`, v1 or v2).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct CpuThrottle {
    /// Quota enforcement periods that elapsed (0 without a quota).
    pub periods: u64,
    /// Of those, the periods in which the group used its quota up.
    pub throttled_periods: u64,
    /// Time the group's tasks were held off the CPU by the quota.
    pub throttled_seconds: f64,
    /// The quota in CPUs (0.15: 15% of one CPU); absent for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_cpus: Option<f64>,
}

impl CpuThrottle {
    /// The share of periods the quota cut short: 0 without a quota.
    pub fn throttled_share(&self) -> f64 {
        if self.periods == 0 {
            0.0
        } else {
            (self.throttled_periods as f64 / self.periods as f64).clamp(0.0, 1.0)
        }
    }
}

/// UDP datagrams a host dropped for lack of socket buffer room over a
/// probe's window: arriving (RcvbufErrors) and leaving (SndbufErrors).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct UdpBufferErrors {
    pub receive: u64,
    pub send: u64,
}

/// One CPU over the window (per-CPU lines of /proc/stat and columns of
/// /proc/interrupts).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct CpuLoad {
    pub cpu: u32,
    /// Fractions of this CPU's time: busy in all, in hard interrupts, in
    /// softirqs.
    pub busy: f64,
    pub irq: f64,
    pub softirq: f64,
    /// Interrupts of the probe's interface this CPU took.
    pub interface_interrupts: u64,
    /// Fraction of this CPU's time the hypervisor ran something else while
    /// the CPU had work (steal). Absent from older peers: 0.
    #[serde(default)]
    pub steal: f64,
}

/// Bytes an interface moved during a test's window (/proc/net/dev), and
/// the part beyond the test's own traffic on this side: its payload plus,
/// for every segment or datagram, full headers (TCP with timestamps, UDP;
/// Ethernet, IP) and, for TCP, one ACK per data segment the other way. The
/// allowance is an upper bound of the test's own bytes, so that a quiet
/// interface reads 0 other traffic, and other traffic is, if anything,
/// under-counted (by at most the headers: about 4% of the test's bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceBytes {
    pub received: u64,
    pub sent: u64,
    pub other_received: u64,
    pub other_sent: u64,
}
