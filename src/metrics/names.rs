//! The one place that defines every metric pathprobe exports: its name,
//! help text, type and labels.
//!
//! Rendering code refers to these definitions rather than spelling names
//! out, and the reference table in `docs/METRICS.md` is generated from
//! [`ALL`] by [`markdown_reference`] (a test fails when the file and the
//! table differ), so code, documentation and output cannot drift apart.

/// Label names, so that a typo is a compile error rather than a new series.
pub mod label {
    pub const TARGET: &str = "target";
    pub const MODULE: &str = "module";
    pub const KIND: &str = "kind";
    pub const DIRECTION: &str = "direction";
    pub const FLOW: &str = "flow";
    pub const RESULT: &str = "result";
    pub const REASON: &str = "reason";
    pub const SIDE: &str = "side";
    pub const PERCENTILE: &str = "percentile";
    pub const MODE: &str = "mode";
    pub const TYPE: &str = "type";
    pub const RELEASE: &str = "release";
    pub const VERSION: &str = "version";
    pub const KERNEL_RELEASE: &str = "kernel_release";
    pub const KERNEL_VERSION: &str = "kernel_version";
    pub const HOSTNAME: &str = "hostname";
    pub const CPUS: &str = "cpus";
    pub const IRQ: &str = "irq";
    pub const DESCRIPTION: &str = "description";
    pub const COLLECTOR: &str = "collector";
    pub const CAUSE: &str = "cause";
    pub const PROTOCOL: &str = "protocol";
    pub const FIGURE: &str = "figure";
    pub const HASH: &str = "hash";
    pub const FROM_RELEASE: &str = "from_release";
    pub const TO_RELEASE: &str = "to_release";
    pub const BEFORE: &str = "before";
    pub const AFTER: &str = "after";
    pub const VERDICT: &str = "verdict";
    pub const ADVICE: &str = "advice";
    pub const CHANGES: &str = "changes";
    pub const HOP: &str = "hop";
    pub const ADDRESS: &str = "address";
    pub const ROLE: &str = "role";
    pub const GROUP_BY: &str = "group_by";
    pub const GROUP: &str = "group";
}

use label::*;

/// The Prometheus metric type of a definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
}

impl MetricType {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
        }
    }
}

/// Which part of the exporter a metric belongs to. Per-probe metrics carry
/// the [`PROBE_LABELS`] and the target's own labels besides their
/// [`MetricDef::labels`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Probe,
    Host,
    Responder,
    Service,
    /// From the traces of `pathprobe serve` (`trace:`): labelled with
    /// `target` and `module` only, so that PromQL joins them with the
    /// per-probe series `on (instance, target, module)`.
    Path,
}

impl Scope {
    fn title(self) -> &'static str {
        match self {
            Scope::Probe => "Per probe",
            Scope::Host => "Host (read from /proc at scrape time)",
            Scope::Responder => "Responder",
            Scope::Service => "Service and scheduler",
            Scope::Path => "Per path (traces, `trace.enabled: true`)",
        }
    }
}

/// Labels every per-probe series has, in this order, before the target's
/// own labels.
pub const PROBE_LABELS: [&str; 4] = [TARGET, MODULE, KIND, DIRECTION];

/// One exported metric.
#[derive(Debug, PartialEq, Eq)]
pub struct MetricDef {
    /// Full name, `pathprobe_` prefix included.
    pub name: &'static str,
    pub help: &'static str,
    pub metric_type: MetricType,
    pub scope: Scope,
    /// Labels beyond the scope's common ones, in output order.
    pub labels: &'static [&'static str],
}

const fn def(
    scope: Scope,
    metric_type: MetricType,
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        help,
        metric_type,
        scope,
        labels,
    }
}

use MetricType::{Counter, Gauge, Histogram};
use Scope::{Host, Path, Probe, Responder, Service};

// ---- Per probe ----------------------------------------------------------

