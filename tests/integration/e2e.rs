//! End to end: a real Prometheus scrapes a real `pathprobe serve` in the
//! network-namespace lab, and the shipped dashboards and rules are checked
//! against what it stored.
//!
//! Namespace `a` runs `pathprobe serve` probing loopback (TCP, UDP), the
//! `pathprobe serve` in `b` (TCP, UDP, tcp_rr, udp_rr, tcp_crr) through the router
//! `r`, and a port of `b` where nothing listens; and a Prometheus (1 s
//! scrapes, 1 s rule evaluation, temporary storage) that scrapes both
//! services. The test then
//! 1. evaluates every query of every dashboard in dashboards/, with the
//!    template variables filled in, and requires data from each;
//! 2. loads config/alerts.yml as it is and requires every rule to evaluate
//!    without error;
//! 3. reloads Prometheus with a fast copy of config/alerts.yml (windows
//!    shortened, see "Shortening the windows" in docs/ALERTS.md), narrows
//!    the lab link from 200 to 20 Mbit/s with tbf on `r`, and requires
//!    PathprobeThroughputBelowBaseline to go pending for the path to `b`
//!    (and not before the drop).
//!
//! Needs root (network namespaces) and the `prometheus` binary (Debian
//! package `prometheus`, installed by .ci/run). Without root it prints why
//! and passes, like the other lab tests.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::lab::{in_netns, require_root, Lab};
use crate::common::metrics::samples;
use crate::common::serve::Serve;
use crate::common::{dashboards, http};

/// Prometheus' port inside namespace `a`: the namespace is private to this
/// test, so the port is free by construction.
const PROMETHEUS_PORT: u16 = 9090;
/// Rate of the lab link before and after the drop, Mbit/s.
const RATE_BEFORE: u32 = 200;
const RATE_AFTER: u32 = 20;
/// Probe interval of every module in `a`.
const PROBE_INTERVAL_S: u32 = 6;

/// `b` only answers probes.
const RESPONDER: &str = "responder: {listen: \"0.0.0.0:5301\", idle_timeout: 5s}\nmodules: {}\n";

/// `a`: short probes of loopback and of `b`, every few seconds, so that
/// Prometheus has several runs of each within seconds. Loopback is paced so
/// that it does not take the machine's CPUs for a second every round. Loopback
/// TCP runs both ways at once and UDP to `b` the other way (b sends), so
/// that bidir and receive flows exist too.
/// `b` is also probed with the request/response kinds (a fifth of a second
/// each, to keep a round of probes within the interval), for the latency
/// panels. Target `down` has no responder behind it: a failing path, as
/// fleets have, for the failure panels. Every IRQ counts as a NIC's here, so that
/// the per-IRQ series exist whatever the machine's interrupt names.
fn prober(b: std::net::Ipv4Addr) -> String {
    format!(
        "responder: {{listen: \"0.0.0.0:5301\"}}\n\
         scheduler: {{default_interval: {PROBE_INTERVAL_S}s, jitter: 0}}\n\
         host_metrics: {{irq_pattern: '.'}}\n\
         modules:\n\
         \x20 loopback_tcp: {{kind: loopback_tcp, direction: bidir, duration: 1s, bitrate: 1G}}\n\
         \x20 loopback_udp: {{kind: loopback_udp, duration: 1s, bitrate: 200M}}\n\
         \x20 tcp: {{kind: tcp, duration: 1s, connect_timeout: 2s, timeout: 5s}}\n\
         \x20 udp: {{kind: udp, direction: receive, duration: 1s, bitrate: 5M, connect_timeout: 2s, timeout: 5s}}\n\
         \x20 rr: {{kind: tcp_rr, duration: 200ms, connect_timeout: 2s, timeout: 5s}}\n\
         \x20 irtt: {{kind: udp_rr, duration: 200ms, connect_timeout: 2s, timeout: 5s}}\n\
         \x20 crr: {{kind: tcp_crr, duration: 200ms, connect_timeout: 2s, timeout: 5s}}\n\
         targets:\n\
         \x20 - {{name: loopback, modules: [loopback_tcp, loopback_udp]}}\n\
         \x20 - {{name: b, address: \"{b}:5301\", modules: [tcp, udp, rr, irtt, crr]}}\n\
         \x20 - {{name: down, address: \"{b}:5399\", modules: [tcp]}}\n"
    )
}

