//! The command line of the `pathprobe` binary: clap's structs, and their
//! translation into the library's types ([`ProbeSpec`] for `probe`, the
//! configuration file's [`ResponderSection`] for `respond`). Nothing here
//! does I/O beyond reading a secret file.
//!
//! Exit codes: 2 for a usage error (a flag or value clap or these checks
//! reject, iperf3 flags pathprobe does not have), 1 for every other
//! failure. With `probe -J`, a usage error is also one JSON error document
//! on stdout, as every other failure is.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use ipnet::IpNet;

use pathprobe::auth::Secret;
use pathprobe::config::ResponderSection;
use pathprobe::engine::zerocopy::ZeroCopy;
use pathprobe::kinds::kind::{RrShape, Transport};
use pathprobe::kinds::registry;
use pathprobe::probe::spec::IpFamily;
use pathprobe::probe::{Direction, Kind, ProbeError, ProbeSpec, Wire};
use pathprobe::protocol::adaptive::AdaptiveRequest;
use pathprobe::protocol::DEFAULT_PORT;
use pathprobe::responder::LimitPolicy;
use pathprobe::units;

#[derive(Parser)]
#[command(
    name = "pathprobe",
    version = pathprobe::build_info::LONG_VERSION,
    about = "Continuous TCP/UDP path throughput probing"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
// Parsed once per process: the probe's flags (now with -t auto's) make
// its variant the largest, and boxing it would buy nothing.
#[allow(clippy::large_enum_variant)]
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
        /// Also check this web configuration file (`serve --web.config.file`).
        #[arg(long = "web.config.file", value_name = "FILE")]
        web_config_file: Option<PathBuf>,
    },
}

#[derive(Args)]
pub struct ServeArgs {
    /// Configuration file; without it, the embedded default (config/pathprobe.yml).
    #[arg(long = "config.file", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// Address for /metrics, /probe and the other HTTP endpoints.
    /// Accepts ip:port, [ipv6]:port and :port (every address).
    #[arg(long = "web.listen-address", value_name = "ADDR", default_value = pathprobe::service::DEFAULT_WEB_LISTEN, value_parser = parse_listen)]
    pub web_listen_address: SocketAddr,
    /// TLS, client certificates, basic-auth users and headers for every
    /// HTTP endpoint, in the format of Prometheus' exporter-toolkit; read
    /// again at every reload.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long = "log.level", value_name = "LEVEL", default_value = "info", value_parser = LOG_LEVELS)]
    pub log_level: String,
    /// Log format.
    #[arg(long = "log.format", value_name = "FORMAT", default_value = "logfmt", value_parser = ["logfmt", "json"])]
    pub log_format: String,
}

/// The levels `--log.level` takes. Anything else is refused: the filter
/// would read a typo such as `verbose` as a module name and log nothing.
pub const LOG_LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

