//! `tcp` as the registry sees it: bulk TCP throughput.

use crate::kinds::kind::{Loops, ProbeKind, Transport};
use crate::protocol::Kind;

pub struct Tcp;
pub static TCP: Tcp = Tcp;

impl ProbeKind for Tcp {
    fn kind(&self) -> Kind {
        Kind::Tcp
    }
    fn transport(&self) -> Transport {
        Transport::Tcp
    }
    fn loops(&self) -> Option<Loops> {
        Some(Loops::Tcp {
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
