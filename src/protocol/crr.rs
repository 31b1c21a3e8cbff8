//! The wire vocabulary of connect/request/response tests (`tcp_crr`,
//! netperf's TCP_CRR): which `stream` a short data connection's
//! `DataHello` names, the bounds both ends hold such a test to, and what
//! each end counted ([`CrrStats`]), failures by reason ([`CrrFailures`]).
//!
//! A `tcp_crr` transaction is a whole connection: the prober connects,
//! writes a `DataHello` carrying the test's token followed by the request
//! in one write, reads the response and closes first; the responder, having
//! written the response, waits for that close before closing its end, so
//! that TIME_WAIT lands on the prober and never piles up on a responder
//! that many probers share.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::latency::LatencyStats;

/// The `stream` of a `DataHello` that opens one transaction.
pub const TRANSACTION_STREAM: u32 = 0;
/// The `stream` of the prober's last connection: no request follows, and
/// the test's transactions are over, so that the responder reports at once
/// rather than at the planned end plus its grace.
pub const END_STREAM: u32 = 1;

/// Longest one transaction may take, on either end: the prober gives up on
/// a connection (and counts a timeout) that has not answered by then, and
/// the responder resets one that has not sent its request and closed.
/// Two seconds leave room for one lost SYN (Linux retries after 1 s), so a
/// single loss shows as a slow transaction rather than a failure.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(2);

/// Connections per second a `tcp_crr` test may open unless the responder
/// is configured otherwise (`max_connections_per_second`). Far above what
/// one prober opening one connection at a time reaches over a real path,
/// yet it bounds what one test can make the responder accept.
pub const DEFAULT_MAX_CONNECTIONS_PER_SECOND: u32 = 20_000;

/// Why one transaction failed. The prober names what its socket calls
/// returned; the responder what happened to a connection it had taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CrrFailure {
    /// The connection was refused (RST to the SYN: nothing listens).
    Refused,
    /// Not connected, answered or closed within [`CONNECTION_DEADLINE`].
    Timeout,
    /// Reset by the peer after it was established.
    Reset,
    /// The peer closed before the whole response (request) came.
    Closed,
    /// No local port was free to connect from (EADDRNOTAVAIL): the
    /// prober's ephemeral ports are all held, typically in TIME_WAIT.
    NoLocalPort,
    /// No route to the responder (ENETUNREACH, EHOSTUNREACH).
    Unreachable,
    /// The peer sent more than the test's message.
    Invalid,
    /// Anything else (out of descriptors, a socket option refused).
    Other,
}

impl CrrFailure {
    /// Every reason, in the order metrics and reports list them.
    pub const ALL: [CrrFailure; 8] = [
        CrrFailure::Refused,
        CrrFailure::Timeout,
        CrrFailure::Reset,
        CrrFailure::Closed,
        CrrFailure::NoLocalPort,
        CrrFailure::Unreachable,
        CrrFailure::Invalid,
        CrrFailure::Other,
    ];

    /// The label value and JSON key.
    pub fn as_str(self) -> &'static str {
        match self {
            CrrFailure::Refused => "refused",
            CrrFailure::Timeout => "timeout",
            CrrFailure::Reset => "reset",
            CrrFailure::Closed => "closed",
            CrrFailure::NoLocalPort => "no_local_port",
            CrrFailure::Unreachable => "unreachable",
            CrrFailure::Invalid => "invalid",
            CrrFailure::Other => "other",
        }
    }
}

/// Failed transactions by reason: one fixed field per [`CrrFailure`], so
/// that a peer's figures cannot add keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CrrFailures {
    pub refused: u64,
    pub timeout: u64,
    pub reset: u64,
    pub closed: u64,
    pub no_local_port: u64,
    pub unreachable: u64,
    pub invalid: u64,
    pub other: u64,
}

impl CrrFailures {
    fn slot(&mut self, reason: CrrFailure) -> &mut u64 {
        match reason {
            CrrFailure::Refused => &mut self.refused,
            CrrFailure::Timeout => &mut self.timeout,
            CrrFailure::Reset => &mut self.reset,
            CrrFailure::Closed => &mut self.closed,
            CrrFailure::NoLocalPort => &mut self.no_local_port,
            CrrFailure::Unreachable => &mut self.unreachable,
            CrrFailure::Invalid => &mut self.invalid,
            CrrFailure::Other => &mut self.other,
        }
    }

