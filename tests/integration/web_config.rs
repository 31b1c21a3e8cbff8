//! `serve --web.config.file` (exporter-toolkit's format) against the real
//! clients: a real Prometheus scraping over TLS with basic auth and with a
//! client certificate, curl for each endpoint, plain HTTP to the TLS port,
//! and a bad file refused at start, by `check-config` and on reload.
//! Certificates are made at test time with `openssl`; Prometheus is the
//! Debian package `prometheus`. Under CI a missing tool fails the test.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::http;

const PASSWORD: &str = "correct horse battery staple";

/// Whether `tool` runs; without it, the test says so and stops, except
/// under CI, where it fails.
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg(if tool == "openssl" {
            "version"
        } else {
            "--version"
        })
        .output()
        .is_ok();
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{tool} is needed (Debian package {tool})"
        );
        eprintln!("SKIPPED: {tool} is not installed");
    }
    ok
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 signed by it, a client
/// certificate signed by it, and a client certificate from another CA.
fn make_certs(dir: &Path) {
    let openssl = |args: &[String]| run(Command::new("openssl").args(args).current_dir(dir));
    let words = |s: &str| -> Vec<String> { s.split_whitespace().map(String::from).collect() };
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    for ca in ["ca", "other-ca"] {
        openssl(&words(&format!(
            "req -x509 {ec} -keyout {ca}.key -out {ca}.pem -days 2 -subj /CN={ca}"
        )));
    }
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, ca, ext) in [
        ("server", "ca", "server.ext"),
        ("client", "ca", "client.ext"),
        ("stranger", "other-ca", "client.ext"),
    ] {
        openssl(&words(&format!(
            "req {ec} -keyout {name}.key -out {name}.csr -subj /CN=pathprobe-test"
        )));
        openssl(&words(&format!(
            "x509 -req -in {name}.csr -CA {ca}.pem -CAkey {ca}.key -CAcreateserial -out {name}.pem -days 2 -extfile {ext}"
        )));
    }
}

