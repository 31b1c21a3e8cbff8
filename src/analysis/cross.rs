//! Cross traffic: what a test's interface moved beyond the test's own
//! bytes, so that a figure taken while other traffic shared the NIC can be
//! told apart.
//!
//! The test's own traffic is allowed for, per direction, as its payload
//! plus headers (Ethernet, IP, TCP with timestamps or UDP) on each of its
//! packets. What its packets are depends on the kind, and
//! [`own_traffic`] is the one place that says it, kind by kind:
//!
//! - `tcp`: data segments (its bytes over the MSS, plus retransmissions)
//!   one way, and at most an ACK per segment, with SACK options, the other.
//! - `udp`: the datagrams, one way.
//! - `tcp_rr`: per transaction, the request's segments one way and the
//!   response's the other, each acknowledged at most once (an ACK mostly
//!   rides on the next request or response), and the connection's close.
//! - `udp_rr`: each end's datagrams sent and received (requests, replies,
//!   copies and strays of the test), and the prober's FIN datagrams.
//! - `tcp_crr`: a whole connection per transaction, both ways: SYN and
//!   SYN-ACK (with their options), the handshake's ACK, the hello and
//!   request, the response, each acknowledged, and the FINs with theirs;
//!   the prober's last connection that tells the responder the test is
//!   over; on the responder, the connections it reset over its limit.
//!
//! How many packets the interface counted for the test depends on the
//! driver: one per wire segment, or one per GSO/GRO packet of up to 64 KiB
//! (veth, many virtual NICs). So the headers are allowed for on no more
//! packets than the interface counted in all, the largest headers first:
//! a quiet interface then reads 0 other traffic, and other traffic is, if
//! anything, under-counted by its own headers (about 4% of it at MTU 1500).
//! Estimates that are bounds (ACKs that usually ride on data) carry the
//! size of the packets they are bounds of, so that the room they leave
//! when they do not occur is a few bytes per packet of someone else's,
//! never the test's whole header budget.

use std::collections::BTreeMap;

use crate::host::NetDevCounters;
use crate::kinds::kind::OwnTraffic;
use crate::protocol::message::Message;
use crate::protocol::model::{InterfaceBytes, Kind, Role, StreamStats};
use crate::protocol::rr::{RrParams, RrStats};
use crate::protocol::udp::HEADER_LEN as UDP_RR_FIN_LEN;

/// Ethernet + IP + TCP with the timestamp option: a data segment, or an
/// ACK without SACK blocks.
const TCP_HEADERS_V4: u64 = 14 + 20 + 32;
const TCP_HEADERS_V6: u64 = 14 + 40 + 32;
/// An ACK's headers at most: TCP with 40 bytes of options (timestamps and
/// SACK blocks, as ACKs carry during loss recovery).
const ACK_HEADERS_V4: u64 = 14 + 20 + 60;
const ACK_HEADERS_V6: u64 = 14 + 40 + 60;
/// A SYN's or SYN-ACK's: TCP with MSS, SACK-permitted, timestamps and
/// window scale (20 bytes of options).
const SYN_HEADERS_V4: u64 = 14 + 20 + 40;
const SYN_HEADERS_V6: u64 = 14 + 40 + 40;
/// Ethernet + IP + UDP.
const UDP_HEADERS_V4: u64 = 14 + 20 + 8;
const UDP_HEADERS_V6: u64 = 14 + 40 + 8;
/// The largest MSS assumed (that of a 1500-byte MTU over IPv6), so that
/// segments are never under-counted; TCP_INFO's MSS is used when smaller.
const MAX_MSS: u64 = 1428;
/// Packets each way that close a TCP connection: a FIN, and the ACK of the
/// peer's.
const CLOSE_PACKETS: u64 = 2;

/// A side's own traffic in one direction: payload bytes, and how many
/// packets on the wire carry each size of headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Own {
    pub payload: u64,
    /// Packets by the header bytes each carries.
    pub packets: BTreeMap<u64, u64>,
}