/// The limits are optional here: one not given keeps the default of the
/// configuration file's `responder:` section, so that the two cannot drift
/// apart. `--help` shows those defaults ([`with_responder_defaults`]).
#[derive(Args)]
pub struct RespondArgs {
    /// Address to listen on: an address (port from --port), ip:port,
    /// [ipv6]:port or :port; [::] also accepts IPv4.
    #[arg(long, value_name = "ADDR", default_value = "::", value_parser = parse_listen_host)]
    listen: (IpAddr, Option<u16>),
    /// Log level: error, warn, info, debug or trace.
    #[arg(long = "log.level", value_name = "LEVEL", default_value = "info", value_parser = LOG_LEVELS)]
    pub log_level: String,
    /// Log format, as `serve`'s.
    #[arg(long = "log.format", value_name = "FORMAT", default_value = "logfmt", value_parser = ["logfmt", "json"])]
    pub log_format: String,
    /// Also answer stock iperf3 clients (`iperf3 -c HOST`) on this port,
    /// TCP and UDP (iperf3's is 5201); off by default.
    #[arg(long, value_name = "PORT")]
    iperf3_port: Option<u16>,
    /// TCP and UDP port, when --listen gives none.
    #[arg(short, long)]
    port: Option<u16>,
    /// Longest test accepted, omit included (e.g. 60s).
    #[arg(long, value_parser = parse_positive_duration)]
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
    /// Test time one client may use in any hour (e.g. 30m); 0 for no limit.
    #[arg(long, value_parser = parse_duration)]
    max_test_seconds_per_client_per_hour: Option<Duration>,
    /// Cap on UDP this responder sends while no secret is set (e.g. 1g); 0 for none.
    #[arg(long, value_parser = parse_rate)]
    max_unauthenticated_udp_bitrate: Option<u64>,
    /// Wait for a new connection's first message (e.g. 2s).
    #[arg(long, value_parser = parse_duration)]
    first_message_timeout: Option<Duration>,
    /// Connections per second one tcp_crr test may open; probers pace
    /// themselves to it, and those beyond it are reset.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections_per_second: Option<u32>,
    /// File holding the shared secret probers must prove they know.
    #[arg(long = "auth.secret-file", value_name = "FILE")]
    auth_secret_file: Option<PathBuf>,
    /// TCP data streams of this end without copying payload: auto (the
    /// default, as measured: MSG_TRUNC; sendfile across a link, write to
    /// this host), on, off, receive (write, MSG_TRUNC) or send (sendfile,
    /// read) (the `zerocopy` key of the responder section).
    #[arg(long, value_name = "MODE", value_parser = parse_zerocopy)]
    zerocopy: Option<ZeroCopy>,
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
    // Not `required` for clap: iperf3's flags are answered first
    // ([`try_parse`]), and a missing target then gets its own message.
    pub target: Option<String>,
    /// The target given as iperf3 takes it (`-c HOST`).
    #[arg(short = 'c', long, value_name = "HOST", conflicts_with_all = ["target", "loopback"])]
    client: Option<String>,
    /// Probe a stock iperf3 server (`iperf3 -s`), through iperf3's own
    /// protocol; the port defaults to iperf3's, 5201. The host is given
    /// here or as usual (`--iperf3 -c HOST`, `--iperf3 HOST`, `HOST
    /// --iperf3`).
    #[arg(long, value_name = "HOST", num_args = 0..=1, conflicts_with = "loopback")]
    iperf3: Option<Option<String>>,
    /// Probe over loopback against a responder inside this process.
    #[arg(long, conflicts_with = "target")]
    pub loopback: bool,
    /// IPv4 only: names resolve to IPv4 addresses; an IPv6 literal is refused.
    #[arg(short = '4', long, conflicts_with = "ipv6")]
    ipv4: bool,
    /// IPv6 only: names resolve to IPv6 addresses; an IPv4 literal is
    /// refused. With --loopback, ::1 instead of 127.0.0.1.
    #[arg(short = '6', long)]
    pub ipv6: bool,
    /// UDP instead of TCP.
    #[arg(short, long)]
    udp: bool,
    /// The kind of probe: tcp and udp are throughput (as -u); tcp_rr is
    /// request/response transactions on one TCP connection (netperf's
    /// TCP_RR), with -r and --burst; tcp_crr is a new connection per
    /// transaction (netperf's TCP_CRR), with -r: connect time,
    /// transaction latency, connections/s and failures by reason; udp_rr
    /// is isochronous UDP round trips (irtt's): a -l byte request every
    /// --interval (default 64 bytes every 10ms), RTT, IPDV and loss each
    /// way.
    ///
    /// trace is no probe: it traces the path to TARGET with the flow a
    /// probe would use (TCP SYNs to the responder port, or UDP with
    /// --trace-protocol udp; --cport fixes the source port), hop by hop,
    /// with -J or -v as usual. See docs/TRACE.md.
    #[arg(long, value_name = "KIND", value_parser = mode_names(), conflicts_with = "udp")]
    mode: Option<String>,
    /// --mode trace: the source port of the traced flow (iperf3's
    /// --cport), so that the trace takes a given flow's ECMP member.
    #[arg(long, value_name = "PORT")]
    cport: Option<u16>,
    /// --mode trace: the transport of the traced flow, tcp or udp.
    #[arg(long, value_name = "PROTO", value_parser = ["tcp", "udp"], default_value = "tcp")]
    trace_protocol: String,
    /// --mode trace: the highest TTL tried (at most 64).
    #[arg(long, value_name = "N", default_value_t = 30)]
    max_hops: u8,
    /// tcp_rr and tcp_crr: request and response sizes in bytes, REQ,RESP
    /// (netperf's -r; k/m suffixes; one size for both). Default 1,1.
    #[arg(short = 'r', long = "rr-size", value_name = "REQ,RESP", value_parser = parse_rr_sizes)]
    rr_size: Option<(u32, u32)>,
    /// tcp_rr: transactions in flight at once on the connection (default 1).
    #[arg(long, value_name = "N")]
    burst: Option<u32>,
    /// tcp_rr and tcp_crr: leave Nagle's algorithm on (TCP_NODELAY is set
    /// by default).
    #[arg(long)]
    nagle: bool,
    /// Reverse: the responder sends.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    reverse: bool,
    /// Both directions at once.
    #[arg(long)]
    bidir: bool,
    /// Parallel streams per direction.
    #[arg(short = 'P', long, default_value_t = 1)]
    parallel: u32,
    /// Measured seconds (fractions allowed), or `auto` (TCP and UDP): stop
    /// once the rate is known to --precision, between --min-duration and
    /// --max-duration (docs/ADAPTIVE.md).
    #[arg(short, long, value_name = "SECS|auto", default_value = "5", value_parser = parse_time, allow_negative_numbers = true)]
    time: ProbeTime,
    /// -t auto: the shortest probe [default: 0.5s].
    #[arg(long, value_name = "SECS", value_parser = parse_positive_duration)]
    min_duration: Option<Duration>,
    /// -t auto: the longest probe [default: 5s].
    #[arg(long, value_name = "SECS", value_parser = parse_positive_duration)]
    max_duration: Option<Duration>,
    /// -t auto: the 95% interval's half-width to reach, as a share of the
    /// rate (e.g. 1% or 0.01) [default: 1%].
    #[arg(long, value_name = "SHARE", value_parser = parse_precision)]
    precision: Option<f64>,
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
    /// 0.1; 0 for none), per stream, as iperf3's -i. With --mode udp_rr:
    /// the send interval (e.g. 10ms, irtt's -i).
    #[arg(short = 'i', long, value_name = "SECS", value_parser = parse_duration)]
    interval: Option<Duration>,
    /// One JSON object per line as the test runs (start, each interval of
    /// this host's streams, end with the whole -J document), as iperf3's
    /// --json-stream.
    #[arg(long, conflicts_with = "json")]
    pub json_stream: bool,
    /// Responder port, when TARGET does not give one [default: 5301; 5201
    /// with --iperf3].
    #[arg(short, long)]
    port: Option<u16>,
    /// Seconds to wait for the connection and each control exchange.
    #[arg(long, default_value = "5", value_parser = parse_duration)]
    connect_timeout: Duration,
    /// Per-stream and per-host detail (-V as in iperf3).
    #[arg(short, long, visible_short_alias = 'V')]
    pub verbose: bool,
    /// UDP without segmentation and receive offload (GSO/GRO) on either
    /// end: sendmmsg and recvmmsg, for figures comparable with history or
    /// with tools that do not use them.
    #[arg(long)]
    no_offload: bool,
    /// TCP without copying payload on this end: sendfile from memory when
    /// sending, MSG_TRUNC when receiving. auto (the default, as measured:
    /// MSG_TRUNC; sendfile across a link, write to this host), on, off for
    /// plain write and read,
    /// receive (write, MSG_TRUNC) or send (sendfile, read). -Z, as
    /// iperf3's, is --zerocopy=on. The responder's end follows its own
    /// setting.
    #[arg(short = 'Z', long, value_name = "MODE", num_args = 0..=1, require_equals = true,
          default_missing_value = "on", value_parser = parse_zerocopy)]
    zerocopy: Option<ZeroCopy>,
    /// --zerocopy=off.
    #[arg(long, conflicts_with = "zerocopy")]
    no_zerocopy: bool,
    /// Accepted for iperf3's habit and ignored: pathprobe does not set
    /// TCP_NODELAY on data sockets (Nagle holds back only writes smaller
    /// than a segment; the default -l is 128K).
    #[arg(short = 'N', long)]
    no_delay: bool,
    // iperf3's flags that pathprobe does not have: taken only to refuse
    // them with a message that names what to use instead.
    #[arg(short = 's', long, hide = true)]
    server: bool,
    #[arg(short = 'n', long, hide = true, value_name = "BYTES")]
    bytes: Option<String>,
    #[arg(short = 'k', long, hide = true, value_name = "BLOCKS")]
    blocks: Option<String>,
    #[arg(short = 'M', long, hide = true, value_name = "MSS")]
    set_mss: Option<String>,
    // nuttcp's -T (time) and iperf3's -f (format), answered likewise.
    #[arg(
        short = 'T',
        hide = true,
        value_name = "SECS",
        allow_hyphen_values = true
    )]
    nuttcp_time: Option<String>,
    #[arg(short = 'f', long = "format", hide = true, value_name = "UNIT")]
    format: Option<String>,
    /// File holding the responder's shared secret, to authenticate with.
    #[arg(long = "auth.secret-file", value_name = "FILE")]
    auth_secret_file: Option<PathBuf>,
}

