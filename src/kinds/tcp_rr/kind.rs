//! `tcp_rr` as the registry sees it: request/response latency on one TCP
//! connection.

use crate::engine::stats::StreamStats;
use crate::kinds::figures::KindFigures;
use crate::kinds::kind::{check_sizes, Asked, Loops, ProbeKind, RrShape, Transport};
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
    /// The prober asks, the responder answers: the same stream.
    fn loops(&self) -> Option<Loops> {
        Some(Loops::Tcp {
            prober: super::ask,
            responder: super::answer,
        })
    }
    fn rr_shape(&self) -> RrShape {
        RrShape::Sized { burst: true }
    }
    fn one_flow(&self) -> Option<&'static str> {
        Some("runs on one connection")
    }
    fn own_traffic(&self) -> crate::kinds::kind::OwnTraffic {
        crate::kinds::kind::OwnTraffic::TcpTransactions
    }
    fn validate(&self, a: &Asked) -> Result<(), String> {
        let rr = a.rr.unwrap_or(crate::kinds::kind::DEFAULT_RR);
        check_sizes(rr, self.length_bounds().max)?;
        if !(1..=crate::protocol::rr::MAX_BURST).contains(&rr.burst) {
            Err(format!(
                "burst must be between 1 and {} transactions in flight, got {}",
                crate::protocol::rr::MAX_BURST,
                rr.burst
            ))
        } else if a.streams != 1 || !a.one_way {
            Err("tcp_rr runs on one connection: no -P, -R or --bidir".into())
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
        KindFigures::Rr(super::RrSummary::combine(p, local, remote))
    }
}