pub static PROBE_SUCCESS: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_success",
    &[],
    "1 if the latest probe succeeded, 0 if it failed.",
);
pub static PROBE_DURATION: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_duration_seconds",
    &[],
    "Wall-clock time the latest probe took, from connecting to the final report, successful or not.",
);
pub static PROBE_SLOT_WAIT: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_slot_wait_seconds",
    &[],
    "/probe only: how long the request waited for running scheduled probes to finish before its own started (not part of pathprobe_probe_duration_seconds).",
);
pub static PROBE_CLAMPED: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_clamped",
    &[],
    "1 if the responder cut the latest probe down to its limits (fewer streams, a shorter or slower test than the module asks for), so its figures are not those of the module; 0 otherwise, and before the first probe.",
);
pub static PROBE_LAST_RUN: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_last_run_timestamp_seconds",
    &[],
    "Unix time at which the latest probe ended, successful or not: time() minus this is the age of every other per-probe figure.",
);
pub static PROBES: MetricDef = def(
    Probe,
    Counter,
    "pathprobe_probes_total",
    &[RESULT],
    "Probes run, by result: success, or the failure reason (refused, unreachable, timeout, busy, version_unsupported (the responder is more than one protocol version away), rejected, auth_required, auth_failed, denied, protocol_error, aborted, io_error, resolve, bad_argument, panic). At metrics.detail: fleet, summed over targets per module (no target or target labels).",
);
pub static PEER_CLOCK_OFFSET: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_peer_clock_offset_seconds",
    &[],
    "The target's wall clock minus this host's, estimated at the latest probe's handshake (protocol version 3 on): positive when the target is ahead. Within pathprobe_peer_clock_offset_uncertainty_seconds of the truth. Absent before the first such probe.",
);
pub static PEER_CLOCK_UNCERTAINTY: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_peer_clock_offset_uncertainty_seconds",
    &[],
    "Half the round trip of the handshake that estimated pathprobe_peer_clock_offset_seconds: the most an asymmetric path can move that estimate.",
);
pub static PROBE_FAILURE_INFO: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_failure_info",
    &[REASON],
    "1 while the latest probe has failed, labelled with why; absent after a success.",
);
pub static THROUGHPUT: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_throughput_bytes_per_second",
    &[FLOW],
    "Receiver goodput of the latest probe in this flow, in bytes per second (multiply by 8 for bit/s); 0 after a failure.",
);
pub static RECEIVED_BYTES: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_received_bytes",
    &[FLOW],
    "Payload bytes the receiver got in the measured window of the latest probe.",
);
pub static SENT_BYTES: MetricDef = def(
    Probe,
    Counter,
    "pathprobe_sent_bytes_total",
    &[FLOW],
    "Payload bytes sent by all probes in their measured windows: what monitoring costs the path (warm-up and headers not included).",
);
pub static TCP_RETRANSMITS: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_tcp_retransmits",
    &[FLOW],
    "TCP segments the sender retransmitted during the latest probe, summed over streams.",
);
pub static TCP_RETRANSMITS_TOTAL: MetricDef = def(
    Probe,
    Counter,
    "pathprobe_tcp_retransmits_total",
    &[FLOW],
    "TCP segments retransmitted by all successful probes, summed over streams.",
);
pub static TCP_RTT: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_tcp_rtt_seconds",
    &[FLOW],
    "Sender's smoothed TCP round-trip time at the end of the latest probe, averaged over streams.",
);
pub static TCP_MIN_RTT: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_tcp_min_rtt_seconds",
    &[FLOW],
    "Smallest TCP round-trip time any stream of the latest probe saw.",
);
pub static TCP_CWND: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_tcp_cwnd_bytes",
    &[FLOW],
    "Sender's congestion window at the end of the latest probe, summed over streams.",
);
pub static TCP_MSS: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_tcp_mss_bytes",
    &[FLOW],
    "Sender's TCP maximum segment size in the latest probe (smallest over streams).",
);
pub static UDP_SENT: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_udp_sent_packets",
    &[FLOW],
    "UDP datagrams sent in the measured window of the latest probe.",
);
pub static UDP_RECEIVED: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_udp_received_packets",
    &[FLOW],
    "UDP datagrams received in the measured window of the latest probe.",
);
pub static UDP_LOST: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_udp_lost_packets",
    &[FLOW],
    "UDP datagrams sent but not received in the latest probe.",
);
pub static UDP_OUT_OF_ORDER: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_udp_out_of_order_packets",
    &[FLOW],
    "UDP datagrams that arrived after a later one in the latest probe.",
);
pub static UDP_DUPLICATED: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_udp_duplicated_packets",
    &[FLOW],
    "UDP datagrams received more than once in the latest probe.",
);
pub static UDP_LOSS: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_udp_loss_ratio",
    &[FLOW],
    "Lost UDP datagrams as a fraction of those sent in the latest probe (0 to 1).",
);
pub static UDP_JITTER: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_udp_jitter_seconds",
    &[FLOW],
    "UDP inter-arrival jitter (RFC 3550) at the end of the latest probe, averaged over streams.",
);
pub static UDP_SOCKET_DROPS: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_udp_socket_dropped_packets",
    &[FLOW],
    "UDP datagrams the receiving socket dropped for lack of buffer room (SO_RXQ_OVFL) in the latest probe; part of the lost ones.",
);
pub static RR_LATENCY: MetricDef = def(
    Probe,
    Histogram,
    "pathprobe_rr_latency_seconds",
    &[],
    "tcp_rr: latency of every transaction (request written to response read); tcp_crr (kind label): of every transaction, a connection each (socket created to response read); udp_rr: round-trip time less the responder's processing time; of every probe since the service started, in buckets from 10 us to 10 s.",
);
pub static RR_LATENCY_PERCENTILE: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_rr_latency_percentile_seconds",
    &[PERCENTILE],
    "tcp_rr and tcp_crr: transaction latency (udp_rr: round-trip time) of the latest probe at percentile 0 (min), 50, 90, 99, 99.9 and 100 (max), from its own histogram (3 significant digits); for those who do not write histogram_quantile.",
);
pub static RR_TRANSACTIONS_RATE: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_rr_transactions_per_second",
    &[],
    "tcp_rr and tcp_crr: transactions completed per second in the latest probe; for tcp_crr each is a connection, so this is its connections per second.",
);
pub static RR_CPU_PER_TRANSACTION: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_rr_cpu_seconds_per_transaction",
    &[SIDE],
    "tcp_rr and tcp_crr: data-thread CPU (user + system) per transaction in the latest probe, on the prober (local) and the responder (remote): netperf's service demand, in seconds. The responder's tcp_crr figure leaves out the accept and the hello read, which its accept loop does.",
);
pub static RR_CONNECT: MetricDef = def(
    Probe,
    Histogram,
    "pathprobe_rr_connect_seconds",
    &[],
    "tcp_crr: connection set-up time of every transaction (connect() called to returned: SYN to SYN-ACK, as the prober sees it) of every probe since the service started, in the buckets of pathprobe_rr_latency_seconds.",
);
pub static RR_CONNECT_PERCENTILE: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_rr_connect_percentile_seconds",
    &[PERCENTILE],
    "tcp_crr: connection set-up time of the latest probe at percentile 0 (min), 50, 90, 99, 99.9 and 100 (max), from its own histogram (3 significant digits).",
);
pub static RR_CONNECTION_FAILURES_TOTAL: MetricDef = def(
    Probe,
    Counter,
    "pathprobe_rr_connection_failures_total",
    &[REASON],
    "tcp_crr: transactions that failed, over every probe since the service started, by reason as the prober saw it: refused, timeout (not connected or answered within 2 s), reset, closed (before the whole response), no_local_port (the prober's ephemeral ports held, in TIME_WAIT), unreachable, invalid (more than the response), other. Every reason exists at 0 from the start.",
);
pub static RR_LOSS: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_rr_loss_ratio",
    &[FLOW],
    "udp_rr: datagrams lost on one leg of the latest probe, as a fraction of those that entered it (0 to 1): flow=send is requests the responder never received, flow=receive is replies it sent that never came back.",
);
pub static RR_LOST_TOTAL: MetricDef = def(
    Probe,
    Counter,
    "pathprobe_rr_lost_datagrams_total",
    &[FLOW],
    "udp_rr: datagrams lost on each leg (flow=send: requests, flow=receive: replies) over every probe since the service started.",
);
pub static RR_IPDV: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_rr_ipdv_seconds",
    &[FLOW],
    "udp_rr: mean IPDV (RFC 3393 jitter, absolute, between consecutive requests) of each leg's one-way delay in the latest probe; the hosts' clock offset cancels in it.",
);
pub static PROBE_CPU: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_cpu_utilization_ratio",
    &[SIDE, MODE],
    "CPU used by the probe's data threads on each side (local prober, remote responder), as a fraction of one CPU; above 1 with several streams.",
);
pub static PROBE_HOST_CPU: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_host_cpu_utilization_ratio",
    &[SIDE],
    "Busy fraction of all CPUs of each side's host during the latest probe (0 to 1).",
);
pub static PROBE_INTERRUPTS: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_interrupts",
    &[SIDE],
    "Hardware interrupts on each side's host during the latest probe, all IRQs.",
);
pub static PROBE_INTERFACE_INTERRUPTS: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_interface_interrupts",
    &[SIDE],
    "Hardware interrupts of the network interface that carried the latest probe, on each side.",
);
pub static PROBE_SOFTIRQS: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_softirqs",
    &[SIDE, TYPE],
    "NET_RX and NET_TX softirqs on each side's host during the latest probe.",
);
pub static PROBE_KERNEL_INFO: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_kernel_info",
    &[SIDE, RELEASE],
    "Always 1; the kernel release each side ran in the latest probe (side=\"remote\" is the peer's; `unstable` while the peer churns, see pathprobe_probe_remote_unstable_total).",
);
pub static PROBE_LIMITED_BY: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_limited_by",
    &[FLOW, CAUSE],
    "1 for what limited each flow of the latest probe (the verdict, and a second cause as strong as the first), 0 for every other cause of the fixed set: sender_cpu, receiver_cpu, softirq_contention, receive_window, send_buffer, network, rate_limit, unknown (docs/DIAGNOSIS.md). Absent for the request/response kinds (tcp_rr, udp_rr, tcp_crr), which get no verdict.",
);
pub static PROBE_LIMIT_STRENGTH: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_limit_strength_ratio",
    &[FLOW, CAUSE],
    "Strength of each candidate cause of the latest probe's verdict, 0 to 1: the fraction of the window it held (the cap reached, for rate_limit); absent where the evidence is unknown, and for the request/response kinds (docs/DIAGNOSIS.md).",
);

