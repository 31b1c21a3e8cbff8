//! `tcp_crr` as the registry sees it: a TCP connection per transaction.

use crate::engine::connections::Connections;
use crate::engine::datapath::{DataSocket, StreamContext};
use crate::engine::stats::{Role, StreamStats};
use crate::kinds::figures::KindFigures;
use crate::kinds::kind::{
    check_sizes, wrong_socket, Asked, OwnTraffic, ProbeKind, RrShape, Series, Transport,
};
use crate::kinds::tcp_rr::RrSummary;
use crate::protocol::rr::RrParams;
use crate::protocol::Kind;

pub struct TcpCrr;
pub static TCP_CRR: TcpCrr = TcpCrr;

impl ProbeKind for TcpCrr {
    fn kind(&self) -> Kind {
        Kind::TcpCrr
    }
    fn transport(&self) -> Transport {
        Transport::Tcp
    }
    fn connection_per_transaction(&self) -> bool {
        true
    }
    fn run_stream(
        &self,
        socket: DataSocket,
        _role: Role,
        ctx: &StreamContext,
        stats: &mut StreamStats,
    ) {
        // The prober dials, the responder is handed each connection.
        match socket {
            DataSocket::Connections(Connections::Dial(d)) => super::ask(d, ctx, stats),
            DataSocket::Connections(Connections::Accepted(a)) => super::answer(a, ctx, stats),
            other => wrong_socket(self.kind(), &other),
        }
    }
    fn rr_shape(&self) -> RrShape {
        RrShape::Sized { burst: false }
    }
    fn one_flow(&self) -> Option<&'static str> {
        Some("opens one connection per transaction, one at a time")
    }
    fn own_traffic(&self) -> OwnTraffic {
        OwnTraffic::TcpConnections
    }
    fn series(&self) -> &'static [Series] {
        &[Series::Latency, Series::Connect, Series::ConnectionFailures]
    }
    fn validate(&self, a: &Asked) -> Result<(), String> {
        let rr = a.rr.unwrap_or(crate::kinds::kind::DEFAULT_RR);
        check_sizes(rr, self.length_bounds().max)?;
        if rr.burst != 1 {
            Err("tcp_crr opens one connection per transaction, one at a time: no --burst".into())
        } else if a.streams != 1 || !a.one_way || a.interval_reports {
            Err(
                "tcp_crr runs one transaction at a time: no -P, -R, --bidir or interval reports"
                    .into(),
            )
        } else {
            Ok(())
        }
    }
    fn figures(
        &self,
        p: RrParams,
        local: Option<&StreamStats>,
        remote: Option<&StreamStats>,
    ) -> KindFigures {
        let rr = RrSummary::combine(p, local, remote);
        // Connection figures come with the prober's stream; without one
        // there is nothing to add to the transactions'.
        let counted = local
            .and_then(|s| s.rr.as_ref())
            .is_some_and(|r| r.crr.is_some());
        if counted {
            let crr = super::CrrSummary::combine(local, remote, rr.seconds);
            KindFigures::Crr { rr, crr }
        } else {
            KindFigures::Rr(rr)
        }
    }
}
