//! `udp_rr` as the registry sees it: isochronous UDP round trips.

use crate::engine::stats::StreamStats;
use crate::kinds::figures::KindFigures;
use crate::kinds::kind::{
    Asked, LengthBounds, Loops, OwnTraffic, ProbeKind, RrShape, Series, Transport,
};
use crate::protocol::rr::RrParams;
use crate::protocol::udp_rr as w;
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
    /// A request carries the header and the reply's stamps.
    fn length_bounds(&self) -> LengthBounds {
        LengthBounds {
            min: w::MIN_LENGTH,
            max: w::MAX_LENGTH,
        }
    }
    /// The prober's schedule, the responder's echo.
    fn loops(&self) -> Option<Loops> {
        Some(Loops::Udp {
            prober: super::ask,
            responder: super::answer,
        })
    }
    fn rr_shape(&self) -> RrShape {
        RrShape::Paced
    }
    fn one_flow(&self) -> Option<&'static str> {
        Some("runs one flow of round trips")
    }
    fn own_traffic(&self) -> OwnTraffic {
        OwnTraffic::UdpRoundTrips
    }
    fn series(&self) -> &'static [Series] {
        &[Series::Latency, Series::RoundTripLoss]
    }
    fn default_length(&self) -> u32 {
        w::DEFAULT_LENGTH
    }
    /// Requests and replies of the datagram length (`-l`), one every
    /// `interval_us` of the asked shape (irtt's 10 ms unless given).
    fn effective_rr(&self, length: Option<u32>, rr: Option<RrParams>) -> Option<RrParams> {
        let len = length.unwrap_or(w::DEFAULT_LENGTH);
        Some(RrParams {
            request_size: len,
            response_size: len,
            burst: 1,
            nodelay: false,
            interval_us: rr
                .map(|r| r.interval_us)
                .filter(|&i| i > 0)
                .unwrap_or(w::DEFAULT_INTERVAL_US),
        })
    }
    /// Set by the schedule, not asked: what the limits see.
    fn effective_bitrate(&self, _: Option<u64>, length: Option<u32>, rr: Option<RrParams>) -> u64 {
        self.effective_rr(length, rr)
            .map_or(0, |rr| w::bitrate(rr.request_size, rr.interval_us))
    }
    fn validate(&self, a: &Asked) -> Result<(), String> {
        let Some(rr) = a.rr else {
            return Err("udp_rr needs its schedule".into());
        };
        let bounds = self.length_bounds();
        if !(bounds.min..=bounds.max).contains(&rr.request_size) {
            Err(format!(
                "udp_rr datagram length must be between {} and {} bytes, got {}",
                bounds.min, bounds.max, rr.request_size
            ))
        } else if !(w::MIN_INTERVAL_US..=w::MAX_INTERVAL_US).contains(&rr.interval_us) {
            Err(format!(
                "udp_rr send interval must be between {} us and {} s, got {} us",
                w::MIN_INTERVAL_US,
                w::MAX_INTERVAL_US / 1_000_000,
                rr.interval_us
            ))
        } else if w::packet_count(a.total_ms, rr.interval_us).is_none() {
            Err(format!(
                "a udp_rr test sends at most {} requests: a longer interval or a shorter test",
                w::MAX_PACKETS
            ))
        } else if a.streams != 1 || !a.one_way || a.interval_reports {
            Err(
                "udp_rr runs one flow of round trips: no -P, -R, --bidir or interval reports"
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
        KindFigures::UdpRr(super::UdpRrSummary::combine(
            p,
            p.request_size,
            local,
            remote,
        ))
    }
}
