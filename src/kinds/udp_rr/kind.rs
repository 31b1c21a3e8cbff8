//! `udp_rr` as the registry sees it: isochronous UDP round trips.

use crate::engine::datapath::{DataSocket, StreamContext};
use crate::engine::stats::{Role, StreamStats};
use crate::kinds::figures::KindFigures;
use crate::kinds::kind::{wrong_socket, Family, LengthBounds, ProbeKind, Transport};
use crate::protocol::rr::RrParams;
use crate::protocol::Kind;

pub struct UdpRr;
pub static UDP_RR: UdpRr = UdpRr;

impl ProbeKind for UdpRr {
    fn kind(&self) -> Kind {
        Kind::UdpRr
    }
    fn transport(&self) -> Transport {
        Transport::Udp
    }
    fn family(&self) -> Family {
        Family::Latency
    }
    /// A request carries the header and the reply's stamps.
    fn length_bounds(&self) -> LengthBounds {
        LengthBounds {
            min: crate::protocol::udp_rr::MIN_LENGTH,
            max: crate::protocol::udp_rr::MAX_LENGTH,
        }
    }
    fn run_stream(
        &self,
        socket: DataSocket,
        role: Role,
        ctx: &StreamContext,
        stats: &mut StreamStats,
    ) {
        // The prober's schedule, the responder's echo.
        match (socket, role) {
            (DataSocket::Udp(s), Role::Sender) => super::ask(s, ctx, stats),
            (DataSocket::Udp(s), Role::Receiver) => super::answer(s, ctx, stats),
            (other, _) => wrong_socket(self.kind(), &other),
        }
    }
    fn figures(
        &self,
        p: RrParams,
        local: Option<&StreamStats>,
        remote: Option<&StreamStats>,
    ) -> KindFigures {
        KindFigures::UdpRr(super::UdpRrSummary::combine(
            p,
            p.request_size,
            local,
            remote,
        ))
    }
}