pub static PROBE_FINGERPRINT_INFO: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_fingerprint_info",
    &[SIDE, HASH, KERNEL_RELEASE],
    "Always 1; each side's host fingerprint in the latest probe that carried one (kernel release, TCP buffer sysctls, congestion control, qdisc, interface, CPU quota, pathprobe version): hash is 8 hex digits of the whole set, so the series changes exactly when a setting does; the settings themselves are on the status page and in the probe JSON. A peer whose fingerprint or release churns reads hash and kernel_release `unstable` (pathprobe_probe_remote_unstable_total). Absent for peers that do not send one.",
);
pub static PROBE_REMOTE_UNSTABLE: MetricDef = def(
    Probe,
    Counter,
    "pathprobe_probe_remote_unstable_total",
    &[],
    "Successful probes whose responder had shown more than 2 distinct kernel releases or fingerprints within the hour before, at 0 from the start: while it churns, its release and fingerprint hash are exported as `unstable` (on pathprobe_probe_kernel_info, pathprobe_probe_fingerprint_info and the step series) rather than as a new series each probe, and the history keeps its buckets whole.",
);
pub static STEP_DETECTED: MetricDef = def(
    Probe,
    Counter,
    "pathprobe_step_detected_total",
    &[FIGURE],
    "Steps the detector found in this path's own recent probes since serve started, per figure the kind has (throughput, and rtt for TCP, loss for UDP; latency for the request/response kinds), each at 0 from the start: the last 5 probes against up to 60 before them (an hour), by an exact rank test, the medians' move and the hour's range (docs/DIAGNOSIS.md, \"Steps\").",
);
pub static STEP_LAST_RATIO: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_step_last_ratio",
    &[FIGURE, FROM_RELEASE, TO_RELEASE, BEFORE, AFTER, VERDICT, ADVICE, CHANGES],
    "The newest step of each figure of this path: median after over median before (0.55 is -45%). Its labels say what it was: the kernel release before and after (of the end whose kernel changed, this host's when both did, the peer's when none did; `unstable` for a peer whose release churns, see pathprobe_probe_remote_unstable_total), both medians in their unit (bit/s for throughput), the verdict and advice most probes after it gave, and the settings that changed on either end between the last probe before it and the first after (at most 200 characters, each end its own share, this host's first; an end whose changes do not fit is summarised as \"remote: 21 settings changed\"). One series per figure and path, replaced at the next step; absent before the first.",
);
pub static STEP_LAST_TIME: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_step_last_timestamp_seconds",
    &[FIGURE],
    "Unix time of the probe that made the newest step of each figure significant (not of the step itself, which the first probe after it started); absent before the first step.",
);
pub static PROBE_STABLE_VERDICT: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_stable_verdict_info",
    &[CAUSE, ADVICE],
    "Always 1; the verdict most of this path's last 5 successful probes gave (one outlier of a loaded host does not flip it), and the advice that came with it (empty when none; at most 200 characters). Absent for the kinds with no verdict and before the first probe.",
);

// ---- Host ---------------------------------------------------------------

