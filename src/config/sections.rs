//! The service-wide sections of the configuration: the responder's listen
//! address and caps, the scheduler's pacing, and host metrics. Each type
//! carries its own defaults, so an empty section (or none) means them.

use std::fmt;
use std::net::{Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;

use regex::Regex;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

use super::quantity;
use crate::auth::Secret;
use crate::protocol::DEFAULT_PORT;
use crate::responder::access::AccessList;
use crate::responder::{LimitPolicy, ResponderConfig};

/// `responder:` the server side that peers probe.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResponderSection {
    pub enabled: bool,
    #[serde(deserialize_with = "listen_address")]
    pub listen: SocketAddr,
    #[serde(deserialize_with = "quantity::duration")]
    pub max_duration: Duration,
    pub max_streams: u32,
    /// Bits per second per direction; 0 for no cap.
    #[serde(deserialize_with = "quantity::rate")]
    pub max_bitrate: u64,
    /// Largest TCP write or UDP datagram a peer may ask for; more is refused.
    #[serde(deserialize_with = "quantity::size_u32")]
    pub max_length: u32,
    /// Largest socket buffer a peer may ask for; more is clamped.
    #[serde(deserialize_with = "quantity::size_u32")]
    pub max_window: u32,
    /// `clamp` (run the test cut down to the limits above, and say so) or
    /// `refuse` (refuse it, naming the limit).
    pub limit_policy: LimitPolicy,
    pub max_concurrent_tests: usize,
    /// Tests one client (IPv4 address or IPv6 /64) may run per minute; 0
    /// for no limit.
    pub max_tests_per_client_per_minute: u32,
    /// Payload bytes all tests together may move in any hour; 0 for no
    /// limit.
    #[serde(deserialize_with = "quantity::size")]
    pub max_bytes_per_hour: u64,
    /// Seconds of test slot one client may hold in any hour; 0 for no
    /// limit.
    #[serde(deserialize_with = "quantity::duration")]
    pub max_test_seconds_per_client_per_hour: Duration,
    #[serde(deserialize_with = "quantity::duration")]
    pub idle_timeout: Duration,
    /// Bits per second of UDP the responder sends when no secret is set;
    /// 0 for no cap.
    #[serde(deserialize_with = "quantity::rate")]
    pub max_unauthenticated_udp_bitrate: u64,
    /// Congestion control algorithms a prober may ask for; unset for those
    /// the host allows (tcp_allowed_congestion_control).
    pub allowed_congestion: Option<Vec<String>>,
    /// Whether a prober may set the TOS of this host's data sockets.
    pub allow_tos: bool,
    /// Whether a prober may pin this host's data threads.
    pub allow_affinity: bool,
    /// Connections per second one `tcp_crr` test may open; at least 1.
    pub max_connections_per_second: u32,
    /// Wait for a new connection's first message and for the proof after
    /// the challenge.
    #[serde(deserialize_with = "quantity::duration")]
    pub first_message_timeout: Duration,
    /// File holding the shared secret probers must prove they know;
    /// relative paths are taken from the config file's directory, and
    /// `${CREDENTIALS_DIRECTORY}` is expanded (see [`expand_secret_path`]).
    pub secret_file: Option<PathBuf>,
    /// The secret read from `secret_file` at load (and at every reload).
    #[serde(skip)]
    pub secret: Option<Secret>,
    /// Client networks served; empty serves everyone not denied.
    #[serde(deserialize_with = "networks")]
    pub allow: Vec<IpNet>,
    /// Client networks refused; wins over `allow`.
    #[serde(deserialize_with = "networks")]
    pub deny: Vec<IpNet>,
    /// A second port that answers stock iperf3 clients (`iperf3 -c`),
    /// iperf3's 5201 by convention; off when absent. See docs/SECURITY.md.
    pub iperf3_port: Option<u16>,
    /// TCP data streams without copies (`auto`, `on`, `off`, `receive`,
    /// `send`): sendfile from memory when sending, MSG_TRUNC when
    /// receiving, with `on`; one of the two with `send` or `receive`;
    /// `auto`, the default, is MSG_TRUNC, with sendfile across a link and
    /// write to a peer on this host, as measured (docs/PERFORMANCE.md).
    pub zerocopy: crate::engine::zerocopy::ZeroCopy,
}

