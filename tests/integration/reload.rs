//! A running `pathprobe serve` under every kind of bad configuration on
//! reload: YAML syntax, wrong types, unknown keys, impossible values, and
//! files that are missing or cannot be read. Each must be refused with an
//! error that names the problem, flip
//! `pathprobe_config_last_reload_successful` to 0 and leave the old
//! configuration probing; a good file then restores 1. `check-config` must
//! fail on the same file with the same message.
//!
//! Runs the real binary, so that SIGHUP is covered as well as
//! `POST /-/reload`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::lab::run_bounded;
use crate::common::metrics::{sample, sum};
use crate::common::serve::Serve;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pathprobe"))
}

/// The value of the unlabelled gauge `name`.
fn gauge(body: &str, name: &str) -> Option<f64> {
    sample(body, name, &[])
}

/// Probes run for target `old`, whatever their result.
fn old_probes(body: &str) -> f64 {
    sum(body, "pathprobe_probes_total", &["target=\"old\""])
}

const HEAD: &str = "responder: {listen: \"127.0.0.1:0\"}
modules:
  lo: {kind: loopback_tcp, duration: 100ms}
  tcp: {kind: tcp, duration: 1s}
";
const OLD_TARGET: &str = "targets:\n  - {name: old, modules: [lo], interval: 1s}\n";

fn good() -> String {
    format!("{HEAD}{OLD_TARGET}")
}

/// What goes where the config file was.
enum Bad {
    Text(String),
    Bytes(&'static [u8]),
    Missing,
    Directory,
    Fifo,
}

impl Bad {
    fn put(&self, path: &Path) {
        remove(path);
        match self {
            Bad::Text(t) => std::fs::write(path, t).unwrap(),
            Bad::Bytes(b) => std::fs::write(path, b).unwrap(),
            Bad::Missing => {}
            Bad::Directory => std::fs::create_dir(path).unwrap(),
            Bad::Fifo => {
                let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
                // SAFETY: a valid NUL-terminated path.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            }
        }
    }
}

fn remove(path: &Path) {
    if path.is_dir() {
        std::fs::remove_dir(path).unwrap();
    } else if path.symlink_metadata().is_ok() {
        std::fs::remove_file(path).unwrap();
    }
}

struct Case {
    name: &'static str,
    bad: Bad,
    /// What the error must say after `<file>`: `:line:col: ` and the
    /// message for what is in the file, `: cannot read: ` and why for a
    /// file that cannot be read.
    error: &'static str,
    /// Through SIGHUP rather than `POST /-/reload`.
    sighup: bool,
}

fn text(body: &str) -> Bad {
    Bad::Text(body.to_string())
}

fn cases() -> Vec<Case> {
    let case = |name, bad, error| Case {
        name,
        bad,
        error,
        sighup: false,
    };
    vec![
        Case {
            sighup: true,
            ..case(
                "YAML syntax",
                text("responder: {listen: \"127.0.0.1:0\"}\nmodules:\n  lo: {kind: loopback_tcp, duration: 100ms}}\ntargets: []\n"),
                ":3:44: did not find expected key",
            )
        },
        case(
            "wrong type",
            text(&format!("{HEAD}targets:\n  - {{name: old, modules: lo, interval: 1s}}\n")),
            ":6:26: targets[0].modules: invalid type: string \"lo\", expected a list",
        ),
        case(
            "unknown key",
            text(&format!("{HEAD}targets:\n  - {{name: old, modules: [lo], intervall: 1s}}\n")),
            ":6:32: targets[0]: unknown key `intervall`: did you mean `interval`?",
        ),
        case(
            "negative interval",
            text(&format!("{HEAD}targets:\n  - {{name: old, modules: [lo], interval: -1s}}\n")),
            ":6:42: targets[0].interval: invalid duration \"-1s\"",
        ),
        case(
            "zero interval",
            text(&format!("{HEAD}targets:\n  - {{name: old, modules: [lo], interval: 0s}}\n")),
            ":6:42: targets[0].interval: must be greater than zero",
        ),
        case(
            "timeout shorter than omit + duration",
            text(&format!(
                "{HEAD}  slow: {{kind: tcp, omit: 2s, duration: 1s, timeout: 3s}}\n{OLD_TARGET}"
            )),
            ":5:54: modules.slow.timeout: 3s leaves no time to run omit (2s) + duration (1s)",
        ),
        case(
            "unknown module",
            text(&format!("{HEAD}targets:\n  - {{name: old, modules: [nosuch], interval: 1s}}\n")),
            ":6:27: targets[0].modules[0]: unknown module \"nosuch\"; defined modules: lo, tcp",
        ),
        case(
            "bad target address",
            text(&format!(
                "{HEAD}{OLD_TARGET}  - {{name: peer, address: \"peer:99999\", modules: [tcp]}}\n"
            )),
            ":7:27: targets[1].address: target \"peer:99999\": expected host, host:port, or [ipv6]:port",
        ),
        case(
            "bad listen address",
            text(&good().replace("127.0.0.1:0", "300.1.1.1:5301")),
            ":1:21: responder.listen: invalid listen address \"300.1.1.1:5301\"",
        ),
        case(
            "bad allow-list network",
            text(&good().replace(
                "listen: \"127.0.0.1:0\"",
                "listen: \"127.0.0.1:0\", allow: [10.0.0.0/33]",
            )),
            ":1:44: responder.allow[0]: invalid network \"10.0.0.0/33\": expected a CIDR such as 10.0.0.0/8 or 2001:db8::/32, or an address",
        ),
        case(
            "missing secret file",
            text(&good().replace(
                "listen: \"127.0.0.1:0\"",
                "listen: \"127.0.0.1:0\", secret_file: /nonexistent/secret",
            )),
            ": responder.secret_file: cannot read secret file /nonexistent/secret",
        ),
        case(
            "jitter out of range",
            text(&format!("{}scheduler: {{jitter: 2}}\n", good())),
            ":7:21: scheduler.jitter: must be a fraction of the interval between 0 and 1, got 2",
        ),
        case(
            "not UTF-8",
            Bad::Bytes(b"targets: [{name: caf\xe9}]\n"),
            ": cannot read: stream did not contain valid UTF-8",
        ),
        case(
            "missing file",
            Bad::Missing,
            ": cannot read: No such file or directory",
        ),
        case(
            "directory in place of the file",
            Bad::Directory,
            ": cannot read: is a directory, not a file",
        ),
        Case {
            sighup: true,
            ..case(
                "FIFO in place of the file",
                Bad::Fifo,
                ": cannot read: is not a regular file",
            )
        },
    ]
}

#[test]
fn every_bad_config_is_refused_and_the_old_one_keeps_probing() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("pathprobe.yml");
    std::fs::write(&path, good()).unwrap();
    let file = path.display().to_string();
    let serve = Serve::start(&path);
    serve.wait_for(Duration::from_secs(30), "first probe of old", |b| {
        old_probes(b) >= 1.0
    });

