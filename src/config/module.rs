//! Modules: named probe recipes, as in blackbox_exporter. A target lists the
//! modules to run against it; each module turns into one or two
//! [`ProbeSpec`]s.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::quantity;
use crate::auth::Secret;
use crate::probe::{Direction, Kind, ProbeSpec, Wire};

/// What a module measures, and against whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModuleKind {
    /// TCP throughput to a remote responder.
    Tcp,
    /// UDP throughput, loss and jitter to a remote responder.
    Udp,
    /// TCP over 127.0.0.1 (or ::1) against a responder inside the process:
    /// the host's own network stack, with no wire involved.
    LoopbackTcp,
    /// UDP over loopback, as [`ModuleKind::LoopbackTcp`].
    LoopbackUdp,
    /// Request/response transactions on one TCP connection to a remote
    /// responder: latency percentiles, transactions/s, CPU per transaction.
    TcpRr,
    /// Isochronous UDP round trips to a remote responder (irtt's): RTT
    /// percentiles, IPDV and loss in each direction.
    UdpRr,
    /// A new TCP connection per request/response transaction to a remote
    /// responder (netperf's TCP_CRR): connect time and transaction latency
    /// percentiles, connections/s, failures by reason.
    TcpCrr,
    /// TCP throughput to a stock iperf3 server (`iperf3 -s`), through
    /// iperf3's protocol, on the module's `port` (default 5201).
    Iperf3Tcp,
    /// UDP throughput, loss and jitter to a stock iperf3 server.
    Iperf3Udp,
}

impl ModuleKind {
    /// The transport the probe engine runs.
    pub fn transport(self) -> Kind {
        match self {
            ModuleKind::Tcp | ModuleKind::LoopbackTcp | ModuleKind::Iperf3Tcp => Kind::Tcp,
            ModuleKind::Udp | ModuleKind::LoopbackUdp | ModuleKind::Iperf3Udp => Kind::Udp,
            ModuleKind::TcpRr => Kind::TcpRr,
            ModuleKind::UdpRr => Kind::UdpRr,
            ModuleKind::TcpCrr => Kind::TcpCrr,
        }
    }

    /// Whether the peer is a stock iperf3 server.
    pub fn is_iperf3(self) -> bool {
        matches!(self, ModuleKind::Iperf3Tcp | ModuleKind::Iperf3Udp)
    }

    pub fn is_loopback(self) -> bool {
        matches!(self, ModuleKind::LoopbackTcp | ModuleKind::LoopbackUdp)
    }

    /// Every kind, in the order the docs list them.
    pub const ALL: [ModuleKind; 9] = [
        ModuleKind::Tcp,
        ModuleKind::Udp,
        ModuleKind::LoopbackTcp,
        ModuleKind::LoopbackUdp,
        ModuleKind::TcpRr,
        ModuleKind::UdpRr,
        ModuleKind::TcpCrr,
        ModuleKind::Iperf3Tcp,
        ModuleKind::Iperf3Udp,
    ];

    /// The name as written in the config, for the `kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ModuleKind::Tcp => "tcp",
            ModuleKind::Udp => "udp",
            ModuleKind::LoopbackTcp => "loopback_tcp",
            ModuleKind::LoopbackUdp => "loopback_udp",
            ModuleKind::TcpRr => "tcp_rr",
            ModuleKind::UdpRr => "udp_rr",
            ModuleKind::TcpCrr => "tcp_crr",
            ModuleKind::Iperf3Tcp => "iperf3_tcp",
            ModuleKind::Iperf3Udp => "iperf3_udp",
        }
    }
}

/// Which way data moves, seen from the prober.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModuleDirection {
    /// The prober sends (iperf3's default).
    #[default]
    Send,
    /// The responder sends (iperf3's `-R`).
    Receive,
    /// Send, then receive: two runs one after the other, so each direction
    /// has the path to itself and is reported on its own.
    Both,
    /// Both directions at once (iperf3's `--bidir`).
    Bidir,
}

/// Extra time a run gets beyond omit + duration before it is abandoned:
/// enough for connecting, the control exchange and a slow results report.
pub const TIMEOUT_MARGIN: Duration = Duration::from_secs(15);

