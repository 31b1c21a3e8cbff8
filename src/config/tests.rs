//! Tests of whole configuration files: the shipped default, and the
//! fixtures under `tests/fixtures/config/`, with the exact messages an
//! operator sees.

use std::net::SocketAddr;

use super::*;
use crate::probe::{Direction, Kind};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config")
}

fn load_fixture(name: &str) -> Result<Config, String> {
    let text = std::fs::read_to_string(fixture_dir().join(name)).unwrap();
    Config::from_yaml(&text, name).map_err(|e| e.to_string())
}

#[test]
fn embedded_default_runs_loopback_tcp_and_udp_every_minute() {
    let c = Config::default_embedded();
    assert_eq!(c, Config::from_yaml(DEFAULT_CONFIG, "x").unwrap());
    assert!(c.responder.enabled);
    assert_eq!(c.responder, ResponderSection::default());
    assert_eq!(c.scheduler, SchedulerConfig::default());
    assert_eq!(c.host_metrics, HostMetricsConfig::default());
    assert_eq!(c.discovery, DiscoveryConfig::default());
    assert_eq!(c.targets.len(), 1);
    let t = &c.targets[0];
    assert_eq!(t.name(), "loopback");
    assert_eq!(t.address, None);
    assert_eq!(t.modules, ["loopback_tcp", "loopback_udp"]);
    assert_eq!(c.interval_of(t), Duration::from_secs(60));

    let tcp = c.module("loopback_tcp").unwrap();
    assert_eq!(tcp.kind, ModuleKind::LoopbackTcp);
    let specs = tcp.specs();
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0].0, Direction::Send);
    assert_eq!(specs[0].1.kind, Kind::Tcp);
    assert_eq!(specs[0].1.duration, Duration::from_secs(5));
    assert_eq!(specs[0].1.effective_bitrate(), 0);

    let udp = c.module("loopback_udp").unwrap();
    assert_eq!(udp.kind, ModuleKind::LoopbackUdp);
    let specs = udp.specs();
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0].1.kind, Kind::Udp);
    assert_eq!(specs[0].1.effective_bitrate(), 1_000_000_000);
    assert!(!udp.ipv6);
    assert_eq!(udp.effective_timeout(), Duration::from_secs(20));
}

#[test]
fn embedded_default_documents_the_irq_pattern_verbatim() {
    // The file shows the default pattern in a comment; keep it truthful.
    assert!(DEFAULT_CONFIG.contains(&format!(
        "# irq_pattern: '{}'",
        sections::DEFAULT_IRQ_PATTERN
    )));
}

#[test]
fn empty_file_means_defaults() {
    for text in ["", "# nothing\n", "responder:\nhost_metrics:\n"] {
        let c = Config::from_yaml(text, "empty.yml").unwrap();
        assert_eq!(c, Config::default(), "{text:?}");
    }
    let c = Config::default();
    assert!(c.modules.is_empty() && c.targets.is_empty());
    assert!(c.responder.enabled);
    assert_eq!(
        c.summary().to_string(),
        "0 modules, 0 static targets (0 probe runs per interval), 0 file_sd and 0 dns discovery entries; responder on [::]:5301"
    );
}