impl Default for ResponderSection {
    fn default() -> Self {
        let limits = ResponderConfig::default();
        ResponderSection {
            enabled: true,
            // The IPv6 wildcard also accepts IPv4 (as mapped addresses) on
            // Linux's default bindv6only=0, so one socket serves both.
            listen: SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), DEFAULT_PORT),
            max_duration: limits.max_duration,
            max_streams: limits.max_streams,
            max_bitrate: limits.max_bitrate,
            max_length: limits.max_length,
            max_window: limits.max_window,
            limit_policy: limits.limit_policy,
            max_concurrent_tests: limits.max_concurrent_tests,
            max_tests_per_client_per_minute: limits.max_tests_per_client_per_minute,
            max_bytes_per_hour: limits.max_bytes_per_hour,
            max_test_seconds_per_client_per_hour: limits.max_test_seconds_per_client_per_hour,
            idle_timeout: limits.idle_timeout,
            first_message_timeout: limits.first_message_timeout,
            max_unauthenticated_udp_bitrate: limits.max_unauthenticated_udp_bitrate,
            allowed_congestion: limits.allowed_congestion,
            allow_tos: limits.allow_tos,
            allow_affinity: limits.allow_affinity,
            max_connections_per_second: limits.max_connections_per_second,
            secret_file: None,
            secret: None,
            allow: Vec::new(),
            deny: Vec::new(),
            iperf3_port: None,
            zerocopy: limits.zerocopy,
        }
    }
}

impl ResponderSection {
    pub fn to_responder_config(&self) -> ResponderConfig {
        ResponderConfig {
            max_duration: self.max_duration,
            max_streams: self.max_streams,
            max_bitrate: self.max_bitrate,
            max_length: self.max_length,
            max_window: self.max_window,
            limit_policy: self.limit_policy,
            max_concurrent_tests: self.max_concurrent_tests,
            max_tests_per_client_per_minute: self.max_tests_per_client_per_minute,
            max_bytes_per_hour: self.max_bytes_per_hour,
            max_test_seconds_per_client_per_hour: self.max_test_seconds_per_client_per_hour,
            idle_timeout: self.idle_timeout,
            first_message_timeout: self.first_message_timeout,
            max_unauthenticated_udp_bitrate: self.max_unauthenticated_udp_bitrate,
            allowed_congestion: self.allowed_congestion.clone(),
            allow_tos: self.allow_tos,
            allow_affinity: self.allow_affinity,
            max_connections_per_second: self.max_connections_per_second,
            secret: self.secret.clone(),
            access: AccessList {
                allow: self.allow.clone(),
                deny: self.deny.clone(),
            },
            zerocopy: self.zerocopy,
            ..ResponderConfig::default()
        }
    }

    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        if self.max_concurrent_tests == 0 {
            return Err((
                "max_concurrent_tests",
                "must be at least 1 (set enabled: false to turn the responder off)".into(),
            ));
        }
        if self.max_streams == 0 {
            return Err(("max_streams", "must be at least 1".into()));
        }
        if self.max_duration.is_zero() {
            return Err(("max_duration", "must be greater than zero".into()));
        }
        if self.max_length == 0 {
            return Err(("max_length", "must be at least 1 byte".into()));
        }
        if self.first_message_timeout.is_zero() {
            return Err(("first_message_timeout", "must be greater than zero".into()));
        }
        if self.max_connections_per_second == 0 {
            return Err((
                "max_connections_per_second",
                "must be at least 1: every tcp_crr test is held to a rate".into(),
            ));
        }
        Ok(())
    }
}

