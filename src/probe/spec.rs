//! What a probe is asked to do: the vocabulary shared by the CLI, the
//! scheduler, the control protocol and the data path.

use crate::protocol::adaptive::AdaptiveRequest;
use std::net::IpAddr;
use std::time::Duration;

use crate::auth::Secret;
pub use crate::protocol::model::{stream_layout, Direction, FlowDirection, Kind};
pub use crate::protocol::rr::RrParams;
use crate::protocol::TestRequest;

// Each kind's defaults are the registry's (kinds/kind.rs); named here too,
// where every caller has them.
pub use crate::kinds::kind::{
    DEFAULT_RR, DEFAULT_TCP_LENGTH, DEFAULT_UDP_BITRATE, DEFAULT_UDP_LENGTH,
};
/// Default measured time: long enough for a stable figure, short enough to
/// repeat every minute without costing the path much.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(5);

/// The IP family a probe is held to (iperf3's `-4` and `-6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn matches(self, ip: IpAddr) -> bool {
        match self {
            IpFamily::V4 => ip.is_ipv4(),
            IpFamily::V6 => ip.is_ipv6(),
        }
    }

    /// The family's name, as error messages write it.
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        }
    }

    /// The command-line flag that asks for it.
    pub fn flag(self) -> &'static str {
        match self {
            IpFamily::V4 => "-4",
            IpFamily::V6 => "-6",
        }
    }

    /// The family of `ip`.
    pub fn of(ip: IpAddr) -> IpFamily {
        if ip.is_ipv4() {
            IpFamily::V4
        } else {
            IpFamily::V6
        }
    }
}

/// One probe as a user or the scheduler asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeSpec {
    pub kind: Kind,
    pub direction: Direction,
    /// Measured time, after the omitted warm-up.
    pub duration: Duration,
    /// Warm-up at the start, excluded from every figure.
    pub omit: Duration,
    pub streams: u32,
    /// Bits per second per direction, summed over streams; 0 means unpaced.
    /// `None` takes the kind's default (unpaced TCP, 1 Mbit/s UDP).
    pub bitrate: Option<u64>,
    /// Write size (TCP) or datagram payload (UDP); `None` takes the default.
    pub length: Option<u32>,
    /// SO_SNDBUF and SO_RCVBUF for the data sockets on both ends.
    pub window: Option<u32>,
    pub congestion: Option<String>,
    pub tos: Option<u8>,
    /// Local address to bind data and control sockets to.
    pub bind: Option<IpAddr>,
    /// Only addresses of this family are resolved and probed; `None` takes
    /// whatever the name resolves to.
    pub family: Option<IpFamily>,
    /// CPU for the local data threads.
    pub affinity: Option<usize>,
    /// CPU for the responder's data threads.
    pub remote_affinity: Option<usize>,
    /// Bound on connecting and on every control exchange.
    pub connect_timeout: Duration,
    /// Shared secret to authenticate with. With one set, the prober also
    /// insists that the responder proves it holds the same secret.
    pub secret: Option<Secret>,
    /// Interval reports (`-i`): both ends bucket their figures by it.
    pub interval: Option<Duration>,
    /// Where the local streams' intervals go as they close (`--json-stream`).
    pub interval_events: Option<crate::engine::datapath::IntervalSink>,
    /// UDP: no GSO/GRO on either end (`--no-offload`).
    pub no_offload: bool,
    /// Request and response sizes, burst and TCP_NODELAY of a `tcp_rr`
    /// probe; `None` takes [`DEFAULT_RR`].
    pub rr: Option<RrParams>,
    /// Whose protocol the peer speaks: a pathprobe responder, or a stock
    /// `iperf3 -s`.
    pub wire: Wire,
    /// Probe this port instead of the target's (iperf3 modules: the
    /// target's port is its pathprobe responder's).
    pub port: Option<u16>,
    /// The newest control protocol version to offer (native wire); the
    /// previous release's (2) speaks exactly as that release did. This
    /// release's newest by default.
    pub max_protocol_version: u32,
    /// TCP: whether this end moves bytes without copying them
    /// (`--zerocopy`); the responder's end follows its own setting.
    pub zerocopy: crate::engine::zerocopy::ZeroCopy,
    /// Told the responder's clamps the moment it accepts the test, before
    /// any data flows, so that `-i` prints the note above the intervals it
    /// qualifies rather than after them.
    pub clamp_notes: Option<ClampNotes>,
    /// Adaptive duration: `duration` is then the maximum, and
    /// the probe stops once its figure is known to the precision.
    pub adaptive: Option<AdaptiveRequest>,
    /// An adaptive probe still running then is ended (`End`) and reported
    /// with stop reason `cut`, not converged: a mesh slot's end, less what
    /// the end of a test takes. Local; not on the wire.
    pub cut_at: Option<tokio::time::Instant>,
    /// Counts every payload byte this end's data sockets write and read,
    /// from the first to the last (warm-up, tail and a run that fails
    /// included): what the byte budget charges, from this side's own
    /// counts rather than the peer's figures. Local; not on the wire.
    pub moved: Option<crate::engine::datapath::Progress>,
}