/// Parses the process's arguments; on a usage error, prints clap's
/// message (or, for `probe -J`, a JSON error document) and exits 2.
pub fn parse() -> Cli {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match try_parse(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            let json = wants_json(&argv);
            if json && usage_error_kind(e.kind()) {
                println!(
                    "{}",
                    pathprobe::report::error_json(&ProbeError::BadArgument(usage_message(&e)))
                );
                std::process::exit(2);
            }
            e.exit()
        }
    }
}

/// Parses `argv` (program name first), with iperf3's habits answered
/// before clap's generic messages, which mislead (for `-c`, clap suggests
/// `-- -c`).
pub fn try_parse(argv: &[std::ffi::OsString]) -> Result<Cli, clap::Error> {
    let mut cmd = with_responder_defaults(Cli::command());
    let first = argv.get(1).and_then(|a| a.to_str()).unwrap_or_default();
    let habit = match first {
        "-s" | "--server" => Some(
            "pathprobe has no -s: to answer probes as `iperf3 -s` does, run `pathprobe respond`",
        ),
        "-c" | "--client" => Some(
            "give the subcommand and the host: pathprobe probe HOST (or pathprobe probe -c HOST)",
        ),
        _ if first.starts_with("-c") => {
            Some("give the subcommand and the host: pathprobe probe HOST")
        }
        _ => None,
    };
    if let Some(m) = habit {
        return Err(cmd.error(clap::error::ErrorKind::UnknownArgument, m));
    }
    if first == "probe" {
        if let Some(m) = nuttcp_receive(&argv[2..]) {
            let probe = cmd
                .find_subcommand_mut("probe")
                .expect("probe is a subcommand");
            return Err(probe.error(clap::error::ErrorKind::InvalidValue, m));
        }
    }
    let matches = cmd.try_get_matches_from_mut(argv)?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))?;
    if let Command::Probe(args) = &cli.command {
        let probe = cmd
            .find_subcommand_mut("probe")
            .expect("probe is a subcommand");
        if let Some(m) = args.unsupported() {
            return Err(probe.error(clap::error::ErrorKind::ArgumentConflict, m));
        }
        if args.target().is_none() && !args.loopback {
            return Err(probe.error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "give the host to probe as an argument: pathprobe probe HOST (or --loopback)",
            ));
        }
    }
    Ok(cli)
}

