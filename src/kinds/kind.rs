//! What a probe kind declares: the one trait every kind implements
//! ([`ProbeKind`]), read through the registry ([`super::registry::of`])
//! wherever the crate's behaviour depends on the kind, so that a kind is
//! described once, in its folder, instead of in a `match` per module.
//!
//! Methods with a default describe the common case (a throughput kind);
//! a kind overrides what differs.

use crate::engine::datapath::{DataSocket, StreamContext};
use crate::engine::stats::{Role, StreamStats};
use crate::protocol::rr::RrParams;
use crate::protocol::Kind;

use super::figures::KindFigures;

/// What carries a kind's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One TCP connection per stream (or per transaction, `tcp_crr`).
    Tcp,
    /// UDP datagrams, paced, with pathprobe's datagram header.
    Udp,
}

/// What a kind measures, which decides its headline figures, its
/// recording rules and alerts, and its verdict: throughput kinds are
/// judged by bits per second, latency kinds by transaction latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Throughput,
    Latency,
}

impl Family {
    /// The family's name in metrics labels and the rules' selectors.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Throughput => "throughput",
            Family::Latency => "latency",
        }
    }
}

/// A figure a summary (status page card, headline line) leads with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headline {
    ThroughputBitsPerSecond,
    LatencyP50Seconds,
    LatencyP99Seconds,
    TransactionsPerSecond,
}

/// The bytes of a request a kind accepts (its `length`): the least carries
/// the kind's own header, the most bounds a responder's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthBounds {
    pub min: u32,
    pub max: u32,
}

/// A `tcp_rr` (and `tcp_crr`) probe's shape unless asked otherwise:
/// netperf's default of 1-byte requests and responses, one at a time,
/// Nagle off.
pub const DEFAULT_RR: RrParams = RrParams {
    request_size: 1,
    response_size: 1,
    burst: 1,
    nodelay: true,
    interval_us: 0,
};

/// The largest TCP write size any responder accepts: a test's buffers are
/// allocated from it, per stream. Every TCP kind's, by default.
pub const TCP_LENGTH_CEILING: u32 = 16 << 20;

/// Default write size for TCP, as iperf3.
pub const DEFAULT_TCP_LENGTH: u32 = 128 * 1024;
/// Default UDP payload: fits a 1500-byte MTU over IPv6 (1500 - 40 - 8 = 1452).
pub const DEFAULT_UDP_LENGTH: u32 = 1448;
/// Default UDP rate, as iperf3: monitoring should not flood a path unasked.
pub const DEFAULT_UDP_BITRATE: u64 = 1_000_000;

/// How a request/response kind is shaped, which decides the config keys
/// and CLI flags it accepts (and the note for another mode's flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RrShape {
    /// Not a request/response kind: none of the keys below.
    None,
    /// Request and response sizes (`-r`, `request_size`/`response_size`)
    /// and Nagle (`--nagle`, `nodelay`); with `burst`, transactions in
    /// flight (`--burst`, `burst`) too.
    Sized { burst: bool },
    /// One datagram length (`-l`, `length`) sent every interval
    /// (`--interval`, `send_interval`).
    Paced,
}

/// How cross traffic accounts for a kind's own packets (analysis/cross.rs):
/// which pattern of data, headers and ACKs its streams put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnTraffic {
    /// Data one way; for TCP, ACKs the other.
    Bulk,
    /// Requests and responses on one TCP connection.
    TcpTransactions,
    /// Requests and replies as single UDP datagrams.
    UdpRoundTrips,
    /// A TCP connection (handshake, transaction, teardown) per transaction.
    TcpConnections,
}

/// A chart of the status page's `/path` view (the CPU chart, common to
/// all kinds, comes after a kind's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chart {
    ThroughputPerDirection,
    Retransmits,
    SmoothedRtt,
    Loss,
    Jitter,
    TransactionLatency,
    TransactionsPerSecond,
}

/// A metric family a kind's series carry beyond every kind's (results,
/// bytes): registered at 0 from the start for the kind's modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    /// TCP retransmits, per direction.
    Retransmits,
    /// The transaction latency histogram (`pathprobe_rr_latency_seconds`).
    Latency,
    /// Requests or replies lost, per direction.
    RoundTripLoss,
    /// The connection set-up histogram (`pathprobe_rr_connect_seconds`).
    Connect,
    /// Failed connections, per reason.
    ConnectionFailures,
}

/// What a probe asks of its kind, as [`ProbeKind::validate`] checks it
/// (the spec's figures after defaults).
#[derive(Debug, Clone, Copy)]
pub struct Asked {
    pub length: u32,
    pub rr: Option<RrParams>,
    pub streams: u32,
    /// The prober sends: no `-R` or `--bidir`.
    pub one_way: bool,
    pub interval_reports: bool,
    /// omit + duration.
    pub total_ms: u64,
}

/// One probe kind. Implemented once per kind, in `kinds/<kind>/kind.rs`.
pub trait ProbeKind: Sync {
    /// The kind's value on the wire and in config (`kind.as_str()`).
    fn kind(&self) -> Kind;