/// Receives the limits the responder applied to a test, once, when it
/// accepts it (see [`ProbeSpec::clamp_notes`]).
#[derive(Clone)]
pub struct ClampNotes(pub std::sync::Arc<ClampNoteSink>);

/// What [`ClampNotes`] calls with the responder's notes.
pub type ClampNoteSink = dyn Fn(&[String]) + Send + Sync;

impl std::fmt::Debug for ClampNotes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClampNotes")
    }
}

impl PartialEq for ClampNotes {
    /// Where notes go is no part of the test asked for, as for
    /// `interval_events`.
    fn eq(&self, _: &ClampNotes) -> bool {
        true
    }
}

/// The protocol a probe speaks to its peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Wire {
    #[default]
    Pathprobe,
    /// A stock iperf3 server (`iperf3 -s`), through iperf3's own protocol.
    Iperf3,
}

impl Wire {
    /// The `protocol` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Wire::Pathprobe => "pathprobe",
            Wire::Iperf3 => "iperf3",
        }
    }
}

impl Default for ProbeSpec {
    fn default() -> Self {
        ProbeSpec {
            kind: Kind::Tcp,
            direction: Direction::Send,
            duration: DEFAULT_DURATION,
            omit: Duration::ZERO,
            streams: 1,
            bitrate: None,
            length: None,
            window: None,
            congestion: None,
            tos: None,
            bind: None,
            family: None,
            affinity: None,
            remote_affinity: None,
            connect_timeout: Duration::from_secs(5),
            secret: None,
            interval: None,
            interval_events: None,
            no_offload: false,
            rr: None,
            wire: Wire::Pathprobe,
            port: None,
            max_protocol_version: crate::protocol::PROTOCOL_VERSION,
            clamp_notes: None,
            zerocopy: Default::default(),
            adaptive: None,
            cut_at: None,
            moved: None,
        }
    }
}

/// A spec that cannot be run, with what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

impl ProbeSpec {
    pub fn effective_length(&self) -> u32 {
        crate::kinds::of(self.kind).effective_length(self.length, self.rr)
    }

    pub fn effective_bitrate(&self) -> u64 {
        crate::kinds::of(self.kind).effective_bitrate(self.bitrate, self.length, self.rr)
    }

    /// The request/response shape this probe runs: its kind's, over the
    /// asked one; [`DEFAULT_RR`] for a kind that takes none.
    pub fn effective_rr(&self) -> RrParams {
        crate::kinds::of(self.kind)
            .effective_rr(self.length, self.rr)
            .unwrap_or(DEFAULT_RR)
    }