pub static HOST_INFO: MetricDef = def(
    Host,
    Gauge,
    "pathprobe_host_info",
    &[KERNEL_RELEASE, KERNEL_VERSION, HOSTNAME, CPUS],
    "Always 1; this host's kernel, name and number of online CPUs.",
);
pub static HOST_CPU_SECONDS: MetricDef = def(
    Host,
    Counter,
    "pathprobe_host_cpu_seconds_total",
    &[MODE],
    "CPU time since boot summed over all CPUs, by mode (/proc/stat).",
);
pub static HOST_INTERRUPTS: MetricDef = def(
    Host,
    Counter,
    "pathprobe_host_interrupts_total",
    &[IRQ, DESCRIPTION],
    "Hardware interrupts since boot of each IRQ whose description matches the configured pattern (/proc/interrupts).",
);
pub static HOST_INTERRUPTS_ALL: MetricDef = def(
    Host,
    Counter,
    "pathprobe_host_interrupts_all_total",
    &[],
    "Interrupts since boot over every IRQ and architecture row, whatever the pattern (/proc/interrupts).",
);
pub static HOST_SOFTIRQS: MetricDef = def(
    Host,
    Counter,
    "pathprobe_host_softirqs_total",
    &[TYPE],
    "Softirqs since boot summed over CPUs, by type (/proc/softirqs).",
);
pub static HOST_TCP_RETRANS: MetricDef = def(
    Host,
    Counter,
    "pathprobe_host_tcp_retransmitted_segments_total",
    &[],
    "TCP segments the host retransmitted since boot (Tcp RetransSegs in /proc/net/snmp).",
);
pub static HOST_UDP_IN_ERRORS: MetricDef = def(
    Host,
    Counter,
    "pathprobe_host_udp_in_errors_total",
    &[],
    "UDP datagrams the host could not deliver since boot, receive-buffer overflows included (Udp InErrors).",
);
pub static HOST_UDP_RCVBUF_ERRORS: MetricDef = def(
    Host,
    Counter,
    "pathprobe_host_udp_receive_buffer_errors_total",
    &[],
    "UDP datagrams dropped since boot because a socket's receive buffer was full (Udp RcvbufErrors).",
);
pub static HOST_UDP_SNDBUF_ERRORS: MetricDef = def(
    Host,
    Counter,
    "pathprobe_host_udp_send_buffer_errors_total",
    &[],
    "UDP datagrams dropped since boot because a socket's send buffer was full (Udp SndbufErrors).",
);
pub static HOST_COLLECTOR_SUCCESS: MetricDef = def(
    Host,
    Gauge,
    "pathprobe_host_collector_success",
    &[COLLECTOR],
    "1 if the /proc file behind a host collector (stat, interrupts, softirqs, snmp) was read at this scrape, 0 if not.",
);

// ---- Responder ----------------------------------------------------------

pub static RESPONDER_TESTS: MetricDef = def(
    Responder,
    Counter,
    "pathprobe_responder_tests_total",
    &[PROTOCOL, RESULT],
    "Tests the responder ran for probers, by protocol (pathprobe: pathprobe's own probers; iperf3: stock iperf3 clients on responder.iperf3_port) and result (success, failure).",
);
pub static RESPONDER_REJECTIONS: MetricDef = def(
    Responder,
    Counter,
    "pathprobe_responder_rejections_total",
    &[REASON],
    "Connections the responder turned away without a test, by reason: busy, limit (a request over a limit under limit_policy refuse), version_mismatch (a prober more than one protocol version away), protocol_error, timeout, auth_required (no secret offered to a responder that needs one), auth_failed (wrong secret), denied (client outside the allow list or inside the deny list), rate_limited (client over its tests per minute), budget_exhausted (the hour's bytes spent), bad_token (a data connection naming no pending test, reset), connection_limit (a tcp_crr connection of a running test over its max_connections_per_second, its count, or its queue of 16, reset), out_of_turn (mesh mode: a test other than the slot's planned one that would overlap a planned test of this host or of the prober, told busy with the next free gap), overload (closed at once: the waiting connections or sessions were full, or an idle one was dropped to make room for a lighter client).",
);
pub static RESPONDER_HANDSHAKES: MetricDef = def(
    Responder,
    Counter,
    "pathprobe_responder_handshakes_total",
    &[VERSION],
    "Control handshakes the responder answered with a welcome, by the protocol version agreed with the prober (the highest both speak: during a rolling upgrade, the older end's). Every version this release speaks exists from the start.",
);
pub static RESPONDER_CLAMPED_TESTS: MetricDef = def(
    Responder,
    Counter,
    "pathprobe_responder_clamped_tests_total",
    &[],
    "Tests the responder accepted cut down to its limits (limit_policy clamp); the prober is told which limits in its reply.",
);
pub static RESPONDER_IGNORED_DATAGRAMS: MetricDef = def(
    Responder,
    Counter,
    "pathprobe_responder_ignored_datagrams_total",
    &[],
    "UDP datagrams on the responder port that belonged to no pending test.",
);
pub static RESPONDER_ACTIVE_TESTS: MetricDef = def(
    Responder,
    Gauge,
    "pathprobe_responder_active_tests",
    &[],
    "Tests the responder is running now.",
);
pub static RESPONDER_BYTES: MetricDef = def(
    Responder,
    Counter,
    "pathprobe_responder_bytes_total",
    &[],
    "Payload bytes the responder's data streams sent and received in measured windows.",
);

// ---- Service and scheduler ----------------------------------------------

pub static BUILD_INFO: MetricDef = def(
    Service,
    Gauge,
    "pathprobe_build_info",
    &[VERSION],
    "Always 1; the pathprobe version running.",
);
pub static CONFIG_RELOAD_SUCCESSFUL: MetricDef = def(
    Service,
    Gauge,
    "pathprobe_config_last_reload_successful",
    &[],
    "1 if the latest configuration load or reload succeeded, 0 if it failed and the previous configuration is still running.",
);
pub static CONFIG_RELOAD_SUCCESS_TIME: MetricDef = def(
    Service,
    Gauge,
    "pathprobe_config_last_reload_success_timestamp_seconds",
    &[],
    "Unix time of the latest successful configuration load or reload.",
);
pub static SCHEDULER_LAG: MetricDef = def(
    Service,
    Histogram,
    "pathprobe_scheduler_lag_seconds",
    &[],
    "How late probes started relative to their scheduled time.",
);
pub static SCHEDULER_SKIPPED: MetricDef = def(
    Service,
    Counter,
    "pathprobe_scheduler_runs_skipped_total",
    &[TARGET, MODULE, REASON],
    "Scheduled probe runs that did not happen, by reason (for example: the previous run was still going, or the probe slot stayed taken). At metrics.detail: fleet, summed over targets per module.",
);
pub static SCHEDULER_BUSY_RETRIES: MetricDef = def(
    Service,
    Counter,
    "pathprobe_scheduler_busy_retries_total",
    &[TARGET, MODULE],
    "Probe attempts a responder answered busy that the scheduler tried again within the interval, after the responder's retry hint. Not failed probes: only a run still busy after scheduler.busy_retries, or at the interval's end, counts as pathprobe_probes_total{result=\"busy\"} (and pathprobe_scheduler_runs_skipped_total{reason=\"busy\"}). At metrics.detail: fleet, summed over targets per module.",
);

