//! Cross traffic: what a test's interface moved beyond the test's own
//! bytes, so that a figure taken while other traffic shared the NIC can be
//! told apart (issue 11, point 4).
//!
//! The test's own traffic is allowed for, per direction, as its payload
//! plus headers (Ethernet, IP, and TCP with timestamps or UDP) on each of
//! its packets. How many packets the interface counted for it depends on
//! the driver: one per wire segment, or one per GSO/GRO packet of up to
//! 64 KiB (veth, many virtual NICs). So the headers are allowed for on the
//! smaller of the test's segments (its bytes over the MSS, plus TCP
//! retransmissions; for TCP, the other way, one ACK per data segment at
//! most, with SACK options) and the packets the
//! interface counted in all. A quiet interface then reads 0 other traffic;
//! other traffic is, if anything, under-counted by its own headers (about
//! 4% of it at MTU 1500).

use crate::host::NetDevCounters;
use crate::protocol::model::{InterfaceBytes, Role, StreamStats};

/// Ethernet + IP + TCP with the timestamp option.
const TCP_HEADERS_V4: u64 = 14 + 20 + 32;
const TCP_HEADERS_V6: u64 = 14 + 40 + 32;
/// An ACK's headers at most: TCP with 40 bytes of options (timestamps and
/// SACK blocks, as ACKs carry during loss recovery).
const ACK_HEADERS_V4: u64 = 14 + 20 + 60;
const ACK_HEADERS_V6: u64 = 14 + 40 + 60;
/// Ethernet + IP + UDP.
const UDP_HEADERS_V4: u64 = 14 + 20 + 8;
const UDP_HEADERS_V6: u64 = 14 + 40 + 8;
/// The largest MSS assumed (that of a 1500-byte MTU over IPv6), so that
/// segments are never under-counted; TCP_INFO's MSS is used when smaller.
const MAX_MSS: u64 = 1428;

/// A side's own traffic in one direction: payload bytes, and packets on
/// the wire with the header bytes each carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Own {
    pub payload: u64,
    pub packets: u64,
    pub header: u64,
}

impl Own {
    fn add(&mut self, payload: u64, packets: u64, header: u64) {
        self.payload = self.payload.saturating_add(payload);
        self.packets = self.packets.saturating_add(packets);
        self.header = self.header.max(header);
    }

    /// The bytes to allow for when the interface counted `counted`
    /// packets in this direction in all.
    fn allowance(&self, counted: u64) -> u64 {
        self.payload
            .saturating_add(self.packets.min(counted).saturating_mul(self.header))
    }
}

/// This side's own traffic over the window, as (received, sent), from its
/// streams' figures.
pub fn own_traffic(streams: &[StreamStats], ipv6: bool) -> (Own, Own) {
    let (tcp_h, ack_h, udp_h) = if ipv6 {
        (TCP_HEADERS_V6, ACK_HEADERS_V6, UDP_HEADERS_V6)
    } else {
        (TCP_HEADERS_V4, ACK_HEADERS_V4, UDP_HEADERS_V4)
    };
    let (mut received, mut sent) = (Own::default(), Own::default());
    for s in streams {
        let (data, reverse) = match (s.role, &mut received, &mut sent) {
            (Some(Role::Sender), r, d) => (d, r),
            (Some(Role::Receiver), d, r) => (d, r),
            (None, _, _) => continue,
        };
        let udp_packets = s
            .udp_sent
            .as_ref()
            .map(|u| u.packets)
            .or(s.udp_received.as_ref().map(|u| u.packets));
        match udp_packets {
            Some(p) => data.add(s.bytes, p, udp_h),
            None => {
                let mss = s
                    .tcp
                    .as_ref()
                    .map(|t| u64::from(t.mss_bytes))
                    .filter(|&m| m > 0)
                    .map_or(MAX_MSS, |m| m.min(MAX_MSS));
                let segments = s.bytes.div_ceil(mss);
                data.add(s.bytes, segments, tcp_h);
                // Retransmitted segments are the test's own bytes too
                // (the sender's TCP_INFO count over the window).
                let retrans = s.tcp.as_ref().map_or(0, |t| t.retransmits);
                data.add(retrans.saturating_mul(mss), retrans, tcp_h);
                reverse.add(0, segments.saturating_add(retrans), ack_h);
            }
        }
    }
    (received, sent)
}