/// `pathprobe serve` with a web config, its log kept; killed when dropped.
struct Served {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Served {
    /// Starts serve and waits, bounded, for the address it logs.
    fn start(config: &Path, web: &Path) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pathprobe"))
            .args(["serve", "--config.file"])
            .arg(config)
            .args(["--web.listen-address", "127.0.0.1:0", "--web.config.file"])
            .arg(web)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning pathprobe serve");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("serving metrics on ").nth(1) {
                    let addr = rest
                        .split("://")
                        .nth(1)
                        .and_then(|r| r.split('/').next())
                        .and_then(|a| a.parse::<SocketAddr>().ok());
                    if let Some(a) = addr {
                        let _ = tx.send((rest.starts_with("https"), a));
                    }
                }
                kept.lock().unwrap().push(line);
            }
        });
        let (_, addr) = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                panic!(
                    "serve logged no address:\n{}",
                    log.lock().unwrap().join("\n")
                )
            });
        Served { child, addr, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    fn cpu_ms(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let after = stat.rsplit_once(')').unwrap().1;
        let f: Vec<u64> = after
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        // utime and stime are fields 14 and 15 (11 and 12 after the name).
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        (f[11] + f[12]) as f64 * 1000.0 / ticks
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What curl got: its exit code, the status (0 if none), the response
/// headers and body.
struct Got {
    exit: i32,
    status: u16,
    headers: String,
    body: String,
}

fn curl(dir: &Path, url: &str, args: &[&str]) -> Got {
    let headers = dir.join(format!("h{}", rand_suffix()));
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-o", "-", "-D"])
        .arg(&headers)
        .args(["-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .current_dir(dir)
        .output()
        .expect("spawning curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    Got {
        exit: out.status.code().unwrap_or(-1),
        status: code.trim().parse().unwrap_or(0),
        headers: std::fs::read_to_string(&headers).unwrap_or_default(),
        body: body.to_string(),
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn auth() -> String {
    format!("prometheus:{PASSWORD}")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real Prometheus with `scrape_configs`, its files in `dir`; killed
/// when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    fn start(dir: &Path, scrape_configs: &str) -> Prometheus {
        let dir = dir.join("prometheus");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}\nscrape_configs:\n{scrape_configs}"
            ),
        )
        .unwrap();
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawning prometheus");
        let mut p = Prometheus { child, addr, dir };
        let start = Instant::now();
        while !matches!(http::try_request(p.addr, "GET", "/-/ready"), Ok((200, _))) {
            if let Ok(Some(s)) = p.child.try_wait() {
                panic!("prometheus exited ({s}):\n{}", p.log());
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "prometheus not ready:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// The targets' health as Prometheus reports it: job to (health, last error).
    fn targets(&self) -> Vec<(String, String, String)> {
        let (_, body) = http::request(self.addr, "GET", "/api/v1/targets");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["data"]["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|t| {
                (
                    t["labels"]["job"].as_str().unwrap_or("").to_string(),
                    t["health"].as_str().unwrap_or("").to_string(),
                    t["lastError"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// Waits, bounded, until every job has been scraped at least once
    /// (health up or down), and returns the targets then.
    fn scraped(&self) -> Vec<(String, String, String)> {
        let start = Instant::now();
        loop {
            let t = self.targets();
            if !t.is_empty() && t.iter().all(|(_, h, _)| h == "up" || h == "down") {
                return t;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "targets never scraped: {t:?}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// An instant query's first value, if any.
    fn value(&self, promql: &str) -> Option<f64> {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", promql)
            .finish();
        let (_, body) = http::request(self.addr, "GET", &format!("/api/v1/query?{q}"));
        let v: Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A service with one loopback module for `/probe` and nothing scheduled,
/// so that its CPU time is the HTTP side's.
fn service_config(dir: &Path) -> PathBuf {
    let p = dir.join("pathprobe.yml");
    std::fs::write(
        &p,
        "responder: {listen: \"127.0.0.1:0\"}\nmodules:\n  lo: {kind: loopback_tcp, duration: 100ms}\ntargets: []\n",
    )
    .unwrap();
    p
}

/// Whether a `/probe` answer says the probe succeeded.
fn probe_succeeded(body: &str) -> bool {
    body.lines()
        .any(|l| l.starts_with("pathprobe_probe_success") && l.ends_with(" 1"))
}

fn hash(cost: u32) -> String {
    bcrypt::hash(PASSWORD, cost).unwrap()
}

#[test]
fn prometheus_scrapes_serve_over_tls_with_basic_auth_and_every_endpoint_is_guarded() {
    if !have("openssl") || !have("curl") || !have("prometheus") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    make_certs(dir);
    let web = dir.join("web.yml");
    // Cost 10, as exporter-toolkit's docs suggest.
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  min_version: TLS12\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\nbasic_auth_users:\n  prometheus: '{}'\n",
            hash(10)
        ),
    )
    .unwrap();
    let serve = Served::start(&service_config(dir), &web);
    let base = format!("https://{}", serve.addr);
    let ca = ["--cacert", "ca.pem"];
    let with = |path: &str, extra: &[&str]| {
        let a = auth();
        let mut args = vec!["-u", &a];
        args.extend(ca);
        args.extend(extra);
        curl(dir, &format!("{base}{path}"), &args)
    };

    // Without credentials, or with wrong ones: 401 and a challenge, on
    // every endpoint.
    for path in [
        "/metrics",
        "/probe?module=lo",
        "/",
        "/api/v1/history",
        "/-/healthy",
        "/-/ready",
    ] {
        let g = curl(dir, &format!("{base}{path}"), &ca);
        assert_eq!(g.status, 401, "{path}: {}", g.body);
        assert!(
            g.headers
                .to_ascii_lowercase()
                .contains("www-authenticate: basic"),
            "{path}: {}",
            g.headers
        );
        assert!(g.headers.contains("x-frame-options: deny"), "{}", g.headers);
        assert!(!g.body.contains("pathprobe_"), "{path}: {}", g.body);
    }
    let g = curl(
        dir,
        &format!("{base}/-/reload"),
        &["--cacert", "ca.pem", "-X", "POST"],
    );
    assert_eq!(g.status, 401, "{}", g.body);
    let g = curl(
        dir,
        &format!("{base}/metrics"),
        &["--cacert", "ca.pem", "-u", "prometheus:wrong"],
    );
    assert_eq!(g.status, 401, "{}", g.body);

    // With them: the first check costs a bcrypt, the next ones none.
    let cpu0 = serve.cpu_ms();
    let g = with("/metrics", &[]);
    assert_eq!(g.status, 200, "{}", g.body);
    assert!(g.body.contains("pathprobe_build_info"), "{}", g.body);
    assert!(
        g.headers.contains("x-content-type-options: nosniff"),
        "{}",
        g.headers
    );
    let first = serve.cpu_ms() - cpu0;
    let cpu1 = serve.cpu_ms();
    for _ in 0..20 {
        assert_eq!(with("/metrics", &[]).status, 200);
    }
    let twenty = serve.cpu_ms() - cpu1;
    eprintln!("FIGURE: first authenticated scrape {first:.0} ms CPU (one bcrypt at cost 10 and a TLS handshake); the next 20 together {twenty:.0} ms");
    assert!(
        twenty < 5.0 * first.max(40.0),
        "checks not remembered: first {first} ms, next 20 {twenty} ms"
    );

    // /probe, /-/reload and the rest with them.
    let g = with("/probe?module=lo", &[]);
    assert_eq!(g.status, 200, "{}", g.body);
    assert!(probe_succeeded(&g.body), "{}", g.body);
    let g = with("/-/reload", &["-X", "POST"]);
    assert_eq!(g.status, 200, "{}", g.body);
    for path in ["/-/healthy", "/", "/api/v1/history"] {
        assert_eq!(with(path, &[]).status, 200, "{path}");
    }

    // Plain HTTP to the TLS port: refused, and told why.
    let g = curl(
        dir,
        &format!("http://{}/metrics", serve.addr),
        &["-u", &auth()],
    );
    assert_eq!(g.status, 400, "{}", g.body);
    assert!(g.body.contains("HTTPS"), "{}", g.body);
    assert!(!g.body.contains("pathprobe_"), "{}", g.body);
    // And a client that does not trust the CA fails its handshake.
    let g = curl(dir, &format!("{base}/metrics"), &["-u", &auth()]);
    assert_ne!(g.exit, 0, "curl trusted a test certificate: {}", g.body);

    // A flood of wrong passwords: each costs a bcrypt, one at a time, and
    // beyond a few waiting they are told to come back; a scrape with the
    // right password (remembered) still gets through at once. 24
    // connections: under one client's share of the HTTP connections (an
    // eighth of 256), which would otherwise close the scrape at accept.
    const FLOOD: usize = 24;
    let cpu2 = serve.cpu_ms();
    let started = Instant::now();
    let flood: Vec<_> = (0..FLOOD)
        .map(|i| {
            let (url, dir) = (format!("{base}/metrics"), dir.to_path_buf());
            std::thread::spawn(move || {
                curl(
                    &dir,
                    &url,
                    &["--cacert", "ca.pem", "-u", &format!("prometheus:guess{i}")],
                )
                .status
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let during = Instant::now();
    let g = with("/metrics", &[]);
    let scrape_during = during.elapsed();
    assert_eq!(g.status, 200, "{}", g.body);
    let codes: Vec<u16> = flood.into_iter().map(|t| t.join().unwrap()).collect();
    let wall = started.elapsed();
    let flood_cpu = serve.cpu_ms() - cpu2;
    let (denied, busy) = (
        codes.iter().filter(|&&c| c == 401).count(),
        codes.iter().filter(|&&c| c == 429).count(),
    );
    eprintln!(
        "FIGURE: {FLOOD} wrong passwords at once: {denied} x 401, {busy} x 429, in {:.2} s using {flood_cpu:.0} ms CPU; a remembered scrape meanwhile took {:.0} ms",
        wall.as_secs_f64(),
        scrape_during.as_secs_f64() * 1000.0
    );
    assert_eq!(denied + busy, FLOOD, "{codes:?}");
    assert!(
        flood_cpu < wall.as_secs_f64() * 1000.0 * 1.3 + 200.0,
        "the flood took more than a core: {flood_cpu} ms CPU in {wall:?}"
    );
    let metrics = with("/metrics", &[]).body;
    let refused = |reason: &str| -> f64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("pathprobe_http_refusals_total{")
                    && l.contains(&format!("reason=\"{reason}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {reason} refusals:\n{metrics}"))
    };
    assert!(refused("unauthorized") >= 8.0 + denied as f64);
    assert_eq!(refused("auth_busy"), busy as f64);
    assert!(refused("tls_handshake") >= 2.0);

    // A real Prometheus: with the CA and the password, up; without the
    // password, down with a 401.
    let scrape = |job: &str, auth: &str| {
        format!(
            "  - job_name: {job}\n    scheme: https\n    tls_config: {{ca_file: {}}}\n{auth}    static_configs: [{{targets: ['{}']}}]\n",
            dir.join("ca.pem").display(),
            serve.addr
        )
    };
    let prom = Prometheus::start(
        dir,
        &(scrape(
            "pathprobe",
            &format!("    basic_auth: {{username: prometheus, password: '{PASSWORD}'}}\n"),
        ) + &scrape("anonymous", "")),
    );
    let targets = prom.scraped();
    let start = Instant::now();
    while prom.value("up{job=\"pathprobe\"}") != Some(1.0) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "up never 1: {:?}\n{}\n{}",
            prom.targets(),
            prom.log(),
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        prom.value("up{job=\"anonymous\"}"),
        Some(0.0),
        "{targets:?}"
    );
    let anonymous = prom
        .targets()
        .into_iter()
        .find(|t| t.0 == "anonymous")
        .unwrap();
    assert!(anonymous.2.contains("401"), "{anonymous:?}");
    assert_eq!(
        prom.value("pathprobe_build_info{job=\"pathprobe\"}"),
        Some(1.0)
    );
}

#[test]
fn a_required_client_certificate_is_checked_by_the_handshake() {
    if !have("openssl") || !have("curl") || !have("prometheus") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    make_certs(dir);
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n",
    )
    .unwrap();
    let serve = Served::start(&service_config(dir), &web);
    let url = format!("https://{}/metrics", serve.addr);
    // No certificate, or one from another CA: no handshake, no status.
    for extra in [
        vec![],
        vec!["--cert", "stranger.pem", "--key", "stranger.key"],
    ] {
        let mut args = vec!["--cacert", "ca.pem"];
        args.extend(extra.iter().copied());
        let g = curl(dir, &url, &args);
        assert_ne!(g.exit, 0, "{extra:?}: {}", g.body);
        assert_eq!(g.status, 0, "{extra:?}: {}", g.body);
    }
    let g = curl(
        dir,
        &url,
        &[
            "--cacert",
            "ca.pem",
            "--cert",
            "client.pem",
            "--key",
            "client.key",
        ],
    );
    assert_eq!(g.status, 200, "{}", g.body);
    let g = curl(
        dir,
        &format!("https://{}/probe?module=lo", serve.addr),
        &[
            "--cacert",
            "ca.pem",
            "--cert",
            "client.pem",
            "--key",
            "client.key",
        ],
    );
    assert!(probe_succeeded(&g.body), "{}", g.body);

    // Prometheus with the client certificate is up; without it, down.
    let ca = dir.join("ca.pem").display().to_string();
    let (cert, key) = (
        dir.join("client.pem").display().to_string(),
        dir.join("client.key").display().to_string(),
    );
    let prom = Prometheus::start(
        dir,
        &format!(
            "  - job_name: with_cert\n    scheme: https\n    tls_config: {{ca_file: {ca}, cert_file: {cert}, key_file: {key}}}\n    static_configs: [{{targets: ['{a}']}}]\n  - job_name: without_cert\n    scheme: https\n    tls_config: {{ca_file: {ca}}}\n    static_configs: [{{targets: ['{a}']}}]\n",
            a = serve.addr
        ),
    );
    prom.scraped();
    let start = Instant::now();
    while prom.value("up{job=\"with_cert\"}") != Some(1.0) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "up never 1: {:?}\n{}",
            prom.targets(),
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(prom.value("up{job=\"without_cert\"}"), Some(0.0));
}

fn check_config(config: &Path, web: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pathprobe"))
        .arg("check-config")
        .arg(config)
        .arg("--web.config.file")
        .arg(web)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn a_bad_web_config_is_refused_at_start_by_check_config_and_on_reload() {
    if !have("openssl") || !have("curl") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    make_certs(dir);
    let config = service_config(dir);
    let web = dir.join("web.yml");
    let bad = "basic_auth_users:\n  prometheus: '$2y$04$notahash'\ntls_server_config:\n  cert_fil: server.pem\n";
    std::fs::write(&web, bad).unwrap();

    // check-config names the file and the line.
    let (code, _, stderr) = check_config(&config, &web);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("web config file {}", web.display())) && stderr.contains("line 2"),
        "{stderr}"
    );
    // At start: the same error, and exit 1.
    let out = Command::new(env!("CARGO_BIN_EXE_pathprobe"))
        .args([
            "serve",
            "--web.listen-address",
            "127.0.0.1:0",
            "--config.file",
        ])
        .arg(&config)
        .arg("--web.config.file")
        .arg(&web)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&web.display().to_string()) && stderr.contains("line 2"),
        "{stderr}"
    );

    // A good file: basic auth over plain HTTP.
    let good = |password: &str| {
        format!(
            "basic_auth_users:\n  prometheus: '{}'\n",
            bcrypt::hash(password, 4).unwrap()
        )
    };
    std::fs::write(&web, good(PASSWORD)).unwrap();
    let (code, stdout, stderr) = check_config(&config, &web);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("OK (web config: plain HTTP, 1 basic-auth user(s)"),
        "{stdout}"
    );
    let serve = Served::start(&config, &web);
    let http_url = format!("http://{}", serve.addr);
    let get = |url: &str, user: &str| curl(dir, url, &["-u", user]).status;
    assert_eq!(get(&format!("{http_url}/metrics"), &auth()), 200);

    // A bad file on reload, by POST and by SIGHUP: refused naming the
    // file and line; the old users stay in force.
    std::fs::write(&web, bad).unwrap();
    let g = curl(
        dir,
        &format!("{http_url}/-/reload"),
        &["-u", &auth(), "-X", "POST"],
    );
    assert_eq!(g.status, 500, "{}", g.body);
    assert!(
        g.body.contains(&web.display().to_string()) && g.body.contains("line 2"),
        "{}",
        g.body
    );
    unsafe { libc::kill(serve.child.id() as i32, libc::SIGHUP) };
    let start = Instant::now();
    while serve
        .log()
        .lines()
        .filter(|l| l.contains("reload failed") && l.contains("web config file"))
        .count()
        < 2
    {
        assert!(start.elapsed() < Duration::from_secs(10), "{}", serve.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(&format!("{http_url}/metrics"), &auth()), 200);
    assert_eq!(get(&format!("{http_url}/metrics"), "prometheus:x"), 401);
    let g = curl(dir, &format!("{http_url}/metrics"), &["-u", &auth()]);
    assert!(
        g.body.contains("pathprobe_config_last_reload_successful 0"),
        "{}",
        g.body
    );

    // A good file on reload: the new password, and TLS from then on.
    std::fs::write(
        &web,
        good("new password")
            + "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n",
    )
    .unwrap();
    let g = curl(
        dir,
        &format!("{http_url}/-/reload"),
        &["-u", &auth(), "-X", "POST"],
    );
    assert_eq!(g.status, 200, "{}", g.body);
    let https = format!("https://{}/metrics", serve.addr);
    let g = curl(
        dir,
        &https,
        &["--cacert", "ca.pem", "-u", "prometheus:new password"],
    );
    assert_eq!(g.status, 200, "{}", g.body);
    let g = curl(dir, &https, &["--cacert", "ca.pem", "-u", &auth()]);
    assert_eq!(g.status, 401, "{}", g.body);
    assert_eq!(
        get(&format!("{http_url}/metrics"), "prometheus:new password"),
        400
    );
}