pub static HTTP_REFUSALS: MetricDef = def(
    Service,
    Counter,
    "pathprobe_http_refusals_total",
    &[REASON],
    "HTTP connections and /probe requests refused by the http: limits: connections (over max_connections, over one client's share of an eighth of it, or into the last eighth kept for clients holding none; closed at accept), probe_busy (over probe_max_concurrent, 503) and probe_forbidden (target outside probe_allow or the static targets, 403); and by `--web.config.file` (docs/SECURITY.md): unauthorized (no or wrong basic-auth credentials, 401), auth_busy (too many password checks waiting, 429) and tls_handshake (a TLS handshake that failed or timed out, plain HTTP to the TLS port, a client certificate missing or not verified).",
);
pub static HOST_SLOT_REFUSALS: MetricDef = def(
    Service,
    Counter,
    "pathprobe_host_slot_refusals_total",
    &[REASON],
    "Incoming tests the responder told busy because of the host's test slot, by reason: probing (this host was probing out), probe_waiting (one of its own probes had the next turn), serving (it already served as many tests as allowed).",
);
pub static HOST_SLOT_WAITS: MetricDef = def(
    Service,
    Counter,
    "pathprobe_host_slot_waits_total",
    &[REASON],
    "This host's own probes (scheduled and /probe) that had to wait for the host's test slot, by what held it first: serving (a test it served) or probing (its own other probes).",
);
pub static HOST_SLOT_WAIT_TIMEOUTS: MetricDef = def(
    Service,
    Counter,
    "pathprobe_host_slot_wait_timeouts_total",
    &[REASON],
    "Own probes that gave up waiting for the host's test slot at their deadline, by what held it last.",
);
pub static HOST_SLOT_WAIT_SECONDS: MetricDef = def(
    Service,
    Counter,
    "pathprobe_host_slot_wait_seconds_total",
    &[],
    "Total time own probes spent waiting for the host's test slot.",
);
pub static BUDGET_MAX_BYTES_PER_HOUR: MetricDef = def(
    Service,
    Gauge,
    "pathprobe_budget_max_bytes_per_hour",
    &[],
    "The host's byte budget (scheduler.max_bytes_per_hour): payload bytes it may move in tests in any hour, both roles together; 0 for none.",
);
pub static BUDGET_WINDOW_BYTES: MetricDef = def(
    Service,
    Gauge,
    "pathprobe_budget_window_bytes",
    &[],
    "Payload bytes this host's tests moved over the last hour, both roles: what counts against scheduler.max_bytes_per_hour now.",
);
pub static BUDGET_BYTES: MetricDef = def(
    Service,
    Counter,
    "pathprobe_budget_bytes_total",
    &[ROLE],
    "Payload bytes counted against the host's byte budget, by role: prober (every byte this host's own probes' data sockets wrote and read, start-up, tail and failed runs included; loopback modules left out) and responder (tests it served, native and iperf3 ports). Counted with or without a budget.",
);
pub static BUDGET_REFUSALS: MetricDef = def(
    Service,
    Counter,
    "pathprobe_budget_refusals_total",
    &[ROLE],
    "Tests the host's byte budget kept from starting, by role: prober (scheduled runs skipped, also counted as pathprobe_scheduler_runs_skipped_total{reason=\"byte_budget\"}) and responder (probers refused with a retry hint, also counted as pathprobe_responder_rejections_total{reason=\"budget_exhausted\"}).",
);
pub static HOST_SLOT_YIELDS: MetricDef = def(
    Service,
    Counter,
    "pathprobe_host_slot_yields_total",
    &[],
    "Own scheduled probes called off so that the peer they were aimed at, asking this host for a test at the same moment, was served first (two hosts probing each other outside mesh mode: the end with the lower address gives way, before its probe moves data, at most 8 times per run); the probe then ran right after the served test. Not failed probes.",
);
pub static HOST_SLOT_SETTLES: MetricDef = def(
    Service,
    Counter,
    "pathprobe_host_slot_settles_total",
    &[],
    "Incoming tests that waited (at most 1 s) for this host's own probes to let go of the test slot rather than be told busy at once: a probe reading its results, between the two tests of a both run, or asking the very prober, which then gave way. Not refusals.",
);
pub static HISTORY_SAVES: MetricDef = def(
    Service,
    Counter,
    "pathprobe_history_saves_total",
    &[RESULT],
    "Saves of the status page's history file (web.history_file, every web.history_save_interval and at shutdown), by result: success, or failure (a full disk, a read-only or missing directory; the previous file is kept intact, a warning is logged, and the next save tries again). Both exist at 0 from the start; both stay 0 when no history file is in use.",
);
pub static MESH_CYCLE_SECONDS: MetricDef = def(
    Service,
    Gauge,
    "pathprobe_mesh_cycle_seconds",
    &[],
    "Length of the mesh schedule's cycle, in which every directed pair of members is measured once (mesh mode only).",
);
pub static MESH_SLOT_SECONDS: MetricDef = def(
    Service,
    Gauge,
    "pathprobe_mesh_slot_seconds",
    &[],
    "Length of one slot of the mesh schedule: the longest module run plus set-up and the guard for clock skew (mesh mode only).",
);
pub static MESH_GUARD_SECONDS: MetricDef = def(
    Service,
    Gauge,
    "pathprobe_mesh_guard_seconds",
    &[],
    "The mesh schedule's guard (scheduler.mesh.guard): how far members' clocks may disagree before their slots overlap; PathprobePeerClockSkew compares pathprobe_peer_clock_offset_seconds with it (mesh mode only).",
);
pub static MESH_MEMBERS: MetricDef = def(
    Service,
    Gauge,
    "pathprobe_mesh_members",
    &[],
    "Hosts in the mesh plan in force, this one included (mesh mode only).",
);
pub static MESH_GROUP_INFO: MetricDef = def(
    Service,
    Gauge,
    "pathprobe_mesh_group_info",
    &[GROUP_BY, GROUP],
    "Always 1, in a mesh grouped by scheduler.mesh.group_by only: the label the plan groups by and this host's own value of it (empty when its entry has none), the group it probes from. config/federation.yml's group-level rules join it on instance to tell each result's source group.",
);

pub static PROBE_LAST_SUCCESS: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_last_success_timestamp_seconds",
    &[],
    "Unix time at which the newest successful probe of this series ended, 0 before the first: for one directed pair (this host and the target, the way the direction says), time() minus this is the age of its newest result. In mesh mode that age stays below about one pathprobe_mesh_cycle_seconds.",
);