/// The interface's traffic over the window and the part that was not this
/// side's.
pub fn interface_bytes(
    before: NetDevCounters,
    after: NetDevCounters,
    streams: &[StreamStats],
    ipv6: bool,
) -> InterfaceBytes {
    let received = after.rx_bytes.saturating_sub(before.rx_bytes);
    let sent = after.tx_bytes.saturating_sub(before.tx_bytes);
    let rx_packets = after.rx_packets.saturating_sub(before.rx_packets);
    let tx_packets = after.tx_packets.saturating_sub(before.tx_packets);
    let (own_received, own_sent) = own_traffic(streams, ipv6);
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
    use crate::protocol::model::{TcpStats, UdpSendStats};

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

    #[test]
    fn own_traffic_counts_segments_both_ways() {
        // 1000 segments of 1428 bytes sent, an ACK each way back at most.
        let (r, s) = own_traffic(&[tcp(Role::Sender, 1_428_000, 1448)], false);
        assert_eq!(
            s,
            Own {
                payload: 1_428_000,
                packets: 1000,
                header: 66
            }
        );
        assert_eq!(
            r,
            Own {
                payload: 0,
                packets: 1000,
                header: 94
            }
        );
        // The receiver of the same, over IPv6, without an MSS of its own.
        let (r, s) = own_traffic(&[tcp(Role::Receiver, 1_428_000, 0)], true);
        assert_eq!(
            r,
            Own {
                payload: 1_428_000,
                packets: 1000,
                header: 86
            }
        );
        assert_eq!(
            s,
            Own {
                payload: 0,
                packets: 1000,
                header: 114
            }
        );
        // Retransmitted segments are the sender's own bytes too.
        let mut lossy = tcp(Role::Sender, 1_428_000, 1448);
        lossy.tcp.as_mut().unwrap().retransmits = 10;
        let (r, s) = own_traffic(&[lossy], false);
        assert_eq!((s.payload, s.packets), (1_428_000 + 14_280, 1010));
        assert_eq!(r.packets, 1010);
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
        let (r, s) = own_traffic(&[u], false);
        assert_eq!(
            s,
            Own {
                payload: 100_000,
                packets: 100,
                header: 42
            }
        );
        assert_eq!(r, Own::default());
    }

    #[test]
    fn other_traffic_is_what_the_interface_moved_beyond() {
        let s = [tcp(Role::Sender, 1_428_000, 1448)];
        let zero = NetDevCounters::default();
        // A NIC that counts wire frames: every segment with its headers,
        // 500 ACKs back. Nothing else.
        let wire = interface_bytes(zero, counters((33_000, 500), (1_494_000, 1000)), &s, false);
        assert_eq!((wire.other_received, wire.other_sent), (0, 0));
        assert_eq!((wire.received, wire.sent), (33_000, 1_494_000));
        // veth: 25 GSO packets of 40 segments, headers once each.
        let gso = interface_bytes(
            zero,
            counters((33_000, 500), (1_428_000 + 25 * 66, 25)),
            &s,
            false,
        );
        assert_eq!((gso.other_received, gso.other_sent), (0, 0));
        // veth with 1000 datagrams of 1042 bytes of someone else's beside:
        // counted but for their headers, which the test's allowance takes.
        let busy = interface_bytes(
            zero,
            counters((33_000, 500), (1_428_000 + 25 * 66 + 1_042_000, 1025)),
            &s,
            false,
        );
        assert_eq!(busy.other_received, 0);
        assert_eq!(busy.other_sent, 1_042_000 - 975 * 66);
        // Counters that went backwards (an interface recreated) read 0.
        let back = interface_bytes(counters((9, 9), (9, 9)), zero, &s, false);
        assert_eq!(back, InterfaceBytes::default());
    }
}
