//! promtool, from the Debian package `prometheus`, which .ci/run installs.
//! One policy when it is missing: the test fails and says how to install
//! it, because a missing promtool must not pass as checked rules.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The promtool binary: $PROMTOOL, or promtool on the PATH.
pub fn path() -> PathBuf {
    let candidates = std::env::var_os("PROMTOOL")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::env::var_os("PATH").into_iter().flat_map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("promtool"))
                .collect::<Vec<_>>()
        }));
    for c in candidates {
        if c.is_file() {
            return c;
        }
    }
    panic!(
        "promtool not found. Install it with `apt-get install prometheus` (Debian; .ci/run \
         does this) or point PROMTOOL at a promtool binary."
    );
}

/// A promtool command, to add arguments to.
pub fn command() -> Command {
    Command::new(path())
}

/// Runs `cmd` (from [`command`]); whether it succeeded, and its stdout
/// and stderr together.
pub fn run(cmd: &mut Command) -> (bool, String) {
    let _turn = super::turn::shared();
    let out = cmd.output().expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `promtool check metrics` on a scrape; fails the test if promtool does.
pub fn check_metrics(body: &str) {
    let _turn = super::turn::shared();
    let mut child = command()
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