pub static PROBE_CROSS_TRAFFIC: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_probe_cross_traffic_bytes",
    &[SIDE, TYPE],
    "Bytes the interface carrying the latest probe received (type=\"received\") or sent (type=\"sent\") during its measured window beyond the probe's own, on this host (side=\"local\") or the responder's (side=\"remote\"): other traffic sharing the NIC, which makes the figure suspect. The probe's own packets are allowed for with their headers, kind by kind (a TCP throughput probe's segments and an ACK per segment; tcp_rr's requests and responses; udp_rr's datagrams both ways; a whole connection per tcp_crr transaction), so a quiet interface reads 0. Absent on loopback and from responders that do not report it.",
);

// ---- Per path (traces) -------------------------------------------------

pub static PATH_HOPS: MetricDef = def(
    Path,
    Gauge,
    "pathprobe_path_hops",
    &[TARGET, MODULE],
    "Hops from this host to the target on the probe's flow (the TTL at which the target answered), from the latest trace that reached it. Absent before the first such trace.",
);
pub static PATH_HOP_INFO: MetricDef = def(
    Path,
    Gauge,
    "pathprobe_path_hop_info",
    &[TARGET, MODULE, HOP, ADDRESS],
    "1 for each hop of the path that answered in its latest trace that reached the target (hop is the TTL, address who answered; the target itself is the last hop). A silent hop has no series. Replaced whole when the path changes: no stale hop stays.",
);
pub static PATH_CHANGES: MetricDef = def(
    Path,
    Counter,
    "pathprobe_path_changes_total",
    &[TARGET, MODULE],
    "Times a trace of this path found another hop count or another answering address at some hop than the trace before (a hop silent in either is no change).",
);
pub static PATH_LAST_TRACE: MetricDef = def(
    Path,
    Gauge,
    "pathprobe_path_last_trace_timestamp_seconds",
    &[TARGET, MODULE],
    "Unix time at which the latest trace of this path ended, whether it reached the target or not.",
);
pub static TRACES: MetricDef = def(
    Service,
    Counter,
    "pathprobe_traces_total",
    &[RESULT],
    "Path traces by result: reached, not_reached (the target did not answer within the bounds), failed (no socket, or another error), rate_limited (the host was traced less than trace.min_interval ago), busy (trace.max_concurrent traces were running).",
);
pub static TRACE_PACKETS: MetricDef = def(
    Service,
    Counter,
    "pathprobe_trace_packets_total",
    &[],
    "Packets the path traces sent: what tracing costs the network.",
);
pub static ADAPTIVE_STOPS_TOTAL: MetricDef = def(
    Probe,
    Counter,
    "pathprobe_adaptive_stops_total",
    &[REASON],
    "Adaptive probes (duration: auto) since the service started, by why they stopped: converged (the rate known to the module's precision), max_duration (not converged: the figure is not precise), budget (a byte budget ended it), cut (the peer or the slot ended it first), out_of_reach (not converged, stopped early: even an optimistic square-root law could not have brought the interval within three times the precision by max_duration). Every reason exists at 0 from the start for an adaptive module.",
);
pub static ADAPTIVE_CONVERGED: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_adaptive_converged",
    &[],
    "Adaptive probes: 1 if the latest probe's estimate reached the module's precision, 0 if it did not (its throughput is then not precise).",
);
pub static ADAPTIVE_ESTIMATE: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_adaptive_estimate_bytes_per_second",
    &[],
    "Adaptive probes: the latest probe's rate estimate over the span after start-up, in bytes per second, both directions' deliveries summed (docs/ADAPTIVE.md).",
);
pub static ADAPTIVE_UNCERTAINTY: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_adaptive_uncertainty_bytes_per_second",
    &[],
    "Adaptive probes: half-width of the 95% interval of the latest estimate, in bytes per second.",
);
pub static ADAPTIVE_SECONDS: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_adaptive_probe_seconds",
    &[],
    "Adaptive probes: time from the start of the latest probe's data to the end it decided.",
);
pub static ADAPTIVE_BYTES: MetricDef = def(
    Probe,
    Gauge,
    "pathprobe_adaptive_probe_bytes",
    &[],
    "Adaptive probes: bytes this host's streams moved in the latest probe, start-up included.",
);