    fn transport(&self) -> Transport;

    /// A request/response kind measures latency; any other, throughput.
    fn family(&self) -> Family {
        match self.rr_shape() {
            RrShape::None => Family::Throughput,
            RrShape::Sized { .. } | RrShape::Paced => Family::Latency,
        }
    }

    /// A request/response kind: its request carries [`RrParams`] (sizes,
    /// burst, interval), which any other kind refuses.
    fn request_response(&self) -> bool {
        self.family() == Family::Latency
    }

    /// Each transaction on a connection of its own (`tcp_crr`): the prober
    /// dials per transaction, the responder's door hands them over, and a
    /// test runs one transaction at a time.
    fn connection_per_transaction(&self) -> bool {
        false
    }

    /// The lengths a responder accepts for this kind on pathprobe's wire,
    /// before its own `max_length`: the one place the minimum is decided
    /// (the prober's verification, the responder's admission and its
    /// iperf3 port all ask here). TCP kinds share one ceiling.
    fn length_bounds(&self) -> LengthBounds {
        LengthBounds {
            min: 1,
            max: TCP_LENGTH_CEILING,
        }
    }

    /// Runs one stream of this kind on a data thread: the prober's loop for
    /// [`Role::Sender`], the responder's for [`Role::Receiver`] (for the
    /// request/response kinds the prober always "sends" the requests).
    /// The default hands a socket of the kind's transport to
    /// [`ProbeKind::loops`].
    fn run_stream(
        &self,
        socket: DataSocket,
        role: Role,
        ctx: &StreamContext,
        stats: &mut StreamStats,
    ) {
        match (self.loops(), socket, role) {
            (Some(Loops::Tcp { prober, .. }), DataSocket::Tcp(s), Role::Sender) => {
                prober(s, ctx, stats)
            }
            (Some(Loops::Tcp { responder, .. }), DataSocket::Tcp(s), Role::Receiver) => {
                responder(s, ctx, stats)
            }
            (Some(Loops::Udp { prober, .. }), DataSocket::Udp(s), Role::Sender) => {
                prober(s, ctx, stats)
            }
            (Some(Loops::Udp { responder, .. }), DataSocket::Udp(s), Role::Receiver) => {
                responder(s, ctx, stats)
            }
            (_, other, _) => wrong_socket(self.kind(), &other),
        }
    }

    /// The prober's and the responder's loop over one data socket, for
    /// the default [`ProbeKind::run_stream`]; `None` for a kind whose
    /// sockets are its own (it overrides `run_stream` instead).
    fn loops(&self) -> Option<Loops> {
        None
    }

    /// Whether it runs with an adaptive duration (`duration: auto`, `-t
    /// auto`; engine/adaptive.rs): a bulk flow whose rate settles, ended
    /// by the prober once its figure is known. Off unless a kind says so.
    fn adaptive_duration(&self) -> bool {
        false
    }

    /// How its request/response shape is given (config keys, CLI flags).
    fn rr_shape(&self) -> RrShape {
        RrShape::None
    }

