//! `tcp` as the registry sees it: bulk TCP throughput.

use crate::engine::datapath::{DataSocket, StreamContext};
use crate::engine::stats::{Role, StreamStats};
use crate::kinds::kind::{wrong_socket, LengthBounds, ProbeKind, Transport};
use crate::protocol::Kind;

/// The largest TCP write size any responder accepts: a test's buffers are
/// allocated from it, per stream.
pub const TCP_LENGTH_CEILING: u32 = 16 << 20;

pub struct Tcp;
pub static TCP: Tcp = Tcp;

impl ProbeKind for Tcp {
    fn kind(&self) -> Kind {
        Kind::Tcp
    }
    fn transport(&self) -> Transport {
        Transport::Tcp
    }
    fn length_bounds(&self) -> LengthBounds {
        LengthBounds {
            min: 1,
            max: TCP_LENGTH_CEILING,
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
            (DataSocket::Tcp(s), Role::Sender) => super::send(s, ctx, stats),
            (DataSocket::Tcp(s), Role::Receiver) => super::receive(s, ctx, stats),
            (other, _) => wrong_socket(self.kind(), &other),
        }
    }
}