/// One probe recipe. Missing keys take the probe engine's defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Module {
    pub kind: ModuleKind,
    #[serde(default = "default_duration", deserialize_with = "quantity::duration")]
    pub duration: Duration,
    #[serde(default, deserialize_with = "quantity::duration")]
    pub omit: Duration,
    #[serde(default = "default_streams")]
    pub streams: u32,
    #[serde(default)]
    pub direction: ModuleDirection,
    /// Bits per second per direction over all streams; 0 is unpaced; `None`
    /// takes the kind's default (unpaced TCP, 1 Mbit/s UDP).
    #[serde(default, deserialize_with = "quantity::opt_rate")]
    pub bitrate: Option<u64>,
    /// TCP write size or UDP payload size.
    #[serde(default, deserialize_with = "quantity::opt_size_u32")]
    pub length: Option<u32>,
    /// Socket buffer size (SO_SNDBUF/SO_RCVBUF) on both ends.
    #[serde(default, deserialize_with = "quantity::opt_size_u32")]
    pub window: Option<u32>,
    pub congestion: Option<String>,
    pub tos: Option<u8>,
    /// CPU for the local data threads.
    pub affinity: Option<usize>,
    /// CPU for the responder's data threads.
    pub remote_affinity: Option<usize>,
    /// Local address to probe from, on hosts with several.
    pub bind: Option<IpAddr>,
    /// Bound on connecting and on each control exchange.
    #[serde(
        default = "default_connect_timeout",
        deserialize_with = "quantity::duration"
    )]
    pub connect_timeout: Duration,
    /// Hard deadline of one run; `None` means omit + duration + 15s.
    #[serde(default, deserialize_with = "quantity::opt_duration")]
    pub timeout: Option<Duration>,
    /// Loopback kinds only: use ::1 instead of 127.0.0.1.
    #[serde(default)]
    pub ipv6: bool,
    /// File holding the shared secret of the responders this module
    /// probes; relative paths are taken from the config file's directory.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// The secret read from `secret_file` at load (and at every reload).
    #[serde(skip)]
    pub secret: Option<Secret>,
    /// UDP: GSO and GRO where the kernel has them; `false` uses sendmmsg
    /// and recvmmsg on both ends, as before offload (docs/UDP.md).
    #[serde(default = "default_offload")]
    pub offload: bool,
    /// tcp_rr only: request and response sizes (default 1 byte each),
    /// transactions in flight (default 1) and TCP_NODELAY (default on).
    #[serde(default, deserialize_with = "quantity::opt_size_u32")]
    pub request_size: Option<u32>,
    #[serde(default, deserialize_with = "quantity::opt_size_u32")]
    pub response_size: Option<u32>,
    #[serde(default)]
    pub burst: Option<u32>,
    #[serde(default)]
    pub nodelay: Option<bool>,
    /// iperf3 kinds only: the iperf3 server's port (default 5201); the
    /// target's own port is its pathprobe responder's.
    #[serde(default)]
    pub port: Option<u16>,
    /// udp_rr only: time between requests (default 10ms, as irtt); the
    /// datagram size is `length` (default 64 bytes).
    #[serde(default, deserialize_with = "quantity::opt_duration")]
    pub send_interval: Option<Duration>,
}

fn default_duration() -> Duration {
    crate::probe::spec::DEFAULT_DURATION
}
fn default_streams() -> u32 {
    1
}
fn default_offload() -> bool {
    true
}
fn default_connect_timeout() -> Duration {
    ProbeSpec::default().connect_timeout
}

impl Module {
    /// A module of `kind` with every other key at its default.
    pub fn new(kind: ModuleKind) -> Module {
        Module {
            kind,
            duration: default_duration(),
            omit: Duration::ZERO,
            streams: default_streams(),
            direction: ModuleDirection::Send,
            bitrate: None,
            length: None,
            window: None,
            congestion: None,
            tos: None,
            affinity: None,
            remote_affinity: None,
            bind: None,
            connect_timeout: default_connect_timeout(),
            timeout: None,
            ipv6: false,
            secret_file: None,
            secret: None,
            offload: default_offload(),
            request_size: None,
            response_size: None,
            burst: None,
            nodelay: None,
            port: None,
            send_interval: None,
        }
    }