    /// Why a probe of this kind keeps one stream in the send direction
    /// ("runs on one connection"), or `None` when it takes any.
    fn one_flow(&self) -> Option<&'static str> {
        None
    }

    /// Whether a stock iperf3 server can run it (`iperf3_<kind>` modules,
    /// `probe --iperf3`, the responder's iperf3 port).
    fn iperf3(&self) -> bool {
        false
    }

    /// Whether it has a `loopback_<kind>` module against the process's own
    /// responder: the kinds a stock iperf3 runs, as before the registry.
    fn loopback(&self) -> bool {
        self.iperf3()
    }

    /// Its length (`-l`, `length`) unless asked otherwise.
    fn default_length(&self) -> u32 {
        match self.transport() {
            Transport::Tcp => DEFAULT_TCP_LENGTH,
            Transport::Udp => DEFAULT_UDP_LENGTH,
        }
    }

    /// The request/response shape it runs, from the asked length and
    /// shape over its defaults; `None` for a kind that takes none.
    fn effective_rr(&self, _length: Option<u32>, rr: Option<RrParams>) -> Option<RrParams> {
        match self.rr_shape() {
            RrShape::None => None,
            RrShape::Sized { .. } | RrShape::Paced => Some(rr.unwrap_or(DEFAULT_RR)),
        }
    }

    /// The length it sends: the larger message of a request/response kind
    /// (the responder holds it to its max_length), else `length`.
    fn effective_length(&self, length: Option<u32>, rr: Option<RrParams>) -> u32 {
        match self.effective_rr(length, rr) {
            Some(rr) => rr.request_size.max(rr.response_size),
            None => length.unwrap_or(self.default_length()),
        }
    }

    /// The rate it asks for: unpaced TCP and 1 Mbit/s UDP unless given.
    fn effective_bitrate(
        &self,
        bitrate: Option<u64>,
        _length: Option<u32>,
        _rr: Option<RrParams>,
    ) -> u64 {
        bitrate.unwrap_or(match self.transport() {
            Transport::Tcp => 0,
            Transport::Udp => DEFAULT_UDP_BITRATE,
        })
    }

    /// Checks what a probe asks of this kind before anything touches the
    /// network; the error is the user's message.
    fn validate(&self, a: &Asked) -> Result<(), String> {
        let b = self.length_bounds();
        if (b.min..=b.max).contains(&a.length) {
            return Ok(());
        }
        Err(match self.transport() {
            Transport::Udp => format!(
                "UDP datagram length must be between {} and {} bytes, got {}",
                b.min, b.max, a.length
            ),
            Transport::Tcp => format!(
                "TCP buffer length must be between 1 byte and {} MiB, got {}",
                b.max >> 20,
                a.length
            ),
        })
    }

    /// The kind's own figures from both ends' first stream, for the result.
    fn figures(
        &self,
        _params: RrParams,
        _local: Option<&StreamStats>,
        _remote: Option<&StreamStats>,
    ) -> KindFigures {
        KindFigures::Throughput
    }

    /// The figures its status-page card and summary lead with.
    fn headline(&self) -> &'static [Headline] {
        match self.family() {
            Family::Throughput => &[Headline::ThroughputBitsPerSecond],
            Family::Latency => &[
                Headline::LatencyP50Seconds,
                Headline::LatencyP99Seconds,
                Headline::TransactionsPerSecond,
            ],
        }
    }

    /// Whether the bottleneck verdict (docs/DIAGNOSIS.md) applies: it
    /// reasons about a bulk flow's limits, which a latency kind does not
    /// have.
    fn has_bottleneck_verdict(&self) -> bool {
        self.family() == Family::Throughput
    }

    /// The charts of its `/path` page.
    fn charts(&self) -> &'static [Chart] {
        match (self.family(), self.transport()) {
            (Family::Throughput, Transport::Tcp) => &[
                Chart::ThroughputPerDirection,
                Chart::Retransmits,
                Chart::SmoothedRtt,
            ],
            (Family::Throughput, Transport::Udp) => {
                &[Chart::ThroughputPerDirection, Chart::Loss, Chart::Jitter]
            }
            (Family::Latency, _) => &[Chart::TransactionLatency, Chart::TransactionsPerSecond],
        }
    }

    /// The metric families its series carry beyond every kind's.
    fn series(&self) -> &'static [Series] {
        match (self.family(), self.transport()) {
            (Family::Throughput, Transport::Tcp) => &[Series::Retransmits],
            (Family::Throughput, Transport::Udp) => &[],
            (Family::Latency, _) => &[Series::Latency],
        }
    }

    /// The figures the step detector (`crate::analysis::step`) watches on
    /// its paths: a throughput kind's goodput and its transport's own
    /// figure (TCP's RTT, UDP's loss); a latency kind's median latency
    /// only (its throughput is its transactions' bytes, not a capacity).
    fn step_figures(&self) -> &'static [crate::analysis::step::Figure] {
        use crate::analysis::step::Figure;
        match (self.family(), self.transport()) {
            (Family::Throughput, Transport::Tcp) => &[Figure::Throughput, Figure::Rtt],
            (Family::Throughput, Transport::Udp) => &[Figure::Throughput, Figure::Loss],
            (Family::Latency, _) => &[Figure::Latency],
        }
    }

    /// How cross traffic accounts for its own packets.
    fn own_traffic(&self) -> OwnTraffic {
        OwnTraffic::Bulk
    }

    /// The transport of a throughput kind, `None` for a latency kind: what
    /// the bulk-flow evidence (UDP loss and buffers, TCP memory limits)
    /// and iperf3's figures follow.
    fn bulk(&self) -> Option<Transport> {
        (self.family() == Family::Throughput).then(|| self.transport())
    }
}

/// Both ends' loops over a kind's data socket: the prober's and the
/// responder's, for the default [`ProbeKind::run_stream`].
#[derive(Clone, Copy)]
pub enum Loops {
    Tcp {
        prober: fn(std::net::TcpStream, &StreamContext, &mut StreamStats),
        responder: fn(std::net::TcpStream, &StreamContext, &mut StreamStats),
    },
    Udp {
        prober: fn(std::net::UdpSocket, &StreamContext, &mut StreamStats),
        responder: fn(std::net::UdpSocket, &StreamContext, &mut StreamStats),
    },
}

/// The least and most request sizes of a `Sized` kind, and its burst:
/// what `tcp_rr` and `tcp_crr` check alike.
pub fn check_sizes(rr: RrParams, most: u32) -> Result<(), String> {
    if rr.request_size == 0 || rr.response_size == 0 || rr.request_size.max(rr.response_size) > most
    {
        return Err(format!(
            "request and response sizes must be between 1 byte and 16 MiB, got {},{}",
            rr.request_size, rr.response_size
        ));
    }
    Ok(())
}

/// The error a kind's loop reports when handed a socket of another kind:
/// [`crate::kinds::side`] checks sockets first, so this is a bug, logged
/// rather than a panic on a data thread.
pub fn wrong_socket(kind: Kind, socket: &DataSocket) {
    tracing::error!(%kind, ?socket, "a stream was handed a data socket of another kind");
}
