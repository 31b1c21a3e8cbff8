//! The `pathprobe` binary: parses flags and calls the library.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use ipnet::IpNet;

use pathprobe::auth::Secret;
use pathprobe::probe::{self, Direction, Kind, ProbeError, ProbeSpec, Target};
use pathprobe::protocol::DEFAULT_PORT;
use pathprobe::report;
use pathprobe::responder::access::AccessList;
use pathprobe::responder::{self, LimitPolicy, Responder, ResponderConfig};
use pathprobe::units;

#[derive(Parser)]
#[command(
    name = "pathprobe",
    version,
    about = "Continuous TCP/UDP path throughput probing"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
struct ServeArgs {
    /// Configuration file; without it, the embedded default (config/pathprobe.yml).
    #[arg(long = "config.file", value_name = "FILE")]
    config_file: Option<PathBuf>,
    /// Address for /metrics, /probe and the other HTTP endpoints.
    #[arg(long = "web.listen-address", value_name = "ADDR", default_value = pathprobe::service::DEFAULT_WEB_LISTEN)]
    web_listen_address: SocketAddr,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long = "log.level", value_name = "LEVEL", default_value = "info")]
    log_level: String,
    /// Log format.
    #[arg(long = "log.format", value_name = "FORMAT", default_value = "logfmt", value_parser = ["logfmt", "json"])]
    log_format: String,
}

#[derive(Args)]
struct RespondArgs {
    /// Address to listen on; [::] also accepts IPv4.
    #[arg(long, default_value = "::")]
    listen: IpAddr,
    /// TCP and UDP port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Longest test accepted, omit included (e.g. 60s).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    max_duration: Duration,
    /// Most streams per direction accepted.
    #[arg(long, default_value_t = 16)]
    max_streams: u32,
    /// Highest rate accepted per direction (e.g. 10g); 0 for no cap.
    #[arg(long, default_value = "0", value_parser = parse_rate)]
    max_bitrate: u64,
    /// Tests run at once; further probers are told the responder is busy.
    #[arg(long, default_value_t = 1)]
    max_concurrent: usize,
    /// Largest TCP write or UDP datagram (-l) accepted.
    #[arg(long, default_value = "16M", value_parser = parse_size_u32)]
    max_length: u32,
    /// Largest socket buffer (-w) accepted.
    #[arg(long, default_value = "256M", value_parser = parse_size_u32)]
    max_window: u32,
    /// What to do with a request over --max-duration, --max-streams,
    /// --max-bitrate, --max-length or --max-window: clamp (run it cut down,
    /// and tell the prober) or refuse (refuse it, naming the limit).
    #[arg(long, default_value = "clamp")]
    limit_policy: LimitPolicy,
    /// Tests one client (IPv4 address or IPv6 /64) may run per minute; 0 for no limit.
    #[arg(long, default_value_t = 60)]
    max_tests_per_client_per_minute: u32,
    /// Payload bytes all tests may move in any hour (e.g. 100G); 0 for no limit.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    max_bytes_per_hour: u64,
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
struct ProbeArgs {
    /// Responder to probe: host, host:port or [ipv6]:port.
    #[arg(required_unless_present = "loopback")]
    target: Option<String>,
    /// Probe over loopback against a responder inside this process.
    #[arg(long, conflicts_with = "target")]
    loopback: bool,
    /// With --loopback, use ::1 instead of 127.0.0.1.
    #[arg(short = '6', long)]
    ipv6: bool,
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
    json: bool,
    /// Responder port, when TARGET does not give one.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Seconds to wait for the connection and each control exchange.
    #[arg(long, default_value = "5", value_parser = parse_duration)]
    connect_timeout: Duration,
    /// Per-stream and per-host detail.
    #[arg(short, long)]
    verbose: bool,
    /// File holding the responder's shared secret, to authenticate with.
    #[arg(long = "auth.secret-file", value_name = "FILE")]
    auth_secret_file: Option<PathBuf>,
}

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
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => s.parse(),
    };
    v.map_err(|_| format!("invalid TOS {s:?}: expected a byte, e.g. 0x10 or 16"))
}

fn parse_affinity(s: &str) -> Result<(Option<usize>, Option<usize>), ProbeError> {
    let bad =
        || ProbeError::BadArgument(format!("affinity {s:?}: expected n or n,m (CPU numbers)"));
    let (local, remote) = match s.split_once(',') {
        Some((l, r)) => (l, Some(r)),
        None => (s, None),
    };
    let local = if local.is_empty() {
        None
    } else {
        Some(local.trim().parse().map_err(|_| bad())?)
    };
    let remote = remote
        .map(|r| r.trim().parse().map_err(|_| bad()))
        .transpose()?;
    Ok((local, remote))
}

