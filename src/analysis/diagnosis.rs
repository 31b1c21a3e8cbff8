//! What limited a probe: the evidence both ends gathered over the measured
//! window, reduced to one verdict from a fixed set of labels, with the
//! strength of every candidate. The rules are in docs/DIAGNOSIS.md; the
//! lab test `diagnosis::` stages each bottleneck and checks them.
//!
//! [`diagnose`] is a pure function of [`Evidence`], so every rule is
//! unit-tested on recorded evidence, including what the lab cannot stage
//! (a NIC's interrupts on the receiver's CPU).

use serde::Serialize;

use crate::engine::stats::StreamStats;
use crate::kinds::kind::Transport;
use crate::protocol::HostDelta;
use crate::protocol::Kind;

/// Whether probes of `kind` get a verdict. The causes are those of a
/// throughput probe: a flow that moved as much as something let it. A
/// request/response probe moves a transaction at a time and waits for its
/// answer, so its bytes are bounded by its own pacing and round trips,
/// none of which is a cause in the set: judged as throughput it only ever
/// read "unknown (0%)". It gets no verdict; its latency figures
/// say what it measured.
pub fn judges(kind: Kind) -> bool {
    crate::kinds::of(kind).has_bottleneck_verdict()
}

/// A bulk UDP flow (`udp`): the kinds whose loss and buffer evidence apply.
fn bulk_udp(kind: Option<Kind>) -> bool {
    kind.and_then(|k| crate::kinds::of(k).bulk()) == Some(Transport::Udp)
}

/// A bulk TCP flow (`tcp`): the kinds whose TCP memory limits apply.
fn bulk_tcp(kind: Kind) -> bool {
    crate::kinds::of(kind).bulk() == Some(Transport::Tcp)
}

/// What limited a probe. The set is fixed: dashboards and alerts match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The probe's own `-b` cap (or the responder's clamp of it) was met.
    RateLimit,
    /// The sending data thread wanted a CPU for the whole window.
    SenderCpu,
    /// The receiving data thread wanted a CPU for the whole window.
    ReceiverCpu,
    /// A data thread's CPU went mostly to hard and soft interrupts.
    SoftirqContention,
    /// The sender had nothing to send with its send buffer full.
    SendBuffer,
    /// The sender was stalled by the receiver's advertised window.
    ReceiveWindow,
    /// The sender was limited by its congestion window: the path.
    Network,
    /// The evidence is not enough.
    Unknown,
}

impl Limit {
    /// Every label, in the order rules break ties.
    pub const ALL: [Limit; 8] = [
        Limit::RateLimit,
        Limit::SenderCpu,
        Limit::ReceiverCpu,
        Limit::SoftirqContention,
        Limit::SendBuffer,
        Limit::ReceiveWindow,
        Limit::Network,
        Limit::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Limit::RateLimit => "rate_limit",
            Limit::SenderCpu => "sender_cpu",
            Limit::ReceiverCpu => "receiver_cpu",
            Limit::SoftirqContention => "softirq_contention",
            Limit::SendBuffer => "send_buffer",
            Limit::ReceiveWindow => "receive_window",
            Limit::Network => "network",
            Limit::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A data thread over the window, as fractions of the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ThreadEvidence {
    /// On a CPU.
    pub run: f64,
    /// Runnable without a CPU (run queue, cgroup quota).
    pub wait: f64,
    pub involuntary_switches: u64,
    /// The CPU it ran on most, and that CPU's share of time in hard and
    /// soft interrupts and the interface interrupts it took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_interrupt_share: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_interface_interrupts: Option<u64>,
}

impl ThreadEvidence {
    /// Time the thread wanted a CPU.
    pub fn demand(&self) -> f64 {
        self.run + self.wait
    }
}

/// Everything a verdict rests on, for one direction of a probe. Fractions
/// are of the side's window; `None` is unknown (older kernel or peer).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Evidence {
    pub kind: Option<Kind>,
    pub throughput_bits_per_second: f64,
    pub sender_throughput_bits_per_second: f64,
    /// The paced rate both ends agreed (0: unpaced), and whether the
    /// responder cut it down from the one asked for.
    pub bitrate_bits_per_second: u64,
    /// Present only when true, as the result's own `clamped`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub bitrate_clamped: bool,
    /// The busiest sending and receiving data threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender: Option<ThreadEvidence>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver: Option<ThreadEvidence>,
    /// TCP sender: time with data outstanding, stalled by the receive
    /// window, and with a full send buffer (TCP_INFO, Linux 4.10+).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rwnd_limited: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sndbuf_limited: Option<f64>,
    pub retransmits: u64,
    /// Bytes retransmitted over bytes sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retransmit_ratio: Option<f64>,
    /// Smoothed RTT over the minimum seen: above 1, a queue built up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_over_min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery_rate_app_limited: Option<bool>,
    /// Receiver's receive buffer and the space autotuning aimed for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receive_buffer_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rcv_space_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_buffer_bytes: Option<u64>,
    /// UDP: datagrams lost over sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_ratio: Option<f64>,
    /// UDP: datagrams lost, the receiving sockets' drops for lack of
    /// buffer room (SO_RXQ_OVFL), and the receiving and sending hosts'
    /// UDP buffer errors over the window (RcvbufErrors, SndbufErrors of
    /// /proc/net/snmp: host-wide, IPv4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_datagrams: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_drops: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver_rcvbuf_errors: Option<u64>,
    /// UDP: datagrams per buffer the receivers read (1 without GRO). The
    /// kernel counts the drops above in buffers as it queued them, so a
    /// GRO buffer of 46 datagrams dropped whole counts once: this turns
    /// those counts into datagrams, as the received buffers held them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub datagrams_per_buffer: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_sndbuf_errors: Option<u64>,
    /// The receiving host's net.ipv4.tcp_rmem max, for the advice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver_tcp_rmem_max: Option<u64>,
    /// The sending host's net.ipv4.tcp_wmem max, for the advice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_tcp_wmem_max: Option<u64>,
    /// The share of CPU quota periods in which each side's cgroup used its
    /// quota up (0 without a quota; unknown when the side could not read
    /// its cgroup). A thread throttled by a container's CPU limit is held
    /// off the CPU outside its own run and wait times, so its demand reads
    /// low although the quota was what held it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_throttled: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver_throttled: Option<f64>,
    /// Each side's CPU quota, in CPUs, for the advice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_quota_cpus: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver_quota_cpus: Option<f64>,
    /// The receiving host's NET_RX softirqs and hardware interrupts over
    /// the window (host-wide): with the receiving thread's wait and its
    /// CPU's interrupt share, the evidence of contention on the receiver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver_net_rx_softirqs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receiver_interrupts: Option<u64>,
    /// Both ends on one host (loopback, or a probe of one's own address):
    /// there is no network between them to blame.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub same_host: bool,
}

impl Evidence {
    /// UDP: the share of lost datagrams the receiving host dropped itself
    /// for lack of socket buffer room, by the larger of the socket's own
    /// count and the host's RcvbufErrors (the socket count cannot include
    /// other sockets; the host's may), in datagrams. Unknown without
    /// either count.
    pub fn receiver_drop_share(&self) -> Option<f64> {
        let lost = self.lost_datagrams.filter(|&l| l > 0)?;
        let drops = match (self.socket_drops, self.receiver_rcvbuf_errors) {
            (None, None) => return None,
            (a, b) => a.unwrap_or(0).max(b.unwrap_or(0)),
        };
        let per_buffer = self.datagrams_per_buffer.unwrap_or(1.0);
        Some(clamp01(drops as f64 * per_buffer / lost as f64))
    }
    /// The datagrams the receiving socket's drops held (see
    /// [`Evidence::datagrams_per_buffer`]), at most the datagrams lost.
    pub fn socket_drop_datagrams(&self) -> Option<u64> {
        let drops = self.socket_drops? as f64 * self.datagrams_per_buffer.unwrap_or(1.0);
        Some((drops.round() as u64).min(self.lost_datagrams.unwrap_or(u64::MAX)))
    }
}

/// One candidate cause and its strength, 0..=1: the fraction of the window
/// it held, or (rate_limit) the fraction of the cap reached.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub limit: Limit,
    pub strength: f64,
}