/// nuttcp's `-r` (receive) where pathprobe's `-r` (netperf's sizes) wants
/// a value: `-r HOST` or a trailing `-r`. clap would say "invalid size" or
/// "a value is required", neither of which names `-R`.
fn nuttcp_receive(args: &[std::ffi::OsString]) -> Option<&'static str> {
    let at = args.iter().position(|a| a == "-r")?;
    let value = args.get(at + 1).and_then(|v| v.to_str());
    match value {
        Some(v) if !v.starts_with('-') && parse_rr_sizes(v).is_ok() => None,
        _ => Some(
            "-r takes request,response sizes here (netperf's, with --mode tcp_rr or tcp_crr, e.g. -r 64,1k); \
             for nuttcp's -r (receive: the far end sends), use -R",
        ),
    }
}

/// Whether clap's error is a usage error, rather than `--help` or
/// `--version` output, which it also reports as an error.
fn usage_error_kind(kind: clap::error::ErrorKind) -> bool {
    use clap::error::ErrorKind as K;
    !matches!(
        kind,
        K::DisplayHelp | K::DisplayVersion | K::DisplayHelpOnMissingArgumentOrSubcommand
    )
}

/// The first line of clap's message, without its `error: ` prefix.
fn usage_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

/// Whether a `probe` command line asks for JSON: the error then has to be
/// JSON too, although clap could not parse the line.
fn wants_json(argv: &[std::ffi::OsString]) -> bool {
    if argv.get(1).and_then(|a| a.to_str()) != Some("probe") {
        return false;
    }
    argv.iter().skip(2).filter_map(|a| a.to_str()).any(|a| {
        a == "--json"
            || (a.starts_with('-')
                && !a.starts_with("--")
                && a.len() > 1
                && a[1..].chars().all(|c| c.is_ascii_alphanumeric())
                && a.contains('J'))
    })
}