    /// Checks the spec before anything touches the network.
    pub fn validate(&self) -> Result<(), SpecError> {
        let fail = |m: String| Err(SpecError(m));
        if self.duration.is_zero() {
            return fail("duration must be greater than zero (e.g. -t 5)".into());
        }
        if self.duration > Duration::from_secs(3600) || self.omit > Duration::from_secs(3600) {
            return fail("duration and omit must each be at most an hour".into());
        }
        if self
            .interval
            .is_some_and(|i| i < crate::engine::datapath::MIN_INTERVAL || i > self.duration)
        {
            return fail(format!(
                "the interval must be between {} s and the duration, {} s (e.g. -i 1)",
                crate::engine::datapath::MIN_INTERVAL.as_secs_f64(),
                self.duration.as_secs_f64()
            ));
        }
        if let Some(a) = &self.adaptive {
            self.check_adaptive(a).map_err(SpecError)?;
        }
        if self.streams == 0 || self.streams > 128 {
            return fail(format!(
                "streams must be between 1 and 128, got {}",
                self.streams
            ));
        }
        // The kind's own checks (lengths within the bounds the responder
        // admits, its request/response shape).
        let kind = crate::kinds::of(self.kind);
        kind.validate(&crate::kinds::kind::Asked {
            length: self.effective_length(),
            rr: kind.effective_rr(self.length, self.rr),
            streams: self.streams,
            one_way: self.direction == Direction::Send,
            interval_reports: self.interval.is_some(),
            total_ms: (self.omit + self.duration).as_millis() as u64,
        })
        .map_err(SpecError)?;
        if let Some(c) = &self.congestion {
            if c.is_empty()
                || c.len() > 15
                || !c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return fail(format!("congestion control {c:?} is not a valid algorithm name (e.g. cubic, bbr, reno)"));
            }
        }
        Ok(())
    }

    /// What an adaptive duration needs: a kind that takes one, pathprobe's
    /// own wire (a stock iperf3 cannot be told the end), a minimum within
    /// the maximum, no warm-up (start-up is left out by the rule itself).
    fn check_adaptive(&self, a: &AdaptiveRequest) -> Result<(), String> {
        let kind = crate::kinds::of(self.kind);
        if !kind.adaptive_duration() {
            let names: Vec<&str> = crate::kinds::registry::KINDS
                .iter()
                .filter(|k| k.adaptive_duration())
                .map(|k| k.kind().as_str())
                .collect();
            return Err(format!(
                "an adaptive duration applies to {} probes only, not {}",
                names.join(" and "),
                self.kind
            ));
        }
        if self.wire != Wire::Pathprobe {
            return Err(
                "an adaptive duration needs a pathprobe responder: a stock iperf3 server cannot be told when the test ends"
                    .into(),
            );
        }
        if !self.omit.is_zero() {
            return Err(
                "an adaptive duration leaves out the start-up by itself: drop the omit (-O)".into(),
            );
        }
        a.check(self.duration.as_millis() as u64).map_err(|_| {
            format!(
                "the adaptive minimum ({} ms) must not exceed the maximum ({}), and the precision must be above 0 and at most 50%",
                a.min_duration_ms,
                crate::units::format_duration(self.duration)
            )
        })
    }

    /// Checks, against this host, what [`ProbeSpec::validate`] cannot:
    /// that the congestion control algorithm is available here, so that a
    /// typo fails at once instead of after the responder has agreed the
    /// test. A host whose list cannot be read is not blocked.
    pub fn check_local(&self) -> Result<(), SpecError> {
        // A CPU this process cannot use would leave the threads unpinned,
        // figures taken as pinned (README: a bad -A is a usage error).
        if let (Some(cpu), Some(allowed)) = (self.affinity, crate::host::allowed_cpus()) {
            if !allowed.contains(&cpu) {
                return Err(SpecError(format!(
                    "-A {cpu}: this host has no CPU {cpu} that pathprobe may use (it may use {})",
                    crate::host::format_cpu_list(&allowed)
                )));
            }
        }
        let (Some(name), Some(available)) = (&self.congestion, available_congestion()) else {
            return Ok(());
        };
        match congestion_unavailable(name, &available) {
            Some(m) => Err(SpecError(m)),
            None => Ok(()),
        }
    }

    /// The request sent to the responder.
    pub fn to_request(&self) -> TestRequest {
        TestRequest {
            kind: self.kind,
            direction: self.direction,
            duration_ms: self.duration.as_millis() as u64,
            omit_ms: self.omit.as_millis() as u64,
            streams: self.streams,
            bitrate: self.effective_bitrate(),
            length: self.effective_length(),
            window: self.window,
            congestion: self.congestion.clone(),
            tos: self.tos,
            affinity: self.remote_affinity,
            interval_ms: self.interval.map(|i| i.as_millis() as u64),
            no_offload: self.no_offload,
            rr: crate::kinds::of(self.kind).effective_rr(self.length, self.rr),
            adaptive: self.adaptive,
        }
    }
}

/// Where Linux lists the congestion control algorithms loaded now.
pub const AVAILABLE_CONGESTION_PATH: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";

/// The congestion control algorithms of mainline Linux (net/ipv4/tcp_*.c)
/// and the common out-of-tree BBR versions: a name outside this list and
/// not loaded on the host is taken for a typo rather than a module to load.
pub const KNOWN_CONGESTION: &[&str] = &[
    "bbr",
    "bbr2",
    "bbr3",
    "bic",
    "cdg",
    "cubic",
    "dctcp",
    "highspeed",
    "htcp",
    "hybla",
    "illinois",
    "lp",
    "nv",
    "prague",
    "reno",
    "scalable",
    "vegas",
    "veno",
    "westwood",
    "yeah",
];

/// The algorithms available on this host, or `None` when the list cannot
/// be read (no /proc, another OS): then nothing is checked.
pub fn available_congestion() -> Option<Vec<String>> {
    std::fs::read_to_string(AVAILABLE_CONGESTION_PATH)
        .ok()
        .map(|text| parse_congestion_list(&text))
}