    /// Counts one failure.
    pub fn add(&mut self, reason: CrrFailure) {
        let n = self.slot(reason);
        *n = n.saturating_add(1);
    }

    /// Failures of one reason.
    pub fn get(&self, reason: CrrFailure) -> u64 {
        match reason {
            CrrFailure::Refused => self.refused,
            CrrFailure::Timeout => self.timeout,
            CrrFailure::Reset => self.reset,
            CrrFailure::Closed => self.closed,
            CrrFailure::NoLocalPort => self.no_local_port,
            CrrFailure::Unreachable => self.unreachable,
            CrrFailure::Invalid => self.invalid,
            CrrFailure::Other => self.other,
        }
    }

    /// Failures of every reason.
    pub fn total(&self) -> u64 {
        CrrFailure::ALL
            .iter()
            .fold(0u64, |sum, r| sum.saturating_add(self.get(*r)))
    }
}

/// What one end of a `tcp_crr` test counted over the measured window, in
/// [`super::rr::RrStats::crr`] beside its transactions and bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CrrStats {
    /// Transactions begun: connections the prober attempted, or that the
    /// responder's data thread took from the test's door.
    pub connections: u64,
    /// The prober's connections whose connect() completed.
    #[serde(default)]
    pub established: u64,
    /// Transactions that did not complete, by reason.
    #[serde(default)]
    pub failures: CrrFailures,
    /// The prober's connection set-up time: connect() called to connect()
    /// returned (SYN sent to SYN-ACK received and ACK sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<LatencyStats>,
    /// The responder's: connections naming this test that its door turned
    /// away over the whole test (over its rate or count, or with the data
    /// thread's queue full), reset at once.
    #[serde(default)]
    pub over_limit: u64,
    /// The prober's: the connection rate it held itself to, the
    /// responder's announced `max_connections_per_second` (0: none).
    #[serde(default)]
    pub rate_limit: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_count_by_reason_and_add_up() {
        let mut f = CrrFailures::default();
        for (i, r) in CrrFailure::ALL.iter().enumerate() {
            for _ in 0..=i {
                f.add(*r);
            }
        }
        for (i, r) in CrrFailure::ALL.iter().enumerate() {
            assert_eq!(f.get(*r), i as u64 + 1, "{}", r.as_str());
        }
        assert_eq!(f.total(), (1..=8).sum::<u64>());
        // Labels are distinct snake_case words, as metrics need them.
        let names: std::collections::BTreeSet<_> =
            CrrFailure::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), CrrFailure::ALL.len());
        // Counting never wraps, whatever a peer claims.
        let mut full = CrrFailures {
            other: u64::MAX,
            refused: u64::MAX,
            ..Default::default()
        };
        full.add(CrrFailure::Other);
        assert_eq!(full.other, u64::MAX);
        assert_eq!(full.total(), u64::MAX);
    }

    #[test]
    fn figures_read_from_a_peer_take_no_unknown_reason_and_default_what_is_missing() {
        let json = r#"{"connections":5,"failures":{"reset":2}}"#;
        let s: CrrStats = serde_json::from_str(json).unwrap();
        assert_eq!(s.connections, 5);
        assert_eq!(s.failures.reset, 2);
        assert_eq!(s.failures.total(), 2);
        assert_eq!(s.connect, None);
        // Garbage in the figures is an error, never a panic.
        for bad in [
            r#"{"connections":-1}"#,
            r#"{"connections":1e400}"#,
            r#"{"connections":5,"failures":{"reset":"x"}}"#,
            r#"[]"#,
        ] {
            assert!(serde_json::from_str::<CrrStats>(bad).is_err(), "{bad}");
        }
        let round = CrrStats {
            connections: 3,
            established: 3,
            rate_limit: 100,
            ..Default::default()
        };
        let back: CrrStats = serde_json::from_str(&serde_json::to_string(&round).unwrap()).unwrap();
        assert_eq!(back, round);
    }
}