impl Own {
    fn add(&mut self, payload: u64, packets: u64, header: u64) {
        self.payload = self.payload.saturating_add(payload);
        if packets > 0 {
            let n = self.packets.entry(header).or_default();
            *n = n.saturating_add(packets);
        }
    }

    /// Packets in all.
    pub fn packet_count(&self) -> u64 {
        self.packets
            .values()
            .fold(0u64, |a, &n| a.saturating_add(n))
    }

    /// The bytes to allow for when the interface counted `counted`
    /// packets in this direction in all: the payload, and headers on at
    /// most `counted` packets, the largest first (so that the test's own
    /// packets are never short of their headers, whichever of them the
    /// interface merged).
    fn allowance(&self, counted: u64) -> u64 {
        let mut left = counted;
        let mut bytes = self.payload;
        for (&header, &n) in self.packets.iter().rev() {
            let take = n.min(left);
            bytes = bytes.saturating_add(take.saturating_mul(header));
            left -= take;
        }
        bytes
    }
}

/// What the accounting needs of a test beyond its streams' figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestShape {
    pub kind: Kind,
    /// Whether the peer is IPv6 (the header sizes).
    pub ipv6: bool,
    /// The agreed datagram length (`udp_rr`).
    pub length: u32,
    /// The agreed request and response sizes (request/response kinds).
    pub rr: Option<RrParams>,
    /// Bytes of the hello frame that opens each `tcp_crr` connection
    /// before its request, which its figures leave out.
    pub hello: u64,
}

impl TestShape {
    /// The shape of the test `request` asked for, under `token`, with a
    /// peer that is IPv6 or not.
    pub fn new(request: &crate::protocol::TestRequest, token: &str, ipv6: bool) -> TestShape {
        // A tcp_crr connection's first frame; its length is the token's
        // and the stream number's (0 or 1, one digit).
        let hello = crate::protocol::frame::encode_frame(&Message::DataHello {
            token: token.to_owned(),
            stream: 0,
        })
        .map_or(0, |f| f.len() as u64);
        TestShape {
            kind: request.kind,
            ipv6,
            length: request.length,
            rr: request.rr,
            hello,
        }
    }
}

/// Header sizes for one address family.
#[derive(Debug, Clone, Copy)]
struct Headers {
    tcp: u64,
    ack: u64,
    syn: u64,
    udp: u64,
}

impl Headers {
    fn of(ipv6: bool) -> Headers {
        if ipv6 {
            Headers {
                tcp: TCP_HEADERS_V6,
                ack: ACK_HEADERS_V6,
                syn: SYN_HEADERS_V6,
                udp: UDP_HEADERS_V6,
            }
        } else {
            Headers {
                tcp: TCP_HEADERS_V4,
                ack: ACK_HEADERS_V4,
                syn: SYN_HEADERS_V4,
                udp: UDP_HEADERS_V4,
            }
        }
    }
}

/// One stream's TCP MSS for segment counts: TCP_INFO's when it is known
/// and smaller than [`MAX_MSS`].
fn mss(s: &StreamStats) -> u64 {
    s.tcp
        .as_ref()
        .map(|t| u64::from(t.mss_bytes))
        .filter(|&m| m > 0)
        .map_or(MAX_MSS, |m| m.min(MAX_MSS))
}