    /// The request/response shape of a `tcp_rr` or `tcp_crr` module, its
    /// keys over the engine's defaults; `None` for other kinds.
    pub fn rr(&self) -> Option<crate::probe::spec::RrParams> {
        if self.kind == ModuleKind::UdpRr {
            // Sizes come from `length` (ProbeSpec::effective_udp_rr).
            return Some(crate::probe::spec::RrParams {
                request_size: 0,
                response_size: 0,
                burst: 1,
                nodelay: false,
                interval_us: self.send_interval.map_or(0, |i| i.as_micros() as u64),
            });
        }
        let d = crate::probe::spec::DEFAULT_RR;
        matches!(self.kind, ModuleKind::TcpRr | ModuleKind::TcpCrr).then(|| {
            crate::probe::spec::RrParams {
                request_size: self.request_size.unwrap_or(d.request_size),
                response_size: self.response_size.unwrap_or(d.response_size),
                burst: self.burst.unwrap_or(d.burst),
                nodelay: self.nodelay.unwrap_or(d.nodelay),
                interval_us: 0,
            }
        })
    }

    pub fn is_loopback(&self) -> bool {
        self.kind.is_loopback()
    }

    /// The hard deadline of one run (each of the two runs for `both`).
    pub fn effective_timeout(&self) -> Duration {
        self.timeout
            .unwrap_or(self.omit + self.duration + TIMEOUT_MARGIN)
    }

    /// The runs this module makes, in order: one per direction, two for
    /// `both` (send, then receive). The direction is repeated beside each
    /// spec so callers can label results without looking inside.
    pub fn specs(&self) -> Vec<(Direction, ProbeSpec)> {
        let directions: &[Direction] = match self.direction {
            ModuleDirection::Send => &[Direction::Send],
            ModuleDirection::Receive => &[Direction::Receive],
            ModuleDirection::Both => &[Direction::Send, Direction::Receive],
            ModuleDirection::Bidir => &[Direction::Bidir],
        };
        directions
            .iter()
            .map(|&direction| (direction, self.spec(direction)))
            .collect()
    }

    fn spec(&self, direction: Direction) -> ProbeSpec {
        ProbeSpec {
            kind: self.kind.transport(),
            direction,
            duration: self.duration,
            omit: self.omit,
            streams: self.streams,
            bitrate: self.bitrate,
            length: self.length,
            window: self.window,
            congestion: self.congestion.clone(),
            tos: self.tos,
            bind: self.bind,
            // A remote module takes the family of the target's address.
            family: None,
            affinity: self.affinity,
            remote_affinity: self.remote_affinity,
            connect_timeout: self.connect_timeout,
            secret: self.secret.clone(),
            no_offload: !self.offload,
            rr: self.rr(),
            wire: if self.kind.is_iperf3() {
                Wire::Iperf3
            } else {
                Wire::Pathprobe
            },
            port: self
                .kind
                .is_iperf3()
                .then(|| self.port.unwrap_or(crate::protocol::iperf3::IPERF3_PORT)),
            ..ProbeSpec::default()
        }
    }