#[test]
fn full_fixture_reads_every_key() {
    let c = load_fixture("good_full.yml").unwrap();

    let r = &c.responder;
    assert!(!r.enabled);
    assert_eq!(r.listen, "0.0.0.0:6301".parse::<SocketAddr>().unwrap());
    let rc = r.to_responder_config();
    assert_eq!(rc.max_duration, Duration::from_secs(120));
    assert_eq!(rc.max_streams, 8);
    assert_eq!(rc.max_bitrate, 10_000_000_000);
    assert_eq!(rc.max_concurrent_tests, 2);
    assert_eq!(rc.idle_timeout, Duration::from_secs(3));

    let s = &c.scheduler;
    assert_eq!(s.max_concurrent_probes, 2);
    assert_eq!(s.default_interval, Duration::from_secs(300));
    assert_eq!(s.jitter, 0.25);
    assert_eq!(s.busy_retries, 5);
    assert_eq!(s.busy_backoff, Duration::from_secs(1));
    assert_eq!(s.busy_backoff_max, Duration::from_secs(10));

    let tcp = c.module("tcp").unwrap();
    let specs = tcp.specs();
    assert_eq!(
        specs
            .iter()
            .map(|(d, s)| (*d, s.direction))
            .collect::<Vec<_>>(),
        [
            (Direction::Send, Direction::Send),
            (Direction::Receive, Direction::Receive)
        ]
    );
    let spec = &specs[0].1;
    assert_eq!(spec.kind, Kind::Tcp);
    assert_eq!(spec.duration, Duration::from_secs(10));
    assert_eq!(spec.omit, Duration::from_secs(2));
    assert_eq!(spec.streams, 4);
    assert_eq!(spec.window, Some(4 << 20));
    assert_eq!(spec.length, Some(128 << 10));
    assert_eq!(spec.congestion.as_deref(), Some("bbr"));
    assert_eq!(spec.tos, Some(0x10));
    assert_eq!(spec.affinity, Some(1));
    assert_eq!(spec.remote_affinity, Some(2));
    assert_eq!(spec.bind, Some("192.0.2.2".parse().unwrap()));
    assert_eq!(spec.connect_timeout, Duration::from_secs(3));
    assert_eq!(tcp.effective_timeout(), Duration::from_secs(30));

    let udp = c.module("udp").unwrap();
    let specs = udp.specs();
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0].0, Direction::Bidir);
    assert_eq!(specs[0].1.bitrate, Some(500_000_000));
    assert_eq!(specs[0].1.length, Some(1400));
    assert_eq!(udp.effective_timeout(), Duration::from_secs(20));

    let lo6 = c.module("lo6").unwrap();
    assert!(lo6.is_loopback() && lo6.ipv6);
    assert_eq!(lo6.duration, Duration::from_millis(1500));

    let names: Vec<&str> = c.targets.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["db1.example.net", "db2", "db3", "self"]);
    let db1 = &c.targets[0];
    assert_eq!(db1.labels["rack"], "r12");
    assert_eq!(db1.labels["zone"], "a");
    assert_eq!(c.interval_of(db1), Duration::from_secs(300));
    let ep = db1.endpoint().unwrap().unwrap();
    assert_eq!((ep.host.as_str(), ep.port), ("db1.example.net", 5301));
    let db2 = &c.targets[1];
    assert_eq!(c.interval_of(db2), Duration::from_secs(30));
    let ep = db2.endpoint().unwrap().unwrap();
    assert_eq!((ep.host.as_str(), ep.port), ("2001:db8::2", 6000));
    let ep = c.targets[2].endpoint().unwrap().unwrap();
    assert_eq!((ep.host.as_str(), ep.port), ("192.0.2.3", 7000));
    assert!(c.targets[3].endpoint().is_none());

    let d = &c.discovery;
    assert!(d.mesh);
    assert_eq!(d.file_sd.len(), 1);
    assert_eq!(d.file_sd[0].files, ["targets/*.json", "extra.yml"]);
    assert_eq!(d.file_sd[0].refresh_interval, Duration::from_secs(600));
    assert_eq!(d.file_sd[0].interval, None);
    assert_eq!(d.file_sd[0].port(), 6001);
    assert_eq!(d.dns.len(), 2);
    assert_eq!(d.dns[0].record_type, DnsRecordType::Aaaa);
    assert_eq!(d.dns[0].interval, Some(Duration::from_secs(120)));
    assert_eq!(d.dns[0].refresh_interval, Duration::from_secs(30));
    assert_eq!(d.dns[0].port(), 6002);
    assert_eq!(d.dns[1].record_type, DnsRecordType::Srv);
    assert_eq!(d.dns[1].modules, ["tcp", "udp"]);

    assert_eq!(c.host_metrics.irq_pattern.as_str(), "^eth0-");
    assert!(c.host_metrics.irq_pattern.is_match("eth0-TxRx-0"));
    assert!(!c.host_metrics.irq_pattern.is_match("veth0-TxRx-0"));

    assert_eq!(
        c.summary().to_string(),
        "3 modules, 4 static targets (7 probe runs per interval), 1 file_sd and 2 dns discovery entries, mesh mode; responder off"
    );
}

