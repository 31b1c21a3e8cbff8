//! `pathprobe serve` for the tests, started one way: a config file, the web
//! listener on port 0 of loopback (or of a lab end's address, inside its
//! namespace), stderr read for the addresses the binary logs. One readiness
//! rule: [`Serve::start`] returns once `/-/ready` answers 200 at the logged
//! address, and fails the test (with the log) if that does not happen
//! within [`READY_WITHIN`] or the process exits.
//!
//! [`InProcess`] is the same service run in the test's own runtime, on
//! listeners the test bound.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::http;
use super::lab::{in_netns, Lab};
use super::turn::{self, Turn};

/// Bound on start-up, from spawn to a 200 from `/-/ready`.
pub const READY_WITHIN: Duration = Duration::from_secs(15);
/// Log lines kept for failure messages.
const LOG_LINES: usize = 200;

/// How to start one `pathprobe serve`.
pub struct Builder {
    config: Config,
    flags: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    lab: Option<(Command, String, IpAddr)>,
    limits: Limits,
}

/// Resource limits for the child, set between fork and exec: a descriptor
/// limit to test exhaustion against, an address-space cap so that an
/// allocation explosion aborts the child and not the machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub nofile: Option<u64>,
    pub address_space: Option<u64>,
}

impl Limits {
    /// Sets the limits on `cmd`'s child.
    pub fn apply(self, cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        if self.nofile.is_none() && self.address_space.is_none() {
            return;
        }
        // SAFETY: only async-signal-safe setrlimit between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let set = |res, v: u64| {
                    let lim = libc::rlimit {
                        rlim_cur: v as libc::rlim_t,
                        rlim_max: v as libc::rlim_t,
                    };
                    if libc::setrlimit(res, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                };
                if let Some(n) = self.nofile {
                    set(libc::RLIMIT_NOFILE, n)?;
                }
                if let Some(n) = self.address_space {
                    set(libc::RLIMIT_AS, n)?;
                }
                Ok(())
            });
        }
    }
}

enum Config {
    File(PathBuf),
    Yaml(String),
}

/// A running `pathprobe serve`; killed when dropped.
pub struct Serve {
    pub child: Child,
    /// Its web listener.
    pub http: SocketAddr,
    /// Its responder, when it runs one.
    pub responder: Option<SocketAddr>,
    /// The lab namespace it runs in, if any.
    ns: Option<String>,
    log: Arc<Mutex<VecDeque<String>>>,
    _dir: Option<tempfile::TempDir>,
    _turn: Turn,
}

impl Builder {
    /// More flags after `--config.file` and `--web.listen-address`.
    pub fn flags<S: Into<OsString>>(mut self, flags: impl IntoIterator<Item = S>) -> Builder {
        self.flags.extend(flags.into_iter().map(Into::into));
        self
    }

    /// With `key=value` in its environment.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Builder {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Under resource `limits`.
    pub fn limits(mut self, limits: Limits) -> Builder {
        self.limits = limits;
        self
    }

    /// In end `end` ("a" or "b") of `lab`, its web listener on that end's
    /// address.
    pub fn in_lab(mut self, lab: &Lab, end: &str) -> Builder {
        let ip = match end {
            "a" => lab.addr_a(),
            "b" => lab.addr_b(),
            _ => panic!("serve runs in lab end a or b, not {end}"),
        };
        let ns = format!("{}-{end}", lab.name());
        self.lab = Some((
            lab.exec(end, env!("CARGO_BIN_EXE_pathprobe")),
            ns,
            ip.into(),
        ));
        self
    }

    /// As [`Builder::in_lab`], under `setarch x86_64 --uname-2.6`: the
    /// process sees a 2.6 kernel release, as on a host before its upgrade.
    pub fn in_lab_on_old_kernel(self, lab: &Lab, end: &str) -> Builder {
        let mut b = self.in_lab(lab, end);
        let (_, ns, ip) = b.lab.take().expect("in_lab sets it");
        let mut cmd = lab.exec(end, "setarch");
        cmd.args(["x86_64", "--uname-2.6", env!("CARGO_BIN_EXE_pathprobe")]);
        b.lab = Some((cmd, ns, ip));
        b
    }

