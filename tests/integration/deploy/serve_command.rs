//! `pathprobe serve` command lines of the deployments, and the HEALTHCHECK against a live service.

use super::*;
use crate::common::serve::Serve;

/// `serve` and its flags as (name, value) pairs, `--name=value` and
/// `--name value` alike.
pub(super) fn serve_flags(args: &[String]) -> Vec<(String, String)> {
    assert_eq!(args.first().map(String::as_str), Some("serve"), "{args:?}");
    let mut out = Vec::new();
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let name = a
            .strip_prefix("--")
            .unwrap_or_else(|| panic!("{a:?} in {args:?} is not a --flag"));
        match name.split_once('=') {
            Some((k, v)) => out.push((k.to_string(), v.to_string())),
            None => {
                let v = it
                    .next()
                    .unwrap_or_else(|| panic!("--{name} has no value in {args:?}"));
                out.push((name.to_string(), v.clone()));
            }
        }
    }
    out
}

pub(super) fn flag<'a>(flags: &'a [(String, String)], name: &str) -> Option<&'a str> {
    flags
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Every flag of a deployment's `serve` command line exists, with a value
/// it accepts; then the binary starts with them, config file and listen
/// address swapped for a quiet config and port 0.
pub(super) fn check_serve_command(args: &[String], origin: &str) {
    let out = run_bounded(
        Command::new(BIN).args(["serve", "--help"]),
        Duration::from_secs(10),
    );
    assert!(out.status.success());
    let help = text(&out.stdout);
    let flags = serve_flags(args);
    for (name, value) in &flags {
        let needle = format!("--{name} <");
        let at = help
            .find(&needle)
            .unwrap_or_else(|| panic!("{origin}: serve has no --{name}:\n{help}"));
        // The flag's entry runs to the next line that starts another flag.
        let rest = &help[at + needle.len()..];
        let end = rest
            .match_indices('\n')
            .map(|(i, _)| i)
            .find(|&i| rest[i + 1..].trim_start().starts_with('-'))
            .unwrap_or(rest.len());
        if let Some(list) = rest[..end].split("[possible values: ").nth(1) {
            let list = &list[..list.find(']').unwrap()];
            assert!(
                list.split(", ").any(|v| v == value),
                "{origin}: --{name}={value} is not one of {list}"
            );
        }
    }
    if let Some(addr) = flag(&flags, "web.listen-address") {
        assert!(
            addr.parse::<SocketAddr>().is_ok(),
            "{origin}: bad listen address {addr}"
        );
    }
    if let Some(file) = flag(&flags, "config.file") {
        assert!(
            file.starts_with('/'),
            "{origin}: the config path {file} should be absolute"
        );
    }
    let keep: Vec<(String, String)> = flags
        .into_iter()
        .filter(|(k, _)| k != "config.file" && k != "web.listen-address")
        .collect();
    let serve = serve_quietly(&keep);
    assert_eq!(serve.get("/-/healthy").0, 200, "{origin}");
}

/// A `pathprobe serve` with no responder and no probes, on port 0, with
/// `extra` flags; killed on drop.
fn serve_quietly(extra: &[(String, String)]) -> Serve {
    Serve::yaml("responder:\n  enabled: false\n")
        .flags(extra.iter().map(|(k, v)| format!("--{k}={v}")))
        .start()
}

#[test]
fn dockerfile_healthcheck_passes_on_a_live_service_and_fails_otherwise() {
    let df = load_dockerfile();
    let last = final_stage(&df);
    let args = *all(last, "HEALTHCHECK").last().expect("a HEALTHCHECK");
    let (flags, rest) = dockerfile::flags(args);
    let rest = rest.strip_prefix("CMD").expect("HEALTHCHECK CMD").trim();
    let cmd = dockerfile::exec_form(rest).expect("HEALTHCHECK CMD in exec form");
    let timeout = flags
        .get("timeout")
        .map(|t| pathprobe::units::parse_duration(t).unwrap());
    let timeout = timeout.expect("HEALTHCHECK --timeout");
    assert!(cmd.join(" ").contains("/-/healthy"), "{cmd:?}");
    // The check dials the metrics port on loopback; here that port is
    // whatever the test's listener got.
    let dial = format!("/dev/tcp/127.0.0.1/{}", metrics_port());
    assert!(
        cmd.iter().any(|a| a.contains(&dial)),
        "{cmd:?} dials {dial}"
    );
    let run = |port: u16| {
        let cmd: Vec<String> = cmd
            .iter()
            .map(|a| a.replace(&dial, &format!("/dev/tcp/127.0.0.1/{port}")))
            .collect();
        run_bounded(
            Command::new(&cmd[0]).args(&cmd[1..]),
            timeout + Duration::from_secs(5),
        )
    };

    let serve = serve_quietly(&[]);
    let out = run(serve.http.port());
    assert!(out.status.success(), "unhealthy: {}", text(&out.stderr));

    // A server that answers 503 fails the check, and the check asked for
    // /-/healthy.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut line = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        s.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        line
    });
    let out = run(port);
    assert!(!out.status.success(), "a 503 passed the health check");
    let request = server.join().unwrap();
    assert!(request.starts_with("GET /-/healthy "), "{request:?}");

    // Nothing listening fails it too.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    assert!(
        !run(closed).status.success(),
        "a closed port passed the health check"
    );
}