#[test]
fn invalid_fixtures_give_exact_messages() {
    let cases = [
        ("bad_unknown_field.yml", "bad_unknown_field.yml:7:5: modules.tcp: unknown key `durations`: did you mean `duration`?"),
        ("bad_unknown_section.yml", "bad_unknown_section.yml:1:1: unknown key `module`: did you mean `modules`?"),
        ("bad_duration.yml", "bad_duration.yml:4:15: modules.tcp.duration: invalid duration \"5 parsecs\": expected a number with an optional ms, s, m or h suffix (e.g. 250ms, 30s, 5m)"),
        ("bad_kind.yml", "bad_kind.yml:3:11: modules.ping.kind: unknown value `icmp`: expected one of tcp, udp, tcp_rr, udp_rr, tcp_crr, loopback_tcp, loopback_udp, iperf3_tcp, iperf3_udp"),
        ("bad_rate.yml", "bad_rate.yml:4:14: modules.udp.bitrate: invalid rate \"fast\": expected a number of bits per second with an optional k, m, g or t suffix (e.g. 500M, 1g)"),
        ("bad_syntax.yml", "bad_syntax.yml:4:4: did not find expected key, while parsing a block mapping at line 2 column 3"),
        ("bad_listen.yml", "bad_listen.yml:2:11: responder.listen: invalid listen address \"localhost:5301\": expected an IP address and port: ip:port, [ipv6]:port or :port (every address), e.g. :9813, 127.0.0.1:5301 or [::]:5301"),
        ("bad_regex.yml", "bad_regex.yml:2:16: host_metrics.irq_pattern: invalid regular expression \"eth(0|1\": unclosed group"),
        ("bad_unknown_module.yml", "bad_unknown_module.yml:6:20: targets[0].modules[1]: unknown module \"tpc\"; defined modules: tcp, udp"),
        ("bad_duplicate_target.yml", "bad_duplicate_target.yml:9:5: targets[2].name: \"db1\" is already the name of targets[0]; target names must be unique (set `name` to tell them apart)"),
        ("bad_timeout.yml", "bad_timeout.yml:6:14: modules.tcp.timeout: 10s leaves no time to run omit (10s) + duration (5s); set it above 15s or leave it out for omit + duration + 15s"),
        ("bad_streams.yml", "bad_streams.yml:4:14: modules.tcp.streams: must be between 1 and 128, got 0"),
        ("bad_dns_no_names.yml", "bad_dns_no_names.yml:5:14: discovery.dns[0].names: lists no names"),
        ("bad_srv_port.yml", "bad_srv_port.yml:6:13: discovery.dns[0].port: SRV records carry their own port; `port` applies to A and AAAA only"),
        ("bad_reserved_label.yml", "bad_reserved_label.yml:6:19: targets[0].labels.job: \"job\" cannot be a target label: Prometheus sets it when it scrapes; pick another name (pathprobe's: target, module, kind, direction, result, reason, flow, percentile, side, mode, type, release, cause, hash, kernel_release, figure, from_release, to_release, before, after, verdict, advice, changes; Prometheus': instance, job; the exposition format's: le, quantile)"),
        ("bad_reserved_label_flow.yml", "bad_reserved_label_flow.yml:7:13: targets[0].labels.flow: \"flow\" cannot be a target label: pathprobe sets it itself; pick another name (pathprobe's: target, module, kind, direction, result, reason, flow, percentile, side, mode, type, release, cause, hash, kernel_release, figure, from_release, to_release, before, after, verdict, advice, changes; Prometheus': instance, job; the exposition format's: le, quantile)"),
        ("bad_loopback_with_address.yml", "bad_loopback_with_address.yml:5:15: targets[0].modules[0]: \"lo\" is a loopback module, which probes this host itself and ignores the address; list it in a target without an address"),
        ("bad_missing_address.yml", "bad_missing_address.yml:5:5: targets[0].address: missing, and module \"tcp\" probes a remote peer; only targets whose modules are all loopback kinds may leave it out"),
        ("bad_port_twice.yml", "bad_port_twice.yml:5:11: targets[0].port: 7000 contradicts the port in address \"db1:6000\"; give the port once"),
    ];
    for (file, expected) in cases {
        assert_eq!(load_fixture(file).unwrap_err(), expected, "{file}");
    }
    // Every bad_ fixture is covered above.
    let on_disk = std::fs::read_dir(fixture_dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("bad_")
        })
        .count();
    assert_eq!(on_disk, cases.len());
}

