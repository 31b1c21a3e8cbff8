//! Loopback probes: the host measures its own network stack, against a
//! responder started inside the process on 127.0.0.1 (or ::1). With no wire
//! involved, a change in the figures is a change in the kernel or the host.
//!
//! It sits above both the prober and the responder, since it runs the two.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::probe::{probe, ProbeError, ProbeResult, ProbeSpec, Target};
use crate::responder::{bind, Responder, ResponderConfig};

/// The in-process responder's limits: the spec's own. No UDP cap either:
/// the peer is this process, and a loopback UDP probe asked to run unpaced
/// measures the stack at full speed.
fn loopback_config(spec: &ProbeSpec) -> ResponderConfig {
    ResponderConfig {
        max_duration: spec.omit + spec.duration + std::time::Duration::from_secs(1),
        max_streams: spec.streams,
        max_bitrate: 0,
        max_unauthenticated_udp_bitrate: 0,
        // The prober reports these tests; a responder line for each would
        // read as a test served to another host, and pathprobe serve's
        // pathprobe_responder_tests_total does not count them.
        log_tests: false,
        ..ResponderConfig::default()
    }
}

/// Runs `spec` over loopback. The in-process responder has no limits beyond
/// the spec itself and is gone when this returns.
pub async fn probe_loopback(spec: &ProbeSpec, ipv6: bool) -> Result<ProbeResult, ProbeError> {
    let ip = if ipv6 {
        IpAddr::V6(Ipv6Addr::LOCALHOST)
    } else {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    };
    let (tcp, udp) = bind(SocketAddr::new(ip, 0))
        .await
        .map_err(|e| ProbeError::io(format!("cannot start the loopback responder on {ip}"), e))?;
    let responder = Responder::new(tcp, udp, loopback_config(spec))
        .map_err(|e| ProbeError::io("loopback responder", e))?;
    let addr = responder
        .local_addr()
        .map_err(|e| ProbeError::io("loopback responder", e))?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(responder.serve(async {
        let _ = stop_rx.await;
    }));
    let result = probe(&Target::from_addr(addr), spec).await;
    let _ = stop_tx.send(());
    let _ = server.await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Direction, Kind, TestRequest};

    #[test]
    fn loopback_reverse_udp_stays_unpaced() {
        let spec = ProbeSpec::default();
        let c = loopback_config(&spec);
        let r = TestRequest {
            kind: Kind::Udp,
            direction: Direction::Receive,
            duration_ms: 1000,
            omit_ms: 0,
            streams: 1,
            bitrate: 0,
            length: 1400,
            window: None,
            congestion: None,
            tos: None,
            affinity: None,
            interval_ms: None,
            no_offload: false,
            rr: None,
            adaptive: None,
        };
        let a = crate::responder::check_limits(&r, &c).unwrap();
        assert_eq!(a.request.bitrate, 0);
        assert!(a.clamped.is_empty(), "{:?}", a.clamped);
    }
}
