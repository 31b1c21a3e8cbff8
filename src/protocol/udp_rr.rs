//! The wire vocabulary of isochronous UDP round trips (`udp_rr`, in the
//! spirit of irtt): the reply datagram's layout and the limits both ends
//! hold a test to.
//!
//! A request is an ordinary pathprobe UDP datagram ([`UdpHeader`]: the
//! prober's sequence number and send time) padded to the test's length. The
//! responder answers each new request once, with a datagram of the same
//! length:
//!
//! ```text
//!  0                       24                  32                     40
//!  +-----------------------+-------------------+----------------------+----
//!  | UdpHeader: REPLY flag,| request sequence  | responder's receive  | pad
//!  | reply sequence, reply |  (u64, BE)        | time ns (u64, BE)    |
//!  | send time ns          |                   |                      |
//!  +-----------------------+-------------------+----------------------+----
//! ```
//!
//! The reply carries its own sequence (downstream) and echoes the
//! request's (upstream), so loss can be told apart by direction. The two
//! responder times give its processing time (send less receive, on one
//! clock), which the prober subtracts from the round trip; the prober's
//! own times never travel, so a reply cannot move them.

use serde::{Deserialize, Serialize};

use super::latency::LatencyStats;
use super::udp::{UdpHeader, HEADER_LEN};

/// Marks a responder's reply; a request never carries it.
pub const FLAG_REPLY: u8 = 0x10;
/// Smallest request and reply: the header, the echoed sequence and the
/// responder's receive time.
pub const MIN_LENGTH: u32 = (HEADER_LEN + 16) as u32;
/// Largest datagram: what one IPv6 packet carries.
pub const MAX_LENGTH: u32 = 65_000;
/// Shortest send interval: below it a probe is a flood, and the schedule
/// is at the mercy of timer slack rather than the path.
pub const MIN_INTERVAL_US: u64 = 100;
/// Longest send interval.
pub const MAX_INTERVAL_US: u64 = 10_000_000;
/// Most requests in one test (warm-up included). Both ends keep a bit (the
/// prober also a send time) per request, allocated before the test: this
/// bounds that memory (8 MiB on the prober, 128 KiB on the responder).
pub const MAX_PACKETS: u64 = 1 << 20;
/// The send interval when none is given, as irtt's default.
pub const DEFAULT_INTERVAL_US: u64 = 10_000;
/// The datagram length when none is given: small, as latency probes are.
pub const DEFAULT_LENGTH: u32 = 64;

/// Requests a test of this length (ms of warm-up and measurement) and
/// interval sends, one at each interval from 0: what both ends size their
/// per-request state by, or `None` beyond [`MAX_PACKETS`].
pub fn packet_count(total_ms: u64, interval_us: u64) -> Option<u64> {
    let n = total_ms.saturating_mul(1000) / interval_us.max(1) + 1;
    (n <= MAX_PACKETS).then_some(n)
}

/// The rate a test of `length`-byte requests every `interval_us` sends in
/// each direction, in bit/s (rounded up): what the responder's rate limits
/// are held against.
pub fn bitrate(length: u32, interval_us: u64) -> u64 {
    (u64::from(length) * 8 * 1_000_000).div_ceil(interval_us.max(1))
}

/// What a reply says, once parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The responder's sequence over its replies (downstream).
    pub reply_seq: u64,
    /// The request's sequence this answers (upstream).
    pub request_seq: u64,
    /// The responder's clock when the request arrived and when it sent
    /// the reply, in ns.
    pub received_ns: u64,
    pub sent_ns: u64,
    /// The request was sent during the warm-up.
    pub omit: bool,
}

impl Reply {
    /// Writes the reply over the first [`MIN_LENGTH`] bytes of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`MIN_LENGTH`]; callers size their buffers.
    pub fn write(&self, test_id: u32, buf: &mut [u8]) {
        let omit = if self.omit { super::udp::FLAG_OMIT } else { 0 };
        UdpHeader {
            flags: FLAG_REPLY | omit,
            test_id,
            seq: self.reply_seq,
            send_ns: self.sent_ns,
        }
        .write(buf);
        buf[24..32].copy_from_slice(&self.request_seq.to_be_bytes());
        buf[32..40].copy_from_slice(&self.received_ns.to_be_bytes());
    }

    /// Parses a reply of the test `test_id`; `None` for anything else.
    pub fn parse(buf: &[u8], test_id: u32) -> Option<Reply> {
        if buf.len() < MIN_LENGTH as usize {
            return None;
        }
        let h = UdpHeader::parse(buf).ok()?;
        if h.test_id != test_id || h.flags & FLAG_REPLY == 0 {
            return None;
        }
        let u64_at = |i: usize| u64::from_be_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
        Some(Reply {
            reply_seq: h.seq,
            request_seq: u64_at(24),
            received_ns: u64_at(32),
            sent_ns: h.send_ns,
            omit: h.flags & super::udp::FLAG_OMIT != 0,
        })
    }
}

/// What one end of a `udp_rr` test counted over the measured window; it
/// travels in [`super::rr::RrStats::udp`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpRrStats {
    /// Requests sent (prober) or replies sent (responder).
    pub sent: u64,
    /// Distinct replies (prober) or distinct requests (responder) received.
    pub received: u64,
    /// Copies of a datagram already received (not answered, not timed).
    pub duplicates: u64,
    /// Datagrams that arrived after one with a higher sequence.
    pub late: u64,
    /// Datagrams ignored as not of this test, malformed, of another
    /// length, answering a request never sent, or (responder) requests
    /// ahead of the agreed interval, left unanswered.
    pub invalid: u64,
    /// The prober's: IPDV (RFC 3393, between consecutive sequence numbers,
    /// absolute) of the request's and the reply's one-way delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipdv_upstream: Option<LatencyStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipdv_downstream: Option<LatencyStats>,
    /// The prober's: the round trip (less processing) with the reply's
    /// arrival taken when the prober's thread read it, as irtt's client
    /// times it: it also holds this host's wake-up latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_userspace: Option<LatencyStats>,
    /// The prober's: the responder's processing time the replies gave,
    /// mean and max, in seconds.
    #[serde(default)]
    pub processing_mean: f64,
    #[serde(default)]
    pub processing_max: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_round_trips_and_nothing_else_passes_for_one() {
        let r = Reply {
            reply_seq: 7,
            request_seq: 9,
            received_ns: 1_000,
            sent_ns: 1_500,
            omit: true,
        };
        let mut buf = vec![0u8; 64];
        r.write(42, &mut buf);
        assert_eq!(Reply::parse(&buf, 42), Some(r));
        // Another test's reply, a truncated one, a request.
        assert_eq!(Reply::parse(&buf, 43), None);
        assert_eq!(Reply::parse(&buf[..39], 42), None);
        let mut req = vec![0u8; 64];
        UdpHeader {
            flags: 0,
            test_id: 42,
            seq: 9,
            send_ns: 1,
        }
        .write(&mut req);
        assert_eq!(Reply::parse(&req, 42), None);
        // Any bytes at all: no panic.
        for n in 0..80 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37) as u8).collect();
            let _ = Reply::parse(&junk, 42);
        }
    }

    #[test]
    fn the_packet_count_is_bounded() {
        assert_eq!(packet_count(10_000, 10_000), Some(1001));
        assert_eq!(packet_count(0, 10_000), Some(1));
        assert_eq!(packet_count(3_600_000, 100), None);
    }
}