/// (target, module) pairs `a` probes successfully.
const PATHS: [(&str, &str); 7] = [
    ("loopback", "loopback_tcp"),
    ("loopback", "loopback_udp"),
    ("b", "tcp"),
    ("b", "udp"),
    ("b", "rr"),
    ("b", "irtt"),
    ("b", "crr"),
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Polls `f` until it returns `Some`, at most `limit`; panics with `what`
/// and the last state `f` left in `last` otherwise.
fn poll<T>(limit: Duration, what: &str, mut f: impl FnMut(&mut String) -> Option<T>) -> T {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        if let Some(v) = f(&mut last) {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: not within {limit:?}; last seen:\n{last}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// An HTTP exchange from inside `ns`.
fn http_in(
    ns: &str,
    addr: SocketAddr,
    method: &str,
    target: &str,
) -> std::io::Result<(u16, String)> {
    let (method, target) = (method.to_string(), target.to_string());
    in_netns(ns, move || http::try_request(addr, &method, &target))
}

/// A Prometheus server in one lab namespace; killed when dropped.
struct Prometheus {
    child: Child,
    ns: String,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Writes `config` (prometheus.yml) and `rules` (rules.yml, named by
    /// the config) to a temporary directory, starts Prometheus in `end`
    /// with its storage there, and waits (bounded) until it is ready.
    fn start(lab: &Lab, end: &str, config: &str, rules: &str) -> Prometheus {
        let dir = tempfile::tempdir().expect("prometheus directory");
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        std::fs::write(dir.path().join("rules.yml"), rules).unwrap();
        let ip = if end == "a" {
            lab.addr_a()
        } else {
            lab.addr_b()
        };
        let addr: SocketAddr = (ip, PROMETHEUS_PORT).into();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
        let child = lab
            .exec(end, "prometheus")
            .args([
                format!("--config.file={}", path("prometheus.yml")),
                format!("--storage.tsdb.path={}", path("data")),
                format!("--web.listen-address={addr}"),
                // POST /-/reload, to swap in the fast rules.
                "--web.enable-lifecycle".into(),
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawning prometheus (Debian package `prometheus`)");
        let mut p = Prometheus {
            child,
            ns: format!("{}-{end}", lab.name()),
            addr,
            dir,
        };
        let start = Instant::now();
        while !matches!(p.get("/-/ready"), Ok((200, _))) {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("prometheus exited ({status}):\n{}", p.log());
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "prometheus never became ready:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    fn log(&self) -> String {
        let log =
            std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn get(&self, target: &str) -> std::io::Result<(u16, String)> {
        http_in(&self.ns, self.addr, "GET", target)
    }

    /// `data` of a successful API answer.
    fn api(&self, target: &str) -> Value {
        let (status, body) = self
            .get(target)
            .unwrap_or_else(|e| panic!("GET {target}: {e}"));
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("GET {target}: {status}, not JSON ({e}): {body}"));
        assert_eq!(
            (status, v["status"].as_str()),
            (200, Some("success")),
            "GET {target}: {body}"
        );
        v["data"].clone()
    }

    /// An instant query; `Err` carries Prometheus' error (e.g. a parse
    /// error), `Ok` the result (vector, matrix, scalar or string).
    fn query(&self, promql: &str) -> Result<Value, String> {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", promql)
            .finish();
        let target = format!("/api/v1/query?{q}");
        let (status, body) = self.get(&target).map_err(|e| e.to_string())?;
        let v: Value =
            serde_json::from_str(&body).map_err(|e| format!("{status}, not JSON ({e}): {body}"))?;
        if v["status"] != "success" {
            return Err(format!("{status}: {} {}", v["errorType"], v["error"]));
        }
        Ok(v["data"].clone())
    }

    /// The sample vector of `promql`; panics on a query error.
    fn vector(&self, promql: &str) -> Vec<Value> {
        let data = self
            .query(promql)
            .unwrap_or_else(|e| panic!("{promql}: {e}"));
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// Replaces the rules file and reloads; Prometheus answers once the
    /// new rules are in place.
    fn reload_rules(&self, rules: &str) {
        std::fs::write(self.dir.path().join("rules.yml"), rules).unwrap();
        let (status, body) =
            http_in(&self.ns, self.addr, "POST", "/-/reload").expect("POST /-/reload");
        assert_eq!(status, 200, "reload: {body}\n{}", self.log());
    }

    /// Prometheus' own counters for each rule group (key "file;group").
    fn group_counters(&self, metric: &str) -> BTreeMap<String, f64> {
        let (status, body) = self.get("/metrics").expect("prometheus /metrics");
        assert_eq!(status, 200);
        samples(&body, metric, &[])
            .filter_map(|(labels, value)| {
                let group = labels.split("rule_group=\"").nth(1)?.split('"').next()?;
                Some((group.to_string(), value))
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Prometheus configuration that scrapes `targets` each second and
/// evaluates `rules.yml` beside it (this lab's and the localization lab's).
pub(crate) fn prometheus_config<T: std::fmt::Display>(targets: &[T]) -> String {
    let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    format!(
        "global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}\n\
         rule_files: [rules.yml]\n\
         scrape_configs:\n\
         \x20 - job_name: pathprobe\n\
         \x20   static_configs: [{{targets: [{}]}}]\n",
        targets.join(", ")
    )
}

/// A fast copy of alerts.yml, for a test of minutes: every range becomes
/// 30 s, every 7 d subquery a 5 min one in 2 s steps, and every `for` 1 min
/// (long enough that an alert is seen pending before it fires). The
/// structure of every expression is untouched, so the test follows the
/// real rules. As in docs/ALERTS.md ("Shortening the windows"), the drop
/// must stay shorter than half of the baseline window.
pub(crate) fn fast_rules(real: &str) -> String {
    // A PromQL duration: 1h, 90s, 1h30m, 500ms.
    const DURATION: &str = r"(?:\d+(?:ms|[smhdwy]))+";
    let subquery = regex::Regex::new(&format!(r"\[{DURATION}:(?:{DURATION})?\]")).unwrap();
    let range = regex::Regex::new(&format!(r"\[{DURATION}\]")).unwrap();
    let for_ = regex::Regex::new(&format!(r"(?m)^(\s*for:\s*){DURATION}\s*$")).unwrap();
    let fast = subquery.replace_all(real, "[5m:2s]");
    let fast = range.replace_all(&fast, "[30s]");
    for_.replace_all(&fast, "${1}1m").into_owned()
}

/// Group name -> number of rules, from a rules file.
fn rule_groups(yaml: &str) -> BTreeMap<String, usize> {
    let v: serde_yaml::Value = serde_yaml::from_str(yaml).expect("rules file parses");
    v["groups"]
        .as_sequence()
        .expect("rules file has groups")
        .iter()
        .map(|g| {
            (
                g["name"].as_str().expect("group name").to_string(),
                g["rules"].as_sequence().map_or(0, |r| r.len()),
            )
        })
        .collect()
}

/// Waits until every group of `rules` has been evaluated at least `evals`
/// more times than at `before`, then checks through /api/v1/rules that
/// all groups and rules are loaded, healthy and without error, and through
/// Prometheus' own counters that no evaluation failed.
fn assert_rules_healthy(
    prom: &Prometheus,
    rules: &str,
    before: &BTreeMap<String, f64>,
    evals: f64,
) {
    let want = rule_groups(rules);
    poll(Duration::from_secs(30), "rule evaluations", |last| {
        let now = prom.group_counters("prometheus_rule_group_iterations_total");
        *last = format!("{now:?}");
        let done = want.keys().all(|g| {
            let key = now.keys().find(|k| k.ends_with(&format!(";{g}")));
            key.is_some_and(|k| now[k] >= before.get(k).copied().unwrap_or(0.0) + evals)
        });
        done.then_some(())
    });

    let data = prom.api("/api/v1/rules");
    let groups = data["groups"].as_array().expect("rule groups");
    let loaded: BTreeMap<String, usize> = groups
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap_or("").to_string(),
                g["rules"].as_array().map_or(0, |r| r.len()),
            )
        })
        .collect();
    assert_eq!(loaded, want, "loaded rule groups and their rule counts");
    for g in groups {
        for r in g["rules"].as_array().unwrap() {
            let name = r["name"].as_str().unwrap_or("?");
            assert_eq!(
                r["health"], "ok",
                "rule {name} in {}: {} (lastError {})",
                g["name"], r["query"], r["lastError"]
            );
            assert!(
                r["lastError"].as_str().unwrap_or("").is_empty(),
                "rule {name}: {}",
                r["lastError"]
            );
        }
    }
    let failures = prom.group_counters("prometheus_rule_evaluation_failures_total");
    for (group, n) in &failures {
        assert_eq!(*n, 0.0, "evaluation failures in {group}");
    }
}

#[test]
fn prometheus_dashboards_and_alerts_against_the_lab() {
    if !require_root() {
        return;
    }
    let started = Instant::now();
    let lab = Lab::up("e2e").unwrap();
    lab.shape(RATE_BEFORE).unwrap();
    let b = Serve::in_lab(&lab, "b", RESPONDER);
    let a = Serve::in_lab(&lab, "a", &prober(lab.addr_b()));
    let real_rules =
        std::fs::read_to_string(repo().join("config/alerts.yml")).expect("config/alerts.yml");
    let prom = Prometheus::start(
        &lab,
        "a",
        &prometheus_config(&[a.http, b.http]),
        &real_rules,
    );
    let instance = a.http.to_string();
    eprintln!("prometheus ready after {:?}", started.elapsed());

    // Both services scraped, and every path has at least two runs stored,
    // so that rates, changes and deltas have two points to work with.
    poll(
        Duration::from_secs(40),
        "two stored runs of every path",
        |last| {
            let up = prom.vector("up == 1");
            let runs = prom.vector(
                "changes(pathprobe_probe_last_run_timestamp_seconds[5m]) \
             and on (instance, target, module) pathprobe_probe_success == 1",
            );
            let ready: BTreeSet<(String, String)> = runs
                .iter()
                .filter(|s| s["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()) >= Some(1.0))
                .map(|s| {
                    (
                        s["metric"]["target"].as_str().unwrap_or("").to_string(),
                        s["metric"]["module"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            *last = format!("up: {up:?}\nruns: {runs:?}");
            (up.len() == 2
                && PATHS
                    .iter()
                    .all(|(t, m)| ready.contains(&(t.to_string(), m.to_string()))))
            .then_some(())
        },
    );
    eprintln!(
        "two runs of every path stored after {:?}",
        started.elapsed()
    );

    // The real rules, as shipped, evaluate cleanly on real data.
    assert_rules_healthy(&prom, &real_rules, &BTreeMap::new(), 3.0);
    eprintln!("config/alerts.yml healthy after {:?}", started.elapsed());

    // The fast copy: loaded now, so that its baseline covers the time the
    // dashboards take.
    let fast = fast_rules(&real_rules);
    assert_ne!(fast, real_rules, "no window of alerts.yml was shortened");
    let before = prom.group_counters("prometheus_rule_group_iterations_total");
    prom.reload_rules(&fast);

    check_dashboards(&prom);
    eprintln!("dashboards checked after {:?}", started.elapsed());

    assert_rules_healthy(&prom, &fast, &before, 3.0);
    eprintln!("fast rules healthy after {:?}", started.elapsed());

    throughput_drop_alert(&lab, &prom, &instance);
    eprintln!("whole test took {:?}", started.elapsed());
    drop(a);
    drop(b);
}

const DROP_ALERT: &str = "PathprobeThroughputBelowBaseline";

/// The drop alert for the TCP path to `b`: states seen in /api/v1/alerts.
fn drop_alert_states(prom: &Prometheus, instance: &str) -> Vec<String> {
    let data = prom.api("/api/v1/alerts");
    data["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .filter(|a| {
            let l = &a["labels"];
            l["alertname"] == DROP_ALERT
                && l["instance"] == instance
                && l["target"] == "b"
                && l["module"] == "tcp"
        })
        .map(|a| a["state"].as_str().unwrap_or("").to_string())
        .collect()
}

fn throughput_of_b(prom: &Prometheus, instance: &str) -> Option<f64> {
    prom.vector(&format!(
        "pathprobe:throughput_bytes_per_second:successful\
         {{instance=\"{instance}\",target=\"b\",module=\"tcp\"}}"
    ))
    .first()
    .and_then(|s| s["value"][1].as_str()?.parse().ok())
}

fn throughput_drop_alert(lab: &Lab, prom: &Prometheus, instance: &str) {
    // A baseline on the steady path: the recorded 7-day median (5 minutes
    // here) exists and is near the shaped rate, and the alert is silent.
    let path = format!("{{instance=\"{instance}\",target=\"b\",module=\"tcp\"}}");
    // It rests on at least 30 s of hourly (30 s here) medians, so that the
    // low ones the drop brings stay a minority while the alert comes up.
    let baseline = poll(
        Duration::from_secs(45),
        "a baseline for the path to b",
        |last| {
            let history = prom.vector(&format!(
                "count_over_time(pathprobe:throughput_bytes_per_second:median1h{path}[5m]) >= 30"
            ));
            let v = prom.vector(&format!(
                "pathprobe:throughput_bytes_per_second:median7d{path}"
            ));
            *last = format!("history {history:?}, baseline {v:?}");
            if history.is_empty() {
                return None;
            }
            v.first()
                .and_then(|s| s["value"][1].as_str()?.parse::<f64>().ok())
        },
    );
    let rate_before = f64::from(RATE_BEFORE) * 1e6 / 8.0;
    assert!(
        baseline > 0.8 * rate_before && baseline < 1.05 * rate_before,
        "baseline {baseline} B/s at {RATE_BEFORE} Mbit/s"
    );
    assert!(
        drop_alert_states(prom, instance).is_empty(),
        "{DROP_ALERT} active on the steady path"
    );

    lab.shape(RATE_AFTER).unwrap();
    let dropped = Instant::now();
    eprintln!("link narrowed to {RATE_AFTER} Mbit/s; baseline {baseline:.0} B/s");
    let states = poll(Duration::from_secs(60), "throughput drop alert", |last| {
        let states = drop_alert_states(prom, instance);
        *last = format!(
            "states {states:?}, latest throughput {:?}, ratio {:?}, success {:?}, failure {:?}",
            throughput_of_b(prom, instance),
            prom.vector(&format!(
                "pathprobe:throughput_bytes_per_second:baseline_ratio{path}"
            )),
            prom.vector(&format!("pathprobe_probe_success{path}")),
            prom.vector(&format!("pathprobe_probe_failure_info{path}")),
        );
        (!states.is_empty()).then_some(states)
    });
    let latest = throughput_of_b(prom, instance).expect("a successful probe after the drop");
    eprintln!(
        "{DROP_ALERT} {states:?} {:?} after the drop; latest {latest:.0} B/s",
        dropped.elapsed()
    );
    assert!(
        states.iter().all(|s| s == "pending" || s == "firing"),
        "{states:?}"
    );
    let rate_after = f64::from(RATE_AFTER) * 1e6 / 8.0;
    assert!(
        latest < 1.05 * rate_after,
        "latest throughput {latest} B/s at {RATE_AFTER} Mbit/s"
    );
}

/// Dashboard queries that may return nothing in this lab, with why: the
/// panel title as `panel_queries` gives it, a piece of the query when only
/// one of the panel's queries is concerned, and the reason. Everything else
/// must return data.
const MAY_BE_EMPTY: &[(&str, Option<&str>, &str)] = &[
    (
        "Skipped scheduled runs per 15 minutes",
        None,
        "the schedule has room for every probe, so no run is skipped and the counter has no series",
    ),
    (
        "Busy: responder rejections and busy probes per 15 minutes",
        Some("result=\"busy\""),
        "busy probes: `b` has one prober, so it never answers busy and a has no result=\"busy\" series \
         (the rejection counters, pre-set to 0, do return data)",
    ),
    (
        "Throughput per kernel release",
        Some("unless topk without (release)"),
        "% change against the previous release: the lab host has run a single release",
    ),
    (
        "annotation Kernel release changed",
        None,
        "the kernel release does not change during the test",
    ),
    (
        "Mesh cycle and slot",
        None,
        "the lab's hosts run the plain scheduler, not mesh mode, so there is no mesh cycle to export \
         (tests/integration/mesh_lab.rs reads these metrics from a mesh)",
    ),
    (
        "Suspect hops",
        None,
        "the panel shows only hops with a score above 0: the lab's serves do not trace \
         (trace.enabled is off by default) and its path is healthy, so no hop is suspect \
         (tests/integration/localization_lab.rs reads the panel's series from a tracing mesh \
         with injected faults)",
    ),
];

fn may_be_empty(title: &str, expr: &str) -> Option<&'static str> {
    MAY_BE_EMPTY
        .iter()
        .find(|(t, piece, _)| *t == title && piece.is_none_or(|p| expr.contains(p)))
        .map(|(_, _, why)| *why)
}

/// Every query of every dashboard (panels, variables, annotations) runs
/// without error, with the dashboards' variables at "All" and Grafana's
/// interval variables set, and returns data unless allowed above. Queries
/// still empty are retried until a deadline: counters need a second sample
/// before `increase` shows anything.
fn check_dashboards(prom: &Prometheus) {
    let files = dashboards::dashboard_files();
    assert!(
        !files.is_empty(),
        "no dashboards/*.json: nothing to check end to end"
    );
    // The dashboards' own variables at "All" (default_values), and
    // Grafana's interval variables as Grafana sets them for "Last 5 minutes"
    // on a datasource scraped every second: $__interval is about a range's
    // step per pixel (a second or two), $__rate_interval
    // max(4 x scrape interval, $__interval + scrape interval). The helper's
    // defaults (1m steps over 1h) suit a long-running Prometheus, not one
    // with a minute of data: [1h:1m] subqueries are empty until the clock
    // crosses a minute boundary after the first sample.
    let short_range = [
        ("__rate_interval", "4s"),
        ("__interval", "2s"),
        ("__interval_ms", "2000"),
        ("__range", "5m"),
        ("__range_s", "300"),
        ("__range_ms", "300000"),
    ];
    let mut values = dashboards::default_values();
    values.retain(|(name, _)| !short_range.iter().any(|(n, _)| n == name));
    values.extend(short_range);
    let mut queries = Vec::new();
    for file in &files {
        let dashboard = dashboards::load(file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let found = dashboards::panel_queries(&dashboard);
        assert!(!found.is_empty(), "{name}: no queries");
        for (title, expr) in found {
            let promql = dashboards::substitute_variables(&expr, &values);
            queries.push((name.clone(), title, promql));
        }
    }
    // An allow-list entry that matches no query has gone stale.
    for (title, piece, _) in MAY_BE_EMPTY {
        assert!(
            queries
                .iter()
                .any(|(_, t, q)| t == title && piece.is_none_or(|p| q.contains(p))),
            "allow-list entry {title:?} {piece:?} matches no dashboard query"
        );
    }

    let mut empty: Vec<usize> = (0..queries.len()).collect();
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        empty.retain(|&i| {
            let (name, title, promql) = &queries[i];
            let data = prom
                .query(promql)
                .unwrap_or_else(|e| panic!("{name} / {title}: {e}\n{promql}"));
            match data["resultType"].as_str() {
                Some("vector") | Some("matrix") => {
                    data["result"].as_array().is_none_or(|r| r.is_empty())
                }
                _ => false, // a scalar or a string is data
            }
        });
        let must = empty
            .iter()
            .filter(|&&i| may_be_empty(&queries[i].1, &queries[i].2).is_none())
            .count();
        if must == 0 || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let mut missing = Vec::new();
    for &i in &empty {
        let (name, title, promql) = &queries[i];
        match may_be_empty(title, promql) {
            Some(why) => eprintln!("allowed empty: {name} / {title}: {why}"),
            None => missing.push(format!("{name} / {title}:\n{promql}")),
        }
    }
    eprintln!(
        "{} dashboard queries in {} files, {} with data",
        queries.len(),
        files.len(),
        queries.len() - empty.len()
    );
    assert!(
        missing.is_empty(),
        "dashboard queries without data:\n{}",
        missing.join("\n\n")
    );
}

/// The fast copy keeps every group and rule of alerts.yml, and no window
/// or `for` of it is longer than the test can wait for. Needs no root.
#[test]
fn fast_rules_shorten_every_window() {
    let real = std::fs::read_to_string(repo().join("config/alerts.yml")).unwrap();
    let fast = fast_rules(&real);
    assert_eq!(rule_groups(&fast), rule_groups(&real));
    let v: serde_yaml::Value = serde_yaml::from_str(&fast).unwrap();
    let bracket = regex::Regex::new(r"\[[0-9a-z:]+\]").unwrap();
    let mut windows = BTreeSet::new();
    let mut fors = BTreeSet::new();
    for g in v["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            let expr = r["expr"].as_str().unwrap();
            windows.extend(bracket.find_iter(expr).map(|m| m.as_str().to_string()));
            if let Some(f) = r["for"].as_str() {
                fors.insert(f.to_string());
            }
        }
    }
    assert_eq!(
        windows,
        BTreeSet::from(["[30s]".to_string(), "[5m:2s]".to_string()])
    );
    assert_eq!(fors, BTreeSet::from(["1m".to_string()]));
}