/// `http:` limits of the HTTP endpoints, chiefly `/probe`, which makes this
/// host send traffic wherever a request says.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    /// HTTP connections open at once; more are closed at accept, so idle
    /// connections cannot hold the descriptors.
    pub max_connections: usize,
    /// `/probe` requests running at once; more are answered 503.
    pub probe_max_concurrent: usize,
    /// When true, `/probe` only probes addresses of the static `targets:`.
    pub probe_restrict_to_targets: bool,
    /// Networks `/probe` may probe (every address a name resolves to must
    /// be in one); empty allows any.
    #[serde(deserialize_with = "networks")]
    pub probe_allow: Vec<IpNet>,
}

impl Default for HttpSection {
    fn default() -> Self {
        HttpSection {
            max_connections: 256,
            probe_max_concurrent: 4,
            probe_restrict_to_targets: false,
            probe_allow: Vec::new(),
        }
    }
}

impl HttpSection {
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        if self.max_connections == 0 {
            return Err(("max_connections", "must be at least 1".into()));
        }
        if self.probe_max_concurrent == 0 {
            return Err(("probe_max_concurrent", "must be at least 1".into()));
        }
        Ok(())
    }
}

/// `scheduler:` when probes run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// Probes running at once on this host. Concurrent probes share the NIC
    /// and spoil each other's figures, hence 1.
    pub max_concurrent_probes: usize,
    /// Interval of targets that do not set one.
    #[serde(deserialize_with = "quantity::duration")]
    pub default_interval: Duration,
    /// Random shift of each start, as a fraction of the interval, on top of
    /// the stable per-pair phase.
    pub jitter: f64,
    /// Retries after a `busy` answer, within the same interval.
    pub busy_retries: u32,
    /// First wait after `busy`; doubled at each retry, capped by
    /// `busy_backoff_max`. A longer retry hint from the responder wins.
    #[serde(deserialize_with = "quantity::duration")]
    pub busy_backoff: Duration,
    #[serde(deserialize_with = "quantity::duration")]
    pub busy_backoff_max: Duration,
    /// The mesh schedule's knobs (used with `discovery.mesh: true`).
    pub mesh: MeshScheduleConfig,
    /// Payload bytes this host may move in tests in any hour, both roles
    /// together (its own probes and the tests its responder serves); 0
    /// for no budget (the default). A run that would break it is skipped,
    /// and a prober is refused while it is spent (docs/MESH.md).
    #[serde(deserialize_with = "quantity::size")]
    pub max_bytes_per_hour: u64,
    /// The rate an unpaced probe is assumed to reach before it has run
    /// once, for the byte budget's estimate; bits per second.
    #[serde(deserialize_with = "quantity::rate")]
    pub link_rate_guess: u64,
}

/// `scheduler.mesh:` how the mesh plan sizes its slots and its cycle.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MeshScheduleConfig {
    /// Largest share of time a host spends in tests, either role: the
    /// cycle stretches to keep to it. Half leaves the host's NIC and CPUs
    /// to its real work the other half.
    pub budget: f64,
    /// Time a test needs beyond its measured run: connecting, the
    /// handshake, the final report and the responder's drain.
    #[serde(deserialize_with = "quantity::duration")]
    pub setup: Duration,
    /// Margin for clock skew between hosts, at each end of a slot. NTP
    /// keeps a fleet within milliseconds; a second covers a bad day.
    #[serde(deserialize_with = "quantity::duration")]
    pub guard: Duration,
    /// Follow the plan (the default). `false` runs a mesh on the plain
    /// random-phase scheduler instead, the way pathprobe did before the
    /// plan: for comparison only (the host slot still keeps one test per
    /// host, so collisions become `busy` answers).
    pub planned: bool,
    /// A target label (rack, site) to group the members by, for fleets
    /// too large for a full mesh: a full mesh inside each group, rotating
    /// representatives between groups (docs/MESH.md). Members without the
    /// label form one group of their own. `None`: one full mesh.
    pub group_by: Option<String>,
    /// Keep this host's slot for the plan: the planned prober gets its
    /// slot, anyone else (a probe by hand, a member off its slot, a
    /// stranger) only a gap the plan leaves this host (and a member
    /// prober) idle for the whole test, and is otherwise told `busy` with
    /// the next free gap (counted as `out_of_turn`). `false` lets anyone
    /// the allow list lets in probe at any time.
    pub refuse_out_of_turn: bool,
}

