//! The `pathprobe` binary as a user runs it: output formats, exit codes and
//! error messages.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::turn::{self, Turn};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pathprobe"))
}

/// Runs to completion, killing the process if it outlives `limit`.
fn run(cmd: &mut Command, limit: Duration) -> std::process::Output {
    // A probe loads the machine as a test's traffic does.
    let _turn = turn::shared();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!("command ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

struct Responder {
    child: Child,
    addr: String,
    _turn: Turn,
}

impl Responder {
    /// Starts `pathprobe respond --port 0` and reads the port it printed.
    fn start(extra: &[&str]) -> Responder {
        let turn = turn::shared();
        let mut child = bin()
            .args(["respond", "--listen", "127.0.0.1", "--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split_whitespace()
            .nth(4)
            .expect("listening line names the address")
            .to_string();
        Responder {
            child,
            addr,
            _turn: turn,
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn tcp_probe_prints_a_nuttcp_line() {
    let r = Responder::start(&[]);
    let out = run(
        bin().args(["probe", "-t", "0.5", &r.addr]),
        Duration::from_secs(20),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // e.g. "1170.2500 MB / 0.50 sec = 19632.1234 Mbps 98 %TX 30 %RX 0 retrans 0.02 msRTT"
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(words[1], "MB");
    assert_eq!(words[2], "/");
    assert!(
        (words[3].parse::<f64>().unwrap() - 0.5).abs() < 0.05,
        "{text}"
    );
    assert_eq!(&words[4..6], ["sec", "="]);
    assert!(words[6].parse::<f64>().unwrap() > 0.0);
    assert_eq!(words[7], "Mbps");
    assert_eq!(words[9], "%TX");
    assert_eq!(words[11], "%RX");
    assert_eq!(words[13], "retrans");
    assert!(
        words[14].parse::<f64>().is_ok() && words[15] == "msRTT",
        "{text}"
    );
}

#[test]
fn udp_probe_reports_drops_and_json_is_one_document() {
    let r = Responder::start(&[]);
    let out = run(
        bin().args(["probe", "-u", "-b", "100m", "-t", "0.5", "-J", &r.addr]),
        Duration::from_secs(20),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["kind"], "udp");
    assert_eq!(v["direction"], "send");
    let sent = v["udp"]["packets_sent"].as_u64().unwrap();
    let received = v["udp"]["packets_received"].as_u64().unwrap();
    assert!(received <= sent && sent > 4000, "{sent} {received}");
    let text = String::from_utf8(
        run(
            bin().args(["probe", "-u", "-t", "0.3", &r.addr]),
            Duration::from_secs(20),
        )
        .stdout,
    )
    .unwrap();
    assert!(
        text.contains(" drop/pkt ") && text.contains(" %loss"),
        "{text}"
    );
}

#[test]
fn loopback_needs_no_target() {
    let out = run(
        bin().args(["probe", "--loopback", "-t", "0.3", "-R", "-v"]),
        Duration::from_secs(20),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(" Mbps "), "{text}");
    assert!(
        text.contains("  local  kernel "),
        "-v adds host detail: {text}"
    );
}

#[test]
fn failures_exit_non_zero_with_a_message_or_a_json_error() {
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let out = run(
        bin().args(["probe", "-t", "1", &free]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("pathprobe: connection to"), "{err}");
    assert!(
        err.contains("refused") && err.contains("start `pathprobe respond`"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let out = run(
        bin().args(["probe", "-J", "-t", "1", &free]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("an error is still one JSON document");
    assert_eq!(v["error"]["reason"], "refused");

    let out = run(
        bin().args(["probe", "-J", "-A", "x", &free]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["reason"], "bad_argument");

    let out = run(
        bin().args(["probe", "-b", "fast", &free]),
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid rate \"fast\""));
}

#[test]
fn busy_responder_is_reported() {
    let r = Responder::start(&[]);
    let mut long = bin()
        .args(["probe", "-t", "3", &r.addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the first test is admitted: its data connection exists
    // only once the responder has accepted the test.
    let port = r.addr.rsplit(':').next().unwrap().to_string();
    let start = Instant::now();
    loop {
        let out = Command::new("ss")
            .args([
                "-tnH",
                "state",
                "established",
                "dport",
                "=",
                &format!(":{port}"),
            ])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).lines().count() >= 2 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the first probe was never admitted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run(
        bin().args(["probe", "-J", "-t", "0.2", &r.addr]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let seen_busy = v["error"]["reason"] == "busy";
    assert!(
        v["error"]["message"].as_str().unwrap().contains("retry"),
        "{v}"
    );
    assert!(seen_busy, "a second prober was never told busy");
    assert!(long.wait().unwrap().success());
}

/// Writes `secret` to a private file in `dir`.
fn secret_file(dir: &tempfile::TempDir, name: &str, secret: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.path().join(name);
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn secrets_come_from_files_and_failures_say_which() {
    let dir = tempfile::tempdir().unwrap();
    let good = secret_file(&dir, "good", "a secret both ends hold");
    let bad = secret_file(&dir, "bad", "a secret only the prober holds");
    let r = Responder::start(&["--auth.secret-file", &good]);
    let probe = |extra: &[&str]| {
        run(
            bin().args(["probe", "-t", "0.3"]).args(extra).arg(&r.addr),
            Duration::from_secs(20),
        )
    };

    let out = probe(&[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(
            "pathprobe: responder refused the test (auth_required): authentication required:"
        ),
        "{err}"
    );
    let out = probe(&["-J"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["reason"], "auth_required");

    let out = probe(&["--auth.secret-file", &bad]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("pathprobe: responder refused the test (auth_failed): authentication failed: the shared secrets differ"),
        "{err}"
    );

    let out = probe(&["--auth.secret-file", &good]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8(out.stdout).unwrap().contains(" Mbps "));

    let missing = dir.path().join("missing");
    let out = probe(&["--auth.secret-file", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("pathprobe: bad argument: --auth.secret-file: cannot read secret file"),
        "{err}"
    );
}

#[test]
fn clamping_is_printed_and_the_allow_list_refuses() {
    let r = Responder::start(&["--max-duration", "0.5s", "--max-streams", "1"]);
    let out = run(
        bin().args(["probe", "-t", "2", "-P", "2", &r.addr]),
        Duration::from_secs(20),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "note: the responder clamped this test: max_duration: duration 2 s clamped to 0.5 s\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "note: the responder clamped this test: max_streams: 2 streams clamped to 1 streams\n"
        ),
        "{text}"
    );

    let r = Responder::start(&["--max-duration", "0.5s", "--limit-policy", "refuse"]);
    let out = run(
        bin().args(["probe", "-t", "2", &r.addr]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("(limit): max_duration: duration 2 s exceeds this responder's maximum of 0.5 s (limit_policy: refuse)"),
        "{err}"
    );

    let r = Responder::start(&["--allow", "10.0.0.0/8", "--deny", "192.0.2.1"]);
    let out = run(
        bin().args(["probe", "-J", "-t", "0.3", &r.addr]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["reason"], "denied");
    assert_eq!(
        v["error"]["message"],
        "responder refused the test (denied): this responder does not accept tests from 127.0.0.1"
    );
}

#[test]
fn clamped_probe_says_so_once_in_a_note_without_a_warning() {
    let r = Responder::start(&["--max-duration", "0.5s"]);
    let out = run(
        bin().args(["probe", "-t", "2", &r.addr]),
        Duration::from_secs(20),
    );
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert_eq!(
        text.matches("note: the responder clamped").count(),
        1,
        "{text}"
    );
    assert!(!err.contains("WARN") && !err.contains("clamp"), "{err}");
}

#[test]
fn responder_logs_one_plain_line_per_test() {
    let turn = turn::shared();
    let mut child = bin()
        .args(["respond", "--listen", "127.0.0.1", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.split_whitespace().nth(4).unwrap().to_string();
    let r = Responder {
        child,
        addr,
        _turn: turn,
    };
    for _ in 0..2 {
        let out = run(
            bin().args(["probe", "-t", "0.3", &r.addr]),
            Duration::from_secs(20),
        );
        assert!(out.status.success());
    }
    let mut r = r;
    let mut stderr = r.child.stderr.take().unwrap();
    unsafe { libc::kill(r.child.id() as i32, libc::SIGTERM) };
    let mut log = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut log).unwrap();
    assert!(
        !log.contains('\x1b'),
        "colour codes in a piped log: {log:?}"
    );
    let done: Vec<&str> = log.lines().filter(|l| l.contains("test done")).collect();
    assert_eq!(done.len(), 2, "{log}");
    for l in done {
        assert!(l.contains(" INFO "), "{l}");
        assert!(l.contains("peer=127.0.0.1:"), "{l}");
        assert!(
            l.contains("kind=tcp") && l.contains("direction=send"),
            "{l}"
        );
        let bytes: u64 = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("bytes="))
            .unwrap()
            .parse()
            .unwrap();
        assert!(bytes > 0, "{l}");
        assert!(l.contains("duration_seconds="), "{l}");
    }
}

#[test]
fn serve_reports_a_startup_error_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yml");
    let out = run(
        bin().args([
            "serve",
            "--web.listen-address",
            "127.0.0.1:0",
            "--config.file",
            missing.to_str().unwrap(),
        ]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("nope.yml").count(), 1, "{err}");
    assert!(!err.contains('\x1b'), "{err:?}");
}

#[test]
fn remote_pinning_failure_comes_back_as_a_note() {
    // CPU 1000 is inside cpu_set_t but on no machine this runs on, so the
    // responder's sched_setaffinity fails for real.
    let r = Responder::start(&[]);
    let out = run(
        bin().args(["probe", "-t", "0.3", "-A", "0,1000", &r.addr]),
        Duration::from_secs(20),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let notes: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("note: the responder could not pin"))
        .collect();
    assert_eq!(notes.len(), 1, "{text}");
    assert!(notes[0].contains("CPU 1000"), "{text}");

    let out = run(
        bin().args(["probe", "-J", "-t", "0.3", "-A", "0,1000", &r.addr]),
        Duration::from_secs(20),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = v["warnings"].as_array().expect("warnings in the JSON");
    assert_eq!(w.len(), 1, "{v}");
    assert!(w[0]
        .as_str()
        .unwrap()
        .starts_with("could not pin the data threads to CPU 1000"));
}