/// This side's own traffic over the window, as (received, sent), from its
/// streams' figures: the per-kind accounting (see the module's doc).
pub fn own_traffic(shape: &TestShape, streams: &[StreamStats]) -> (Own, Own) {
    let h = Headers::of(shape.ipv6);
    let (mut received, mut sent) = (Own::default(), Own::default());
    for s in streams {
        // `out` is the way this side's own data goes (requests, for the
        // prober of a request/response test), `back` the other.
        let (out, back) = match s.role {
            Some(Role::Sender) => (&mut sent, &mut received),
            Some(Role::Receiver) => (&mut received, &mut sent),
            None => continue,
        };
        let rr = s.rr.as_ref();
        // The registry says which pattern of packets the kind puts on the
        // wire.
        match (crate::kinds::of(shape.kind).own_traffic(), rr) {
            (OwnTraffic::TcpTransactions, Some(r)) => tcp_rr(s, r, shape, h, out, back),
            (OwnTraffic::UdpRoundTrips, Some(r)) => udp_rr(s, r, shape, h, out, back),
            (OwnTraffic::TcpConnections, Some(r)) => tcp_crr(s, r, shape, h, out, back),
            // A request/response stream without its figures (it never
            // started) moved nothing of its own worth allowing for.
            (
                OwnTraffic::TcpTransactions
                | OwnTraffic::UdpRoundTrips
                | OwnTraffic::TcpConnections,
                None,
            ) => {}
            (OwnTraffic::Bulk, _) => throughput(s, h, out, back),
        }
    }
    (received, sent)
}

/// A throughput stream: its data one way (`out` for a sender), and for
/// TCP the ACKs the other.
fn throughput(s: &StreamStats, h: Headers, data: &mut Own, reverse: &mut Own) {
    let udp_packets = s
        .udp_sent
        .as_ref()
        .map(|u| u.packets)
        .or(s.udp_received.as_ref().map(|u| u.packets));
    match udp_packets {
        Some(p) => data.add(s.bytes, p, h.udp),
        None => {
            let mss = mss(s);
            let segments = s.bytes.div_ceil(mss);
            data.add(s.bytes, segments, h.tcp);
            // Retransmitted segments are the test's own bytes too
            // (the sender's TCP_INFO count over the window).
            let retrans = s.tcp.as_ref().map_or(0, |t| t.retransmits);
            data.add(retrans.saturating_mul(mss), retrans, h.tcp);
            reverse.add(0, segments.saturating_add(retrans), h.ack);
        }
    }
}

/// Segments that carry `messages` messages of `size` bytes each, written
/// one at a time.
fn segments(messages: u64, size: u64, mss: u64) -> u64 {
    messages.saturating_mul(size.max(1).div_ceil(mss))
}

/// `tcp_rr`, one connection: requests one way, responses the other, each
/// segment acknowledged at most once by a pure ACK (timestamps, no SACK:
/// the transactions leave no holes to report), and the close.
fn tcp_rr(
    s: &StreamStats,
    r: &RrStats,
    shape: &TestShape,
    h: Headers,
    requests_way: &mut Own,
    responses_way: &mut Own,
) {
    let (req, resp) = shape.rr.map_or((1, 1), |p| {
        (
            u64::from(p.request_size.max(1)),
            u64::from(p.response_size.max(1)),
        )
    });
    let mss = mss(s);
    let req_segs = segments(r.request_bytes.div_ceil(req), req, mss);
    let resp_segs = segments(r.response_bytes.div_ceil(resp), resp, mss);
    requests_way.add(r.request_bytes, req_segs, h.tcp);
    responses_way.add(0, req_segs, h.tcp);
    responses_way.add(r.response_bytes, resp_segs, h.tcp);
    requests_way.add(0, resp_segs, h.tcp);
    requests_way.add(0, CLOSE_PACKETS, h.tcp);
    responses_way.add(0, CLOSE_PACKETS, h.tcp);
}

/// `udp_rr`: every datagram of the test this side sent and received, as
/// its own counts have them, and the prober's FIN datagrams at the end.
fn udp_rr(
    s: &StreamStats,
    r: &RrStats,
    shape: &TestShape,
    h: Headers,
    out: &mut Own,
    back: &mut Own,
) {
    let Some(u) = &r.udp else { return };
    let len = u64::from(shape.length.max(crate::protocol::udp_rr::MIN_LENGTH));
    // Both ends count what they sent and what reached them alike.
    let (sent, received) = if s.role == Some(Role::Sender) {
        (out, back)
    } else {
        (back, out)
    };
    sent.add(u.sent.saturating_mul(len), u.sent, h.udp);
    let arrived = u
        .received
        .saturating_add(u.duplicates)
        .saturating_add(u.invalid);
    received.add(arrived.saturating_mul(len), arrived, h.udp);
    // The prober's FIN datagrams; the responder's side receives them.
    let fins = u64::from(crate::kinds::udp_rr::FIN_COPIES);
    let fin_way = if s.role == Some(Role::Sender) {
        sent
    } else {
        received
    };
    fin_way.add(fins * UDP_RR_FIN_LEN as u64, fins, h.udp);
}