    /// Checks what serde cannot: values that parse but cannot run. Returns
    /// the offending key (relative to the module) and what is wrong.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        if self.streams == 0 || self.streams > 128 {
            return Err((
                "streams",
                format!("must be between 1 and 128, got {}", self.streams),
            ));
        }
        if let Some(timeout) = self.timeout {
            let needed = self.omit + self.duration;
            if timeout <= needed {
                return Err((
                    "timeout",
                    format!(
                        "{} leaves no time to run omit ({}) + duration ({}); set it above {} or leave it out for omit + duration + 15s",
                        fmt(timeout),
                        fmt(self.omit),
                        fmt(self.duration),
                        fmt(needed)
                    ),
                ));
            }
        }
        if self.ipv6 && !self.is_loopback() {
            return Err((
                "ipv6",
                format!(
                    "applies to loopback kinds only; a {} probe uses the family of the target's address",
                    self.kind.as_str()
                ),
            ));
        }
        if self.secret_file.is_some() && self.is_loopback() {
            return Err((
                "secret_file",
                "does not apply to loopback kinds, whose responder lives inside this process"
                    .to_string(),
            ));
        }
        let rr_keys = [
            ("request_size", self.request_size.is_some()),
            ("response_size", self.response_size.is_some()),
            ("burst", self.burst.is_some()),
            ("nodelay", self.nodelay.is_some()),
        ];
        if let Some((key, _)) = rr_keys.iter().find(|(_, set)| *set) {
            if !matches!(self.kind, ModuleKind::TcpRr | ModuleKind::TcpCrr) {
                return Err((
                    key,
                    format!(
                        "applies to tcp_rr and tcp_crr modules only, not {}",
                        self.kind.as_str()
                    ),
                ));
            }
        }
        if self.kind == ModuleKind::TcpRr
            && (self.streams != 1 || self.direction != ModuleDirection::Send)
        {
            return Err((
                "kind",
                "tcp_rr runs on one connection: leave streams and direction at their defaults"
                    .to_string(),
            ));
        }
        if self.kind == ModuleKind::TcpCrr {
            if self.burst.is_some() {
                return Err((
                    "burst",
                    "applies to tcp_rr only: tcp_crr opens one connection per transaction, one at a time"
                        .to_string(),
                ));
            }
            if self.streams != 1 || self.direction != ModuleDirection::Send {
                return Err((
                    "kind",
                    "tcp_crr runs one transaction at a time: leave streams and direction at their defaults"
                        .to_string(),
                ));
            }
        }
        if self.send_interval.is_some() && self.kind != ModuleKind::UdpRr {
            return Err((
                "send_interval",
                format!("applies to udp_rr modules only, not {}", self.kind.as_str()),
            ));
        }
        if self.kind == ModuleKind::UdpRr
            && (self.streams != 1 || self.direction != ModuleDirection::Send)
        {
            return Err((
                "kind",
                "udp_rr runs one flow of round trips: leave streams and direction at their defaults"
                    .to_string(),
            ));
        }
        if self.port.is_some() && !self.kind.is_iperf3() {
            return Err((
                "port",
                "applies to iperf3 kinds only; a responder's port is the target's".to_string(),
            ));
        }
        if self.kind.is_iperf3() {
            if self.secret_file.is_some() {
                return Err((
                    "secret_file",
                    "does not apply to iperf3 kinds: a stock iperf3 server knows no pathprobe secret".to_string(),
                ));
            }
            if self.remote_affinity.is_some() {
                return Err((
                    "remote_affinity",
                    "does not apply to iperf3 kinds: a stock iperf3 server cannot be pinned from the prober".to_string(),
                ));
            }
            if self.duration.subsec_nanos() != 0 || self.omit.subsec_nanos() != 0 {
                return Err((
                    "duration",
                    "iperf3 kinds take duration and omit in whole seconds".to_string(),
                ));
            }
        }
        if self.bind.is_some() && self.is_loopback() {
            return Err(("bind", "does not apply to loopback kinds".to_string()));
        }
        // The engine's own check covers lengths, durations and congestion
        // names; run it on the first spec, as all specs share those values.
        if let Some((_, spec)) = self.specs().first() {
            spec.validate().map_err(|e| ("", e.0))?;
        }
        Ok(())
    }
}