/// The verdict on one direction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// What limited the probe, and its figure (the strength behind it).
    pub limit: Limit,
    pub strength: f64,
    /// A second cause as strong as the first (within [`CLOSE`]): both are
    /// named, rather than one guessed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub also: Option<Candidate>,
    /// Every candidate with evidence, strongest first.
    pub candidates: Vec<Candidate>,
    /// What to change, only where a staged lab test showed the change
    /// lifts the probe (docs/DIAGNOSIS.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub advice: Vec<String>,
    /// Why the verdict is `unknown`: which candidate came nearest, and
    /// the threshold it missed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_unknown: Option<String>,
    pub evidence: Evidence,
}

/// A data thread that wanted a CPU this much of the window was CPU-bound.
pub const CPU_SATURATED: f64 = 0.9;
/// Time accounting (receive window, send buffer, congestion window) that
/// held this much of the window names the cause.
pub const MOST_OF_THE_WINDOW: f64 = 0.5;
/// The kernel books only part of a window- or buffer-limited flow's time
/// as rwnd- or sndbuf-limited (the rest of each round trip, with the window
/// in flight, is plain busy): staged, a receive window far below the path's
/// bandwidth-delay product read 0.47-0.61 and a send buffer 0.47, where
/// tbf and random drops read below 0.01. This much names the cause, ahead
/// of the congestion window.
pub const WINDOW_OR_BUFFER: f64 = 0.25;
/// A paced probe that reached this much of its rate was held by its cap.
pub const RATE_REACHED: f64 = 0.9;
/// Interrupts that took this much of a data thread's CPU, and more of it
/// than the thread itself, crowded the thread out.
pub const INTERRUPTS_CROWD: f64 = 0.3;
/// A receiving thread runnable without a CPU this much of the window ...
pub const CONTENDED_WAIT: f64 = 0.25;
/// ... on a CPU whose hard and soft interrupts took at least this much of
/// it, while its run, wait and the interrupts together filled the CPU
/// ([`CPU_SATURATED`]), was crowded off its CPU: the receiver's CPU was
/// contended. A thread that waits on a host merely busy with other
/// processes (a build) shows no interrupt share, and is not.
pub const CONTENDED_IRQ: f64 = 0.15;
/// UDP loss above this is the path's.
pub const UDP_LOSS: f64 = 0.01;
/// UDP loss this much of which the receiving host dropped at its socket
/// was the receiver's, not the path's.
pub const MOST_OF_LOSS: f64 = 0.5;
/// Two causes within this strength of each other are both named.
pub const CLOSE: f64 = 0.05;

