//! The table of probe kinds: the one place that maps a [`Kind`] to what it
//! declares. Everything else asks [`of`].

use crate::protocol::Kind;

use super::kind::ProbeKind;
use super::{tcp, tcp_crr, tcp_rr, udp, udp_rr};

/// Every kind, in the order help texts and docs list them.
pub static KINDS: [&dyn ProbeKind; 5] = [
    &tcp::kind::TCP,
    &udp::kind::UDP,
    &tcp_rr::kind::TCP_RR,
    &udp_rr::kind::UDP_RR,
    &tcp_crr::kind::TCP_CRR,
];

/// What `kind` declares.
pub fn of(kind: Kind) -> &'static dyn ProbeKind {
    match kind {
        Kind::Tcp => KINDS[0],
        Kind::Udp => KINDS[1],
        Kind::TcpRr => KINDS[2],
        Kind::UdpRr => KINDS[3],
        Kind::TcpCrr => KINDS[4],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_and_the_lookup_agree() {
        for k in KINDS {
            assert_eq!(of(k.kind()).kind(), k.kind());
        }
        let names: Vec<_> = KINDS.iter().map(|k| k.kind().as_str()).collect();
        assert_eq!(names, ["tcp", "udp", "tcp_rr", "udp_rr", "tcp_crr"]);
    }
}