#[test]
fn inline_semantic_errors() {
    // The messages; where they point is checked with the fixtures above.
    let err = |text: &str| match Config::from_yaml(text, "c.yml").unwrap_err() {
        ConfigError::InvalidAt {
            file, key, message, ..
        } => format!("{file}: {key}: {message}"),
        e => e.to_string(),
    };
    assert_eq!(
        err("modules:\n  a: {kind: tcp}\n  a: {kind: udp}\n"),
        "c.yml:2:3: modules: module \"a\" is defined twice"
    );
    assert_eq!(
        err("modules:\n  \"a b\": {kind: tcp}\n"),
        "c.yml: modules.a b: module names may hold only letters, digits, '_', '-' and '.'"
    );
    assert_eq!(
        err("modules:\n  t: {kind: tcp}\ntargets:\n  - {address: h, modules: [t, t]}\n"),
        "c.yml: targets[0].modules[1]: \"t\" is listed twice"
    );
    assert_eq!(
        err("targets:\n  - {address: h, modules: []}\n"),
        "c.yml: targets[0].modules: lists no modules"
    );
    assert_eq!(
        err("targets:\n  - {address: h, modules: [t]}\n"),
        "c.yml: targets[0].modules[0]: unknown module \"t\"; defined modules: (none)"
    );
    assert_eq!(
        err("modules:\n  t: {kind: tcp}\ntargets:\n  - {address: h, modules: [t], interval: 0s}\n"),
        "c.yml: targets[0].interval: must be greater than zero"
    );
    assert_eq!(
        err("modules:\n  lo: {kind: loopback_udp}\ndiscovery:\n  file_sd:\n    - {files: [a.json], modules: [lo]}\n"),
        "c.yml: discovery.file_sd[0].modules[0]: \"lo\" is a loopback module; discovered peers need tcp or udp modules"
    );
    assert_eq!(
        err(
            "modules:\n  t: {kind: tcp}\ndiscovery:\n  file_sd:\n    - {files: [], modules: [t]}\n"
        ),
        "c.yml: discovery.file_sd[0].files: lists no files"
    );
    assert_eq!(
        err("modules:\n  t: {kind: tcp}\ndiscovery:\n  dns:\n    - {names: [x], type: A, modules: [t], refresh_interval: 0}\n"),
        "c.yml: discovery.dns[0].refresh_interval: must be greater than zero"
    );
    assert_eq!(
        err("discovery:\n  dns:\n    - {names: [x], type: MX, modules: [t]}\n"),
        "c.yml:3:26: discovery.dns[0].type: unknown value `MX`: expected one of A, AAAA, SRV"
    );
    assert_eq!(
        err("scheduler:\n  max_concurrent_probes: 0\n"),
        "c.yml: scheduler.max_concurrent_probes: must be at least 1"
    );
    assert_eq!(
        err("responder:\n  max_concurrent_tests: 0\n"),
        "c.yml: responder.max_concurrent_tests: must be at least 1 (set enabled: false to turn the responder off)"
    );
    assert_eq!(
        err("modules:\n  t: {kind: tcp, congestion: \"cu bic\"}\n"),
        "c.yml: modules.t: congestion control \"cu bic\" is not a valid algorithm name (e.g. cubic, bbr, reno)"
    );
    assert_eq!(
        err("modules:\n  t: {kind: tcp, tos: 256}\n"),
        "c.yml:2:23: modules.t.tos: invalid value: integer `256`, expected a whole number from 0 to 255"
    );
}