impl Default for MeshScheduleConfig {
    fn default() -> Self {
        MeshScheduleConfig {
            budget: 0.5,
            setup: Duration::from_secs(4),
            guard: Duration::from_secs(1),
            planned: true,
            group_by: None,
            refuse_out_of_turn: true,
        }
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_concurrent_probes: 1,
            default_interval: Duration::from_secs(60),
            jitter: 0.1,
            busy_retries: 3,
            busy_backoff: Duration::from_secs(2),
            busy_backoff_max: Duration::from_secs(30),
            mesh: MeshScheduleConfig::default(),
            max_bytes_per_hour: 0,
            link_rate_guess: crate::scheduler::budget::DEFAULT_LINK_RATE_GUESS,
        }
    }
}

impl SchedulerConfig {
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        if self.max_concurrent_probes == 0 {
            return Err(("max_concurrent_probes", "must be at least 1".into()));
        }
        if self.default_interval.is_zero() {
            return Err(("default_interval", "must be greater than zero".into()));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err((
                "jitter",
                format!(
                    "must be a fraction of the interval between 0 and 1, got {}",
                    self.jitter
                ),
            ));
        }
        if self.busy_backoff > self.busy_backoff_max {
            return Err(("busy_backoff", "must not exceed busy_backoff_max".into()));
        }
        if self.link_rate_guess == 0 {
            return Err((
                "link_rate_guess",
                "must be a rate above zero: an unpaced probe's bytes are estimated from it".into(),
            ));
        }
        let m = &self.mesh;
        if !(m.budget > 0.0 && m.budget <= 1.0) {
            return Err((
                "mesh.budget",
                format!(
                    "must be a share of time above 0 and at most 1, got {}",
                    m.budget
                ),
            ));
        }
        if m.guard.is_zero() {
            return Err((
                "mesh.guard",
                "must be greater than zero: hosts' clocks differ".into(),
            ));
        }
        if let Some(label) = &m.group_by {
            super::target::check_label_name(label).map_err(|e| ("mesh.group_by", e))?;
        }
        Ok(())
    }
}

/// `host_metrics:` what the host collector exports at scrape time.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct HostMetricsConfig {
    /// IRQs whose /proc/interrupts description matches get a series of
    /// their own; the total is exported regardless.
    pub irq_pattern: IrqPattern,
}

/// The default names network queues the way common drivers do: interface
/// names (eth0-TxRx-0, enp3s0-rx-1), Mellanox completion queues
/// (mlx5_comp0@pci:...), virtio-net queues (virtio2-input.0) and bare
/// `-tx-N`/`-rx-N` suffixes. It skips control vectors (mlx5_async,
/// virtio*-config) whose counts say nothing about traffic.
pub const DEFAULT_IRQ_PATTERN: &str =
    r"\b(eth|en[opsx])[0-9a-z]+|mlx\d+_comp|virtio\d+-(input|output)\.\d+|-(TxRx|rx|tx)-\d+";

/// A regular expression compiled once, at load.
#[derive(Clone)]
pub struct IrqPattern(Regex);

impl IrqPattern {
    pub fn new(pattern: &str) -> Result<IrqPattern, String> {
        Regex::new(pattern).map(IrqPattern).map_err(|e| {
            // regex's message spans several lines with a caret under the
            // fault; its last line names the fault, which is enough once
            // the pattern is quoted beside it.
            let text = e.to_string();
            let reason = text
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("error: "))
                .unwrap_or(&text)
                .to_string();
            format!("invalid regular expression {pattern:?}: {reason}")
        })
    }

    pub fn is_match(&self, description: &str) -> bool {
        self.0.is_match(description)
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn regex(&self) -> &Regex {
        &self.0
    }
}