    /// In network namespace `ns` (e.g. a [`super::lab::Star`] host), its
    /// web listener on `ip`, running `binary` (`None`: this build's), at
    /// nice -10: a lab that checks figures against the truth on a machine
    /// shared with other work (compilers) gives its own processes the CPU
    /// first, so that a receiver is not read late.
    pub fn in_namespace(mut self, ns: &str, ip: IpAddr, binary: Option<&Path>) -> Builder {
        let mut cmd = Command::new("nice");
        cmd.args(["-n", "-10", "ip", "netns", "exec", ns]);
        match binary {
            Some(b) => cmd.arg(b),
            None => cmd.arg(env!("CARGO_BIN_EXE_pathprobe")),
        };
        self.lab = Some((cmd, ns.to_string(), ip));
        self
    }

    pub fn start(self) -> Serve {
        let turn = turn::shared();
        let (dir, config) = match self.config {
            Config::File(path) => (None, path),
            Config::Yaml(yaml) => {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("pathprobe.yml");
                std::fs::write(&path, yaml).unwrap();
                (Some(dir), path)
            }
        };
        let (mut cmd, ns, ip) = match self.lab {
            Some((cmd, ns, ip)) => (cmd, Some(ns), ip),
            None => (
                Command::new(env!("CARGO_BIN_EXE_pathprobe")),
                None,
                Ipv4Addr::LOCALHOST.into(),
            ),
        };
        self.limits.apply(&mut cmd);
        cmd.envs(self.env);
        let mut child = cmd
            .arg("serve")
            .arg("--config.file")
            .arg(&config)
            .arg("--web.listen-address")
            .arg(SocketAddr::new(ip, 0).to_string())
            .args(&self.flags)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning pathprobe serve");
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let addrs = read_log(child.stderr.take().unwrap(), log.clone());
        let mut serve = Serve {
            child,
            http: SocketAddr::new(ip, 0),
            responder: None,
            ns,
            log,
            _dir: dir,
            _turn: turn,
        };
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            match addrs.recv_timeout(Duration::from_millis(100)) {
                Ok(Logged::Responder(a)) => serve.responder = Some(a),
                Ok(Logged::Http(a)) => {
                    serve.http = a;
                    break;
                }
                Err(_) => serve.check_starting(deadline, "log its HTTP address"),
            }
        }
        while !matches!(serve.try_get("/-/ready"), Ok((200, _))) {
            serve.check_starting(deadline, "answer 200 on /-/ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        serve
    }
}

enum Logged {
    Responder(SocketAddr),
    Http(SocketAddr),
}

/// Reads serve's stderr to its end on a thread (a full pipe would block
/// it): keeps the last lines, and sends the addresses it logs, in logfmt or
/// JSON.
fn read_log(
    stderr: std::process::ChildStderr,
    log: Arc<Mutex<VecDeque<String>>>,
) -> mpsc::Receiver<Logged> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let logged = if let Some(rest) = line.split("serving metrics on http://").nth(1) {
                rest.split('/')
                    .next()
                    .and_then(|a| a.parse().ok())
                    .map(Logged::Http)
            } else if line.contains("responder listening") {
                addr_field(&line).map(Logged::Responder)
            } else {
                None
            };
            if let Some(l) = logged {
                let _ = tx.send(l);
            }
            let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
            if log.len() == LOG_LINES {
                log.pop_front();
            }
            log.push_back(line);
        }
    });
    rx
}

/// The `addr` field of a log line: `addr=...` (logfmt) or `"addr":"..."`.
fn addr_field(line: &str) -> Option<SocketAddr> {
    let value = if let Some(rest) = line.split("addr=").nth(1) {
        rest.split_whitespace().next()?.trim_matches('"')
    } else {
        line.split("\"addr\":\"").nth(1)?.split('"').next()?
    };
    value.parse().ok()
}

impl Serve {
    /// With the config file at `config`.
    pub fn file(config: &Path) -> Builder {
        Builder {
            config: Config::File(config.to_path_buf()),
            flags: Vec::new(),
            env: Vec::new(),
            lab: None,
            limits: Limits::default(),
        }
    }

    /// With `yaml` as its config file (in a temporary directory).
    pub fn yaml(yaml: &str) -> Builder {
        Builder {
            config: Config::Yaml(yaml.to_string()),
            flags: Vec::new(),
            env: Vec::new(),
            lab: None,
            limits: Limits::default(),
        }
    }

    /// `Serve::file(config).start()`.
    pub fn start(config: &Path) -> Serve {
        Serve::file(config).start()
    }

    /// `Serve::yaml(yaml).in_lab(lab, end).start()`.
    pub fn in_lab(lab: &Lab, end: &str, yaml: &str) -> Serve {
        Serve::yaml(yaml).in_lab(lab, end).start()
    }