#[test]
fn load_names_the_path_and_sets_the_base_dir() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pathprobe.yml");
    std::fs::write(&path, "modules:\n  t: {kind: tcp, streams: many}\n").unwrap();
    assert_eq!(
        Config::load(&path).unwrap_err().to_string(),
        format!(
            "{}:2:27: modules.t.streams: invalid type: string \"many\", expected a whole number",
            path.display()
        )
    );
    std::fs::write(&path, DEFAULT_CONFIG).unwrap();
    let c = Config::load(&path).unwrap();
    assert_eq!(c.base_dir, dir.path());
    let missing = dir.path().join("missing.yml");
    let e = check_config_file(&missing).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
    assert!(e
        .to_string()
        .starts_with(&format!("{}: cannot read: ", missing.display())));
}

#[test]
fn check_config_summarises_the_shipped_file() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/pathprobe.yml");
    let summary = check_config_file(&path).unwrap();
    assert_eq!(
        summary,
        Summary {
            modules: 2,
            targets: 1,
            probes: 2,
            file_sd: 0,
            dns: 0,
            mesh: false,
            responder: Some("[::]:5301".parse().unwrap()),
            warnings: vec![],
        }
    );
}

#[test]
fn commented_examples_in_the_shipped_file_are_valid() {
    // Uncommenting the examples must give a working file: strip one level
    // of "# " from indented comment lines that read as YAML keys or items.
    let yaml_line = regex::Regex::new(r"^(- )?[a-z_0-9]+:( |$)").unwrap();
    let mut text = String::new();
    for line in DEFAULT_CONFIG.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let example = trimmed.strip_prefix("# ").filter(|rest| {
            indent > 0 && yaml_line.is_match(rest.trim_start()) && !rest.starts_with("irq_pattern")
        });
        match example {
            Some(rest) => text.push_str(&format!("{}{}", " ".repeat(indent), rest)),
            None => text.push_str(line),
        }
        text.push('\n');
    }
    let text = text
        .replace("file_sd: []", "file_sd:")
        .replace("dns: []", "dns:");
    let c = Config::from_yaml(&text, "uncommented.yml").unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(c.modules.contains_key("tcp_both_ways"));
    assert_eq!(
        c.targets.iter().map(|t| t.name()).collect::<Vec<_>>(),
        ["loopback", "db1"]
    );
    assert_eq!(c.discovery.dns.len(), 2);
}