/// Every metric, in the order of the documentation and of /metrics output.
pub static ALL: &[&MetricDef] = &[
    &PROBE_SUCCESS,
    &PROBE_DURATION,
    &PROBE_SLOT_WAIT,
    &PROBE_CLAMPED,
    &PROBE_LAST_RUN,
    &PROBES,
    &PROBE_FAILURE_INFO,
    &PEER_CLOCK_OFFSET,
    &PEER_CLOCK_UNCERTAINTY,
    &THROUGHPUT,
    &RECEIVED_BYTES,
    &SENT_BYTES,
    &TCP_RETRANSMITS,
    &TCP_RETRANSMITS_TOTAL,
    &TCP_RTT,
    &TCP_MIN_RTT,
    &TCP_CWND,
    &TCP_MSS,
    &UDP_SENT,
    &UDP_RECEIVED,
    &UDP_LOST,
    &UDP_OUT_OF_ORDER,
    &UDP_DUPLICATED,
    &UDP_LOSS,
    &UDP_JITTER,
    &UDP_SOCKET_DROPS,
    &RR_LATENCY,
    &RR_LATENCY_PERCENTILE,
    &RR_TRANSACTIONS_RATE,
    &RR_CPU_PER_TRANSACTION,
    &RR_CONNECT,
    &RR_CONNECT_PERCENTILE,
    &RR_CONNECTION_FAILURES_TOTAL,
    &RR_LOSS,
    &RR_LOST_TOTAL,
    &RR_IPDV,
    &PROBE_CPU,
    &PROBE_HOST_CPU,
    &PROBE_INTERRUPTS,
    &PROBE_INTERFACE_INTERRUPTS,
    &PROBE_SOFTIRQS,
    &PROBE_KERNEL_INFO,
    &PROBE_LIMITED_BY,
    &PROBE_LIMIT_STRENGTH,
    &PROBE_FINGERPRINT_INFO,
    &PROBE_REMOTE_UNSTABLE,
    &STEP_DETECTED,
    &STEP_LAST_RATIO,
    &STEP_LAST_TIME,
    &PROBE_STABLE_VERDICT,
    &HOST_INFO,
    &HOST_CPU_SECONDS,
    &HOST_INTERRUPTS,
    &HOST_INTERRUPTS_ALL,
    &HOST_SOFTIRQS,
    &HOST_TCP_RETRANS,
    &HOST_UDP_IN_ERRORS,
    &HOST_UDP_RCVBUF_ERRORS,
    &HOST_UDP_SNDBUF_ERRORS,
    &HOST_COLLECTOR_SUCCESS,
    &RESPONDER_TESTS,
    &RESPONDER_REJECTIONS,
    &RESPONDER_HANDSHAKES,
    &RESPONDER_CLAMPED_TESTS,
    &RESPONDER_IGNORED_DATAGRAMS,
    &RESPONDER_ACTIVE_TESTS,
    &RESPONDER_BYTES,
    &BUILD_INFO,
    &CONFIG_RELOAD_SUCCESSFUL,
    &CONFIG_RELOAD_SUCCESS_TIME,
    &SCHEDULER_LAG,
    &SCHEDULER_SKIPPED,
    &SCHEDULER_BUSY_RETRIES,
    &HTTP_REFUSALS,
    &HOST_SLOT_REFUSALS,
    &HOST_SLOT_WAITS,
    &HOST_SLOT_WAIT_TIMEOUTS,
    &HOST_SLOT_WAIT_SECONDS,
    &BUDGET_MAX_BYTES_PER_HOUR,
    &BUDGET_WINDOW_BYTES,
    &BUDGET_BYTES,
    &BUDGET_REFUSALS,
    &HOST_SLOT_YIELDS,
    &HOST_SLOT_SETTLES,
    &HISTORY_SAVES,
    &MESH_CYCLE_SECONDS,
    &MESH_SLOT_SECONDS,
    &MESH_GUARD_SECONDS,
    &MESH_MEMBERS,
    &MESH_GROUP_INFO,
    &PROBE_LAST_SUCCESS,
    &PROBE_CROSS_TRAFFIC,
    &TRACES,
    &TRACE_PACKETS,
    &PATH_HOPS,
    &PATH_HOP_INFO,
    &PATH_CHANGES,
    &PATH_LAST_TRACE,
    &ADAPTIVE_STOPS_TOTAL,
    &ADAPTIVE_CONVERGED,
    &ADAPTIVE_ESTIMATE,
    &ADAPTIVE_UNCERTAINTY,
    &ADAPTIVE_SECONDS,
    &ADAPTIVE_BYTES,
];

/// Looks a metric up by its full name.
pub fn find(name: &str) -> Option<&'static MetricDef> {
    ALL.iter().copied().find(|d| d.name == name)
}

/// Labels Prometheus itself puts on every series it scrapes (the scrape
/// job and the scraped address). A target label of the same name would be
/// renamed `exported_instance` or `exported_job` at scrape time, or, with
/// `honor_labels`, replace Prometheus' own.
pub const PROMETHEUS_LABELS: [&str; 2] = ["instance", "job"];

/// Labels the exposition format itself gives a meaning to: `le` is the
/// upper bound of a histogram bucket and `quantile` the rank of a summary
/// sample. A target label `le="x"` beside the bucket's own `le` makes the
/// line unparseable (a duplicate label, and not a float), and Prometheus
/// then drops the whole scrape of the host, not only the series.
pub const EXPOSITION_LABELS: [&str; 2] = ["le", "quantile"];

/// Label names a target's own labels may not use because pathprobe sets
/// them itself: the [`PROBE_LABELS`] and every label of a per-probe
/// metric, each once, in definition order. Derived from [`ALL`], so a
/// label added to a metric is reserved with it.
pub fn reserved_label_names() -> impl Iterator<Item = &'static str> {
    let mut seen: Vec<&'static str> = Vec::new();
    for l in PROBE_LABELS.into_iter().chain(
        ALL.iter()
            .filter(|d| d.scope == Scope::Probe)
            .flat_map(|d| d.labels.iter().copied()),
    ) {
        if !seen.contains(&l) {
            seen.push(l);
        }
    }
    seen.into_iter()
}

/// Why `name` cannot be a target label because someone else sets it
/// (pathprobe or Prometheus); `None` if nobody does.
pub fn label_owner(name: &str) -> Option<&'static str> {
    if reserved_label_names().any(|r| r == name) {
        Some("pathprobe sets it itself")
    } else if PROMETHEUS_LABELS.contains(&name) {
        Some("Prometheus sets it when it scrapes")
    } else if name == "le" {
        Some(
            "the exposition format uses it for a histogram bucket's upper bound, \
             and a second `le` on a bucket line makes Prometheus reject the whole scrape",
        )
    } else if EXPOSITION_LABELS.contains(&name) {
        Some(
            "the exposition format uses it for a summary's quantile, \
             and Prometheus would reject or misread those series",
        )
    } else {
        None
    }
}

/// The rule for target label names, in words, for docs/METRICS.md and the
/// comments of config/pathprobe.yml (both generated from this).
pub fn label_rule_text() -> String {
    let quote = |it: &mut dyn Iterator<Item = &'static str>| {
        it.map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ")
    };
    format!(
        "Names must match [a-zA-Z_][a-zA-Z0-9_]*, must not start with __ \
         (Prometheus' own), must not be a label pathprobe sets ({}), must \
         not be {}, which Prometheus sets when it scrapes, and must not be {}, \
         which the exposition format gives a meaning to (histogram buckets, \
         summary quantiles).",
        quote(&mut reserved_label_names()),
        quote(&mut PROMETHEUS_LABELS.into_iter()).replace(", ", " or "),
        quote(&mut EXPOSITION_LABELS.into_iter()).replace(", ", " or ")
    )
}