fn clamp01(x: f64) -> f64 {
    if x.is_finite() {
        x.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

fn ratio(num: f64, den: f64) -> Option<f64> {
    let r = num / den;
    (r.is_finite() && den > 0.0).then_some(r)
}

/// The busiest data thread of `streams` (by CPU demand), and its CPU's
/// interrupt load from `host`.
fn thread_evidence(streams: &[&StreamStats], host: &HostDelta) -> Option<ThreadEvidence> {
    streams
        .iter()
        .filter_map(|s| {
            let sched = s.sched.as_ref()?;
            let window = s.seconds;
            let cpu = sched.cpus.first().copied();
            let load = cpu.and_then(|c| host.cpus.iter().find(|l| l.cpu == c));
            // On a virtual machine the hypervisor may take the thread's
            // CPU away (steal); the kernel's run time leaves that out, so
            // a thread that ran whenever its CPU was there is CPU-bound.
            let steal = load.map_or(0.0, |l| clamp01(l.steal));
            Some(ThreadEvidence {
                run: clamp01(ratio(sched.run_seconds, window * (1.0 - steal))?),
                wait: clamp01(ratio(sched.wait_seconds, window)?),
                involuntary_switches: sched.involuntary_switches,
                cpu,
                cpu_interrupt_share: load.map(|l| clamp01(l.irq + l.softirq)),
                cpu_interface_interrupts: load.map(|l| l.interface_interrupts),
            })
        })
        .max_by(|a, b| a.demand().total_cmp(&b.demand()))
}

/// What one direction's streams and both sides' hosts show.
#[allow(clippy::too_many_arguments)]
pub fn gather(
    kind: Kind,
    bitrate: u64,
    bitrate_clamped: bool,
    senders: &[&StreamStats],
    receivers: &[&StreamStats],
    sender_host: &HostDelta,
    receiver_host: &HostDelta,
    throughput: f64,
    sender_throughput: f64,
    loss_ratio: Option<f64>,
) -> Evidence {
    let window: f64 = senders.iter().map(|s| s.seconds).sum();
    let limits: Vec<_> = senders
        .iter()
        .filter_map(|s| s.tcp_limits.as_ref())
        .collect();
    // Unknown unless every sender reported it.
    let summed = |f: fn(&crate::engine::stats::TcpLimits) -> Option<f64>| -> Option<f64> {
        if limits.len() != senders.len() || limits.is_empty() {
            return None;
        }
        let total: Option<f64> = limits.iter().map(|l| f(l)).sum();
        ratio(total?, window).map(clamp01)
    };
    let bytes_retrans: Option<u64> = if limits.is_empty() {
        None
    } else {
        limits.iter().map(|l| l.bytes_retrans).sum()
    };
    let sent: u64 = senders.iter().map(|s| s.bytes).sum();
    let tcp: Vec<_> = senders.iter().filter_map(|s| s.tcp.as_ref()).collect();
    let rtt_over_min = tcp
        .iter()
        .filter_map(|t| ratio(t.rtt_seconds, t.min_rtt_seconds))
        .reduce(f64::max);
    let receiver_limits: Vec<_> = receivers
        .iter()
        .filter_map(|s| s.tcp_limits.as_ref())
        .collect();
    Evidence {
        kind: Some(kind),
        throughput_bits_per_second: throughput,
        sender_throughput_bits_per_second: sender_throughput,
        bitrate_bits_per_second: bitrate,
        bitrate_clamped,
        sender: thread_evidence(senders, sender_host),
        receiver: thread_evidence(receivers, receiver_host),
        busy: summed(|l| l.busy_seconds),
        rwnd_limited: summed(|l| l.rwnd_limited_seconds),
        sndbuf_limited: summed(|l| l.sndbuf_limited_seconds),
        retransmits: tcp.iter().map(|t| t.retransmits).sum(),
        retransmit_ratio: bytes_retrans.and_then(|b| ratio(b as f64, sent as f64)),
        rtt_over_min,
        delivery_rate_app_limited: limits
            .iter()
            .filter_map(|l| l.delivery_rate_app_limited)
            .reduce(|a, b| a || b),
        receive_buffer_bytes: receivers.iter().map(|s| s.receive_buffer_bytes).max(),
        rcv_space_bytes: receiver_limits
            .iter()
            .filter_map(|l| l.rcv_space_bytes)
            .max(),
        send_buffer_bytes: senders.iter().map(|s| s.send_buffer_bytes).max(),
        loss_ratio,
        lost_datagrams: bulk_udp(Some(kind))
            .then(|| udp_lost(senders, receivers))
            .flatten(),
        socket_drops: bulk_udp(Some(kind))
            .then(|| {
                receivers
                    .iter()
                    .filter_map(|s| s.udp_received.as_ref()?.socket_drops)
                    .reduce(u64::saturating_add)
            })
            .flatten(),
        receiver_rcvbuf_errors: bulk_udp(Some(kind))
            .then(|| receiver_host.udp_buffer_errors.map(|u| u.receive))
            .flatten(),
        datagrams_per_buffer: bulk_udp(Some(kind))
            .then(|| datagrams_per_buffer(receivers))
            .flatten(),
        sender_sndbuf_errors: bulk_udp(Some(kind))
            .then(|| sender_host.udp_buffer_errors.map(|u| u.send))
            .flatten(),
        receiver_tcp_rmem_max: bulk_tcp(kind)
            .then_some(receiver_host.tcp_rmem_max)
            .flatten(),
        sender_tcp_wmem_max: bulk_tcp(kind).then_some(sender_host.tcp_wmem_max).flatten(),
        sender_throttled: sender_host.cpu_throttle.map(|t| t.throttled_share()),
        receiver_throttled: receiver_host.cpu_throttle.map(|t| t.throttled_share()),
        sender_quota_cpus: sender_host.cpu_throttle.and_then(|t| t.quota_cpus),
        receiver_quota_cpus: receiver_host.cpu_throttle.and_then(|t| t.quota_cpus),
        receiver_net_rx_softirqs: Some(receiver_host.softirq_net_rx),
        receiver_interrupts: Some(receiver_host.interrupts),
        // Set by the caller, which knows the addresses.
        same_host: false,
    }
}

/// Datagrams per buffer over the receivers that said how many buffers
/// they read: at least 1, since a buffer is counted only for a datagram.
fn datagrams_per_buffer(receivers: &[&StreamStats]) -> Option<f64> {
    let (packets, buffers) = receivers
        .iter()
        .filter_map(|s| {
            let u = s.udp_received.as_ref()?;
            Some((u.packets, u.buffers?))
        })
        .fold((0u64, 0u64), |(p, b), (up, ub)| {
            (p.saturating_add(up), b.saturating_add(ub))
        });
    (buffers > 0).then(|| (packets as f64 / buffers as f64).max(1.0))
}

/// UDP datagrams lost: the senders' count less what arrived, or the
/// receivers' sequence gaps when no sender reported.
fn udp_lost(senders: &[&StreamStats], receivers: &[&StreamStats]) -> Option<u64> {
    let received: Vec<_> = receivers
        .iter()
        .filter_map(|s| s.udp_received.as_ref())
        .collect();
    if received.is_empty() {
        return None;
    }
    let arrived: u64 = received.iter().map(|u| u.packets).sum();
    let sent: Option<u64> = senders
        .iter()
        .filter_map(|s| s.udp_sent.as_ref())
        .map(|u| u.packets)
        .reduce(u64::saturating_add);
    Some(match sent {
        Some(sent) => sent.saturating_sub(arrived),
        None => received.iter().map(|u| u.lost).sum(),
    })
}

/// How a side's data thread and its CPU bear on the verdict: its
/// saturation (the thread's demand, plus the CPU's interrupt share when
/// the thread itself held more of the CPU than interrupts did) and the
/// interrupt share when interrupts held more of it than the thread.
fn cpu_candidates(t: &ThreadEvidence) -> (f64, Option<f64>) {
    let irq = t.cpu_interrupt_share.unwrap_or(0.0);
    if irq >= INTERRUPTS_CROWD && irq >= t.run && t.demand() + irq >= CPU_SATURATED {
        (clamp01(t.demand()), Some(irq))
    } else if irq < t.run {
        // The interrupt work on the thread's CPU is (mostly) this flow's
        // own (loopback, or the thread's own softirq): the CPU was full.
        (clamp01(t.demand() + irq), None)
    } else {
        (clamp01(t.demand()), None)
    }
}

/// The receiving thread's CPU as contended (see [`CONTENDED_WAIT`]): its
/// run, wait and interrupt share together, when it waited long enough on
/// a CPU with enough interrupt work to be crowded off it.
fn contention(t: &ThreadEvidence) -> Option<f64> {
    let irq = t.cpu_interrupt_share.unwrap_or(0.0);
    let held = clamp01(t.run + t.wait + irq);
    (t.wait >= CONTENDED_WAIT && irq >= CONTENDED_IRQ && held >= CPU_SATURATED).then_some(held)
}

/// Whether a side's cgroup used its CPU quota up in nearly every period.
fn capped(throttled: Option<f64>) -> bool {
    throttled.is_some_and(|t| t >= CPU_SATURATED)
}

/// The verdict: see docs/DIAGNOSIS.md for each rule.
pub fn diagnose(e: &Evidence) -> Diagnosis {
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut push = |limit: Limit, strength: f64| {
        candidates.push(Candidate {
            limit,
            strength: clamp01(strength),
        })
    };
    let rate = (e.bitrate_bits_per_second > 0)
        .then(|| e.sender_throughput_bits_per_second / e.bitrate_bits_per_second as f64);
    if let Some(r) = rate {
        push(Limit::RateLimit, r);
    }
    // A side whose cgroup used its CPU quota up in a share of the periods
    // was CPU-bound for that share, whatever its thread's own times say.
    let (mut sender_sat, mut receiver_sat) = (
        e.sender_throttled.unwrap_or(0.0),
        e.receiver_throttled.unwrap_or(0.0),
    );
    let mut irq_crowd: f64 = 0.0;
    // Contention on the receiver's CPU: its thread waited for the CPU
    // while interrupts (a storm of another flow's softirqs) took it.
    let receiver_contended = e.receiver.as_ref().and_then(contention);
    if let Some(t) = &e.sender {
        let (mut sat, irq) = cpu_candidates(t);
        if receiver_contended.is_some() && t.demand() < CPU_SATURATED {
            // A sending thread well below a full CPU, while the receiver
            // could not get its own: the sender was held by the receiver,
            // and its CPU's interrupt work (on one host, the flow's own
            // receive path) does not make it the limit. Staged: the
            // sender at 69% with 26% interrupts read `sender_cpu` 0.95.
            sat = clamp01(t.demand());
        }
        sender_sat = sender_sat.max(sat);
        irq_crowd = irq_crowd.max(irq.unwrap_or(0.0));
    }
    if e.sender.is_some() || e.sender_throttled.is_some() {
        push(Limit::SenderCpu, sender_sat);
    }
    // UDP loss the receiving host booked as its own buffer overflows: the
    // receiver did not drain its socket in time, whatever its CPU showed.
    let udp_lossy = bulk_udp(e.kind) && e.loss_ratio.is_some_and(|l| l >= UDP_LOSS);
    let receiver_drops = e.receiver_drop_share().filter(|_| udp_lossy);
    if let Some(t) = &e.receiver {
        let (sat, irq) = cpu_candidates(t);
        receiver_sat = receiver_sat.max(sat).max(receiver_contended.unwrap_or(0.0));
        irq_crowd = irq_crowd.max(irq.unwrap_or(0.0));
    }
    if e.receiver.is_some() || e.receiver_throttled.is_some() || receiver_drops.is_some() {
        push(
            Limit::ReceiverCpu,
            receiver_sat.max(receiver_drops.unwrap_or(0.0)),
        );
    }
    if irq_crowd > 0.0 {
        push(Limit::SoftirqContention, irq_crowd);
    }
    if let Some(s) = e.sndbuf_limited {
        push(Limit::SendBuffer, s);
    }
    if let Some(r) = e.rwnd_limited {
        push(Limit::ReceiveWindow, r);
    }
    let network = if bulk_udp(e.kind) {
        e.loss_ratio.filter(|&l| l >= UDP_LOSS).map(|_| {
            // A lossy path held the flow to what arrived.
            1.0 - e.loss_ratio.unwrap_or(0.0)
        })
    } else {
        e.busy
            .map(|b| b - e.rwnd_limited.unwrap_or(0.0) - e.sndbuf_limited.unwrap_or(0.0))
    };
    // Between two ends on one host there is no path: what the congestion
    // window or lost datagrams show there is the host's own doing.
    let network = network.filter(|_| !e.same_host);
    if let Some(n) = network {
        push(Limit::Network, n);
    }
    candidates.sort_by(|a, b| {
        b.strength
            .total_cmp(&a.strength)
            .then(a.limit.cmp(&b.limit))
    });

    let strength_of = |l: Limit| {
        candidates
            .iter()
            .find(|c| c.limit == l)
            .map_or(0.0, |c| c.strength)
    };
    // Which candidates may be the verdict, by the rules' precedence: a cap
    // the probe set itself and met explains everything else; a saturated
    // thread explains the windows and buffers it could not keep filled or
    // drained; then the kernel's own time accounting.
    let mut eligible: Vec<Limit> = Vec::new();
    if receiver_drops.is_some_and(|share| share >= MOST_OF_LOSS) {
        // Most of the loss was the receiving socket overflowing: the path
        // carried it, the receiver did not keep up.
        eligible.push(Limit::ReceiverCpu);
    } else if bulk_udp(e.kind) && network.is_some() {
        // Datagrams lost on the way: whatever the sender did, the path
        // did not carry it.
        eligible.push(Limit::Network);
    } else if rate.is_some_and(|r| r >= RATE_REACHED) {
        eligible.push(Limit::RateLimit);
    } else if capped(e.sender_throttled) || capped(e.receiver_throttled) {
        // A cgroup quota used up in nearly every period is a cap the host
        // set and met, as the rate limit is one the probe set: it explains
        // the other side's full CPU too. Held by the quota, the receiver's
        // reads come seldom, and on veth the receive path's softirq work
        // then fills what the blocked sender leaves of its CPU, so that
        // side reads saturated as well (CI: run 0.65, wait 0.02,
        // interrupts 0.42, against a receiver throttled in every period).
        if capped(e.sender_throttled) {
            eligible.push(Limit::SenderCpu);
        }
        if capped(e.receiver_throttled) {
            eligible.push(Limit::ReceiverCpu);
        }
    } else {
        if sender_sat >= CPU_SATURATED {
            eligible.push(Limit::SenderCpu);
        }
        if receiver_sat >= CPU_SATURATED {
            eligible.push(Limit::ReceiverCpu);
        }
        if irq_crowd >= INTERRUPTS_CROWD {
            eligible.push(Limit::SoftirqContention);
        }
        if eligible.is_empty() {
            for l in [Limit::SendBuffer, Limit::ReceiveWindow] {
                if strength_of(l) >= WINDOW_OR_BUFFER {
                    eligible.push(l);
                }
            }
        }
        if eligible.is_empty() && strength_of(Limit::Network) >= MOST_OF_THE_WINDOW {
            eligible.push(Limit::Network);
        }
    }
    let mut ranked: Vec<Candidate> = candidates
        .iter()
        .filter(|c| eligible.contains(&c.limit))
        .cloned()
        .collect();
    ranked.dedup_by(|a, b| a.limit == b.limit);
    let (limit, strength, also) = match ranked.as_slice() {
        [] => (Limit::Unknown, 0.0, None),
        [first, rest @ ..] => {
            let also = rest
                .first()
                .filter(|second| first.strength - second.strength <= CLOSE)
                .cloned();
            (first.limit, first.strength, also)
        }
    };
    let why_unknown = (limit == Limit::Unknown).then(|| why_unknown(&candidates, e));
    Diagnosis {
        limit,
        strength,
        also,
        advice: advice(limit, strength, e),
        candidates,
        why_unknown,
        evidence: e.clone(),
    }
}

/// Why no candidate became the verdict: the strongest one and the
/// threshold it would have needed.
fn why_unknown(candidates: &[Candidate], e: &Evidence) -> String {
    let Some(best) = candidates.iter().find(|c| c.limit != Limit::Unknown) else {
        return if e.same_host {
            "no evidence was gathered (and on one host the network is never the cause)".into()
        } else {
            "no evidence was gathered: neither end reported its threads or TCP_INFO".into()
        };
    };
    let needs = match best.limit {
        Limit::RateLimit => RATE_REACHED,
        Limit::SenderCpu | Limit::ReceiverCpu => CPU_SATURATED,
        Limit::SoftirqContention => INTERRUPTS_CROWD,
        Limit::SendBuffer | Limit::ReceiveWindow => WINDOW_OR_BUFFER,
        Limit::Network | Limit::Unknown => MOST_OF_THE_WINDOW,
    };
    let mut why = format!(
        "no cause reached its threshold: the strongest, {}, held {:.0}% (needs {:.0}%)",
        best.limit,
        best.strength * 100.0,
        needs * 100.0
    );
    if e.same_host {
        why.push_str("; on one host the network is never the cause");
    }
    why
}

/// Advice for a verdict, only where a lab test proves it: the tests
/// `diagnosis::a_small_receive_buffer_on_the_receiver_is_the_receive_window`
/// and `diagnosis::a_small_send_buffer_on_the_sender_is_the_send_buffer`
/// raise the tcp_rmem / tcp_wmem max and see the probe lifted.
fn advice(limit: Limit, strength: f64, e: &Evidence) -> Vec<String> {
    match limit {
        Limit::ReceiveWindow => vec![format!(
            "the receive window limited {:.0}% of the time: raise -w, or net.ipv4.tcp_rmem max on the receiver (now {})",
            strength * 100.0,
            e.receiver_tcp_rmem_max
                .map_or("unknown".to_string(), |m| m.to_string())
        )],
        Limit::SendBuffer => vec![format!(
            "the send buffer limited {:.0}% of the time: raise -w, or net.ipv4.tcp_wmem max on the sender (now {})",
            strength * 100.0,
            e.sender_tcp_wmem_max
                .map_or("unknown".to_string(), |m| m.to_string())
        )],
        _ => Vec::new(),
    }
}

impl Default for Diagnosis {
    /// The verdict without evidence: unknown.
    fn default() -> Diagnosis {
        diagnose(&Evidence::default())
    }
}

impl Diagnosis {
    /// `receiver_cpu (94%)`, or `receiver_cpu (94%) and receive_window (91%)`.
    /// The strength is written as a ratio named as such: a percentage
    /// beside nuttcp's `%TX %RX` read as CPU.
    pub fn headline(&self) -> String {
        let mut s = format!("{} (strength {:.2})", self.limit, self.strength);
        if let Some(a) = &self.also {
            s.push_str(&format!(" and {} (strength {:.2})", a.limit, a.strength));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::model::{Role, UdpReceiveStats};

    fn thread(run: f64, wait: f64, irq: f64) -> ThreadEvidence {
        ThreadEvidence {
            run,
            wait,
            involuntary_switches: 0,
            cpu: Some(1),
            cpu_interrupt_share: Some(irq),
            cpu_interface_interrupts: Some(0),
        }
    }

    fn tcp(sender: ThreadEvidence, receiver: ThreadEvidence) -> Evidence {
        Evidence {
            kind: Some(Kind::Tcp),
            throughput_bits_per_second: 1e9,
            sender_throughput_bits_per_second: 1e9,
            sender: Some(sender),
            receiver: Some(receiver),
            busy: Some(1.0),
            rwnd_limited: Some(0.0),
            sndbuf_limited: Some(0.0),
            ..Evidence::default()
        }
    }

    /// The evidence of `diagnosis::a_receiver_held_to_15_percent_...` on a
    /// loaded machine before the cgroup was read: both threads waited for
    /// a CPU, neither reached saturation, and `network` won at 0.68.
    fn quota_on_a_busy_host() -> Evidence {
        let mut e = tcp(thread(0.22, 0.43, 0.0), thread(0.14, 0.50, 0.0));
        e.busy = Some(0.686);
        e.sndbuf_limited = Some(0.002);
        e
    }

    #[test]
    fn a_receiver_throttled_by_its_cpu_quota_is_the_receiver_cpu() {
        let before = diagnose(&quota_on_a_busy_host());
        assert_eq!(before.limit, Limit::Network, "the old reading");
        let mut e = quota_on_a_busy_host();
        e.receiver_throttled = Some(0.98);
        e.receiver_quota_cpus = Some(0.15);
        e.sender_throttled = Some(0.0);
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::ReceiverCpu, "{d:#?}");
        assert!((d.strength - 0.98).abs() < 1e-9);
        // No advice: lifting the quota was not shown to lift the probe.
        assert!(d.advice.is_empty(), "{:?}", d.advice);
        // The sender's quota, likewise.
        let mut e = quota_on_a_busy_host();
        e.sender_throttled = Some(0.95);
        assert_eq!(diagnose(&e).limit, Limit::SenderCpu);
        // A quota that was seldom reached is no verdict of its own.
        let mut e = quota_on_a_busy_host();
        e.receiver_throttled = Some(0.2);
        assert_eq!(diagnose(&e).limit, Limit::Network);
    }

    /// The CI run that read `sender_cpu` for a responder held to 15% of a
    /// CPU: the receiver throttled in every period, the sender's thread
    /// blocked a third of the window while softirq work filled its CPU.
    #[test]
    fn a_quota_met_in_every_period_outranks_the_other_side_s_full_cpu() {
        let mut e = tcp(thread(0.647, 0.021, 0.415), thread(0.150, 0.317, 0.126));
        e.busy = Some(1.0);
        e.rwnd_limited = Some(0.0);
        e.sndbuf_limited = Some(0.0);
        e.sender_throttled = Some(0.0);
        e.receiver_throttled = Some(1.0);
        e.receiver_quota_cpus = Some(0.15);
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::ReceiverCpu, "{d:#?}");
        assert!((d.strength - 1.0).abs() < 1e-9);
        // Without the quota's evidence the sender's full CPU is the verdict.
        e.receiver_throttled = None;
        assert_eq!(diagnose(&e).limit, Limit::SenderCpu);
        // A quota met in most but not nearly all periods is no cap.
        e.receiver_throttled = Some(0.8);
        assert_eq!(diagnose(&e).limit, Limit::SenderCpu);
    }

    #[test]
    fn on_one_host_the_network_is_never_the_verdict_and_unknown_says_why() {
        let mut e = quota_on_a_busy_host();
        e.same_host = true;
        let d = diagnose(&e);
        assert!(
            d.candidates.iter().all(|c| c.limit != Limit::Network),
            "{d:#?}"
        );
        assert_eq!(d.limit, Limit::Unknown);
        let why = d.why_unknown.unwrap();
        assert!(
            why.contains("sender_cpu, held 65% (needs 90%)") && why.contains("one host"),
            "{why}"
        );
        // UDP loss between two ends of one host is the host's, not a path's.
        let udp = Evidence {
            kind: Some(Kind::Udp),
            loss_ratio: Some(0.3),
            same_host: true,
            ..Evidence::default()
        };
        assert_ne!(diagnose(&udp).limit, Limit::Network);
        assert!(diagnose(&tcp(thread(1.0, 0.0, 0.0), thread(0.1, 0.0, 0.0)))
            .why_unknown
            .is_none());
    }

    #[test]
    fn a_saturated_thread_is_the_limit_and_explains_a_full_window() {
        let mut e = tcp(thread(0.3, 0.0, 0.0), thread(0.2, 0.74, 0.0));
        e.rwnd_limited = Some(0.97);
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::ReceiverCpu);
        assert!((d.strength - 0.94).abs() < 1e-9);
        assert_eq!(d.also, None, "{d:?}");
        assert_eq!(d.headline(), "receiver_cpu (strength 0.94)");
        // The full window is still shown among the candidates.
        assert_eq!(d.candidates[0].limit, Limit::ReceiveWindow);
    }

    #[test]
    fn time_the_hypervisor_took_from_the_thread_s_cpu_is_not_idle_time() {
        // Measured in CI: a CPU-bound loopback sender ran 80% of its window
        // while the hypervisor stole 20% of its CPU.
        let stream = StreamStats {
            seconds: 2.0,
            sched: Some(crate::engine::stats::ThreadSched {
                run_seconds: 1.6,
                wait_seconds: 0.0,
                involuntary_switches: 0,
                cpus: vec![1],
            }),
            ..StreamStats::default()
        };
        let mut host = HostDelta {
            cpus: vec![crate::engine::stats::CpuLoad {
                cpu: 1,
                busy: 1.0,
                steal: 0.2,
                ..Default::default()
            }],
            ..HostDelta::default()
        };
        let t = thread_evidence(&[&stream], &host).unwrap();
        assert!((t.run - 1.0).abs() < 1e-9, "{t:?}");
        // Without steal the same run time is 80% of the window.
        host.cpus[0].steal = 0.0;
        assert!((thread_evidence(&[&stream], &host).unwrap().run - 0.8).abs() < 1e-9);
    }

    #[test]
    fn two_saturated_threads_are_both_named() {
        let d = diagnose(&tcp(thread(0.99, 0.0, 0.0), thread(0.97, 0.0, 0.0)));
        assert_eq!(d.limit, Limit::SenderCpu);
        assert_eq!(d.also.as_ref().map(|a| a.limit), Some(Limit::ReceiverCpu));
        assert_eq!(
            d.headline(),
            "sender_cpu (strength 0.99) and receiver_cpu (strength 0.97)"
        );
    }

    #[test]
    fn a_flow_s_own_softirq_on_its_cpu_counts_as_the_thread_s() {
        // Loopback: the receive path runs in softirq on the sender's CPU.
        let d = diagnose(&tcp(thread(0.6, 0.0, 0.38), thread(0.5, 0.0, 0.0)));
        assert_eq!(d.limit, Limit::SenderCpu);
        assert!((d.strength - 0.98).abs() < 1e-9);
    }

    /// A loopback probe, the receiver pinned to the CPU of a softirq storm
    /// (64-byte UDP floods over a veth pair), as staged: the receiver's
    /// thread ran 24% and waited for its CPU 41% of the window, on a CPU
    /// with 27% irq+softirq; the sender ran 69% with 26% interrupts on its
    /// own CPU (the loopback receive path).
    fn storm() -> Evidence {
        let mut e = tcp(thread(0.69, 0.0, 0.26), thread(0.242, 0.408, 0.266));
        e.same_host = true;
        e.rtt_over_min = Some(21.0);
        e.receiver_net_rx_softirqs = Some(676_000);
        e
    }

    #[test]
    fn a_softirq_storm_on_the_receiver_s_cpu_is_the_receiver_not_the_sender() {
        let d = diagnose(&storm());
        assert_eq!(d.limit, Limit::ReceiverCpu, "{d:?}");
        assert!((d.strength - 0.916).abs() < 1e-9, "{}", d.strength);
        // The sender is ranked at its own thread's share, below the verdict.
        let sender = d.candidates.iter().find(|c| c.limit == Limit::SenderCpu);
        assert!((sender.unwrap().strength - 0.69).abs() < 1e-9, "{d:?}");
        assert_eq!(d.candidates[0].limit, Limit::ReceiverCpu, "{d:?}");
        // The evidence says why, in the JSON.
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["evidence"]["receiver"]["wait"], 0.408);
        assert_eq!(json["evidence"]["receiver_net_rx_softirqs"], 676_000);
        // Before the rule: the sender's CPU with its interrupts read full.
        let mut quiet_receiver = storm();
        quiet_receiver.receiver = Some(thread(0.6, 0.02, 0.0));
        assert_eq!(diagnose(&quiet_receiver).limit, Limit::SenderCpu);
    }

    #[test]
    fn a_quiet_loopback_sender_at_a_full_cpu_is_still_the_sender() {
        let mut e = tcp(thread(0.99, 0.0, 0.0), thread(0.62, 0.02, 0.0));
        e.same_host = true;
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::SenderCpu);
        assert!((d.strength - 0.99).abs() < 1e-9);
        // A sender at a full CPU stays the sender even beside a contended
        // receiver: both are named when close.
        e.receiver = Some(thread(0.3, 0.4, 0.25));
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::SenderCpu, "{d:?}");
        assert_eq!(d.also.as_ref().map(|a| a.limit), Some(Limit::ReceiverCpu));
    }

    #[test]
    fn threads_waiting_on_a_host_busy_with_other_work_are_no_contention() {
        // Measured on the team's machine under parallel builds: both
        // threads mostly waited, with almost no interrupt work.
        let mut e = tcp(thread(0.08, 0.57, 0.024), thread(0.03, 0.39, 0.06));
        e.same_host = true;
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::Unknown, "{d:?}");
    }

    #[test]
    fn interrupts_that_crowd_a_thread_out_are_softirq_contention() {
        // Recorded from the story of a netserver: the netserver shared a CPU
        // with the NIC's interrupts (71% of it), and ran only 27% itself.
        let mut receiver = thread(0.27, 0.02, 0.71);
        receiver.cpu_interface_interrupts = Some(180_000);
        let d = diagnose(&tcp(thread(0.4, 0.0, 0.05), receiver));
        assert_eq!(d.limit, Limit::SoftirqContention);
        assert!((d.strength - 0.71).abs() < 1e-9);
    }

    #[test]
    fn time_accounting_names_windows_buffers_and_the_path() {
        let idle = || thread(0.1, 0.0, 0.0);
        let mut e = tcp(idle(), idle());
        e.rwnd_limited = Some(0.88);
        e.receiver_tcp_rmem_max = Some(4_194_304);
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::ReceiveWindow);
        assert_eq!(
            d.advice,
            ["the receive window limited 88% of the time: raise -w, or net.ipv4.tcp_rmem max on the receiver (now 4194304)"]
        );
        let mut e = tcp(idle(), idle());
        e.sndbuf_limited = Some(0.7);
        e.sender_tcp_wmem_max = Some(8192);
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::SendBuffer);
        assert!((d.strength - 0.7).abs() < 1e-9);
        assert_eq!(
            d.advice,
            ["the send buffer limited 70% of the time: raise -w, or net.ipv4.tcp_wmem max on the sender (now 8192)"]
        );
        // What the lab measured for a receive window far below the
        // bandwidth-delay product: the kernel booked the rest as busy.
        let mut e = tcp(idle(), idle());
        e.rwnd_limited = Some(0.487);
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::ReceiveWindow);
        assert_eq!(d.candidates[0].limit, Limit::Network, "{d:?}");
        let mut e = tcp(idle(), idle());
        e.retransmits = 300;
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::Network);
        // Close causes: both named.
        let mut e = tcp(idle(), idle());
        e.rwnd_limited = Some(0.52);
        e.sndbuf_limited = Some(0.55);
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::SendBuffer);
        assert_eq!(d.also.map(|a| a.limit), Some(Limit::ReceiveWindow));
    }

    #[test]
    fn a_met_cap_is_the_limit_whatever_else_the_sender_shows() {
        let mut e = tcp(thread(0.05, 0.0, 0.0), thread(0.05, 0.0, 0.0));
        e.bitrate_bits_per_second = 50_000_000;
        e.sender_throughput_bits_per_second = 49_900_000.0;
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::RateLimit);
        assert!(d.strength > 0.99);
        // Not met: the cap was not the limit.
        e.sender_throughput_bits_per_second = 20_000_000.0;
        assert_eq!(diagnose(&e).limit, Limit::Network);
    }

    #[test]
    fn without_evidence_the_verdict_is_unknown() {
        let d = diagnose(&Evidence::default());
        assert_eq!(d.limit, Limit::Unknown);
        assert!(d.candidates.is_empty());
        // An old kernel: no time accounting, idle threads.
        let mut e = tcp(thread(0.2, 0.0, 0.0), thread(0.2, 0.0, 0.0));
        e.busy = None;
        e.rwnd_limited = None;
        e.sndbuf_limited = None;
        assert_eq!(diagnose(&e).limit, Limit::Unknown);
        // NaN from a broken peer does not become a verdict.
        let mut e = tcp(thread(f64::NAN, 0.0, 0.0), thread(0.2, 0.0, 0.0));
        e.busy = Some(f64::NAN);
        assert_eq!(diagnose(&e).limit, Limit::Unknown);
    }

    #[test]
    fn udp_loss_is_the_path_and_a_met_rate_the_cap() {
        let mut e = Evidence {
            kind: Some(Kind::Udp),
            bitrate_bits_per_second: 100_000_000,
            sender_throughput_bits_per_second: 99e6,
            loss_ratio: Some(0.0),
            sender: Some(thread(0.2, 0.0, 0.0)),
            receiver: Some(thread(0.2, 0.0, 0.0)),
            ..Evidence::default()
        };
        assert_eq!(diagnose(&e).limit, Limit::RateLimit);
        e.sender_throughput_bits_per_second = 60e6;
        e.loss_ratio = Some(0.05);
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::Network);
        assert!((d.strength - 0.95).abs() < 1e-9);
    }

    #[test]
    fn gro_drops_count_buffers_and_are_turned_into_datagrams() {
        // Loopback UDP with GSO and GRO, as measured: 1,760,236 datagrams
        // lost, the socket (and the host) counted 38,266 drops, each a GRO
        // buffer of about 46 datagrams. Read as datagrams, the drops
        // would explain 2% of the loss and the verdict would blame the path.
        let mut e = Evidence {
            kind: Some(Kind::Udp),
            sender_throughput_bits_per_second: 53.6e9,
            throughput_bits_per_second: 47.0e9,
            loss_ratio: Some(0.1226),
            lost_datagrams: Some(1_760_236),
            socket_drops: Some(38_266),
            receiver_rcvbuf_errors: Some(38_266),
            datagrams_per_buffer: Some(46.0),
            sender: Some(thread(0.9, 0.0, 0.0)),
            receiver: Some(thread(0.66, 0.0, 0.0)),
            ..Evidence::default()
        };
        assert_eq!(e.socket_drop_datagrams(), Some(1_760_236));
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::ReceiverCpu, "{d:?}");
        // Without the buffer count (an older peer) the drops stay as the
        // kernel counted them, and the verdict cannot see it.
        e.datagrams_per_buffer = None;
        assert_eq!(e.socket_drop_datagrams(), Some(38_266));
        assert_eq!(diagnose(&e).limit, Limit::Network);
    }

    #[test]
    fn datagrams_per_buffer_is_over_the_receivers_that_counted_buffers() {
        let rx = |packets, buffers| {
            let mut s = StreamStats {
                role: Some(Role::Receiver),
                ..StreamStats::default()
            };
            s.udp_received = Some(UdpReceiveStats {
                packets,
                buffers,
                ..UdpReceiveStats::default()
            });
            s
        };
        let (a, b, old) = (rx(4600, Some(100)), rx(1000, Some(1000)), rx(500, None));
        assert_eq!(datagrams_per_buffer(&[&a, &b, &old]), Some(5600.0 / 1100.0));
        assert_eq!(datagrams_per_buffer(&[&old]), None);
        assert_eq!(datagrams_per_buffer(&[&rx(0, Some(0))]), None);
    }

    #[test]
    fn udp_loss_the_receiver_dropped_at_its_socket_is_the_receiver_s() {
        // Evidence shaped like a receiver with a tiny receive buffer fed
        // 1 Gbit/s: 31% lost, nearly all of it overflows of the receiving
        // socket, while the receiving thread ran only 40%.
        let mut e = Evidence {
            kind: Some(Kind::Udp),
            bitrate_bits_per_second: 1_000_000_000,
            sender_throughput_bits_per_second: 990e6,
            throughput_bits_per_second: 683e6,
            loss_ratio: Some(0.31),
            lost_datagrams: Some(26_600),
            socket_drops: Some(26_350),
            receiver_rcvbuf_errors: Some(26_480),
            sender_sndbuf_errors: Some(0),
            sender: Some(thread(0.6, 0.0, 0.0)),
            receiver: Some(thread(0.4, 0.0, 0.0)),
            ..Evidence::default()
        };
        let d = diagnose(&e);
        assert_eq!(d.limit, Limit::ReceiverCpu, "{d:?}");
        // The host's count (larger) explains 26480 of 26600.
        assert!((d.strength - 26_480.0 / 26_600.0).abs() < 1e-9, "{d:?}");
        // The same loss with the receiving socket dropping nothing: the path.
        e.socket_drops = Some(0);
        e.receiver_rcvbuf_errors = Some(3);
        assert_eq!(diagnose(&e).limit, Limit::Network);
        // Drops explaining a minority of the loss: still the path.
        e.socket_drops = Some(10_000);
        assert_eq!(diagnose(&e).limit, Limit::Network);
        // Unknown counts (an older peer): the path, as before.
        e.socket_drops = None;
        e.receiver_rcvbuf_errors = None;
        assert_eq!(e.receiver_drop_share(), None);
        assert_eq!(diagnose(&e).limit, Limit::Network);
        // Host-wide errors from other sockets far above the loss are
        // capped at all of it, not more.
        e.receiver_rcvbuf_errors = Some(u64::MAX);
        assert_eq!(e.receiver_drop_share(), Some(1.0));
        // Drops without loss above the threshold are no verdict.
        e.loss_ratio = Some(0.001);
        e.lost_datagrams = Some(80);
        e.socket_drops = Some(80);
        assert_ne!(diagnose(&e).limit, Limit::ReceiverCpu);
    }
}
