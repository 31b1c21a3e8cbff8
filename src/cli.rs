//! The command line of the `pathprobe` binary: clap's structs, and their
//! translation into the library's types ([`ProbeSpec`] for `probe`, the
//! configuration file's [`ResponderSection`] for `respond`). Nothing here
//! does I/O beyond reading a secret file.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use ipnet::IpNet;

use pathprobe::auth::Secret;
use pathprobe::config::ResponderSection;
use pathprobe::probe::{Direction, Kind, ProbeError, ProbeSpec};
use pathprobe::protocol::DEFAULT_PORT;
use pathprobe::responder::LimitPolicy;
use pathprobe::units;

#[derive(Parser)]
#[command(
    name = "pathprobe",
    version,
    about = "Continuous TCP/UDP path throughput probing"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Answer other hosts' probes (the server side, like `iperf3 -s`).
    Respond(RespondArgs),
    /// Run one probe against a responder and print the result.
    Probe(ProbeArgs),
    /// The service: responder, scheduled probes, Prometheus metrics.
    Serve(ServeArgs),
    /// Validate a configuration file; exits non-zero with the error.
    CheckConfig {
        /// The configuration file (YAML).
        file: PathBuf,
    },
}

#[derive(Args)]
pub struct ServeArgs {
    /// Configuration file; without it, the embedded default (config/pathprobe.yml).
    #[arg(long = "config.file", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// Address for /metrics, /probe and the other HTTP endpoints.
    #[arg(long = "web.listen-address", value_name = "ADDR", default_value = pathprobe::service::DEFAULT_WEB_LISTEN)]
    pub web_listen_address: SocketAddr,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long = "log.level", value_name = "LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long = "log.format", value_name = "FORMAT", default_value = "logfmt", value_parser = ["logfmt", "json"])]
    pub log_format: String,
}

/// The limits are optional here: one not given keeps the default of the
/// configuration file's `responder:` section, so that the two cannot drift
/// apart. `--help` shows those defaults ([`with_responder_defaults`]).
#[derive(Args)]
pub struct RespondArgs {
    /// Address to listen on; [::] also accepts IPv4.
    #[arg(long, default_value = "::")]
    listen: IpAddr,
    /// TCP and UDP port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Longest test accepted, omit included (e.g. 60s).
    #[arg(long, value_parser = parse_duration)]
    max_duration: Option<Duration>,
    /// Most streams per direction accepted.
    #[arg(long)]
    max_streams: Option<u32>,
    /// Highest rate accepted per direction (e.g. 10g); 0 for no cap.
    #[arg(long, value_parser = parse_rate)]
    max_bitrate: Option<u64>,
    /// Tests run at once; further probers are told the responder is busy.
    #[arg(long)]
    max_concurrent: Option<usize>,
    /// Largest TCP write or UDP datagram (-l) accepted.
    #[arg(long, value_parser = parse_size_u32)]
    max_length: Option<u32>,
    /// Largest socket buffer (-w) accepted.
    #[arg(long, value_parser = parse_size_u32)]
    max_window: Option<u32>,
    /// What to do with a request over --max-duration, --max-streams,
    /// --max-bitrate, --max-length or --max-window: clamp (run it cut down,
    /// and tell the prober) or refuse (refuse it, naming the limit).
    #[arg(long)]
    limit_policy: Option<LimitPolicy>,
    /// Tests one client (IPv4 address or IPv6 /64) may run per minute; 0 for no limit.
    #[arg(long)]
    max_tests_per_client_per_minute: Option<u32>,
    /// Payload bytes all tests may move in any hour (e.g. 100G); 0 for no limit.
    #[arg(long, value_parser = parse_size)]
    max_bytes_per_hour: Option<u64>,
    /// File holding the shared secret probers must prove they know.
    #[arg(long = "auth.secret-file", value_name = "FILE")]
    auth_secret_file: Option<PathBuf>,
    /// Client network (CIDR or address) to serve; repeatable. Without any,
    /// every client not denied is served.
    #[arg(long = "allow", value_name = "CIDR", value_parser = parse_network)]
    allow: Vec<IpNet>,
    /// Client network (CIDR or address) to refuse; repeatable; wins over --allow.
    #[arg(long = "deny", value_name = "CIDR", value_parser = parse_network)]
    deny: Vec<IpNet>,
}

