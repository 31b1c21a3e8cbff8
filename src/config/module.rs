//! Modules: named probe recipes, as in blackbox_exporter. A target lists the
//! modules to run against it; each module turns into one or two
//! [`ProbeSpec`]s.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::quantity;
use crate::auth::Secret;
use crate::kinds::kind::RrShape;
use crate::kinds::registry::{by_module_name, module_names, Via};
use crate::probe::{Direction, Kind, ProbeSpec, Wire};

/// What a module measures, and against whom: a probe kind of the registry
/// (`tcp`, `udp`, `tcp_rr`, `udp_rr`, `tcp_crr`) against a remote
/// responder, or the kinds a stock iperf3 runs as `loopback_<kind>` (the
/// host's own network stack, against a responder inside the process: no
/// wire involved) and `iperf3_<kind>` (against `iperf3 -s`, on the
/// module's `port`, default 5201). Its names come from the registry
/// (`kinds::registry::module_names`), so a new kind needs no edit here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModuleKind {
    pub kind: Kind,
    pub via: Via,
}

impl<'de> Deserialize<'de> for ModuleKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A visitor, as a derived enum's, so that an unknown name is
        // reported where it is written (line, column and key path).
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = ModuleKind;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a module kind")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<ModuleKind, E> {
                ModuleKind::from_name(name).ok_or_else(|| {
                    static EXPECTED: std::sync::OnceLock<Vec<&'static str>> =
                        std::sync::OnceLock::new();
                    let expected =
                        EXPECTED.get_or_init(|| module_names().iter().map(|n| n.0).collect());
                    E::unknown_variant(name, expected)
                })
            }
        }
        d.deserialize_str(Name)
    }
}

impl ModuleKind {
    /// The module kind named `name` in the config.
    pub fn from_name(name: &str) -> Option<ModuleKind> {
        by_module_name(name).map(|(k, via)| ModuleKind {
            kind: k.kind(),
            via,
        })
    }

    /// The transport the probe engine runs.
    pub fn transport(self) -> Kind {
        self.kind
    }

    /// Whether the peer is a stock iperf3 server.
    pub fn is_iperf3(self) -> bool {
        self.via == Via::Iperf3
    }

    pub fn is_loopback(self) -> bool {
        self.via == Via::Loopback
    }

    /// Every kind, in the order the docs list them.
    pub fn all() -> impl Iterator<Item = ModuleKind> {
        module_names()
            .iter()
            .map(|&(_, kind, via)| ModuleKind { kind, via })
    }

    /// The name as written in the config, for the `kind` label.
    pub fn as_str(self) -> &'static str {
        module_names()
            .iter()
            .find(|&&(_, k, via)| (k, via) == (self.kind, self.via))
            .map_or("unknown", |n| n.0)
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
    /// The measured time; `auto` reads as the module's
    /// maximum once resolved ([`Module::resolve_auto`]), with `adaptive`.
    #[serde(
        default = "default_duration",
        deserialize_with = "quantity::duration_or_auto"
    )]
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
    /// `duration: auto` only: the shortest and longest probe (default
    /// 0.5 s and 5 s) and the precision to reach (default 1%).
    #[serde(default, deserialize_with = "quantity::opt_duration")]
    pub min_duration: Option<Duration>,
    #[serde(default, deserialize_with = "quantity::opt_duration")]
    pub max_duration: Option<Duration>,
    #[serde(default, deserialize_with = "quantity::opt_precision")]
    pub precision: Option<f64>,
    /// `duration: auto` only: what one run is expected to take, which the
    /// mesh plan sizes its slot from: a key of the
    /// shared config, so that every host computes the same plan. Between
    /// `min_duration` and `max_duration`; by default
    /// [`default_expected_duration`]. A run still going at its slot's end
    /// is cut and reported not converged.
    #[serde(default, deserialize_with = "quantity::opt_duration")]
    pub expected_duration: Option<Duration>,
    /// Set by [`Module::resolve_auto`] for `duration: auto`.
    #[serde(skip)]
    pub adaptive: Option<crate::protocol::adaptive::AdaptiveRequest>,
}

fn default_duration() -> Duration {
    crate::probe::spec::DEFAULT_DURATION
}