/// `tcp_crr`: a connection per transaction, the prober's last one that
/// ends the test, and (on the responder) those it reset over its limit.
fn tcp_crr(
    s: &StreamStats,
    r: &RrStats,
    shape: &TestShape,
    h: Headers,
    requests_way: &mut Own,
    responses_way: &mut Own,
) {
    let Some(c) = &r.crr else { return };
    let (req, resp) = shape.rr.map_or((1, 1), |p| {
        (
            u64::from(p.request_size.max(1)),
            u64::from(p.response_size.max(1)),
        )
    });
    let mss = mss(s);
    // Every connection begun, the last one, and those reset at the door,
    // which carried their hello and request before the reset.
    let connections = c.connections.saturating_add(1).saturating_add(c.over_limit);
    let opening = shape.hello.saturating_add(req);
    let req_segs = segments(connections, opening, mss);
    let resp_segs = segments(c.connections, resp, mss);
    let opened_payload = connections.saturating_mul(shape.hello);
    let reset_payload = c.over_limit.saturating_mul(req);
    // SYN one way, SYN-ACK the other.
    requests_way.add(0, connections, h.syn);
    responses_way.add(0, connections, h.syn);
    // The handshake's ACK, and each way's close.
    requests_way.add(0, connections.saturating_mul(1 + CLOSE_PACKETS), h.tcp);
    responses_way.add(0, connections.saturating_mul(CLOSE_PACKETS), h.tcp);
    // Hello and request one way, the response the other, each segment
    // acknowledged at most once.
    requests_way.add(
        r.request_bytes
            .saturating_add(opened_payload)
            .saturating_add(reset_payload),
        req_segs,
        h.tcp,
    );
    responses_way.add(0, req_segs, h.tcp);
    responses_way.add(r.response_bytes, resp_segs, h.tcp);
    requests_way.add(0, resp_segs, h.tcp);
}

