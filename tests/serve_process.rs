//! `pathprobe serve` and `check-config` as processes: signals, exit codes,
//! the embedded default.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pathprobe"))
}

fn get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

struct Serve {
    child: Child,
    http: SocketAddr,
}

impl Serve {
    /// Starts serve with the web listener on port 0, reading the address it logs.
    fn start(args: &[&str]) -> Serve {
        let mut child = bin()
            .args(["serve", "--web.listen-address", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(rest) = line.split("serving metrics on http://").nth(1) {
                    let addr = rest.split('/').next().unwrap().to_string();
                    let _ = tx.send(addr);
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("serve logged its address");
        Serve {
            child,
            http: addr.parse().unwrap(),
        }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill with our own child's pid.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, sig) },
            0
        );
    }

    fn wait_for(&self, limit: Duration, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let body = get(self.http, "/metrics");
            if ok(&body) {
                return body;
            }
            assert!(start.elapsed() < limit, "{what} never happened:\n{body}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn embedded_default_shows_loopback_throughput_within_seconds() {
    // The embedded default binds the responder on [::]:5301; use a config
    // equal to it but for the port, so that tests can run side by side.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("default.yml");
    std::fs::write(
        &path,
        pathprobe::config::DEFAULT_CONFIG.replace("\"[::]:5301\"", "\"127.0.0.1:0\""),
    )
    .unwrap();
    let serve = Serve::start(&["--config.file", path.to_str().unwrap()]);
    let body = serve.wait_for(Duration::from_secs(40), "first loopback probes", |b| {
        b.contains("pathprobe_probe_success{target=\"loopback\",module=\"loopback_tcp\"")
            && b.contains("pathprobe_probe_success{target=\"loopback\",module=\"loopback_udp\"")
    });
    for line in body
        .lines()
        .filter(|l| l.starts_with("pathprobe_probe_success{"))
    {
        assert!(line.ends_with(" 1"), "{line}");
    }
}

#[test]
fn sighup_with_a_broken_file_keeps_running_and_sigterm_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pathprobe.yml");
    std::fs::write(&path, "responder: {listen: \"127.0.0.1:0\"}\nmodules: {lo: {kind: loopback_tcp, duration: 200ms}}\ntargets: [{modules: [lo]}]\n").unwrap();
    let mut serve = Serve::start(&["--config.file", path.to_str().unwrap()]);
    serve.wait_for(Duration::from_secs(30), "first probe", |b| {
        b.contains("pathprobe_probe_success{target=\"loopback\"")
    });

    std::fs::write(&path, "modules: [not, a, map]\n").unwrap();
    serve.signal(libc::SIGHUP);
    let body = serve.wait_for(Duration::from_secs(10), "failed reload", |b| {
        b.contains("pathprobe_config_last_reload_successful 0")
    });
    assert!(
        body.contains("pathprobe_probe_success{target=\"loopback\""),
        "old config gone"
    );

    serve.signal(libc::SIGTERM);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = serve.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "serve did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(
        std::net::TcpStream::connect_timeout(&serve.http, Duration::from_secs(1)).is_err(),
        "HTTP listener still open"
    );
}

#[test]
fn check_config_reports_the_error_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yml");
    std::fs::write(&good, pathprobe::config::DEFAULT_CONFIG).unwrap();
    let out = bin()
        .args(["check-config", good.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(": OK ("));

    // The shipped examples are valid.
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/config/examples")).unwrap()
    {
        let path = entry.unwrap().path();
        let out = bin().arg("check-config").arg(&path).output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let bad = dir.path().join("bad.yml");
    std::fs::write(&bad, "modules:\n  tcp:\n    kind: tcp\n    durations: 5s\n").unwrap();
    let out = bin()
        .args(["check-config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yml:4:5") && err.contains("unknown field `durations`"),
        "{err}"
    );
}