/// Parses the kernel's space-separated list.
pub fn parse_congestion_list(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// Why `name` cannot be used on a host offering `available`, or `None`.
pub fn congestion_unavailable(name: &str, available: &[String]) -> Option<String> {
    if available.iter().any(|a| a == name) {
        return None;
    }
    Some(format!(
        "congestion control {name:?} is not available on this host (available: {}); pick one of those, or load its module first (modprobe tcp_{name})",
        available.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_puts_senders_first_for_bidir() {
        use FlowDirection::*;
        assert_eq!(
            stream_layout(Direction::Bidir, 2),
            vec![Send, Send, Receive, Receive]
        );
        assert_eq!(stream_layout(Direction::Receive, 1), vec![Receive]);
        assert_eq!(stream_layout(Direction::Send, 3).len(), 3);
    }

    #[test]
    fn defaults_follow_the_kind() {
        let tcp = ProbeSpec::default();
        assert_eq!(tcp.effective_length(), 128 * 1024);
        assert_eq!(tcp.effective_bitrate(), 0);
        let udp = ProbeSpec {
            kind: Kind::Udp,
            ..ProbeSpec::default()
        };
        assert_eq!(udp.effective_length(), 1448);
        assert_eq!(udp.effective_bitrate(), 1_000_000);
        assert_eq!(udp.to_request().bitrate, 1_000_000);
    }

    #[test]
    fn unavailable_congestion_names_the_available_ones() {
        let list = parse_congestion_list("reno cubic\n");
        assert_eq!(list, ["reno", "cubic"]);
        assert_eq!(congestion_unavailable("cubic", &list), None);
        let m = congestion_unavailable("bogus", &list).unwrap();
        assert!(
            m.starts_with(
                "congestion control \"bogus\" is not available on this host (available: reno, cubic)"
            ),
            "{m}"
        );
        // This host's own list: whatever it holds, the first entry passes
        // and a made-up name fails.
        if let Some(here) = available_congestion() {
            let ok = ProbeSpec {
                congestion: here.first().cloned(),
                ..ProbeSpec::default()
            };
            assert_eq!(ok.check_local(), Ok(()));
            let bad = ProbeSpec {
                congestion: Some("bogus".into()),
                ..ProbeSpec::default()
            };
            assert!(bad.check_local().unwrap_err().0.contains("not available"));
        }
        assert_eq!(ProbeSpec::default().check_local(), Ok(()));
    }

    #[test]
    fn validation_explains() {
        let bad = ProbeSpec {
            streams: 0,
            ..ProbeSpec::default()
        };
        assert!(bad.validate().unwrap_err().0.contains("between 1 and 128"));
        let bad = ProbeSpec {
            kind: Kind::Udp,
            length: Some(10),
            ..ProbeSpec::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .0
            .contains("UDP datagram length"));
        let bad = ProbeSpec {
            congestion: Some("cub ic".into()),
            ..ProbeSpec::default()
        };
        assert!(bad.validate().is_err());
        let bad = ProbeSpec {
            duration: Duration::ZERO,
            ..ProbeSpec::default()
        };
        assert!(bad.validate().is_err());
        assert!(ProbeSpec::default().validate().is_ok());
    }

    #[test]
    fn tcp_crr_takes_netperfs_sizes_one_transaction_at_a_time() {
        let crr = ProbeSpec {
            kind: Kind::TcpCrr,
            ..ProbeSpec::default()
        };
        assert_eq!(crr.validate(), Ok(()));
        let req = crr.to_request();
        assert_eq!(req.rr, Some(DEFAULT_RR));
        assert_eq!((req.length, req.bitrate), (1, 0));
        let sized = ProbeSpec {
            rr: Some(RrParams {
                request_size: 64,
                response_size: 1500,
                ..DEFAULT_RR
            }),
            ..crr.clone()
        };
        assert_eq!(sized.to_request().length, 1500);
        let cases = [
            (
                ProbeSpec {
                    rr: Some(RrParams {
                        burst: 4,
                        ..DEFAULT_RR
                    }),
                    ..crr.clone()
                },
                "no --burst",
            ),
            (
                ProbeSpec {
                    streams: 2,
                    ..crr.clone()
                },
                "one transaction at a time",
            ),
            (
                ProbeSpec {
                    direction: Direction::Receive,
                    ..crr.clone()
                },
                "one transaction at a time",
            ),
            (
                ProbeSpec {
                    interval: Some(Duration::from_secs(1)),
                    ..crr.clone()
                },
                "interval reports",
            ),
            (
                ProbeSpec {
                    rr: Some(RrParams {
                        response_size: 0,
                        ..DEFAULT_RR
                    }),
                    ..crr.clone()
                },
                "between 1 byte and 16 MiB",
            ),
        ];
        for (spec, why) in cases {
            let e = spec.validate().unwrap_err().0;
            assert!(e.contains(why), "{e}");
        }
    }
}