impl Default for IrqPattern {
    fn default() -> Self {
        IrqPattern(Regex::new(DEFAULT_IRQ_PATTERN).expect("the default IRQ pattern is valid"))
    }
}

impl PartialEq for IrqPattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl fmt::Debug for IrqPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IrqPattern({:?})", self.as_str())
    }
}

/// Compiles inside the visitor (not after deserializing a String), so that
/// serde_yaml still knows the key path when it reports the error.
struct PatternVisitor;

impl Visitor<'_> for PatternVisitor {
    type Value = IrqPattern;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a regular expression")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<IrqPattern, E> {
        IrqPattern::new(v).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for IrqPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(PatternVisitor)
    }
}

/// Reads a list of client networks. A bare address means that host alone,
/// as operators often write it.
fn networks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    // Each item is checked as it is read, so that an error points at it.
    struct Network(IpNet);
    impl<'de> Deserialize<'de> for Network {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Network, D::Error> {
            struct NetworkVisitor;
            impl Visitor<'_> for NetworkVisitor {
                type Value = Network;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a CIDR network such as 10.0.0.0/8, or an address")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Network, E> {
                    parse_network(v).map(Network).map_err(E::custom)
                }
            }
            d.deserialize_str(NetworkVisitor)
        }
    }
    let items = Vec::<Network>::deserialize(d)?;
    Ok(items.into_iter().map(|n| n.0).collect())
}

/// Parses a CIDR network (`10.0.0.0/8`, `2001:db8::/32`) or a single
/// address, for config and command line alike.
pub fn parse_network(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| {
            format!("invalid network {s:?}: expected a CIDR such as 10.0.0.0/8 or 2001:db8::/32, or an address")
        })
}

/// Reads `listen` with a message that shows the expected form; the
/// standard one ("invalid socket address syntax") does not.
fn listen_address<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    struct ListenVisitor;
    impl Visitor<'_> for ListenVisitor {
        type Value = SocketAddr;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an IP address and port such as \"[::]:5301\"")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<SocketAddr, E> {
            // The parser of --listen and --web.listen-address, so that
            // every listen address takes the same forms.
            crate::units::parse_listen_address(v).map_err(E::custom)
        }
    }
    d.deserialize_str(ListenVisitor)
}

/// The variable systemd's `LoadCredential=` sets to the directory holding
/// the service's credentials, readable by its `DynamicUser` (a chmod-600
/// file in /etc is not).
pub const CREDENTIALS_DIRECTORY: &str = "CREDENTIALS_DIRECTORY";