#[derive(Args)]
pub struct ProbeArgs {
    /// Responder to probe: host, host:port or [ipv6]:port.
    #[arg(required_unless_present = "loopback")]
    pub target: Option<String>,
    /// Probe over loopback against a responder inside this process.
    #[arg(long, conflicts_with = "target")]
    pub loopback: bool,
    /// With --loopback, use ::1 instead of 127.0.0.1.
    #[arg(short = '6', long)]
    pub ipv6: bool,
    /// UDP instead of TCP.
    #[arg(short, long)]
    udp: bool,
    /// Reverse: the responder sends.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    reverse: bool,
    /// Both directions at once.
    #[arg(long)]
    bidir: bool,
    /// Parallel streams per direction.
    #[arg(short = 'P', long, default_value_t = 1)]
    parallel: u32,
    /// Measured seconds (fractions allowed).
    #[arg(short, long, default_value = "5", value_parser = parse_duration)]
    time: Duration,
    /// Warm-up seconds excluded from every figure.
    #[arg(short = 'O', long, default_value = "0", value_parser = parse_duration)]
    omit: Duration,
    /// Rate per direction in bits/s, summed over streams (k/m/g suffixes).
    /// UDP defaults to 1m; 0 is unpaced. For TCP it caps via kernel pacing.
    #[arg(short, long, value_parser = parse_rate)]
    bitrate: Option<u64>,
    /// Write size (TCP, default 128K) or datagram payload (UDP, default 1448).
    #[arg(short, long, value_parser = parse_size_u32)]
    length: Option<u32>,
    /// Socket buffer size (SO_SNDBUF and SO_RCVBUF) on both ends.
    #[arg(short, long, value_parser = parse_size_u32)]
    window: Option<u32>,
    /// TCP congestion control algorithm on both ends.
    #[arg(short = 'C', long)]
    congestion: Option<String>,
    /// IP type of service / traffic class byte (e.g. 0x10 or 16).
    #[arg(long, value_parser = parse_tos)]
    tos: Option<u8>,
    /// Local address to send from.
    #[arg(short = 'B', long)]
    bind: Option<IpAddr>,
    /// Pin data threads to CPU n locally, and m on the responder: n[,m].
    #[arg(short = 'A', long)]
    affinity: Option<String>,
    /// Print one JSON document.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Interval reports every SECS seconds (fractions allowed, at least
    /// 0.1; 0 for none), per stream, as iperf3's -i.
    #[arg(short = 'i', long, value_name = "SECS", value_parser = parse_duration)]
    interval: Option<Duration>,
    /// One JSON object per line as the test runs (start, each interval of
    /// this host's streams, end with the whole -J document), as iperf3's
    /// --json-stream.
    #[arg(long, conflicts_with = "json")]
    pub json_stream: bool,
    /// Responder port, when TARGET does not give one.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Seconds to wait for the connection and each control exchange.
    #[arg(long, default_value = "5", value_parser = parse_duration)]
    connect_timeout: Duration,
    /// Per-stream and per-host detail.
    #[arg(short, long)]
    pub verbose: bool,
    /// File holding the responder's shared secret, to authenticate with.
    #[arg(long = "auth.secret-file", value_name = "FILE")]
    auth_secret_file: Option<PathBuf>,
}