#[test]
fn access_control_keys_are_read_and_secret_files_loaded_relative_to_the_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), "sixteen or more bytes\n").unwrap();
    let path = dir.path().join("c.yml");
    std::fs::write(
        &path,
        "responder:\n  secret_file: secret\n  allow: [10.0.0.0/8, \"2001:db8::1\"]\n  deny: [10.9.0.0/16]\n  \
         limit_policy: refuse\n  max_length: 64K\n  max_window: 4M\n  max_tests_per_client_per_minute: 5\n  \
         max_bytes_per_hour: 10G\n\
         modules:\n  t: {kind: tcp, secret_file: secret}\n",
    )
    .unwrap();
    let c = Config::load(&path).unwrap();
    let rc = c.responder.to_responder_config();
    let want = crate::auth::Secret::new(b"sixteen or more bytes").unwrap();
    assert_eq!(rc.secret.as_ref(), Some(&want));
    assert_eq!(c.modules["t"].secret.as_ref(), Some(&want));
    assert_eq!(
        rc.access.allow,
        [
            "10.0.0.0/8".parse().unwrap(),
            "2001:db8::1/128".parse().unwrap()
        ]
    );
    assert_eq!(rc.access.deny, ["10.9.0.0/16".parse().unwrap()]);
    assert_eq!(rc.limit_policy, crate::responder::LimitPolicy::Refuse);
    assert_eq!(rc.max_length, 64 * 1024);
    assert_eq!(rc.max_window, 4 << 20);
    assert_eq!(rc.max_tests_per_client_per_minute, 5);
    assert_eq!(rc.max_bytes_per_hour, 10 << 30);

    let err = |text: &str| Config::from_yaml(text, "c.yml").unwrap_err().to_string();
    assert_eq!(
        err("responder:\n  allow: [10.0.0.0/33]\n"),
        "c.yml:2:11: responder.allow[0]: invalid network \"10.0.0.0/33\": expected a CIDR such as 10.0.0.0/8 or 2001:db8::/32, or an address"
    );
    assert_eq!(
        err("responder:\n  limit_policy: maybe\n"),
        "c.yml:2:17: responder.limit_policy: unknown value `maybe`: expected one of clamp, refuse"
    );
    let e = err("responder:\n  secret_file: /nonexistent/secret\n");
    assert!(
        e.starts_with("c.yml: responder.secret_file: cannot read secret file /nonexistent/secret:"),
        "{e}"
    );
    std::fs::write(dir.path().join("short"), "short").unwrap();
    std::fs::write(&path, "modules:\n  t: {kind: tcp, secret_file: short}\n").unwrap();
    let e = Config::load(&path).unwrap_err().to_string();
    assert!(e.contains("modules.t.secret_file: secret file"), "{e}");
    assert!(e.contains("holds 5 bytes after trimming"), "{e}");
}

/// A FIFO in place of the config used to block the reload for good (open
/// waits for a writer); a directory or a FIFO is now a read error at once.
#[test]
fn only_regular_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.yml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let err = Config::load(&fifo).unwrap_err().to_string();
    assert_eq!(
        err,
        format!("{}: cannot read: is not a regular file", fifo.display())
    );
    let err = Config::load(dir.path()).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}: cannot read: is a directory, not a file",
            dir.path().display()
        )
    );
    let err = read_file_sd(&fifo).unwrap_err().to_string();
    assert!(err.ends_with("cannot read: is not a regular file"), "{err}");

    let bad = dir.path().join("latin1.yml");
    std::fs::write(&bad, b"targets: [{name: caf\xe9}]\n").unwrap();
    let err = Config::load(&bad).unwrap_err().to_string();
    assert!(
        err.contains("cannot read: stream did not contain valid UTF-8"),
        "{err}"
    );
}