/// What an adaptive run is expected to take when `expected_duration` is
/// not set: twice the minimum at a precision of 1%, and four times that
/// per halving of the precision (the rule's interval narrows as the square
/// root of the time), within [`Module::planned_run`]'s bounds. With the
/// defaults (0.5 s, 1%) that is 1 s: the adaptive lab's converged TCP runs
/// took 0.6 to 1.6 s at 20 to 1,000 Mbit/s (docs/ADAPTIVE.md), and one
/// that needs longer takes the slot's spare set-up time, or is cut.
pub fn default_expected_duration(min_duration: Duration, precision: f64) -> Duration {
    let scale = (crate::engine::adaptive::DEFAULT_PRECISION / precision.max(1e-6)).powi(2);
    // A tiny precision or a huge minimum asks for years: saturate rather
    // than overflow (the caller bounds it by the maximum).
    Duration::try_from_secs_f64(min_duration.as_secs_f64() * 2.0 * scale).unwrap_or(Duration::MAX)
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
            min_duration: None,
            max_duration: None,
            precision: None,
            expected_duration: None,
            adaptive: None,
        }
    }

    /// Turns `duration: auto` into the module's maximum and its adaptive
    /// request, so that everything sized from `duration` (timeouts, slots,
    /// time shares) sees the longest the probe may run.
    pub fn resolve_auto(&mut self) {
        if self.duration != quantity::AUTO_DURATION {
            return;
        }
        let max = self
            .max_duration
            .unwrap_or(crate::engine::adaptive::DEFAULT_MAX_DURATION);
        let min = self
            .min_duration
            .unwrap_or(crate::engine::adaptive::DEFAULT_MIN_DURATION)
            .min(max);
        let precision = self
            .precision
            .unwrap_or(crate::engine::adaptive::DEFAULT_PRECISION);
        self.duration = max;
        self.adaptive = Some(crate::protocol::adaptive::AdaptiveRequest {
            min_duration_ms: min.as_millis() as u64,
            precision_ppm: (precision * 1e6).round() as u32,
            receiver_progress: false,
        });
    }

    /// The measured time the mesh plan gives each run of this module (its
    /// slot holds one per run, plus set-up and guard): `omit + duration`
    /// for a fixed module; for an adaptive one its `expected_duration`,
    /// by default [`default_expected_duration`], never above its maximum.
    pub fn planned_run(&self) -> Duration {
        match self.adaptive {
            None => self.omit + self.duration,
            Some(a) => {
                let min = Duration::from_millis(a.min_duration_ms);
                self.expected_duration
                    .unwrap_or_else(|| default_expected_duration(min, a.precision()))
                    .clamp(min.min(self.duration), self.duration)
            }
        }
    }

    /// The measured time a mesh slot holds for this module: a run of
    /// [`Module::planned_run`] per direction (two for `both`).
    pub fn planned_slot_run(&self) -> Duration {
        self.planned_run() * self.specs().len().max(1) as u32
    }

    /// The longest one run of this module takes and, when its rate is
    /// known (`bitrate`, or `path_bits_per_second` for an unpaced one),
    /// the most bytes it moves: an adaptive module is bounded by its
    /// maximum. For the byte budget and the mesh planner.
    pub fn run_bound(&self, path_bits_per_second: Option<u64>) -> (Duration, Option<u64>) {
        let runs = self.specs();
        let time = (self.omit + self.duration) * runs.len() as u32;
        let rate = match self.bitrate {
            Some(b) if b > 0 => Some(b),
            _ => path_bits_per_second,
        };
        let flows: u64 = runs
            .iter()
            .map(|(d, _)| if *d == Direction::Bidir { 2 } else { 1 })
            .sum();
        let bytes = rate.map(|r| {
            ((r as f64 / 8.0) * (self.omit + self.duration).as_secs_f64() * flows as f64) as u64
        });
        (time, bytes)
    }

    /// The request/response shape of a request/response module, its keys
    /// over the engine's defaults; `None` for other kinds.
    pub fn rr(&self) -> Option<crate::probe::spec::RrParams> {
        let d = crate::probe::spec::DEFAULT_RR;
        match crate::kinds::of(self.kind.kind).rr_shape() {
            RrShape::None => None,
            // Sizes come from `length` (ProbeSpec::effective_rr).
            RrShape::Paced => Some(crate::probe::spec::RrParams {
                request_size: 0,
                response_size: 0,
                burst: 1,
                nodelay: false,
                interval_us: self.send_interval.map_or(0, |i| i.as_micros() as u64),
            }),
            RrShape::Sized { .. } => Some(crate::probe::spec::RrParams {
                request_size: self.request_size.unwrap_or(d.request_size),
                response_size: self.response_size.unwrap_or(d.response_size),
                burst: self.burst.unwrap_or(d.burst),
                nodelay: self.nodelay.unwrap_or(d.nodelay),
                interval_us: 0,
            }),
        }
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
            kind: self.kind.kind,
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
            adaptive: self.adaptive,
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
        if let (Some(a), Some(e)) = (self.adaptive, self.expected_duration) {
            let min = Duration::from_millis(a.min_duration_ms);
            if e < min || e > self.duration {
                return Err((
                    "expected_duration",
                    format!(
                        "must be between min_duration ({}) and max_duration ({}), got {}",
                        fmt(min),
                        fmt(self.duration),
                        fmt(e)
                    ),
                ));
            }
        }
        if self.adaptive.is_none() {
            for (key, set) in [
                ("min_duration", self.min_duration.is_some()),
                ("max_duration", self.max_duration.is_some()),
                ("precision", self.precision.is_some()),
                ("expected_duration", self.expected_duration.is_some()),
            ] {
                if set {
                    return Err((key, "applies to duration: auto only".to_string()));
                }
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
        // The keys of a request/response shape: each applies to the kinds
        // whose shape takes it (the registry says which).
        let sized =
            |burst: bool| move |s: RrShape| matches!(s, RrShape::Sized { burst: b } if b || !burst);
        let shape_keys: [ShapeKey; 5] = [
            ("request_size", self.request_size.is_some(), &sized(false)),
            ("response_size", self.response_size.is_some(), &sized(false)),
            ("burst", self.burst.is_some(), &sized(true)),
            ("nodelay", self.nodelay.is_some(), &sized(false)),
            ("send_interval", self.send_interval.is_some(), &|s| {
                s == RrShape::Paced
            }),
        ];
        let kind = crate::kinds::of(self.kind.kind);
        for (key, set, takes) in shape_keys {
            if set && !takes(kind.rr_shape()) {
                let names: Vec<&str> = crate::kinds::registry::KINDS
                    .iter()
                    .filter(|k| takes(k.rr_shape()))
                    .map(|k| k.kind().as_str())
                    .collect();
                // A sized kind refusing one of the sized keys (tcp_crr's
                // burst) says why.
                let why = kind
                    .one_flow()
                    .filter(|_| sized(false)(kind.rr_shape()))
                    .map(|w| format!(", which {w}"))
                    .unwrap_or_default();
                return Err((
                    key,
                    format!(
                        "applies to {} modules only, not {}{why}",
                        names.join(" and "),
                        self.kind.as_str()
                    ),
                ));
            }
        }
        if let Some(why) = kind.one_flow() {
            if self.streams != 1 || self.direction != ModuleDirection::Send {
                return Err((
                    "kind",
                    format!(
                        "{} {why}: leave streams and direction at their defaults",
                        self.kind.as_str()
                    ),
                ));
            }
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

/// A request/response key: its name, whether it is set, and the shapes
/// that take it.
type ShapeKey<'a> = (&'static str, bool, &'a dyn Fn(RrShape) -> bool);

fn fmt(d: Duration) -> String {
    crate::units::format_duration(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The module kinds by their former variants' names, for the tests.
    #[allow(non_upper_case_globals)]
    impl ModuleKind {
        const fn of(kind: Kind, via: Via) -> ModuleKind {
            ModuleKind { kind, via }
        }
        pub const Tcp: ModuleKind = ModuleKind::of(Kind::Tcp, Via::Responder);
        pub const Udp: ModuleKind = ModuleKind::of(Kind::Udp, Via::Responder);
        pub const TcpRr: ModuleKind = ModuleKind::of(Kind::TcpRr, Via::Responder);
        pub const TcpCrr: ModuleKind = ModuleKind::of(Kind::TcpCrr, Via::Responder);
        pub const LoopbackTcp: ModuleKind = ModuleKind::of(Kind::Tcp, Via::Loopback);
        pub const LoopbackUdp: ModuleKind = ModuleKind::of(Kind::Udp, Via::Loopback);
    }

    /// The docs' lists of kinds drifted from the code once:
    /// README's module bullet and METRICS.md's `kind` label row must name
    /// every kind the config accepts.
    #[test]
    fn docs_name_every_module_kind() {
        // Every name the registry gives a module kind, a new kind's too.
        assert!(ModuleKind::all().count() >= 9);
        for k in ModuleKind::all() {
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
        for k in ModuleKind::all() {
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
