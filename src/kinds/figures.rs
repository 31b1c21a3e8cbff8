//! The figures only one kind has, as one value: a result holds exactly one
//! kind's figures, so that it can never carry `tcp_crr` connection figures
//! beside `udp_rr` round trips. The throughput kinds' figures are the
//! result's shared fields (throughput, `tcp`, `udp`).
//!
//! The JSON keeps the shape consumers read since before the enum: a
//! request/response kind's figures under `rr` (`tcp_crr`'s connection
//! figures inside it as `rr.crr`), `udp_rr`'s under `udp_rr`, and neither
//! key for a throughput kind.

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::tcp_crr::CrrSummary;
use super::tcp_rr::RrSummary;
use super::udp_rr::UdpRrSummary;

/// One kind's own figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum KindFigures {
    /// `tcp` and `udp`: nothing beyond the shared fields.
    #[default]
    Throughput,
    /// `tcp_rr`.
    Rr(RrSummary),
    /// `tcp_crr`: the request/response figures and the connections'.
    Crr { rr: RrSummary, crr: CrrSummary },
    /// `udp_rr`.
    UdpRr(UdpRrSummary),
}

impl KindFigures {
    /// The request/response figures (`tcp_rr`, `tcp_crr`).
    pub fn rr(&self) -> Option<&RrSummary> {
        match self {
            KindFigures::Rr(rr) | KindFigures::Crr { rr, .. } => Some(rr),
            _ => None,
        }
    }

    /// `tcp_crr`'s connection figures.
    pub fn crr(&self) -> Option<&CrrSummary> {
        match self {
            KindFigures::Crr { crr, .. } => Some(crr),
            _ => None,
        }
    }

    /// `udp_rr`'s round-trip figures.
    pub fn udp_rr(&self) -> Option<&UdpRrSummary> {
        match self {
            KindFigures::UdpRr(u) => Some(u),
            _ => None,
        }
    }
}

/// `rr` with `crr` inside, as the JSON has always had it.
#[derive(serde::Serialize)]
struct RrWithCrr<'a> {
    #[serde(flatten)]
    rr: &'a RrSummary,
    crr: &'a CrrSummary,
}

/// Serialized as the entries it adds to the result (flattened there): none,
/// `rr` or `udp_rr`.
impl Serialize for KindFigures {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match self {
            KindFigures::Throughput => {}
            KindFigures::Rr(rr) => m.serialize_entry("rr", rr)?,
            KindFigures::Crr { rr, crr } => m.serialize_entry("rr", &RrWithCrr { rr, crr })?,
            KindFigures::UdpRr(u) => m.serialize_entry("udp_rr", u)?,
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_keeps_rr_crr_and_udp_rr_where_consumers_read_them() {
        #[derive(serde::Serialize)]
        struct Result {
            kind: &'static str,
            #[serde(flatten)]
            figures: KindFigures,
            after: u32,
        }
        let json = |figures| {
            serde_json::to_value(Result {
                kind: "k",
                figures,
                after: 1,
            })
            .unwrap()
        };
        let rr = RrSummary {
            transactions: 7,
            ..RrSummary::default()
        };
        let crr = CrrSummary {
            connections_per_second: 3.0,
            ..CrrSummary::default()
        };

        let t = json(KindFigures::Throughput);
        assert_eq!(t, serde_json::json!({"kind": "k", "after": 1}));

        let r = json(KindFigures::Rr(rr.clone()));
        assert_eq!(r["rr"]["transactions"], 7);
        assert!(r["rr"].get("crr").is_none());
        assert!(r.get("udp_rr").is_none());

        let c = json(KindFigures::Crr {
            rr: rr.clone(),
            crr,
        });
        assert_eq!(c["rr"]["transactions"], 7);
        assert_eq!(c["rr"]["crr"]["connections_per_second"], 3.0);

        let u = json(KindFigures::UdpRr(UdpRrSummary {
            received: 5,
            ..UdpRrSummary::default()
        }));
        assert_eq!(u["udp_rr"]["received"], 5);
        assert!(u.get("rr").is_none());
        assert_eq!(u["after"], 1);
    }
}