/// Shows, in `respond --help`, the defaults the omitted limits take; they
/// are computed, so they stay those of [`ResponderSection::default`].
fn with_responder_defaults(cmd: clap::Command) -> clap::Command {
    let d = ResponderSection::default();
    let defaults = [
        ("port", DEFAULT_PORT.to_string()),
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
        (
            "max_test_seconds_per_client_per_hour",
            units::format_duration(d.max_test_seconds_per_client_per_hour),
        ),
        (
            "max_unauthenticated_udp_bitrate",
            units::format_rate(d.max_unauthenticated_udp_bitrate),
        ),
        (
            "first_message_timeout",
            units::format_duration(d.first_message_timeout),
        ),
        (
            "max_connections_per_second",
            d.max_connections_per_second.to_string(),
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

fn parse_zerocopy(s: &str) -> Result<ZeroCopy, String> {
    s.parse()
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
        let port = match (self.listen.1, self.port) {
            (Some(a), Some(b)) if a != b => {
                anyhow::bail!("--listen gives port {a} and --port {b}: give the port once")
            }
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) => DEFAULT_PORT,
        };
        Ok(ResponderSection {
            listen: SocketAddr::new(self.listen.0, port),
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
            max_unauthenticated_udp_bitrate: self
                .max_unauthenticated_udp_bitrate
                .unwrap_or(d.max_unauthenticated_udp_bitrate),
            max_test_seconds_per_client_per_hour: self
                .max_test_seconds_per_client_per_hour
                .unwrap_or(d.max_test_seconds_per_client_per_hour),
            // Zero would close every connection at once; the file refuses it.
            first_message_timeout: self
                .first_message_timeout
                .filter(|t| !t.is_zero())
                .unwrap_or(d.first_message_timeout),
            max_connections_per_second: self
                .max_connections_per_second
                .unwrap_or(d.max_connections_per_second),
            secret_file: self.auth_secret_file.clone(),
            secret: read_secret(self.auth_secret_file.as_deref())?,
            allow: self.allow.clone(),
            deny: self.deny.clone(),
            iperf3_port: self.iperf3_port,
            zerocopy: self.zerocopy.unwrap_or(d.zerocopy),
            ..d
        })
    }
}

/// What `--mode trace` asks for, before the target is resolved.
pub struct TraceRequest {
    pub proto: pathprobe::trace::Proto,
    pub cport: Option<u16>,
    pub bind: Option<IpAddr>,
    pub ipv4: bool,
    pub ipv6: bool,
    pub limits: pathprobe::trace::TraceLimits,
}

impl ProbeArgs {
    /// `Some` with `--mode trace`.
    pub fn trace_request(&self) -> Option<TraceRequest> {
        if self.mode.as_deref() != Some("trace") {
            return None;
        }
        let proto = if self.trace_protocol == "udp" {
            pathprobe::trace::Proto::Udp
        } else {
            pathprobe::trace::Proto::Tcp
        };
        Some(TraceRequest {
            proto,
            cport: self.cport,
            bind: self.bind,
            ipv4: self.ipv4,
            ipv6: self.ipv6,
            limits: pathprobe::trace::TraceLimits {
                max_hops: self.max_hops,
                ..Default::default()
            }
            .clamped(),
        })
    }

    /// The host to probe: the argument, or iperf3's `-c HOST`.
    pub fn target(&self) -> Option<&str> {
        self.target
            .as_deref()
            .or(self.client.as_deref())
            .or(self.iperf3.as_ref().and_then(Option::as_deref))
    }

    /// The port to probe when the target gives none.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(if self.iperf3.is_some() {
            pathprobe::protocol::iperf3::IPERF3_PORT
        } else {
            DEFAULT_PORT
        })
    }

    /// Why an iperf3 flag given cannot be honoured, naming what to use.
    fn unsupported(&self) -> Option<String> {
        if self.server {
            return Some("pathprobe probe has no server mode (-s): run `pathprobe respond` on the host to probe".into());
        }
        let by_amount = [("-n/--bytes", &self.bytes), ("-k/--blocks", &self.blocks)];
        if let Some((flag, _)) = by_amount.iter().find(|(_, v)| v.is_some()) {
            return Some(format!(
                "{flag} is not supported: pathprobe measures for a time, not an amount; give the time with -t (e.g. -t 10)"
            ));
        }
        if let Some(t) = &self.nuttcp_time {
            return Some(format!(
                "-T is nuttcp's time: pathprobe takes it as -t, iperf3's spelling (-t {t})"
            ));
        }
        if self.target.is_some() as u8
            + self.client.is_some() as u8
            + self.iperf3.as_ref().is_some_and(Option::is_some) as u8
            > 1
        {
            return Some(
                "give the host once: pathprobe probe --iperf3 -c HOST (or --iperf3 HOST)".into(),
            );
        }
        // iperf3's -f m (Mbits) and -f M (MBytes) are what pathprobe prints
        // anyway, so they are accepted as iperf3 users type them.
        if let Some(unit) = self.format.as_deref().filter(|u| !matches!(*u, "m" | "M")) {
            return Some(format!("-f {unit} is not supported: pathprobe always prints Mbps (and MiB), as -f m does; -J gives exact bytes and bits per second"));
        }
        if self.set_mss.is_some() {
            return Some("-M/--set-mss is not supported: pathprobe leaves the MSS to the kernel, which follows the path MTU; lower the route's MTU (ip route ... mtu N) to test smaller segments".into());
        }
        None
    }

    /// Notes for flags accepted and ignored (iperf3's that pathprobe
    /// needs not, another mode's), and for a udp_rr -i that leaves too few
    /// samples, for stderr.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.no_delay {
            notes.push(
                "note: -N is ignored: pathprobe does not set TCP_NODELAY on data sockets".into(),
            );
        }
        let kind = self.kind();
        // Flags of another mode: silently dropping them would let the user
        // believe they shaped the test.
        let mut foreign: Vec<(&str, String)> = Vec::new();
        let shape = registry::of(kind).rr_shape();
        // The modes whose shape takes a flag, for "it applies to …".
        let modes = |takes: fn(RrShape) -> bool| {
            let names: Vec<&str> = registry::KINDS
                .iter()
                .filter(|k| takes(k.rr_shape()))
                .map(|k| k.kind().as_str())
                .collect();
            format!("it applies to --mode {}", names.join(" and "))
        };
        let sized = |s: RrShape| matches!(s, RrShape::Sized { .. });
        if self.rr_size.is_some() && !sized(shape) {
            let what = if shape == RrShape::Paced {
                format!("{kind}'s sizes come from -l")
            } else {
                modes(sized)
            };
            foreign.push(("-r", what));
        }
        if self.burst.is_some() && shape != (RrShape::Sized { burst: true }) {
            foreign.push(("--burst", modes(|s| s == RrShape::Sized { burst: true })));
        }
        if self.nagle && !sized(shape) {
            foreign.push(("--nagle", modes(sized)));
        }
        if self.no_offload && registry::of(kind).transport() != Transport::Udp {
            foreign.push(("--no-offload", "it applies to UDP".into()));
        }
        for (flag, why) in foreign {
            notes.push(format!("note: {flag} is ignored in a {kind} test: {why}"));
        }
        if let (RrShape::Paced, Some(every)) = (shape, self.interval) {
            // udp_rr's -i is its send interval (irtt's), not reports: a
            // habit of iperf3's `-i 1` leaves a handful of round trips.
            let samples = if every.is_zero() {
                0
            } else {
                (self.time().as_secs_f64() / every.as_secs_f64()).floor() as u64
            };
            if samples < MIN_UDP_RR_SAMPLES {
                notes.push(format!(
                    "note: with --mode udp_rr, -i is the send interval (irtt's -i), not reports: \
                     -i {} for {} sends {samples} request{}, too few for its percentiles; \
                     leave -i out for the default 10ms, or lengthen -t",
                    units::format_duration(every),
                    units::format_duration(self.time()),
                    if samples == 1 { "" } else { "s" }
                ));
            }
        }
        notes
    }

    /// The probe these flags ask for.
    pub fn spec(&self) -> Result<ProbeSpec, ProbeError> {
        let (affinity, remote_affinity) = match &self.affinity {
            Some(a) => {
                units::parse_affinity(a).map_err(|e| ProbeError::BadArgument(e.to_string()))?
            }
            None => (None, None),
        };
        Ok(ProbeSpec {
            kind: self.kind(),
            direction: if self.bidir {
                Direction::Bidir
            } else if self.reverse {
                Direction::Receive
            } else {
                Direction::Send
            },
            duration: self.time(),
            omit: self.omit,
            adaptive: self.adaptive()?,
            streams: self.parallel,
            bitrate: self.bitrate,
            length: self.length,
            window: self.window,
            congestion: self.congestion.clone(),
            tos: self.tos,
            bind: self.bind,
            family: if self.ipv4 {
                Some(IpFamily::V4)
            } else if self.ipv6 {
                Some(IpFamily::V6)
            } else {
                None
            },
            affinity,
            remote_affinity,
            connect_timeout: self.connect_timeout,
            secret: read_secret(self.auth_secret_file.as_deref())
                .map_err(|e| ProbeError::BadArgument(format!("{e:#}")))?,
            // udp_rr's --interval is its schedule (in `rr`), not reports.
            interval: self.interval.filter(|i| !i.is_zero() && !self.paced()),
            interval_events: None,
            no_offload: self.no_offload,
            rr: self.rr_params(),
            wire: if self.iperf3.is_some() {
                Wire::Iperf3
            } else {
                Wire::Pathprobe
            },
            port: None,
            zerocopy: self.zerocopy_mode(),
            ..ProbeSpec::default()
        })
    }

    /// The measured time: the fixed one, or an adaptive probe's maximum.
    fn time(&self) -> Duration {
        match self.time {
            ProbeTime::Fixed(d) => d,
            ProbeTime::Auto => self
                .max_duration
                .unwrap_or(pathprobe::engine::adaptive::DEFAULT_MAX_DURATION),
        }
    }

    /// `-t auto`'s request; its flags without it are a usage error rather
    /// than silently a fixed probe.
    fn adaptive(&self) -> Result<Option<AdaptiveRequest>, ProbeError> {
        if self.time != ProbeTime::Auto {
            let given: Vec<&str> = [
                ("--min-duration", self.min_duration.is_some()),
                ("--max-duration", self.max_duration.is_some()),
                ("--precision", self.precision.is_some()),
            ]
            .iter()
            .filter(|(_, set)| *set)
            .map(|(f, _)| *f)
            .collect();
            if given.is_empty() {
                return Ok(None);
            }
            return Err(ProbeError::BadArgument(format!(
                "{} appl{} to -t auto only",
                given.join(" and "),
                if given.len() == 1 { "ies" } else { "y" }
            )));
        }
        let min = self
            .min_duration
            .unwrap_or(pathprobe::engine::adaptive::DEFAULT_MIN_DURATION)
            .min(self.time());
        let precision = self
            .precision
            .unwrap_or(pathprobe::engine::adaptive::DEFAULT_PRECISION);
        Ok(Some(AdaptiveRequest {
            min_duration_ms: min.as_millis() as u64,
            precision_ppm: (precision * 1e6).round() as u32,
            receiver_progress: false,
        }))
    }

    fn zerocopy_mode(&self) -> ZeroCopy {
        if self.no_zerocopy {
            ZeroCopy::Off
        } else {
            self.zerocopy.unwrap_or_default()
        }
    }

    fn kind(&self) -> Kind {
        match self.mode.as_deref().and_then(registry::by_name) {
            Some(k) => k.kind(),
            // iperf3's habit: -u for UDP, TCP without.
            None if self.udp => registry::iperf3_kind(Transport::Udp),
            None => registry::iperf3_kind(Transport::Tcp),
        }
    }

    /// A paced request/response mode (udp_rr): -l and --interval are its
    /// schedule.
    fn paced(&self) -> bool {
        registry::of(self.kind()).rr_shape() == RrShape::Paced
    }

    /// The request/response shape -r, --burst and --nagle ask for, over
    /// the defaults; `None` when none of them was given.
    fn rr_params(&self) -> Option<pathprobe::probe::spec::RrParams> {
        if self.paced() {
            // Sizes come from -l (see ProbeSpec::effective_rr).
            return Some(pathprobe::probe::spec::RrParams {
                request_size: 0,
                response_size: 0,
                burst: 1,
                nodelay: false,
                interval_us: self.interval.map_or(0, |i| i.as_micros() as u64),
            });
        }
        if self.rr_size.is_none() && self.burst.is_none() && !self.nagle {
            return None;
        }
        let d = pathprobe::probe::spec::DEFAULT_RR;
        let (request_size, response_size) =
            self.rr_size.unwrap_or((d.request_size, d.response_size));
        Some(pathprobe::probe::spec::RrParams {
            request_size,
            response_size,
            burst: self.burst.unwrap_or(d.burst),
            nodelay: !self.nagle,
            interval_us: 0,
        })
    }
}

