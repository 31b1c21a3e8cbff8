//! `pathprobe serve` processes inside lab namespaces, and an HTTP client
//! that runs inside a namespace (a thread that has joined it with setns),
//! so that tests can scrape services the root namespace cannot reach.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::common_lab::Lab;

/// Runs `f` on a thread inside network namespace `ns`.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on this thread only, with an open namespace fd.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("namespace thread")
}

/// `GET path` (or another method) from inside `ns`; status and body.
pub fn http(
    ns: &str,
    addr: SocketAddr,
    method: &str,
    path: &str,
) -> std::io::Result<(u16, String)> {
    let (method, path) = (method.to_string(), path.to_string());
    in_netns(ns, move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        )?;
        let mut raw = String::new();
        s.read_to_string(&mut raw)?;
        let status = raw
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = raw
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    })
}

/// The value of the first sample of `metric` whose line contains all of `labels`.
pub fn sample(body: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.split(['{', ' ']).next() == Some(metric) && labels.iter().all(|w| l.contains(w))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A `pathprobe serve` running in one end of a lab.
pub struct Serve {
    pub child: Child,
    pub ns: String,
    pub http: SocketAddr,
    _config: tempfile::NamedTempFile,
}

impl Serve {
    /// Starts serve in `end` ("a" or "b") with `yaml`, HTTP on that end's
    /// address port 9813, and waits (bounded) until it is ready.
    pub fn start(lab: &Lab, end: &str, yaml: &str) -> Serve {
        let mut config = tempfile::Builder::new().suffix(".yml").tempfile().unwrap();
        config.write_all(yaml.as_bytes()).unwrap();
        let ip = if end == "a" {
            lab.addr_a()
        } else {
            lab.addr_b()
        };
        let http: SocketAddr = (ip, 9813).into();
        let child = lab
            .exec(end, env!("CARGO_BIN_EXE_pathprobe"))
            .args([
                "serve",
                "--config.file",
                config.path().to_str().unwrap(),
                "--web.listen-address",
                &http.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let s = Serve {
            child,
            ns: format!("{}-{end}", lab.name()),
            http,
            _config: config,
        };
        let start = Instant::now();
        while !matches!(s.get("/-/ready"), Ok((200, _))) {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "serve in {end} never became ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        http(&self.ns, self.http, "GET", path)
    }

    pub fn metrics(&self) -> String {
        let (status, body) = self.get("/metrics").expect("serve answers /metrics");
        assert_eq!(status, 200);
        body
    }

    /// Scrapes until `ok` holds, within `limit`; returns that scrape.
    pub fn wait_for(&self, limit: Duration, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let body = self.metrics();
            if ok(&body) {
                return body;
            }
            assert!(
                start.elapsed() < limit,
                "{what}: not within {limit:?}\n{}",
                relevant(&body)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Resident memory of the process, KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

fn relevant(body: &str) -> String {
    body.lines()
        .filter(|l| {
            l.starts_with("pathprobe_probe_success")
                || l.starts_with("pathprobe_probe_failure_info")
                || l.starts_with("pathprobe_responder_")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill();
    }
}
