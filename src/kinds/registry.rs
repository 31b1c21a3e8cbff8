//! The table of probe kinds: the one place that maps a [`Kind`] to what it
//! declares. Everything else asks [`of`].

use crate::protocol::Kind;

use super::kind::{ProbeKind, Transport};
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

/// The kind named `name` (its wire and config value, `--mode`).
pub fn by_name(name: &str) -> Option<&'static dyn ProbeKind> {
    KINDS.iter().copied().find(|k| k.kind().as_str() == name)
}

/// The kind a stock iperf3 runs over `transport` (its `-u` or not).
pub fn iperf3_kind(transport: Transport) -> Kind {
    KINDS
        .iter()
        .find(|k| k.iperf3() && k.transport() == transport)
        .map_or(KINDS[0].kind(), |k| k.kind())
}

/// Against whom a module of a kind probes: its name is the kind's, with
/// `loopback_` or `iperf3_` before it for the other two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Via {
    /// A remote pathprobe responder (the kind's own name).
    Responder,
    /// The process's own responder over loopback (`loopback_<kind>`).
    Loopback,
    /// A stock iperf3 server (`iperf3_<kind>`).
    Iperf3,
}

impl Via {
    const ALL: [Via; 3] = [Via::Responder, Via::Loopback, Via::Iperf3];

    fn prefix(self) -> &'static str {
        match self {
            Via::Responder => "",
            Via::Loopback => "loopback_",
            Via::Iperf3 => "iperf3_",
        }
    }

    /// Whether `kind` runs this way.
    pub fn runs(self, kind: &dyn ProbeKind) -> bool {
        match self {
            Via::Responder => true,
            Via::Loopback => kind.loopback(),
            Via::Iperf3 => kind.iperf3(),
        }
    }
}

/// Every module kind's name with its kind and way, in the order the docs
/// list them: the kinds against a responder, then loopback, then iperf3.
pub fn module_names() -> &'static [(&'static str, Kind, Via)] {
    static NAMES: std::sync::OnceLock<Vec<(&'static str, Kind, Via)>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        Via::ALL
            .iter()
            .flat_map(|&via| {
                KINDS.iter().filter(move |k| via.runs(**k)).map(move |k| {
                    let name = match via {
                        Via::Responder => k.kind().as_str(),
                        // Built once for a fixed set of names.
                        _ => &*Box::leak(format!("{}{}", via.prefix(), k.kind()).into_boxed_str()),
                    };
                    (name, k.kind(), via)
                })
            })
            .collect()
    })
}

/// The kind and way of the module kind `name` (`tcp`, `loopback_udp`,
/// `iperf3_tcp`, …).
pub fn by_module_name(name: &str) -> Option<(&'static dyn ProbeKind, Via)> {
    module_names()
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|&(_, k, via)| (of(k), via))
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
        assert_eq!(by_name("udp_rr").map(|k| k.kind()), Some(Kind::UdpRr));
        assert!(by_name("udp_r").is_none());
        assert_eq!(iperf3_kind(Transport::Udp), Kind::Udp);
        assert_eq!(iperf3_kind(Transport::Tcp), Kind::Tcp);
    }

    /// The module kinds the config accepted before the registry named them.
    #[test]
    fn module_names_are_the_configs() {
        let names: Vec<_> = module_names().iter().map(|(n, _, _)| *n).collect();
        assert_eq!(
            names,
            [
                "tcp",
                "udp",
                "tcp_rr",
                "udp_rr",
                "tcp_crr",
                "loopback_tcp",
                "loopback_udp",
                "iperf3_tcp",
                "iperf3_udp"
            ]
        );
        let (k, via) = by_module_name("iperf3_udp").unwrap();
        assert_eq!((k.kind(), via), (Kind::Udp, Via::Iperf3));
        assert!(by_module_name("loopback_tcp_rr").is_none());
    }
}