    fn check_starting(&mut self, deadline: Instant, what: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("pathprobe serve exited ({status}):\n{}", self.log());
        }
        assert!(
            Instant::now() < deadline,
            "pathprobe serve did not {what} within {READY_WITHIN:?}:\n{}",
            self.log()
        );
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How it exited, once it has.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last lines serve logged.
    pub fn log(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// `method path`, from inside serve's namespace when it has one.
    pub fn try_request(&self, method: &str, path: &str) -> std::io::Result<(u16, String)> {
        let (addr, method, path) = (self.http, method.to_string(), path.to_string());
        match &self.ns {
            Some(ns) => in_netns(ns, move || http::try_request(addr, &method, &path)),
            None => http::try_request(addr, &method, &path),
        }
    }

    pub fn try_get(&self, path: &str) -> std::io::Result<(u16, String)> {
        self.try_request("GET", path)
    }

    /// Status and body; an I/O error fails the test.
    pub fn request(&self, method: &str, path: &str) -> (u16, String) {
        self.try_request(method, path)
            .unwrap_or_else(|e| panic!("{method} {path} on serve at {}: {e}", self.http))
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path)
    }

    /// A scrape of /metrics, which must answer 200.
    pub fn metrics(&self) -> String {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "/metrics: {body}");
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
                "{what}: not within {limit:?}\n{body}\nlog:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends `sig` to the process.
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, sig) },
            0
        );
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Resident memory of the process, KiB.
    pub fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `pathprobe serve` in the test's runtime: the service's `run` on port-0
/// listeners, beside a second in-process responder (the peer) whose
/// address replaces `PEER` in the config.
pub struct InProcess {
    pub http: SocketAddr,
    pub peer: SocketAddr,
    /// The service's own responder.
    pub responder: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _peer: super::responder::Stop,
    /// The config file, which a test may rewrite before a reload.
    pub config: tempfile::NamedTempFile,
    _turn: Turn,
}

impl InProcess {
    pub async fn start(yaml: &str) -> InProcess {
        Self::start_with_peer(yaml, pathprobe::responder::ResponderConfig::default()).await
    }

    /// As [`InProcess::start`], with the peer responder's limits given.
    pub async fn start_with_peer(
        yaml: &str,
        peer_config: pathprobe::responder::ResponderConfig,
    ) -> InProcess {
        let run = Self::spawn(yaml, peer_config).await;
        // The web routes answer 503 until the schedule is in force: a test
        // starts from a service that knows its jobs.
        let start = Instant::now();
        while run.request("GET", "/-/ready").await.0 != 200 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "serve was not ready within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        run
    }

    /// As [`InProcess::start_with_peer`], returning as soon as the service
    /// task is spawned: its HTTP listener answers, the schedule may not be
    /// in force yet.
    pub async fn spawn(
        yaml: &str,
        peer_config: pathprobe::responder::ResponderConfig,
    ) -> InProcess {
        use pathprobe::responder::bind;
        use pathprobe::service::{self, ConfigSource, Listeners};
        let turn = turn::shared();
        let (peer, _, peer_stop) = super::responder::start(peer_config).await;
        let mut config = tempfile::Builder::new().suffix(".yml").tempfile().unwrap();
        config
            .write_all(yaml.replace("PEER", &peer.to_string()).as_bytes())
            .unwrap();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_addr = http.local_addr().unwrap();
        let responder = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let responder_addr = responder.0.local_addr().unwrap();
        let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(1);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let source = ConfigSource::File(config.path().to_path_buf());
        let task = tokio::spawn(async move {
            let _keep = reload_tx;
            service::run(
                source,
                Listeners {
                    http,
                    responder: Some(responder),
                },
                reload_rx,
                async {
                    let _ = stop_rx.await;
                },
            )
            .await
        });
        InProcess {
            http: http_addr,
            peer,
            responder: responder_addr,
            stop: Some(stop_tx),
            task,
            _peer: peer_stop,
            config,
            _turn: turn,
        }
    }

    /// `method path`: status and body.
    pub async fn request(&self, method: &str, path: &str) -> (u16, String) {
        http::request_async(self.http, method, path).await
    }

    /// Scrapes until `ok` holds, within `limit`; returns that scrape.
    pub async fn wait_for(&self, limit: Duration, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let (status, body) = self.request("GET", "/metrics").await;
            assert_eq!(status, 200);
            if ok(&body) {
                return body;
            }
            assert!(
                start.elapsed() < limit,
                "metrics never became ready:\n{body}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops the service and waits (bounded) for it to end cleanly.
    pub async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("serve stopped in time")
            .unwrap()
            .unwrap();
    }
}
