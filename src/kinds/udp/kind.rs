//! `udp` as the registry sees it: paced UDP throughput, loss and jitter.

use crate::engine::datapath::{DataSocket, StreamContext};
use crate::engine::stats::{Role, StreamStats};
use crate::kinds::kind::{wrong_socket, LengthBounds, ProbeKind, Transport};
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
    fn run_stream(
        &self,
        socket: DataSocket,
        role: Role,
        ctx: &StreamContext,
        stats: &mut StreamStats,
    ) {
        match (socket, role) {
            (DataSocket::Udp(s), Role::Sender) => super::send(s, ctx, stats),
            (DataSocket::Udp(s), Role::Receiver) => super::receive(s, ctx, stats),
            (other, _) => wrong_socket(self.kind(), &other),
        }
    }
}