impl ProbeArgs {
    fn spec(&self) -> Result<ProbeSpec, ProbeError> {
        let (affinity, remote_affinity) = match &self.affinity {
            Some(a) => parse_affinity(a)?,
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
            secret: self
                .auth_secret_file
                .as_deref()
                .map(Secret::from_file)
                .transpose()
                .map_err(|e| ProbeError::BadArgument(format!("--auth.secret-file: {e}")))?,
        })
    }
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// Logging for the service, as Prometheus' exporters do it: logfmt or JSON
/// on stderr, at `--log.level`.
fn init_service_logging(level: &str, format: &str) -> anyhow::Result<()> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_new(level).with_context(|| {
        format!("invalid --log.level {level:?}: expected error, warn, info, debug or trace")
    })?;
    let registry = tracing_subscriber::registry().with(filter);
    if format == "json" {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .init();
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .event_format(tracing_logfmt::EventsFormatter::default())
                    .fmt_fields(tracing_logfmt::FieldsFormatter::default())
                    .with_writer(std::io::stderr),
            )
            .init();
    }
    Ok(())
}

async fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    use pathprobe::service::{self, ConfigSource, Listeners};
    let source = match args.config_file {
        Some(p) => ConfigSource::File(p),
        None => ConfigSource::Embedded,
    };
    let http = bind_http(args.web_listen_address)
        .with_context(|| format!("cannot listen on {} for HTTP", args.web_listen_address))?;
    let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(1);
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("SIGHUP handler")?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration");
            if reload_tx.send(()).await.is_err() {
                break;
            }
        }
    });
    service::run(
        source,
        Listeners {
            http,
            responder: None,
        },
        reload_rx,
        shutdown_signal(),
    )
    .await
}

fn bind_http(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    match responder::bind_tcp(addr) {
        // No IPv6 on this host: the default [::] falls back to 0.0.0.0.
        Err(_) if addr.ip() == IpAddr::from([0u16; 8]) => {
            responder::bind_tcp(SocketAddr::new(IpAddr::from([0u8; 4]), addr.port()))
        }
        other => other,
    }
}

async fn run_probe(args: ProbeArgs) -> ExitCode {
    let outcome = async {
        let spec = args.spec()?;
        if args.loopback {
            pathprobe::loopback::probe_loopback(&spec, args.ipv6).await
        } else {
            let target = Target::parse(args.target.as_deref().unwrap_or_default(), args.port)?;
            probe::probe(&target, &spec).await
        }
    }
    .await;
    match outcome {
        Ok(result) => {
            if args.json {
                println!("{}", report::json(&result));
            } else {
                print!("{}", report::text(&result, args.verbose));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            if args.json {
                println!("{}", report::error_json(&e));
            } else {
                eprintln!("{}", report::error_text(&e));
            }
            ExitCode::from(1)
        }
    }
}

async fn run_respond(args: RespondArgs) -> anyhow::Result<()> {
    let addr = SocketAddr::new(args.listen, args.port);
    let (tcp, udp) = match responder::bind(addr).await {
        // No IPv6 on this host: fall back to IPv4 for the default listen address.
        Err(_) if args.listen == IpAddr::from([0u16; 8]) => {
            responder::bind(SocketAddr::new(IpAddr::from([0u8; 4]), args.port)).await
        }
        other => other,
    }
    .with_context(|| format!("cannot listen on {addr} (TCP and UDP)"))?;
    let config = ResponderConfig {
        max_duration: args.max_duration,
        max_streams: args.max_streams,
        max_bitrate: args.max_bitrate,
        max_concurrent_tests: args.max_concurrent.max(1),
        max_length: args.max_length.max(1),
        max_window: args.max_window,
        limit_policy: args.limit_policy,
        max_tests_per_client_per_minute: args.max_tests_per_client_per_minute,
        max_bytes_per_hour: args.max_bytes_per_hour,
        secret: args
            .auth_secret_file
            .as_deref()
            .map(Secret::from_file)
            .transpose()
            .context("--auth.secret-file")?,
        access: AccessList {
            allow: args.allow,
            deny: args.deny,
        },
        ..ResponderConfig::default()
    };
    let responder = Responder::new(tcp, udp, config).context("starting the responder")?;
    // Like iperf3's "Server listening on 5201"; with --port 0 it tells the port.
    println!(
        "pathprobe responder listening on {} (TCP and UDP)",
        responder.local_addr()?
    );
    responder.serve(shutdown_signal()).await;
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pathprobe: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match cli.command {
        Command::Probe(args) => {
            init_logging("warn");
            runtime.block_on(run_probe(args))
        }
        Command::CheckConfig { file } => match pathprobe::config::check_config_file(&file) {
            Ok(summary) => {
                println!("{}: OK ({summary})", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        },
        Command::Serve(args) => {
            if let Err(e) = init_service_logging(&args.log_level, &args.log_format) {
                eprintln!("pathprobe: {e:#}");
                return ExitCode::from(2);
            }
            match runtime.block_on(run_serve(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "pathprobe serve failed");
                    eprintln!("pathprobe: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Respond(args) => {
            init_logging("info");
            match runtime.block_on(run_respond(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("pathprobe: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
    }
}