/// Fewer udp_rr round trips than this and `-i` draws a note: a p99 of
/// less than a hundred samples is the largest of them.
const MIN_UDP_RR_SAMPLES: u64 = 100;

/// The `--mode` values: every kind of the registry.
fn mode_names() -> clap::builder::PossibleValuesParser {
    // `trace` is no probe kind: it traces the path a probe's flow takes.
    clap::builder::PossibleValuesParser::new(
        registry::KINDS
            .iter()
            .map(|k| k.kind().as_str())
            .chain(["trace"]),
    )
}

/// `REQ,RESP` or one size for both, as netperf's `-r`.
fn parse_rr_sizes(s: &str) -> Result<(u32, u32), String> {
    let (req, resp) = s.split_once(',').unwrap_or((s, s));
    Ok((parse_size_u32(req.trim())?, parse_size_u32(resp.trim())?))
}

/// `-t`: seconds, or `auto` for an adaptive duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProbeTime {
    Fixed(Duration),
    Auto,
}

fn parse_time(s: &str) -> Result<ProbeTime, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(ProbeTime::Auto);
    }
    if s.trim().starts_with('-') {
        return Err(format!(
            "{s} is negative: give the seconds to measure, more than zero (e.g. -t 10), or auto"
        ));
    }
    parse_duration(s).map(ProbeTime::Fixed)
}

