//! The `pathprobe` binary: parses flags ([`cli`]) and calls the library.

mod cli;

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;

use anyhow::Context;

use pathprobe::probe::{self, Target};
use pathprobe::report;
use pathprobe::responder::{self, Responder};

use cli::{Command, ProbeArgs, ServeArgs};

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // No colour: every line is escaped on its way out (a peer's string
    // must not start a line of its own), and so would the colour codes be.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(pathprobe::logging::escaping_stderr)
        .init();
}

/// Logging for `serve` and `respond`, as Prometheus' exporters do it:
/// logfmt or JSON on stderr, at `--log.level`, every line escaped
/// ([`pathprobe::logging`]).
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
                    // Fields beside `message` at the top level, as other
                    // exporters' JSON logs have them, not under `fields`.
                    .flatten_event(true)
                    .with_ansi(false)
                    .with_writer(pathprobe::logging::escaping_stderr),
            )
            .init();
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .event_format(tracing_logfmt::EventsFormatter::default())
                    .fmt_fields(tracing_logfmt::FieldsFormatter::default())
                    .with_ansi(false)
                    .with_writer(pathprobe::logging::escaping_stderr),
            )
            .init();
    }
    Ok(())
}

/// Raises the descriptor limit before any listener opens, so that many
/// connections cannot run the service out of descriptors at 1024. A failure
/// is only logged: the service still runs, at the old limit.
fn raise_fd_limit() {
    match pathprobe::limits::raise_nofile_limit() {
        Ok(n) => tracing::debug!(limit = n, "RLIMIT_NOFILE soft limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise RLIMIT_NOFILE"),
    }
}

async fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    use pathprobe::service::{self, ConfigSource, Listeners};
    raise_fd_limit();
    let source = match args.config_file {
        Some(p) => ConfigSource::File(p),
        None => ConfigSource::Embedded,
    };
    let http = bind_or_ipv4(args.web_listen_address, |a| async move {
        responder::bind_tcp(a)
    })
    .await
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
    service::run_with_web_config(
        source,
        args.web_config_file,
        Listeners {
            http,
            responder: None,
        },
        reload_rx,
        shutdown_signal(),
    )
    .await
}

/// Binds `addr` with `bind`. The default listen address is the IPv6
/// wildcard, which also takes IPv4; on a host without IPv6 it falls back to
/// 0.0.0.0 on the same port.
async fn bind_or_ipv4<T, F, Fut>(addr: SocketAddr, bind: F) -> io::Result<T>
where
    F: Fn(SocketAddr) -> Fut,
    Fut: Future<Output = io::Result<T>>,
{
    match bind(addr).await {
        Err(_) if addr.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED) => {
            bind(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), addr.port())).await
        }
        other => other,
    }
}

/// Exit status of a usage error (clap's own), as opposed to 1 for any
/// other failure.
const USAGE: u8 = 2;

