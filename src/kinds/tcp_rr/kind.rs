//! `tcp_rr` as the registry sees it: request/response latency on one TCP
//! connection.

use crate::engine::datapath::{DataSocket, StreamContext};
use crate::engine::stats::{Role, StreamStats};
use crate::kinds::figures::KindFigures;
use crate::kinds::kind::{wrong_socket, Family, LengthBounds, ProbeKind, Transport};
use crate::kinds::tcp::kind::TCP_LENGTH_CEILING;
use crate::protocol::rr::RrParams;
use crate::protocol::Kind;

pub struct TcpRr;
pub static TCP_RR: TcpRr = TcpRr;

impl ProbeKind for TcpRr {
    fn kind(&self) -> Kind {
        Kind::TcpRr
    }
    fn transport(&self) -> Transport {
        Transport::Tcp
    }
    fn family(&self) -> Family {
        Family::Latency
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
        // The prober asks, the responder answers: the same stream.
        match (socket, role) {
            (DataSocket::Tcp(s), Role::Sender) => super::ask(s, ctx, stats),
            (DataSocket::Tcp(s), Role::Receiver) => super::answer(s, ctx, stats),
            (other, _) => wrong_socket(self.kind(), &other),
        }
    }
    fn figures(
        &self,
        p: RrParams,
        local: Option<&StreamStats>,
        remote: Option<&StreamStats>,
    ) -> KindFigures {
        KindFigures::Rr(super::RrSummary::combine(p, local, remote))
    }
}