/// The metric reference of docs/METRICS.md: one table per scope.
pub fn markdown_reference() -> String {
    let mut out = String::new();
    for scope in [Probe, Host, Responder, Service, Path] {
        out.push_str(&format!("### {}\n\n", scope.title()));
        if scope == Probe {
            out.push_str(
                "Every series here also has the labels `target`, `module`, `kind`, \
                 `direction` and the target's own labels.\n\n",
            );
        }
        out.push_str("| Metric | Type | Labels | Meaning |\n");
        out.push_str("|---|---|---|---|\n");
        for d in ALL.iter().filter(|d| d.scope == scope) {
            let labels = if d.labels.is_empty() {
                "".to_string()
            } else {
                d.labels
                    .iter()
                    .map(|l| format!("`{l}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                d.name,
                d.metric_type.as_str(),
                labels,
                d.help.replace('|', "\\|")
            ));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn is_snake(s: &str) -> bool {
        !s.is_empty()
            && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !s.contains("__")
            && !s.ends_with('_')
    }

    #[test]
    fn names_are_unique_prefixed_snake_case() {
        let mut seen = BTreeSet::new();
        for d in ALL {
            assert!(seen.insert(d.name), "{} defined twice", d.name);
            assert!(d.name.starts_with("pathprobe_"), "{}", d.name);
            assert!(is_snake(d.name), "{}", d.name);
            assert!(!d.help.is_empty(), "{} has no help", d.name);
            for l in d.labels {
                assert!(is_snake(l), "{}: label {l}", d.name);
            }
        }
        assert_eq!(ALL.len(), 104);
    }

    #[test]
    fn suffixes_follow_prometheus_conventions() {
        for d in ALL {
            let counter = d.metric_type == MetricType::Counter;
            assert_eq!(d.name.ends_with("_total"), counter, "{}", d.name);
            if d.name.ends_with("_info") {
                assert_eq!(d.metric_type, MetricType::Gauge, "{}", d.name);
            }
            // Base units only: no milli-, kilo- or bit-based names.
            for word in d.name.split('_') {
                let bad = ["milliseconds", "ms", "bits", "kbytes", "percent"];
                assert!(!bad.contains(&word), "{} uses a non-base unit", d.name);
            }
        }
    }

    #[test]
    fn labels_do_not_repeat_within_a_series() {
        for d in ALL {
            let mut all: Vec<&str> = d.labels.to_vec();
            if d.scope == Scope::Probe {
                all.extend(PROBE_LABELS);
            }
            let unique: BTreeSet<&str> = all.iter().copied().collect();
            assert_eq!(unique.len(), all.len(), "{}", d.name);
        }
    }

    #[test]
    fn find_and_reserved_labels() {
        assert_eq!(find("pathprobe_probe_success"), Some(&PROBE_SUCCESS));
        assert_eq!(find("pathprobe_nope"), None);
        let reserved: BTreeSet<&str> = reserved_label_names().collect();
        for l in [
            "target",
            "module",
            "kind",
            "direction",
            "flow",
            "side",
            "mode",
            "result",
        ] {
            assert!(reserved.contains(l), "{l}");
        }
        assert!(!reserved.contains("site"));
        // What serve used to drop with a log line on every probe.
        for l in ["flow", "type", "release", "reason"] {
            assert!(reserved.contains(l), "{l}");
        }
        // Each once.
        assert_eq!(reserved.len(), reserved_label_names().count());
        // Prometheus', not pathprobe's.
        assert!(!reserved.contains("instance") && !reserved.contains("job"));
        assert_eq!(
            label_owner("job"),
            Some("Prometheus sets it when it scrapes")
        );
        assert_eq!(label_owner("release"), Some("pathprobe sets it itself"));
        assert_eq!(label_owner("rack"), None);
        assert!(label_owner("le").unwrap().contains("bucket"));
        assert!(label_owner("quantile").unwrap().contains("quantile"));
        assert_eq!(
            label_rule_text(),
            "Names must match [a-zA-Z_][a-zA-Z0-9_]*, must not start with __ (Prometheus' own), \
             must not be a label pathprobe sets (`target`, `module`, `kind`, `direction`, \
             `result`, `reason`, `flow`, `percentile`, `side`, `mode`, `type`, `release`, `cause`, \
             `hash`, `kernel_release`, `figure`, `from_release`, `to_release`, `before`, `after`, \
             `verdict`, `advice`, `changes`), must not be \
             `instance` or `job`, which Prometheus sets when it scrapes, and must not be `le` or `quantile`, \
             which the exposition format gives a meaning to (histogram buckets, summary quantiles)."
        );
    }

    #[test]
    fn reference_has_a_row_per_metric() {
        let md = markdown_reference();
        for d in ALL {
            let row = md
                .lines()
                .find(|l| l.starts_with(&format!("| `{}` |", d.name)))
                .unwrap_or_else(|| panic!("no row for {}", d.name));
            assert!(
                row.contains(&format!("| {} |", d.metric_type.as_str())),
                "{row}"
            );
        }
        assert!(md
            .contains("| `pathprobe_probe_softirqs` | gauge | `side`, `type` | NET_RX and NET_TX"));
    }

    /// The text between `begin` and the next END marker in `path`, checked
    /// against `wanted` (and rewritten under PATHPROBE_BLESS_DOCS=1).
    pub(crate) fn check_generated(path: &str, begin: &str, end: &str, wanted: &str) {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let Some(b) = text.find(begin) else {
            panic!("{path} lacks the marker {begin:?}");
        };
        let Some(e) = text[b..].find(end).map(|e| e + b) else {
            panic!("{path} lacks the marker {end:?} after {begin:?}");
        };
        let current = &text[b + begin.len()..e];
        if current != wanted && std::env::var_os("PATHPROBE_BLESS_DOCS").is_some() {
            let new = format!("{}{}{}", &text[..b + begin.len()], wanted, &text[e..]);
            std::fs::write(path, new).unwrap_or_else(|e| panic!("{path}: {e}"));
            return;
        }
        assert!(
            current == wanted,
            "{path} is out of date with src/metrics/names.rs; \
             run `PATHPROBE_BLESS_DOCS=1 cargo test --lib` to regenerate"
        );
    }

    /// docs/METRICS.md must carry the generated reference and label rule
    /// verbatim. `PATHPROBE_BLESS_DOCS=1 cargo test --lib metrics` rewrites
    /// them.
    #[test]
    fn docs_match_definitions() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/METRICS.md");
        let end = "<!-- END GENERATED -->";
        check_generated(
            path,
            "<!-- BEGIN GENERATED: metric reference, from src/metrics/names.rs -->\n",
            end,
            &markdown_reference(),
        );
        check_generated(
            path,
            "<!-- BEGIN GENERATED: target label rule, from src/metrics/names.rs -->\n",
            end,
            &format!("{}\n", label_rule_text()),
        );
        let text = std::fs::read_to_string(path).unwrap();
        for d in ALL {
            assert!(
                text.contains(&format!("`{}`", d.name)),
                "{} undocumented",
                d.name
            );
        }
    }
}