/// A `secret_file` with `${CREDENTIALS_DIRECTORY}` replaced by the value
/// `lookup` gives it, so that one configuration names the secret wherever
/// systemd put it: `secret_file: ${CREDENTIALS_DIRECTORY}/secret`. No other
/// variable is expanded, and a `${` naming one is an error rather than a
/// file name taken literally.
pub fn expand_secret_path(
    path: &Path,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<PathBuf, String> {
    let Some(text) = path.to_str() else {
        return Ok(path.to_path_buf());
    };
    let var = format!("${{{CREDENTIALS_DIRECTORY}}}");
    let mut out = text.to_string();
    if out.contains(&var) {
        let dir = lookup(CREDENTIALS_DIRECTORY)
            .filter(|d| !d.is_empty())
            .ok_or_else(|| {
                format!(
                "{text} names ${{{CREDENTIALS_DIRECTORY}}}, which is not set: it is set by systemd \
                 for a unit with LoadCredential= (see deploy/README.md)"
            )
            })?;
        out = out.replace(&var, &dir);
    }
    if out.contains("${") {
        return Err(format!(
            "{text}: only ${{{CREDENTIALS_DIRECTORY}}} is expanded in a secret_file"
        ));
    }
    Ok(PathBuf::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_paths_expand_the_credentials_directory_only() {
        let env = |v: &str| {
            (v == "CREDENTIALS_DIRECTORY").then(|| "/run/credentials/pathprobe.service".to_string())
        };
        let none = |_: &str| None;
        assert_eq!(
            expand_secret_path(Path::new("${CREDENTIALS_DIRECTORY}/secret"), env),
            Ok(PathBuf::from("/run/credentials/pathprobe.service/secret"))
        );
        assert_eq!(
            expand_secret_path(Path::new("/etc/pathprobe/secret"), none),
            Ok(PathBuf::from("/etc/pathprobe/secret"))
        );
        assert!(
            expand_secret_path(Path::new("${CREDENTIALS_DIRECTORY}/secret"), none)
                .unwrap_err()
                .contains("which is not set: it is set by systemd for a unit with LoadCredential=")
        );
        assert!(expand_secret_path(Path::new("${HOME}/secret"), env)
            .unwrap_err()
            .contains("only ${CREDENTIALS_DIRECTORY} is expanded"));
    }
    use crate::host::parse_interrupts;

    #[test]
    fn responder_defaults_match_the_engine() {
        let r = ResponderSection::default();
        assert!(r.enabled);
        assert_eq!(r.listen, "[::]:5301".parse().unwrap());
        assert_eq!(r.max_duration, Duration::from_secs(60));
        assert_eq!(r.max_streams, 16);
        assert_eq!(r.max_bitrate, 0);
        assert_eq!(r.max_concurrent_tests, 1);
        assert_eq!(r.to_responder_config(), ResponderConfig::default());
    }

    #[test]
    fn responder_config_carries_the_caps() {
        let r = ResponderSection {
            max_duration: Duration::from_secs(30),
            max_streams: 4,
            max_bitrate: 2_000_000_000,
            max_concurrent_tests: 2,
            ..ResponderSection::default()
        };
        let c = r.to_responder_config();
        assert_eq!(c.max_duration, Duration::from_secs(30));
        assert_eq!(c.max_streams, 4);
        assert_eq!(c.max_bitrate, 2_000_000_000);
        assert_eq!(c.max_concurrent_tests, 2);
        assert_eq!(c.idle_timeout, Duration::from_secs(10));
    }

    #[test]
    fn responder_zerocopy_key_takes_its_five_words_and_defaults_to_auto() {
        use crate::engine::zerocopy::ZeroCopy;
        for (word, want) in [
            ("auto", ZeroCopy::Auto),
            ("on", ZeroCopy::On),
            ("off", ZeroCopy::Off),
            ("receive", ZeroCopy::Receive),
            ("send", ZeroCopy::Send),
        ] {
            let c: super::super::Config =
                serde_yaml::from_str(&format!("responder:\n  zerocopy: {word}\n")).unwrap();
            assert_eq!(c.responder.to_responder_config().zerocopy, want, "{word}");
        }
        assert_eq!(ResponderSection::default().zerocopy, ZeroCopy::Auto);
        // A YAML boolean is not one of the words.
        assert!(
            serde_yaml::from_str::<super::super::Config>("responder:\n  zerocopy: true\n").is_err()
        );
    }

    #[test]
    fn responder_section_carries_the_per_client_time_and_first_message_limits() {
        let c: super::super::Config = serde_yaml::from_str(
            "responder:\n  max_test_seconds_per_client_per_hour: 10m\n  first_message_timeout: 500ms\n  max_unauthenticated_udp_bitrate: 100M\n",
        )
        .unwrap();
        let r = c.responder.to_responder_config();
        assert_eq!(
            r.max_test_seconds_per_client_per_hour,
            Duration::from_secs(600)
        );
        assert_eq!(r.first_message_timeout, Duration::from_millis(500));
        assert_eq!(r.max_unauthenticated_udp_bitrate, 100_000_000);
        let d = ResponderSection::default();
        assert_eq!(
            d.max_test_seconds_per_client_per_hour,
            Duration::from_secs(1800)
        );
        assert_eq!(d.first_message_timeout, Duration::from_secs(2));
        let zero = ResponderSection {
            first_message_timeout: Duration::ZERO,
            ..d
        };
        assert_eq!(zero.check().unwrap_err().0, "first_message_timeout");
    }

    #[test]
    fn responder_section_bounds_tcp_crr_connections_and_tells_probers() {
        let c: super::super::Config =
            serde_yaml::from_str("responder:\n  max_connections_per_second: 500\n").unwrap();
        let r = c.responder.to_responder_config();
        assert_eq!(r.max_connections_per_second, 500);
        assert_eq!(r.limits().max_connections_per_second, 500);
        let d = ResponderSection::default();
        assert_eq!(d.max_connections_per_second, 20_000);
        assert_eq!(d.check(), Ok(()));
        let zero = ResponderSection {
            max_connections_per_second: 0,
            ..d
        };
        assert_eq!(zero.check().unwrap_err().0, "max_connections_per_second");
        assert!(serde_yaml::from_str::<super::super::Config>(
            "responder:\n  max_connections_per_second: -1\n"
        )
        .is_err());
    }

    #[test]
    fn scheduler_defaults_and_checks() {
        let s = SchedulerConfig::default();
        assert_eq!(s.max_concurrent_probes, 1);
        assert_eq!(s.default_interval, Duration::from_secs(60));
        assert_eq!(s.jitter, 0.1);
        assert_eq!(s.check(), Ok(()));
        let bad = SchedulerConfig {
            jitter: 1.5,
            ..s.clone()
        };
        assert_eq!(
            bad.check().unwrap_err(),
            (
                "jitter",
                "must be a fraction of the interval between 0 and 1, got 1.5".to_string()
            )
        );
        assert_eq!(s.mesh.budget, 0.5);
        let mut over = s.clone();
        over.mesh.budget = 1.5;
        assert_eq!(over.check().unwrap_err().0, "mesh.budget");
        let mut blind = s.clone();
        blind.mesh.guard = Duration::ZERO;
        assert_eq!(blind.check().unwrap_err().0, "mesh.guard");
        let mut grouped = s.clone();
        grouped.mesh.group_by = Some("rack".into());
        assert_eq!(grouped.check(), Ok(()));
        grouped.mesh.group_by = Some("rack-id".into());
        assert_eq!(grouped.check().unwrap_err().0, "mesh.group_by");
        // The byte budget: unlimited by default, written as a size.
        assert_eq!(s.max_bytes_per_hour, 0);
        assert_eq!(s.link_rate_guess, 10_000_000_000);
        let c: super::super::Config =
            serde_yaml::from_str("scheduler:\n  max_bytes_per_hour: 2G\n  link_rate_guess: 100M\n")
                .unwrap();
        assert_eq!(c.scheduler.max_bytes_per_hour, 2 << 30);
        assert_eq!(c.scheduler.link_rate_guess, 100_000_000);
        let mut zero = s.clone();
        zero.link_rate_guess = 0;
        assert_eq!(zero.check().unwrap_err().0, "link_rate_guess");
    }

    fn matching(pattern: &IrqPattern, fixture: &str) -> Vec<String> {
        let path = format!(
            "{}/tests/fixtures/proc/{fixture}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(path).unwrap();
        parse_interrupts(&text)
            .unwrap()
            .into_iter()
            .filter(|r| pattern.is_match(&r.description))
            .map(|r| r.id)
            .collect()
    }

    #[test]
    fn default_irq_pattern_picks_nic_queues() {
        let p = IrqPattern::default();
        assert_eq!(
            matching(&p, "interrupts_4cpu_before"),
            ["24", "25", "26", "27", "28", "30", "90", "91"]
        );
        assert_eq!(matching(&p, "interrupts_vm_2cpu"), ["38", "39"]);
        assert_eq!(matching(&p, "interrupts_arm64_2cpu"), ["48"]);
    }

    #[test]
    fn bad_irq_pattern_is_one_line() {
        assert_eq!(
            IrqPattern::new("eth(").unwrap_err(),
            "invalid regular expression \"eth(\": unclosed group"
        );
    }
}