/// `pathprobe probe --mode trace HOST`: the hops of the flow a probe of
/// HOST would use, as text (`-v` adds nothing: every hop is shown) or -J.
async fn run_trace(args: &ProbeArgs, req: cli::TraceRequest) -> ExitCode {
    let outcome = async {
        let target = Target::parse(args.target().unwrap_or_default(), args.port())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let addrs = tokio::net::lookup_host((target.host.as_str(), target.port)).await?;
        let dst = addrs
            .filter(|a| if a.is_ipv4() { !req.ipv6 } else { !req.ipv4 })
            .find(|a| req.bind.is_none_or(|b| b.is_ipv4() == a.is_ipv4()))
            .ok_or_else(|| anyhow::anyhow!("{target}: no address of the family asked for"))?;
        let source = match (req.bind, req.cport) {
            (None, None) => None,
            (b, p) => Some(SocketAddr::new(
                b.unwrap_or(if dst.is_ipv4() {
                    Ipv4Addr::UNSPECIFIED.into()
                } else {
                    Ipv6Addr::UNSPECIFIED.into()
                }),
                p.unwrap_or(0),
            )),
        };
        let spec = pathprobe::trace::TraceSpec {
            proto: req.proto,
            destination: dst,
            source,
            limits: req.limits,
        };
        Ok::<_, anyhow::Error>(pathprobe::trace::trace(spec).await?)
    }
    .await;
    match outcome {
        Ok(t) => {
            if args.json {
                report::print_line(&serde_json::json!({ "trace": t }).to_string());
            } else {
                report::print_text(&t.text());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            if args.json {
                report::print_line(&serde_json::json!({ "error": format!("{e:#}") }).to_string());
            } else {
                eprintln!("pathprobe: trace: {e:#}");
            }
            ExitCode::from(1)
        }
    }
}

async fn run_probe(args: ProbeArgs) -> ExitCode {
    if let Some(req) = args.trace_request() {
        return run_trace(&args, req).await;
    }
    for note in args.notes() {
        eprintln!("{note}");
    }
    let mut stream = None;
    let mut live = None;
    let outcome = async {
        let mut spec = args.spec()?;
        if args.json_stream {
            let target = args.target().unwrap_or("loopback");
            let s = report::JsonStream::start(&spec, target);
            spec.interval_events = s.sink();
            stream = Some(s);
        } else if !args.json && spec.interval.is_some() {
            let l = report::LiveIntervals::start(&spec);
            spec.interval_events = l.sink();
            spec.clamp_notes = Some(l.clamp_notes());
            live = Some(l);
        }
        if args.loopback {
            spec.check_local()
                .map_err(|e| probe::ProbeError::BadArgument(e.0))?;
            pathprobe::loopback::probe_loopback(&spec, args.ipv6).await
        } else {
            let target = Target::parse(args.target().unwrap_or_default(), args.port())?;
            probe::probe(&target, &spec).await
        }
    }
    .await;
    if let Some(stream) = stream {
        let code = if outcome.is_ok() { 0 } else { 1 };
        stream.end(&outcome);
        return ExitCode::from(code);
    }
    let was_live = live.is_some();
    let clamp_noted = live.is_some_and(|live| live.finish());
    match outcome {
        Ok(result) => {
            if args.json {
                report::print_line(&report::json(&result));
            } else if was_live {
                report::print_text(&report::text_after_live(&result, args.verbose, clamp_noted));
            } else {
                report::print_text(&report::text(&result, args.verbose));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            if args.json_stream {
                report::print_line(&report::json_stream_error(&e));
            } else if args.json {
                report::print_line(&report::error_json(&e));
            } else {
                eprintln!("{}", report::error_text(&e));
            }
            // A bad argument is found before any traffic: a usage error.
            match e {
                probe::ProbeError::BadArgument(_) => ExitCode::from(USAGE),
                _ => ExitCode::from(1),
            }
        }
    }
}

async fn run_respond(section: pathprobe::config::ResponderSection) -> anyhow::Result<()> {
    raise_fd_limit();
    let addr = section.listen;
    let (tcp, udp) = bind_or_ipv4(addr, responder::bind)
        .await
        .with_context(|| format!("cannot listen on {addr} (TCP and UDP)"))?;
    let config = section.to_responder_config();
    let responder = Responder::new(tcp, udp, config).context("starting the responder")?;
    // Like iperf3's "Server listening on 5201"; with --port 0 it tells the port.
    println!(
        "pathprobe responder listening on {} (TCP and UDP)",
        responder.local_addr()?
    );
    let iperf3 = match section.iperf3_port {
        Some(port) => {
            let at = SocketAddr::new(addr.ip(), port);
            let tcp = bind_or_ipv4(at, |a| async move { responder::bind_tcp(a) })
                .await
                .with_context(|| format!("cannot listen on {at} for iperf3 clients"))?;
            let server = responder.iperf3(tcp);
            println!(
                "pathprobe responder answering iperf3 clients on {} (TCP and UDP)",
                server.local_addr()?
            );
            Some(tokio::spawn(server.serve(shutdown_signal())))
        }
        None => None,
    };
    responder.serve(shutdown_signal()).await;
    if let Some(task) = iperf3 {
        task.abort();
    }
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
    let cli = cli::parse();
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
        Command::CheckConfig {
            file,
            web_config_file,
        } => {
            let mut report = pathprobe::service::check::check_config(&file);
            if let Some(web) = web_config_file {
                pathprobe::service::check::check_web_config(&web, &mut report);
            }
            for line in &report.stderr {
                eprintln!("{line}");
            }
            for line in &report.stdout {
                println!("{line}");
            }
            ExitCode::from(report.code)
        }
        Command::Serve(args) => {
            if let Err(e) = init_service_logging(&args.log_level, &args.log_format) {
                eprintln!("pathprobe: {e:#}");
                return ExitCode::from(USAGE);
            }
            match runtime.block_on(run_serve(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    // Once, in the log's format: the log is stderr already.
                    // A file's errors one a line, as check-config lists
                    // them, so that logfmt and JSON keep each whole.
                    match e.downcast_ref::<pathprobe::config::ConfigError>() {
                        Some(pathprobe::config::ConfigError::Several(all)) => {
                            for one in all {
                                tracing::error!(error = %one, "invalid configuration");
                            }
                            tracing::error!(
                                errors = all.len(),
                                "pathprobe serve failed: the configuration has errors"
                            );
                        }
                        _ => tracing::error!(error = %format!("{e:#}"), "pathprobe serve failed"),
                    }
                    // --config.file that cannot be read is a flag's file,
                    // a usage error (README, exit codes) as for `probe
                    // --auth.secret-file`; an invalid one is a failure.
                    match e.downcast_ref::<pathprobe::config::ConfigError>() {
                        Some(pathprobe::config::ConfigError::Read { .. }) => ExitCode::from(USAGE),
                        _ => ExitCode::from(1),
                    }
                }
            }
        }
        Command::Respond(args) => {
            // The same subscriber as `serve`, so that both log alike.
            if let Err(e) = init_service_logging(&args.log_level, &args.log_format) {
                eprintln!("pathprobe: {e:#}");
                return ExitCode::from(USAGE);
            }
            let section = match args.section() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("pathprobe: {e:#}");
                    return ExitCode::from(USAGE);
                }
            };
            match runtime.block_on(run_respond(section)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("pathprobe: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
    }
}
