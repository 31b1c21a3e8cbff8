//! The wire vocabulary of request/response tests (`tcp_rr`, and the
//! `udp_rr` and `tcp_crr` kinds built on it): what the prober asks for
//! ([`RrParams`]) and what each end counted ([`RrStats`]).
//! Latencies travel as [`LatencyStats`] (in [`super::latency`]).

use serde::{Deserialize, Serialize};

use super::latency::LatencyStats;

/// A request/response test's shape, as netperf's `-r REQ,RESP` and `-b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RrParams {
    /// Bytes of each request (prober to responder).
    pub request_size: u32,
    /// Bytes of each response (responder to prober).
    pub response_size: u32,
    /// Transactions in flight at once on the connection (at least 1).
    pub burst: u32,
    /// TCP_NODELAY on both ends' data socket.
    pub nodelay: bool,
    /// `udp_rr`: microseconds between requests (0 for `tcp_rr`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub interval_us: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Most transactions in flight a responder accepts: more only queues data
/// in socket buffers and says nothing new about the path.
pub const MAX_BURST: u32 = 256;

/// What one end of a request/response connection counted over the
/// measured window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RrStats {
    /// Transactions completed (prober) or answered (responder).
    pub transactions: u64,
    /// Request bytes written (prober) or read (responder).
    pub request_bytes: u64,
    /// Response bytes read (prober) or written (responder).
    pub response_bytes: u64,
    /// Per-transaction latency, from the first byte of the request written
    /// to the last byte of its response read: the prober's only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyStats>,
    /// `udp_rr`: datagram counts by direction, IPDV and processing time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<super::udp_rr::UdpRrStats>,
    /// `tcp_crr`: connections, failures by reason and connect time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crr: Option<super::crr::CrrStats>,
}
