//! The deployment files, checked without a container engine, a cluster or
//! systemd: the Dockerfile is parsed and its build stage replayed in an
//! empty directory (its COPY lines copying from the build context, its RUN
//! lines run with the real cargo, offline), its HEALTHCHECK is run against a
//! real `pathprobe serve`, the Compose, Kubernetes, Grafana and systemd files
//! are parsed, every host path they name must exist, every pathprobe
//! configuration they carry is loaded by the library's own parser, and every
//! command line they give `pathprobe serve` is started for real.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pathprobe::config::Config;
use serde_yaml::Value;

mod binary;
mod compare_script;
mod compose;
mod dockerfile;
mod dockerignore;
mod image;
mod kubernetes;
mod linters;
mod serve_command;
mod state;
mod systemd;
mod yaml;

use dockerignore::*;
use image::*;
use serve_command::*;
use yaml::*;

const BIN: &str = env!("CARGO_BIN_EXE_pathprobe");

/// The dashboards the Compose file's Grafana is to load.
const DASHBOARDS: &[&str] = &["path-overview.json", "kernel-host.json", "fleet.json"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `p` with `.` and `..` resolved lexically; panics if it climbs out of
/// the repository.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                assert!(out.pop(), "{} leaves the repository", p.display())
            }
            other => out.push(other),
        }
    }
    out
}

/// Asserts that `rel` (relative to the repository) exists; returns true so
/// that callers can go on to read it.
fn require(rel: &Path, named_by: &str) -> bool {
    let rel = normalize(rel);
    assert!(
        repo().join(&rel).exists(),
        "{named_by} names {}, which does not exist",
        rel.display()
    );
    true
}

/// Runs `cmd` to completion, killing it if it outlives `limit`.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    // Builds and promtool runs load the machine as a test's traffic does.
    let _turn = crate::common::turn::shared();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    // Both pipes drain on threads, so that a chatty child cannot block.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The ports the service listens on by default, from the library itself.
fn metrics_port() -> u16 {
    pathprobe::service::DEFAULT_WEB_LISTEN
        .parse::<SocketAddr>()
        .unwrap()
        .port()
}

fn responder_port() -> u16 {
    Config::default_embedded().responder.listen.port()
}