fn parse_precision(s: &str) -> Result<f64, String> {
    units::parse_precision(s).map_err(|e| e.to_string())
}

// clap wants `Result<_, String>`-like errors; the library's are typed.
fn parse_duration(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}
fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!(
            "{s:?} is no time: expected more than zero (e.g. 60s)"
        )),
        d => Ok(d),
    }
}
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    units::parse_listen_address(s).map_err(|e| e.to_string())
}
fn parse_listen_host(s: &str) -> Result<(IpAddr, Option<u16>), String> {
    units::parse_listen_host(s).map_err(|e| e.to_string())
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

    fn argv(args: &[&str]) -> Vec<std::ffi::OsString> {
        std::iter::once("pathprobe")
            .chain(args.iter().copied())
            .map(Into::into)
            .collect()
    }

    fn probe(args: &[&str]) -> ProbeArgs {
        match try_parse(&argv(&[&["probe"], args].concat()))
            .unwrap()
            .command
        {
            Command::Probe(a) => a,
            _ => unreachable!("parsed the probe subcommand"),
        }
    }

    fn usage_error(args: &[&str]) -> String {
        match try_parse(&argv(args)) {
            Ok(_) => panic!("{args:?} parsed"),
            Err(e) => usage_message(&e),
        }
    }

    #[test]
    fn iperf3_habits_are_taken_or_answered() {
        let a = probe(&["-c", "db.example", "-4", "-V", "-Z", "-N"]);
        assert_eq!(a.target(), Some("db.example"));
        assert!(a.verbose);
        assert_eq!(a.spec().unwrap().family, Some(IpFamily::V4));
        // -Z is taken (zero copy on); -N is noted as ignored.
        assert_eq!(
            a.notes(),
            ["note: -N is ignored: pathprobe does not set TCP_NODELAY on data sockets"]
        );
        assert_eq!(a.zerocopy_mode(), ZeroCopy::On);
        assert_eq!(
            probe(&["-6", "h"]).spec().unwrap().family,
            Some(IpFamily::V6)
        );
        assert_eq!(probe(&["h"]).spec().unwrap().family, None);
        assert!(usage_error(&["-s"]).contains("run `pathprobe respond`"));
        assert!(usage_error(&["probe", "-s"]).contains("run `pathprobe respond`"));
        assert!(usage_error(&["-c", "h"]).contains("pathprobe probe HOST"));
        assert!(usage_error(&["probe"]).contains("pathprobe probe HOST"));
        for flag in ["-n", "-k"] {
            let m = usage_error(&["probe", flag, "1G", "h"]);
            assert!(m.contains("not supported") && m.contains("-t"), "{m}");
        }
        assert!(
            usage_error(&["probe", "-M", "1400", "h"]).contains("-M/--set-mss is not supported")
        );
        assert!(usage_error(&["probe", "-4", "-6", "h"]).contains("cannot be used with"));
    }

    #[test]
    fn json_is_seen_before_parsing() {
        assert!(wants_json(&argv(&["probe", "-J", "--bogus"])));
        assert!(wants_json(&argv(&["probe", "-uJ", "h"])));
        assert!(wants_json(&argv(&["probe", "h", "--json"])));
        assert!(!wants_json(&argv(&["probe", "h"])));
        assert!(!wants_json(&argv(&["serve", "-J"])));
    }

    #[test]
    fn listen_addresses_take_every_form() {
        let serve = |a: &str| match try_parse(&argv(&["serve", "--web.listen-address", a]))
            .map(|c| c.command)
        {
            Ok(Command::Serve(s)) => Ok(s.web_listen_address),
            Ok(_) => unreachable!(),
            Err(e) => Err(usage_message(&e)),
        };
        assert_eq!(serve(":9813").unwrap(), "[::]:9813".parse().unwrap());
        assert_eq!(
            serve("127.0.0.1:1").unwrap(),
            "127.0.0.1:1".parse().unwrap()
        );
        assert!(serve("9813").is_err());
        let listen = |args: &[&str]| respond(args).section().map(|s| s.listen);
        assert_eq!(
            listen(&["--listen", "127.0.0.1:5301"]).unwrap(),
            "127.0.0.1:5301".parse().unwrap()
        );
        assert_eq!(
            listen(&["--listen", "[::]:5301"]).unwrap(),
            "[::]:5301".parse().unwrap()
        );
        assert_eq!(
            listen(&["--listen", ":7", "-p", "7"]).unwrap(),
            "[::]:7".parse().unwrap()
        );
        assert_eq!(
            listen(&["--listen", "::1", "-p", "7"]).unwrap(),
            "[::1]:7".parse().unwrap()
        );
        assert_eq!(
            listen(&[]).unwrap(),
            SocketAddr::new("::".parse().unwrap(), DEFAULT_PORT)
        );
        let e = listen(&["--listen", "127.0.0.1:1", "-p", "2"]).unwrap_err();
        assert!(e.to_string().contains("give the port once"), "{e}");
    }

    #[test]
    fn log_level_and_max_duration_are_checked_at_start() {
        let m = usage_error(&["serve", "--log.level", "verbose"]);
        assert!(m.contains("invalid value 'verbose'"), "{m}");
        let text = try_parse(&argv(&["serve", "--log.level", "verbose"]))
            .err()
            .unwrap()
            .to_string();
        assert!(text.contains("error, warn, info, debug, trace"), "{text}");
        assert!(try_parse(&argv(&["serve", "--log.level", "debug"])).is_ok());
        let m = usage_error(&["respond", "--max-duration", "0"]);
        assert!(m.contains("expected more than zero"), "{m}");
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
            "--max-test-seconds-per-client-per-hour",
            "10m",
            "--first-message-timeout",
            "500ms",
            "--max-connections-per-second",
            "300",
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
        assert_eq!(
            s.max_test_seconds_per_client_per_hour,
            Duration::from_secs(600)
        );
        assert_eq!(s.first_message_timeout, Duration::from_millis(500));
        assert_eq!(s.max_connections_per_second, 300);
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
        assert!(help.contains("(-l) accepted [default: 1M]"), "{help}");
        assert!(help.contains("(e.g. 2s) [default: 2s]"), "{help}");
        assert!(help.contains("(-w) accepted [default: 256M]"), "{help}");
        assert!(help.contains("[default: clamp]"), "{help}");
        assert!(help.contains("are reset [default: 20000]"), "{help}");
    }

    #[test]
    fn tcp_crr_mode_takes_rr_sizes_and_no_burst() {
        let spec = probe(&["--mode", "tcp_crr", "-r", "64,1k", "h"])
            .spec()
            .unwrap();
        assert_eq!(spec.kind, Kind::TcpCrr);
        let rr = spec.rr.unwrap();
        assert_eq!((rr.request_size, rr.response_size, rr.burst), (64, 1024, 1));
        assert!(rr.nodelay);
        assert!(spec.validate().is_ok());
        let burst = probe(&["--mode", "tcp_crr", "--burst", "2", "h"])
            .spec()
            .unwrap();
        assert!(burst.validate().unwrap_err().0.contains("no --burst"));
        assert!(usage_error(&["respond", "--max-connections-per-second", "0"]).contains("0"));
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