/// The interface's traffic over the window and the part that was not this
/// side's.
pub fn interface_bytes(
    before: NetDevCounters,
    after: NetDevCounters,
    streams: &[StreamStats],
    shape: &TestShape,
) -> InterfaceBytes {
    let received = after.rx_bytes.saturating_sub(before.rx_bytes);
    let sent = after.tx_bytes.saturating_sub(before.tx_bytes);
    let rx_packets = after.rx_packets.saturating_sub(before.rx_packets);
    let tx_packets = after.tx_packets.saturating_sub(before.tx_packets);
    let (own_received, own_sent) = own_traffic(shape, streams);
    InterfaceBytes {
        received,
        sent,
        other_received: received.saturating_sub(own_received.allowance(rx_packets)),
        other_sent: sent.saturating_sub(own_sent.allowance(tx_packets)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::crr::CrrStats;
    use crate::protocol::model::{TcpStats, UdpSendStats};
    use crate::protocol::udp_rr::UdpRrStats;

    fn tcp(role: Role, bytes: u64, mss: u32) -> StreamStats {
        StreamStats {
            role: Some(role),
            bytes,
            tcp: (mss > 0).then(|| TcpStats {
                mss_bytes: mss,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn counters(rx: (u64, u64), tx: (u64, u64)) -> NetDevCounters {
        NetDevCounters {
            rx_bytes: rx.0,
            rx_packets: rx.1,
            tx_bytes: tx.0,
            tx_packets: tx.1,
        }
    }

    fn shape(kind: Kind, ipv6: bool) -> TestShape {
        TestShape {
            kind,
            ipv6,
            length: 64,
            rr: Some(RrParams {
                request_size: 1,
                response_size: 1,
                burst: 1,
                nodelay: true,
                interval_us: 0,
            }),
            hello: 80,
        }
    }

    fn own(payload: u64, packets: &[(u64, u64)]) -> Own {
        Own {
            payload,
            packets: packets.iter().copied().collect(),
        }
    }

    #[test]
    fn own_traffic_counts_segments_both_ways() {
        let tcp4 = shape(Kind::Tcp, false);
        // 1000 segments of 1428 bytes sent, an ACK each way back at most.
        let (r, s) = own_traffic(&tcp4, &[tcp(Role::Sender, 1_428_000, 1448)]);
        assert_eq!(s, own(1_428_000, &[(66, 1000)]));
        assert_eq!(r, own(0, &[(94, 1000)]));
        // The receiver of the same, over IPv6, without an MSS of its own.
        let (r, s) = own_traffic(
            &shape(Kind::Tcp, true),
            &[tcp(Role::Receiver, 1_428_000, 0)],
        );
        assert_eq!(r, own(1_428_000, &[(86, 1000)]));
        assert_eq!(s, own(0, &[(114, 1000)]));
        // Retransmitted segments are the sender's own bytes too.
        let mut lossy = tcp(Role::Sender, 1_428_000, 1448);
        lossy.tcp.as_mut().unwrap().retransmits = 10;
        let (r, s) = own_traffic(&tcp4, &[lossy]);
        assert_eq!((s.payload, s.packet_count()), (1_428_000 + 14_280, 1010));
        assert_eq!(r.packet_count(), 1010);
        // UDP: 100 datagrams, nothing back.
        let u = StreamStats {
            role: Some(Role::Sender),
            bytes: 100_000,
            udp_sent: Some(UdpSendStats {
                packets: 100,
                mode: None,
            }),
            ..Default::default()
        };
        let (r, s) = own_traffic(&shape(Kind::Udp, false), &[u]);
        assert_eq!(s, own(100_000, &[(42, 100)]));
        assert_eq!(r, Own::default());
    }

    #[test]
    fn other_traffic_is_what_the_interface_moved_beyond() {
        let tcp4 = shape(Kind::Tcp, false);
        let s = [tcp(Role::Sender, 1_428_000, 1448)];
        let zero = NetDevCounters::default();
        // A NIC that counts wire frames: every segment with its headers,
        // 500 ACKs back. Nothing else.
        let wire = interface_bytes(zero, counters((33_000, 500), (1_494_000, 1000)), &s, &tcp4);
        assert_eq!((wire.other_received, wire.other_sent), (0, 0));
        assert_eq!((wire.received, wire.sent), (33_000, 1_494_000));
        // veth: 25 GSO packets of 40 segments, headers once each.
        let gso = interface_bytes(
            zero,
            counters((33_000, 500), (1_428_000 + 25 * 66, 25)),
            &s,
            &tcp4,
        );
        assert_eq!((gso.other_received, gso.other_sent), (0, 0));
        // veth with 1000 datagrams of 1042 bytes of someone else's beside:
        // counted but for their headers, which the test's allowance takes.
        let busy = interface_bytes(
            zero,
            counters((33_000, 500), (1_428_000 + 25 * 66 + 1_042_000, 1025)),
            &s,
            &tcp4,
        );
        assert_eq!(busy.other_received, 0);
        assert_eq!(busy.other_sent, 1_042_000 - 975 * 66);
        // Counters that went backwards (an interface recreated) read 0.
        let back = interface_bytes(counters((9, 9), (9, 9)), zero, &s, &tcp4);
        assert_eq!(back, InterfaceBytes::default());
    }

    fn rr_stream(role: Role, request_bytes: u64, response_bytes: u64) -> StreamStats {
        StreamStats {
            role: Some(role),
            bytes: request_bytes,
            rr: Some(RrStats {
                transactions: request_bytes,
                request_bytes,
                response_bytes,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// 53,000 tcp_rr transactions of 1 byte each way on a veth
    /// are 53,000 frames of 67 bytes each way, the ACKs riding on the next
    /// request or response. Counted as throughput they left 3.5 MB each
    /// way "beyond the test's own"; now nothing, on both ends.
    #[test]
    fn tcp_rr_own_packets_are_its_transactions() {
        let rr4 = shape(Kind::TcpRr, false);
        let t = 53_000u64;
        let zero = NetDevCounters::default();
        let frames = (t * 67 + 2 * 66, t + 2);
        for role in [Role::Sender, Role::Receiver] {
            let quiet = interface_bytes(
                zero,
                counters(frames, frames),
                &[rr_stream(role, t, t)],
                &rr4,
            );
            assert_eq!((quiet.other_received, quiet.other_sent), (0, 0), "{role:?}");
        }
        // What the throughput accounting allowed: 1 segment for 53,000
        // bytes of requests, and no responses at all.
        let as_tcp = interface_bytes(
            zero,
            counters(frames, frames),
            &[rr_stream(Role::Sender, t, t)],
            &shape(Kind::Tcp, false),
        );
        assert!(as_tcp.other_sent > 3_400_000, "{as_tcp:?}");
        // With 1000 datagrams of 1448 bytes of someone else's beside, they
        // are reported but for the headers the ACK bound leaves room for.
        let busy = interface_bytes(
            zero,
            counters(frames, (frames.0 + 1000 * 1490, frames.1 + 1000)),
            &[rr_stream(Role::Sender, t, t)],
            &rr4,
        );
        assert_eq!(busy.other_sent, 1000 * (1490 - 66));
        // Large transactions span segments: 10 requests of 3000 bytes are
        // 3 segments each at an MSS of 1428, and 10 responses of 10 bytes.
        let big = TestShape {
            rr: Some(RrParams {
                request_size: 3000,
                response_size: 10,
                burst: 1,
                nodelay: true,
                interval_us: 0,
            }),
            ..rr4
        };
        let (r, s) = own_traffic(&big, &[rr_stream(Role::Sender, 30_000, 100)]);
        assert_eq!(s, own(30_000, &[(66, 30 + 10 + 2)]));
        assert_eq!(r, own(100, &[(66, 10 + 30 + 2)]));
    }

    #[test]
    fn udp_rr_own_packets_are_both_ends_datagrams() {
        let udp_rr = shape(Kind::UdpRr, false);
        let stream = |role, sent, received, duplicates| StreamStats {
            role: Some(role),
            rr: Some(RrStats {
                udp: Some(UdpRrStats {
                    sent,
                    received,
                    duplicates,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let fin = 8 * UDP_RR_FIN_LEN as u64;
        // The prober: 500 requests of 64 bytes, 498 replies and a copy.
        let (r, s) = own_traffic(&udp_rr, &[stream(Role::Sender, 500, 498, 1)]);
        assert_eq!(s, own(500 * 64 + fin, &[(42, 508)]));
        assert_eq!(r, own(499 * 64, &[(42, 499)]));
        // The responder: 499 requests, 499 replies; the FINs come in.
        let (r, s) = own_traffic(&udp_rr, &[stream(Role::Receiver, 499, 499, 0)]);
        assert_eq!(s, own(499 * 64, &[(42, 499)]));
        assert_eq!(r, own(499 * 64 + fin, &[(42, 507)]));
        // Counted as TCP, the replies were someone else's.
        let zero = NetDevCounters::default();
        let frames = (499 * 106, 499);
        let quiet = interface_bytes(
            zero,
            counters(frames, (500 * 106 + 8 * (42 + fin / 8), 508)),
            &[stream(Role::Sender, 500, 498, 1)],
            &udp_rr,
        );
        assert_eq!((quiet.other_received, quiet.other_sent), (0, 0));
        let as_tcp = interface_bytes(
            zero,
            counters(frames, frames),
            &[stream(Role::Sender, 500, 498, 1)],
            &shape(Kind::Tcp, false),
        );
        assert!(as_tcp.other_received > 40_000, "{as_tcp:?}");
    }

    #[test]
    fn tcp_crr_own_packets_are_whole_connections() {
        let crr = shape(Kind::TcpCrr, false);
        let stream = |role, connections, over_limit| StreamStats {
            role: Some(role),
            bytes: connections,
            rr: Some(RrStats {
                transactions: connections,
                request_bytes: connections,
                response_bytes: connections,
                crr: Some(CrrStats {
                    connections,
                    established: connections,
                    over_limit,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        // 1000 transactions and the last connection. The prober sends a
        // SYN (74 bytes), the handshake's ACK, hello and request (80 + 1
        // payload), its FIN and the ACK of the responder's (66 each);
        // the responder a SYN-ACK, the response and its FIN.
        let n = 1001u64;
        let up = (n * (74 + 66 * 4) + 1000 + 80 * n, 5 * n);
        let down = (n * (74 + 66 * 2) + 1000, 3 * n);
        let zero = NetDevCounters::default();
        let prober = interface_bytes(
            zero,
            counters(down, up),
            &[stream(Role::Sender, 1000, 0)],
            &crr,
        );
        assert_eq!((prober.other_received, prober.other_sent), (0, 0));
        let responder = interface_bytes(
            zero,
            counters(up, down),
            &[stream(Role::Receiver, 1000, 0)],
            &crr,
        );
        assert_eq!((responder.other_received, responder.other_sent), (0, 0));
        // Counted as throughput, 1000 connections' packets were not the
        // test's.
        let as_tcp = interface_bytes(
            zero,
            counters(down, up),
            &[stream(Role::Sender, 1000, 0)],
            &shape(Kind::Tcp, false),
        );
        assert!(as_tcp.other_sent > 300_000, "{as_tcp:?}");
        // 200 connections reset at the responder's door: SYN, ACK, hello
        // and request in; SYN-ACK and RST out.
        let reset_in = (200 * (74 + 66 + 66 + 81), 200 * 3);
        let reset_out = (200 * (74 + 54), 200 * 2);
        let busy = interface_bytes(
            zero,
            counters(
                (up.0 + reset_in.0, up.1 + reset_in.1),
                (down.0 + reset_out.0, down.1 + reset_out.1),
            ),
            &[stream(Role::Receiver, 1000, 200)],
            &crr,
        );
        assert_eq!((busy.other_received, busy.other_sent), (0, 0));
        // Someone else's 100 datagrams of 1490 bytes beside are reported,
        // but for the headers of the packets the bounds leave room for.
        let busy = interface_bytes(
            zero,
            counters(down, (up.0 + 100 * 1490, up.1 + 100)),
            &[stream(Role::Sender, 1000, 0)],
            &crr,
        );
        assert_eq!(busy.other_sent, 100 * (1490 - 66));
    }

    #[test]
    fn the_hello_is_a_frame_with_the_token() {
        let request = crate::protocol::TestRequest {
            kind: Kind::TcpCrr,
            direction: crate::protocol::model::Direction::Send,
            duration_ms: 5000,
            omit_ms: 0,
            streams: 1,
            bitrate: 0,
            length: 64,
            window: None,
            congestion: None,
            tos: None,
            affinity: None,
            interval_ms: None,
            no_offload: false,
            rr: None,
            adaptive: None,
        };
        let token = "0123456789abcdef0123456789abcdef";
        let s = TestShape::new(&request, token, false);
        // 4 bytes of length, then {"type":"data_hello","token":"…","stream":0}.
        assert_eq!(s.hello, 4 + 43 + 32);
        assert_eq!((s.kind, s.ipv6), (Kind::TcpCrr, false));
    }
}
