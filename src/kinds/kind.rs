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

/// One probe kind. Implemented once per kind, in `kinds/<kind>/kind.rs`.
pub trait ProbeKind: Sync {
    /// The kind's value on the wire and in config (`kind.as_str()`).
    fn kind(&self) -> Kind;

    fn transport(&self) -> Transport;

    fn family(&self) -> Family {
        Family::Throughput
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
    /// iperf3 port all ask here).
    fn length_bounds(&self) -> LengthBounds;

    /// Runs one stream of this kind on a data thread: the prober's loop for
    /// [`Role::Sender`], the responder's for [`Role::Receiver`] (for the
    /// request/response kinds the prober always "sends" the requests).
    fn run_stream(
        &self,
        socket: DataSocket,
        role: Role,
        ctx: &StreamContext,
        stats: &mut StreamStats,
    );

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
}

/// The error a kind's loop reports when handed a socket of another kind:
/// [`crate::kinds::side`] checks sockets first, so this is a bug, logged
/// rather than a panic on a data thread.
pub fn wrong_socket(kind: Kind, socket: &DataSocket) {
    tracing::error!(%kind, ?socket, "a stream was handed a data socket of another kind");
}