/// Parses the process's arguments, exiting with clap's message on error.
pub fn parse() -> Cli {
    let matches = with_responder_defaults(Cli::command()).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Shows, in `respond --help`, the defaults the omitted limits take; they
/// are computed, so they stay those of [`ResponderSection::default`].
fn with_responder_defaults(cmd: clap::Command) -> clap::Command {
    let d = ResponderSection::default();
    let defaults = [
        ("max_duration", units::format_duration(d.max_duration)),
        ("max_streams", d.max_streams.to_string()),
        ("max_bitrate", units::format_rate(d.max_bitrate)),
        ("max_concurrent", d.max_concurrent_tests.to_string()),
        ("max_length", units::format_size(d.max_length.into())),
        ("max_window", units::format_size(d.max_window.into())),
        ("limit_policy", d.limit_policy.as_str().to_string()),
        (
            "max_tests_per_client_per_minute",
            d.max_tests_per_client_per_minute.to_string(),
        ),
        (
            "max_bytes_per_hour",
            units::format_size(d.max_bytes_per_hour),
        ),
    ];
    cmd.mut_subcommand("respond", |mut respond| {
        for (id, value) in defaults {
            respond = respond.mut_arg(id, |arg| {
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                arg.help(format!("{help} [default: {value}]"))
            });
        }
        respond
    })
}

/// Reads the secret named by `--auth.secret-file`, when it is given.
fn read_secret(path: Option<&Path>) -> anyhow::Result<Option<Secret>> {
    path.map(Secret::from_file)
        .transpose()
        .context("--auth.secret-file")
}

impl RespondArgs {
    /// The configuration file's `responder:` section these flags describe:
    /// its defaults, with every limit given replacing its key, and the
    /// secret read.
    pub fn section(&self) -> anyhow::Result<ResponderSection> {
        let d = ResponderSection::default();
        Ok(ResponderSection {
            listen: SocketAddr::new(self.listen, self.port),
            max_duration: self.max_duration.unwrap_or(d.max_duration),
            max_streams: self.max_streams.unwrap_or(d.max_streams),
            max_bitrate: self.max_bitrate.unwrap_or(d.max_bitrate),
            // 0 means 1 here, where the config file refuses it.
            max_concurrent_tests: self
                .max_concurrent
                .map_or(d.max_concurrent_tests, |n| n.max(1)),
            max_length: self.max_length.map_or(d.max_length, |n| n.max(1)),
            max_window: self.max_window.unwrap_or(d.max_window),
            limit_policy: self.limit_policy.unwrap_or(d.limit_policy),
            max_tests_per_client_per_minute: self
                .max_tests_per_client_per_minute
                .unwrap_or(d.max_tests_per_client_per_minute),
            max_bytes_per_hour: self.max_bytes_per_hour.unwrap_or(d.max_bytes_per_hour),
            secret_file: self.auth_secret_file.clone(),
            secret: read_secret(self.auth_secret_file.as_deref())?,
            allow: self.allow.clone(),
            deny: self.deny.clone(),
            ..d
        })
    }
}

impl ProbeArgs {
    /// The probe these flags ask for.
    pub fn spec(&self) -> Result<ProbeSpec, ProbeError> {
        let (affinity, remote_affinity) = match &self.affinity {
            Some(a) => {
                units::parse_affinity(a).map_err(|e| ProbeError::BadArgument(e.to_string()))?
            }
            None => (None, None),
        };
        Ok(ProbeSpec {
            kind: if self.udp { Kind::Udp } else { Kind::Tcp },
            direction: if self.bidir {
                Direction::Bidir
            } else if self.reverse {
                Direction::Receive
            } else {
                Direction::Send
            },
            duration: self.time,
            omit: self.omit,
            streams: self.parallel,
            bitrate: self.bitrate,
            length: self.length,
            window: self.window,
            congestion: self.congestion.clone(),
            tos: self.tos,
            bind: self.bind,
            affinity,
            remote_affinity,
            connect_timeout: self.connect_timeout,
            secret: read_secret(self.auth_secret_file.as_deref())
                .map_err(|e| ProbeError::BadArgument(format!("{e:#}")))?,
            interval: self.interval.filter(|i| !i.is_zero()),
            interval_events: None,
        })
    }
}

// clap wants `Result<_, String>`-like errors; the library's are typed.
fn parse_duration(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}
fn parse_rate(s: &str) -> Result<u64, String> {
    units::parse_rate(s).map_err(|e| e.to_string())
}
fn parse_size_u32(s: &str) -> Result<u32, String> {
    let v = units::parse_size(s).map_err(|e| e.to_string())?;
    u32::try_from(v).map_err(|_| format!("size {s:?} is too large: expected at most 4G"))
}
fn parse_size(s: &str) -> Result<u64, String> {
    units::parse_size(s).map_err(|e| e.to_string())
}
fn parse_network(s: &str) -> Result<IpNet, String> {
    pathprobe::config::sections::parse_network(s)
}
fn parse_tos(s: &str) -> Result<u8, String> {
    units::parse_tos(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathprobe::responder::ResponderConfig;

    fn respond(args: &[&str]) -> RespondArgs {
        let argv = ["pathprobe", "respond"].iter().chain(args);
        let matches = with_responder_defaults(Cli::command())
            .try_get_matches_from(argv)
            .unwrap();
        match Cli::from_arg_matches(&matches).unwrap().command {
            Command::Respond(a) => a,
            _ => unreachable!("parsed the respond subcommand"),
        }
    }

    #[test]
    fn command_line_is_consistent() {
        with_responder_defaults(Cli::command()).debug_assert();
    }

    #[test]
    fn respond_without_flags_is_the_default_section() {
        let section = respond(&[]).section().unwrap();
        assert_eq!(section, ResponderSection::default());
        assert_eq!(section.to_responder_config(), ResponderConfig::default());
    }

    #[test]
    fn respond_flags_replace_their_keys() {
        let s = respond(&[
            "--listen",
            "127.0.0.1",
            "--port",
            "0",
            "--max-duration",
            "0.5s",
            "--max-streams",
            "2",
            "--max-concurrent",
            "0",
            "--limit-policy",
            "refuse",
            "--max-window",
            "1M",
            "--deny",
            "10.0.0.0/8",
        ])
        .section()
        .unwrap();
        assert_eq!(s.listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(s.max_duration, Duration::from_millis(500));
        assert_eq!(s.max_streams, 2);
        assert_eq!(s.max_concurrent_tests, 1);
        assert_eq!(s.limit_policy, LimitPolicy::Refuse);
        assert_eq!(s.max_window, 1 << 20);
        assert_eq!(s.deny, vec!["10.0.0.0/8".parse::<IpNet>().unwrap()]);
        let d = ResponderSection::default();
        assert_eq!(s.max_bitrate, d.max_bitrate);
        assert_eq!(s.max_length, d.max_length);
        assert_eq!(s.idle_timeout, d.idle_timeout);
    }

    #[test]
    fn respond_help_shows_the_section_defaults() {
        let mut cmd = with_responder_defaults(Cli::command());
        let help = cmd
            .find_subcommand_mut("respond")
            .unwrap()
            .render_help()
            .to_string();
        assert!(
            help.contains("Most streams per direction accepted [default: 16]"),
            "{help}"
        );
        assert!(help.contains("(-l) accepted [default: 16M]"), "{help}");
        assert!(help.contains("(-w) accepted [default: 256M]"), "{help}");
        assert!(help.contains("[default: clamp]"), "{help}");
    }

    #[test]
    fn missing_secret_file_names_the_flag() {
        let e = read_secret(Some(Path::new("/nonexistent/secret"))).unwrap_err();
        assert!(
            format!("{e:#}").starts_with("--auth.secret-file: "),
            "{e:#}"
        );
    }
}