#[test]
fn http_section_reads_its_keys_and_rejects_unknown_ones() {
    let c = Config::from_yaml(
        "http:\n  max_connections: 10\n  probe_max_concurrent: 2\n  probe_restrict_to_targets: true\n  probe_allow: [10.0.0.0/8, \"::1\"]\n",
        "t.yml",
    )
    .unwrap();
    assert_eq!(c.http.max_connections, 10);
    assert_eq!(c.http.probe_max_concurrent, 2);
    assert!(c.http.probe_restrict_to_targets);
    assert_eq!(
        c.http.probe_allow,
        vec![
            "10.0.0.0/8".parse::<ipnet::IpNet>().unwrap(),
            "::1/128".parse().unwrap()
        ]
    );
    let d = Config::from_yaml("", "t.yml").unwrap().http;
    assert_eq!((d.max_connections, d.probe_max_concurrent), (256, 4));
    let e = Config::from_yaml("http:\n  probe_alow: []\n", "t.yml")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.yml:2:3: "), "{e}");
    assert!(e.contains("probe_alow"), "{e}");
    let e = Config::from_yaml("http:\n  probe_max_concurrent: 0\n", "t.yml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("http.probe_max_concurrent"), "{e}");
}

/// `duration: auto` reads as the module's maximum (what every
/// slot and timeout is sized from) with its adaptive request; its keys
/// without it, and on a kind that cannot stop early, are refused.
#[test]
fn duration_auto_is_bounded_by_its_maximum_and_refused_where_it_cannot_run() {
    let c = Config::from_yaml(
        "modules:\n  a: {kind: tcp, duration: auto, max_duration: 8s, precision: 0.5%}\n  \
         d: {kind: udp, duration: auto}\n",
        "c.yml",
    )
    .unwrap();
    let a = c.module("a").unwrap();
    assert_eq!(a.duration, Duration::from_secs(8));
    assert_eq!(
        a.adaptive,
        Some(crate::protocol::adaptive::AdaptiveRequest {
            min_duration_ms: 500,
            precision_ppm: 5000,
            receiver_progress: false,
        })
    );
    assert_eq!(a.specs()[0].1.adaptive, a.adaptive);
    assert_eq!(
        a.run_bound(Some(80_000_000)),
        (Duration::from_secs(8), Some(80_000_000))
    );
    let d = c.module("d").unwrap();
    assert_eq!(d.duration, Duration::from_secs(5));
    assert_eq!(d.adaptive.unwrap().precision_ppm, 10_000);
    let err = |yaml: &str| Config::from_yaml(yaml, "c.yml").unwrap_err().to_string();
    let e = err("modules:\n  a: {kind: tcp, precision: 1%}\n");
    assert!(
        e.contains("precision") && e.contains("duration: auto"),
        "{e}"
    );
    let e = err("modules:\n  a: {kind: tcp_rr, duration: auto}\n");
    assert!(
        e.contains("adaptive duration applies to tcp and udp"),
        "{e}"
    );
    let e = err("modules:\n  a: {kind: iperf3_tcp, duration: auto}\n");
    assert!(e.contains("pathprobe responder"), "{e}");
    let e = err("modules:\n  a: {kind: tcp, duration: auto, precision: 80%}\n");
    assert!(e.contains("precision"), "{e}");
}

/// The mesh slot holds an adaptive module's expected
/// run, not its maximum; the key is bounded by the module's minimum and
/// maximum, and refused on a fixed module.
#[test]
fn an_adaptive_module_plans_its_expected_run_within_its_bounds() {
    let c = Config::from_yaml(
        "modules:\n  a: {kind: tcp, duration: auto}\n  \
         b: {kind: tcp, duration: auto, max_duration: 8s, precision: 0.5%, direction: both}\n  \
         c: {kind: udp, duration: auto, precision: 0.1%}\n  \
         d: {kind: tcp, duration: auto, expected_duration: 2500ms, direction: both}\n  \
         f: {kind: tcp, duration: 5s, omit: 1s, direction: both}\n",
        "c.yml",
    )
    .unwrap();
    let m = |n: &str| c.module(n).unwrap().clone();
    // Defaults: twice the 0.5 s minimum at 1%.
    assert_eq!(m("a").planned_run(), Duration::from_secs(1));
    assert_eq!(m("a").planned_slot_run(), Duration::from_secs(1));
    // Half the precision, four times the time; two runs for `both`.
    assert_eq!(m("b").planned_run(), Duration::from_secs(4));
    assert_eq!(m("b").planned_slot_run(), Duration::from_secs(8));
    // A precision that would need 100 s is held to the maximum.
    assert_eq!(m("c").planned_run(), Duration::from_secs(5));
    assert_eq!(m("d").planned_slot_run(), Duration::from_secs(5));
    // A fixed module keeps omit + duration per run.
    assert_eq!(m("f").planned_slot_run(), Duration::from_secs(12));
    let err = |yaml: &str| Config::from_yaml(yaml, "c.yml").unwrap_err().to_string();
    let e = err("modules:\n  a: {kind: tcp, duration: auto, expected_duration: 6s}\n");
    assert!(
        e.contains("expected_duration") && e.contains("between min_duration"),
        "{e}"
    );
    let e = err("modules:\n  a: {kind: tcp, duration: auto, expected_duration: 100ms}\n");
    assert!(e.contains("expected_duration"), "{e}");
    let e = err("modules:\n  a: {kind: tcp, expected_duration: 1s}\n");
    assert!(
        e.contains("expected_duration") && e.contains("duration: auto"),
        "{e}"
    );
}