    for case in cases() {
        let name = case.name;
        case.bad.put(&path);
        let want = format!("{file}{}", case.error);

        // check-config refuses the same file with the same message.
        // Bounded: a check that blocks (a FIFO opened for reading waits for
        // a writer) must fail this test, not hang the suite.
        let out = run_bounded(
            bin().arg("check-config").arg(&path),
            Duration::from_secs(20),
        )
        .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        // A file that cannot be read as text is an unreadable file: exit 2,
        // as README's table has it; a readable but wrong one is exit 1.
        let code = if matches!(
            name,
            "not UTF-8"
                | "missing file"
                | "directory in place of the file"
                | "FIFO in place of the file"
        ) {
            2
        } else {
            1
        };
        assert_eq!(
            out.status.code(),
            Some(code),
            "{name}: check-config exit code"
        );
        let stderr = &out.stderr;
        assert!(
            stderr.contains(&want),
            "{name}: check-config said {stderr:?}, want {want:?}"
        );

        if case.sighup {
            serve.signal(libc::SIGHUP);
            serve.wait_for(Duration::from_secs(10), name, |b| {
                gauge(b, "pathprobe_config_last_reload_successful") == Some(0.0)
            });
        } else {
            let (status, body) = serve.request("POST", "/-/reload");
            assert_eq!(status, 500, "{name}: {body}");
            assert!(
                body.starts_with("failed to reload config: ") && body.contains(&want),
                "{name}: reload said {body:?}, want {want:?}"
            );
        }
        let body = serve.metrics();
        assert_eq!(
            gauge(&body, "pathprobe_config_last_reload_successful"),
            Some(0.0),
            "{name}"
        );
        // The old configuration is still the one running: its target is
        // still exported and still gets probed.
        let before = old_probes(&body);
        assert!(before >= 1.0, "{name}: old target gone:\n{body}");
        serve.wait_for(Duration::from_secs(15), name, |b| old_probes(b) > before);

        remove(&path);
        std::fs::write(&path, good()).unwrap();
        let (status, body) = serve.request("POST", "/-/reload");
        assert_eq!((status, body.as_str()), (200, "Reloaded.\n"), "{name}");
        assert_eq!(
            gauge(&serve.metrics(), "pathprobe_config_last_reload_successful"),
            Some(1.0),
            "{name}"
        );
    }
}