fn fmt(d: Duration) -> String {
    crate::units::format_duration(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The docs' lists of kinds drifted from the code once (issue 25):
    /// README's module bullet and METRICS.md's `kind` label row must name
    /// every kind the config accepts.
    #[test]
    fn docs_name_every_module_kind() {
        // A new variant fails to compile here until ALL (and so this
        // test) knows it.
        for k in ModuleKind::ALL {
            match k {
                ModuleKind::Tcp
                | ModuleKind::Udp
                | ModuleKind::LoopbackTcp
                | ModuleKind::LoopbackUdp
                | ModuleKind::TcpRr
                | ModuleKind::UdpRr
                | ModuleKind::TcpCrr
                | ModuleKind::Iperf3Tcp
                | ModuleKind::Iperf3Udp => {}
            }
            let parsed: ModuleKind = serde_yaml::from_str(k.as_str()).unwrap();
            assert_eq!(parsed, k);
        }
        // Read at run time, not embedded: the image's build stage copies no docs.
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
            .expect("README.md");
        let bullet = readme
            .split("\n- ")
            .find(|b| b.starts_with("**modules** are named probe recipes"))
            .expect("README's modules bullet");
        let metrics =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/METRICS.md"))
                .expect("docs/METRICS.md");
        let row = metrics
            .lines()
            .find(|l| l.starts_with("| `kind` |"))
            .expect("METRICS.md's kind label row");
        for k in ModuleKind::ALL {
            let name = format!("`{}`", k.as_str());
            assert!(
                bullet.contains(&name),
                "README's modules bullet lacks {name}"
            );
            assert!(row.contains(&name), "METRICS.md's kind row lacks {name}");
        }
    }

    #[test]
    fn iperf3_kinds_speak_iperf3_on_their_own_port() {
        let m: Module = serde_yaml::from_str("kind: iperf3_udp\nbitrate: 10m").unwrap();
        let (_, spec) = &m.specs()[0];
        assert_eq!(
            (spec.kind, spec.wire, spec.port),
            (Kind::Udp, Wire::Iperf3, Some(5201))
        );
        let m: Module = serde_yaml::from_str("kind: iperf3_tcp\nport: 7000").unwrap();
        assert_eq!(m.specs()[0].1.port, Some(7000));
        assert!(m.check().is_ok());
        let native: Module = serde_yaml::from_str("kind: tcp").unwrap();
        assert_eq!(
            (native.specs()[0].1.wire, native.specs()[0].1.port),
            (Wire::Pathprobe, None)
        );
        for bad in [
            "kind: tcp\nport: 5201",
            "kind: iperf3_tcp\nremote_affinity: 1",
            "kind: iperf3_tcp\nduration: 1500ms",
        ] {
            let m: Module = serde_yaml::from_str(bad).unwrap();
            assert!(m.check().is_err(), "{bad}");
        }
    }

    #[test]
    fn both_runs_send_then_receive() {
        let m = Module {
            direction: ModuleDirection::Both,
            bitrate: Some(100_000_000),
            streams: 2,
            ..Module::new(ModuleKind::Udp)
        };
        let specs = m.specs();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].0, Direction::Send);
        assert_eq!(specs[0].1.direction, Direction::Send);
        assert_eq!(specs[1].0, Direction::Receive);
        assert_eq!(specs[1].1.direction, Direction::Receive);
        for (_, s) in &specs {
            assert_eq!(s.kind, Kind::Udp);
            assert_eq!(s.bitrate, Some(100_000_000));
            assert_eq!(s.streams, 2);
            assert_eq!(s.duration, Duration::from_secs(5));
        }
    }

    #[test]
    fn bidir_is_one_run_and_loopback_maps_to_its_transport() {
        let m = Module {
            direction: ModuleDirection::Bidir,
            ..Module::new(ModuleKind::LoopbackTcp)
        };
        let specs = m.specs();
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].0, Direction::Bidir);
        assert_eq!(specs[0].1.kind, Kind::Tcp);
        assert!(m.is_loopback());
        assert!(!Module::new(ModuleKind::Udp).is_loopback());
        assert_eq!(ModuleKind::LoopbackUdp.transport(), Kind::Udp);
    }

    #[test]
    fn spec_carries_every_setting() {
        let m = Module {
            omit: Duration::from_secs(1),
            length: Some(9000),
            window: Some(4 << 20),
            congestion: Some("bbr".into()),
            tos: Some(0x10),
            affinity: Some(2),
            remote_affinity: Some(3),
            bind: Some("192.0.2.1".parse().unwrap()),
            connect_timeout: Duration::from_secs(2),
            offload: false,
            ..Module::new(ModuleKind::Tcp)
        };
        let (_, s) = m.specs().remove(0);
        assert!(s.no_offload);
        assert!(!Module::new(ModuleKind::Udp).specs()[0].1.no_offload);
        assert_eq!(s.omit, Duration::from_secs(1));
        assert_eq!(s.length, Some(9000));
        assert_eq!(s.window, Some(4 << 20));
        assert_eq!(s.congestion.as_deref(), Some("bbr"));
        assert_eq!(s.tos, Some(0x10));
        assert_eq!(s.affinity, Some(2));
        assert_eq!(s.remote_affinity, Some(3));
        assert_eq!(s.bind, Some("192.0.2.1".parse().unwrap()));
        assert_eq!(s.connect_timeout, Duration::from_secs(2));
    }

    #[test]
    fn timeout_defaults_to_run_time_plus_margin() {
        let m = Module {
            omit: Duration::from_secs(2),
            ..Module::new(ModuleKind::Tcp)
        };
        assert_eq!(m.effective_timeout(), Duration::from_secs(22));
        let m = Module {
            timeout: Some(Duration::from_secs(9)),
            ..m
        };
        assert_eq!(m.effective_timeout(), Duration::from_secs(9));
    }

    #[test]
    fn checks_name_the_key() {
        let m = Module {
            streams: 0,
            ..Module::new(ModuleKind::Tcp)
        };
        assert_eq!(
            m.check().unwrap_err(),
            ("streams", "must be between 1 and 128, got 0".to_string())
        );
        let m = Module {
            omit: Duration::from_secs(10),
            timeout: Some(Duration::from_secs(10)),
            ..Module::new(ModuleKind::Tcp)
        };
        assert_eq!(m.check().unwrap_err().0, "timeout");
        let m = Module {
            ipv6: true,
            ..Module::new(ModuleKind::Udp)
        };
        assert_eq!(m.check().unwrap_err().0, "ipv6");
        let m = Module {
            length: Some(4),
            ..Module::new(ModuleKind::LoopbackUdp)
        };
        assert!(m.check().unwrap_err().1.contains("UDP datagram length"));
        assert_eq!(Module::new(ModuleKind::LoopbackUdp).check(), Ok(()));
    }

    #[test]
    fn a_tcp_rr_module_carries_its_shape_and_other_kinds_refuse_its_keys() {
        let m: Module = serde_yaml::from_str(
            "kind: tcp_rr\nrequest_size: 32k\nresponse_size: 1\nburst: 6\nnodelay: false\n",
        )
        .unwrap();
        assert_eq!(m.check(), Ok(()));
        let specs = m.specs();
        assert_eq!(specs.len(), 1);
        let spec = &specs[0].1;
        assert_eq!(spec.kind, Kind::TcpRr);
        let rr = spec.rr.unwrap();
        assert_eq!(
            (rr.request_size, rr.response_size, rr.burst, rr.nodelay),
            (32768, 1, 6, false)
        );
        let req = spec.to_request();
        assert_eq!(req.length, 32768);
        assert_eq!(req.rr, Some(rr));
        // Defaults: 1-byte messages, one in flight, Nagle off.
        let d = Module::new(ModuleKind::TcpRr).specs()[0].1.effective_rr();
        assert_eq!(d, crate::probe::spec::DEFAULT_RR);
        let tcp: Module = serde_yaml::from_str("kind: tcp\nburst: 4\n").unwrap();
        assert_eq!(tcp.check().unwrap_err().0, "burst");
        let multi: Module = serde_yaml::from_str("kind: tcp_rr\nstreams: 2\n").unwrap();
        assert!(multi.check().is_err());
    }

    #[test]
    fn a_tcp_crr_module_takes_message_sizes_but_no_burst_and_runs_one_stream() {
        let m: Module =
            serde_yaml::from_str("kind: tcp_crr\nrequest_size: 100\nresponse_size: 2k\n").unwrap();
        assert_eq!(m.check(), Ok(()));
        let spec = &m.specs()[0].1;
        assert_eq!(spec.kind, Kind::TcpCrr);
        let req = spec.to_request();
        let rr = req.rr.unwrap();
        assert_eq!(
            (rr.request_size, rr.response_size, rr.burst),
            (100, 2048, 1)
        );
        assert!(rr.nodelay);
        assert_eq!(req.length, 2048);
        assert_eq!(m.kind.as_str(), "tcp_crr");
        let burst: Module = serde_yaml::from_str("kind: tcp_crr\nburst: 2\n").unwrap();
        let (key, why) = burst.check().unwrap_err();
        assert_eq!(key, "burst");
        assert!(why.contains("one connection per transaction"), "{why}");
        for bad in ["streams: 2", "direction: both", "direction: receive"] {
            let m: Module = serde_yaml::from_str(&format!("kind: tcp_crr\n{bad}\n")).unwrap();
            assert_eq!(m.check().unwrap_err().0, "kind", "{bad}");
        }
        let zero: Module = serde_yaml::from_str("kind: tcp_crr\nrequest_size: 0\n").unwrap();
        assert!(zero.check().unwrap_err().1.contains("between 1 byte"));
        let udp: Module = serde_yaml::from_str("kind: udp\nrequest_size: 4\n").unwrap();
        assert!(udp.check().unwrap_err().1.contains("tcp_crr"));
    }
}
