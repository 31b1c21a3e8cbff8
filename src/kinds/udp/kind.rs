//! `udp` as the registry sees it: paced UDP throughput, loss and jitter.

use crate::kinds::kind::{LengthBounds, Loops, ProbeKind, Transport};
use crate::protocol::Kind;

pub struct Udp;
pub static UDP: Udp = Udp;

impl ProbeKind for Udp {
    fn kind(&self) -> Kind {
        Kind::Udp
    }
    fn transport(&self) -> Transport {
        Transport::Udp
    }
    /// A datagram carries the header and the hello's token and count.
    fn length_bounds(&self) -> LengthBounds {
        LengthBounds {
            min: crate::protocol::udp::HELLO_LEN as u32,
            max: 65_000,
        }
    }
    fn loops(&self) -> Option<Loops> {
        Some(Loops::Udp {
            prober: super::send,
            responder: super::receive,
        })
    }
    fn iperf3(&self) -> bool {
        true
    }
    /// A bulk flow settles on the path's rate, so its probe can stop
    /// once that rate is known.
    fn adaptive_duration(&self) -> bool {
        true
    }
}
