use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;
use crate::probe::Direction;
use crate::service::history::{Point, Retention};

fn at(s: f64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs_f64(s)
}

struct Fixture {
    config: Config,
    history: History,
    store: ResultStore,
    jobs: Vec<JobInfo>,
    now: SystemTime,
}

fn job(target: &str, module: &str, kind: &'static str, host: Option<&str>) -> JobInfo {
    JobInfo {
        key: ProbeKey::new(target, module),
        kind,
        interval: Duration::from_secs(60),
        host: host.map(String::from),
        first_due: at(2e9 + 30.0),
    }
}

fn fixture() -> Fixture {
    let now = at(2e9);
    let history = History::new(Retention::default());
    let evil = ProbeKey::new("<script>alert(1)</script>", "tcp");
    for i in 0..30 {
        let t = 2e9 - 3600.0 + i as f64 * 60.0;
        let mut p = point(t, Direction::Send);
        p.throughput = 1e9;
        p.send = 1e9;
        p.local_kernel = Some("6.1".into());
        p.remote_kernel = Some(if i < 10 { "<b>5.10</b>" } else { "6.6" }.into());
        history.record_point(&evil, "tcp", p, at(t));
    }
    let mut f = point(2e9 - 10.0, Direction::Send);
    f.failures = 1;
    f.reason = Some("refused".into());
    history.record_point(&ProbeKey::new("down", "tcp"), "tcp", f, now);
    Fixture {
        config: Config::default(),
        history,
        store: ResultStore::new(),
        jobs: vec![
            job("<script>alert(1)</script>", "tcp", "tcp", Some("<script>")),
            job("down", "tcp", "tcp", Some("10.0.0.9")),
            job("fresh", "tcp", "tcp", Some("10.0.0.10")),
        ],
        now,
    }
}

fn point(t: f64, d: Direction) -> Point {
    let mut p = Point::from_outcome(&crate::metrics::ProbeOutcome {
        kind: "tcp".into(),
        direction: d,
        labels: Default::default(),
        started: at(t),
        duration: Duration::ZERO,
        slot_wait: None,
        result: Err(crate::metrics::ProbeFailure {
            reason: "x",
            message: String::new(),
        }),
    });
    p.failures = 0;
    p.reason = None;
    p
}

impl Fixture {
    fn get(&self, path: &str, query: Option<&str>) -> Reply {
        let view = View {
            config: &self.config,
            history: &self.history,
            store: &self.store,
            jobs: &self.jobs,
            host: "host<1>",
            now: self.now,
        };
        handle(&view, path, query).expect("a route of ours")
    }
}

#[test]
fn every_name_from_config_or_a_peer_is_escaped() {
    let f = fixture();
    for (path, q) in [
        ("/", None),
        (
            "/path",
            Some("target=%3Cscript%3Ealert(1)%3C%2Fscript%3E&module=tcp"),
        ),
        ("/kernels", None),
        ("/fleet", None),
    ] {
        let r = f.get(path, q);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        // The only script element is the page's own.
        assert_eq!(r.body.matches("<script").count(), 1, "{path}: {}", r.body);
        assert!(r.body.contains("&lt;script&gt;"), "{path}");
        assert!(!r.body.contains("<b>5.10"), "{path}");
        assert!(!r.body.contains("host<1>"), "{path}");
    }
}

#[test]
fn overview_puts_failures_first_and_says_when_the_first_probe_is_due() {
    let f = fixture();
    let body = f.get("/", None).body;
    let down = body.find("data-target=\"down\"").unwrap();
    let evil = body.find("data-target=\"&lt;script&gt;").unwrap();
    assert!(down < evil);
    assert!(body.contains("class=\"card fail\" data-target=\"down\""));
    assert!(body.contains("failed (refused)"), "{body}");
    assert!(
        body.contains("no results yet, first probe by <time data-ts=\"2000000030\">in 30 s</time>")
    );
    assert!(body.contains("data-points=\"30\""));
    // Filtered and paged.
    let body = f.get("/", Some("q=fre")).body;
    assert!(body.contains("data-target=\"fresh\"") && !body.contains("data-target=\"down\""));
    assert_eq!(f.get("/", Some("page=9")).status, 404);
}

#[test]
fn path_page_marks_the_peer_kernel_change() {
    let f = fixture();
    let r = f.get(
        "/path",
        Some("target=%3Cscript%3Ealert(1)%3C%2Fscript%3E&module=tcp"),
    );
    // One marker per chart (throughput, retransmits, RTT, CPU).
    assert_eq!(r.body.matches("class=\"kmark\"").count(), 4, "{}", r.body);
    assert!(r.body.contains("peer kernel &lt;b&gt;5.10&lt;/b&gt; → 6.6"));
    assert!(r.body.contains("data-name=\"send\" data-points=\"30\""));
}

#[test]
fn hostile_queries_are_refused_not_served() {
    let f = fixture();
    let long = "a".repeat(5000);
    let cases = [
        ("/", format!("q={long}"), 414),
        ("/", "page=0".to_string(), 400),
        ("/", "page=-1".to_string(), 400),
        ("/", "page=99999999999999999999999".to_string(), 400),
        ("/", "nosuch=1".to_string(), 400),
        ("/", "q=a&q=b".to_string(), 400),
        ("/path", String::new(), 400),
        ("/path", "target=nosuch&module=tcp".to_string(), 404),
        ("/api/v1/history", "since=NaN".to_string(), 400),
        ("/api/v1/history", "since=-4".to_string(), 400),
        ("/api/v1/history", "since=5x".to_string(), 400),
        ("/api/v1/history", "since=inf".to_string(), 400),
        (
            "/api/v1/history",
            "since=99999999999999999999999999h".to_string(),
            200,
        ),
        ("/api/v1/history", "limit=0".to_string(), 400),
        ("/api/v1/history", "limit=1001".to_string(), 400),
        (
            "/api/v1/history",
            "target=%FF%FE&module=%00".to_string(),
            404,
        ),
        (
            "/api/v1/history",
            format!("target={}", "b".repeat(1025)),
            400,
        ),
    ];
    for (path, q, want) in cases {
        let r = f.get(path, Some(&q));
        assert_eq!(r.status, want, "{path}?{}: {}", trunc(&q, 80), r.body);
    }
}

#[test]
fn api_answers_with_the_probe_json_names() {
    let f = fixture();
    let r = f.get("/api/v1/history", Some("target=down&module=tcp"));
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["jobs_total"], 1);
    let s = &v["jobs"][0]["samples"][0];
    assert_eq!(s["reason"], "refused");
    assert_eq!(s["failures"], 1);
    let all: serde_json::Value =
        serde_json::from_str(&f.get("/api/v1/history", None).body).unwrap();
    assert_eq!(all["jobs_total"], 3);
    let evil = &all["jobs"][0];
    assert_eq!(evil["samples"].as_array().unwrap().len(), 30);
    assert_eq!(evil["samples"][0]["throughput_bits_per_second"], 1e9);
    assert_eq!(evil["samples"][0]["remote_kernel_release"], "<b>5.10</b>");
    // since= as a duration back from now.
    let recent: serde_json::Value =
        serde_json::from_str(&f.get("/api/v1/history", Some("since=40m&limit=1")).body).unwrap();
    assert_eq!(recent["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(recent["jobs"][0]["samples"].as_array().unwrap().len(), 10);
}

#[test]
fn relative_times_read_as_words() {
    assert_eq!(relative(3.0), "just now");
    assert_eq!(relative(42.0), "42 s ago");
    assert_eq!(relative(180.0), "3 min ago");
    assert_eq!(relative(-30.0), "in 30 s");
    assert_eq!(relative(7200.0), "2 h ago");
    assert_eq!(fmt_bps(5.4e9), "5.40 Gbit/s");
    assert_eq!(fmt_bps(950e6), "950 Mbit/s");
}

/// Issue 23 defect 8: an answer holds at most `api::MAX_SAMPLES` entries,
/// and following `next_cursor` walks every entry exactly once.
#[test]
fn api_pages_a_large_history_and_the_cursor_walks_all_of_it() {
    let mut f = fixture();
    let now = 2e9;
    f.history = History::new(Retention::default());
    f.jobs.clear();
    for j in 0..12 {
        let key = ProbeKey::new(format!("t{j}"), "tcp");
        for i in 0..200 {
            let t = now - 7000.0 + i as f64 * 30.0;
            f.history
                .record_point(&key, "tcp", point(t, Direction::Send), at(t));
        }
        f.jobs.push(job(&format!("t{j}"), "tcp", "tcp", None));
    }
    let mut seen = std::collections::HashSet::new();
    let mut query = String::from("limit=1000");
    let mut pages = 0;
    loop {
        let r = f.get("/api/v1/history", Some(&query));
        assert_eq!(r.status, 200, "{}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        let mut on_page = 0;
        for job in v["jobs"].as_array().unwrap() {
            for s in job["samples"].as_array().unwrap() {
                let k = (
                    job["target"].as_str().unwrap().to_string(),
                    s["timestamp_seconds"].as_f64().unwrap().to_bits(),
                );
                assert!(seen.insert(k), "an entry given twice");
                on_page += 1;
            }
        }
        assert!(on_page <= api::MAX_SAMPLES, "{on_page} entries on a page");
        pages += 1;
        match v["next"].as_str() {
            Some(next) => query = next.split_once('?').unwrap().1.to_string(),
            None => break,
        }
        assert!(pages < 10, "the cursor does not advance");
    }
    assert_eq!(seen.len(), 2400);
    assert_eq!(pages, 2);
    // A cursor that is not one is refused.
    assert_eq!(f.get("/api/v1/history", Some("cursor=x:y")).status, 400);
    // Past the jobs of `limit`, the next page starts at the next job.
    let v: serde_json::Value =
        serde_json::from_str(&f.get("/api/v1/history", Some("limit=2")).body).unwrap();
    assert_eq!(v["next_cursor"], "2");
}

/// Markup a peer or a configuration could send: a script, quotes that
/// would end an attribute, and an element with a handler.
const HOSTILE: &str = "<script>alert(\"x\")</script>'\"><img src=x onerror=alert(2)>";

/// A result as a probe gives one, with `text` wherever a peer's words
/// reach the page: the kernel release, and a clamp note naming the
/// peer's software.
fn result_with(kind: crate::probe::Kind, text: &str) -> crate::probe::ProbeResult {
    use crate::probe::result::SideSummary;
    use crate::probe::ProbeResult;
    let side = |k: &str| SideSummary {
        kernel_release: k.to_string(),
        ..Default::default()
    };
    ProbeResult {
        kind,
        direction: Direction::Send,
        target: text.into(),
        local_address: "10.0.0.1:50000".into(),
        remote_address: "10.0.0.2:5301".into(),
        timestamp_seconds: 2e9 - 5.0,
        requested_seconds: 1.0,
        omit_seconds: 0.0,
        duration_seconds: 1.0,
        bytes: 1000,
        throughput_bits_per_second: 8e3,
        sender_bytes: 1000,
        sender_throughput_bits_per_second: 8e3,
        streams: Vec::new(),
        directions: Vec::new(),
        tcp: None,
        udp: None,
        rr: None,
        udp_rr: None,
        local: side("6.1"),
        remote: side(text),
        clamped: vec![format!("the responder ({text}) cut the duration to 1 s")],
        interval_seconds: None,
        intervals: Vec::new(),
        warnings: Vec::new(),
        diagnosis: Default::default(),
        protocol_version: Some(3),
        peer_clock: None,
    }
}

fn outcome(
    started: f64,
    result: Result<crate::probe::ProbeResult, crate::metrics::ProbeFailure>,
) -> crate::metrics::ProbeOutcome {
    crate::metrics::ProbeOutcome {
        kind: "tcp".into(),
        direction: Direction::Send,
        labels: Default::default(),
        started: at(started),
        duration: Duration::from_secs(1),
        slot_wait: None,
        result,
    }
}

/// Issue 21: every peer-controlled string (target name, the peer's
/// software and kernel release, a failure's text, a verdict) is escaped
/// on every page that shows it, by the template engine rather than by a
/// call a new line of code could forget.
#[test]
fn peer_controlled_markup_is_escaped_on_every_page() {
    let mut f = fixture();
    f.history = History::new(Retention::default());
    let ok = ProbeKey::new(HOSTILE, "tcp");
    let down = ProbeKey::new("down", HOSTILE);
    for i in 0..12 {
        let t = 2e9 - 3.0 * 3600.0 + i as f64 * 900.0;
        let mut p = point(t, Direction::Send);
        p.throughput = 1e9;
        p.send = 1e9;
        p.local_kernel = Some(if i < 6 { HOSTILE } else { "6.1" }.into());
        p.remote_kernel = Some(if i < 6 { "6.1" } else { HOSTILE }.into());
        p.verdict = Some(HOSTILE.into());
        f.history.record_point(&ok, "tcp", p, at(t));
        let mut d = point(t, Direction::Send);
        d.failures = 1;
        d.reason = Some(HOSTILE.into());
        f.history.record_point(&down, "tcp", d, at(t));
    }
    f.store.record(
        ok.clone(),
        outcome(2e9 - 5.0, Ok(result_with(crate::probe::Kind::Tcp, HOSTILE))),
    );
    f.store.record(
        down.clone(),
        outcome(
            2e9 - 5.0,
            Err(crate::metrics::ProbeFailure {
                reason: "refused",
                message: format!("the responder ({HOSTILE}) said no"),
            }),
        ),
    );
    f.jobs = vec![
        job(HOSTILE, "tcp", "tcp", Some(HOSTILE)),
        job("down", HOSTILE, "tcp", Some("10.0.0.9")),
    ];
    let q = |k: &ProbeKey| format!("target={}&module={}", url(&k.target), url(&k.module));
    let pages = [
        ("/", None),
        ("/path", Some(q(&ok))),
        ("/path", Some(q(&down))),
        ("/kernels", None),
        ("/fleet", None),
        ("/", Some(format!("q={}", url(HOSTILE)))),
    ];
    for (path, query) in &pages {
        let r = f.get(path, query.as_deref());
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let b = &r.body;
        // The page's own script is the only one, and no element or
        // attribute came from the hostile string.
        assert_eq!(b.matches("<script").count(), 1, "{path}: {b}");
        assert!(!b.contains("<img"), "{path}: {b}");
        assert!(!b.contains("host<1>"), "{path}: {b}");
        assert!(
            b.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;'&quot;&gt;&lt;img"),
            "{path}: {b}"
        );
    }
    // Where each string shows, it shows escaped, not dropped.
    let esc = "&lt;script&gt;alert(&quot;x&quot;)";
    let overview = f.get("/", None).body;
    // Target name (heading, data attribute), verdict, failure text and
    // the software named in a clamp note.
    assert!(overview.matches(esc).count() >= 5, "{overview}");
    assert!(
        overview.contains(&format!("the responder ({esc}")),
        "{overview}"
    );
    let path = f.get("/path", Some(&q(&ok))).body;
    // Kernel releases on the markers and in the list, and the peer's
    // kernel release in the latest result's text.
    assert!(path.contains(&format!("this host kernel {esc}")), "{path}");
    assert!(path.contains(&format!("peer kernel 6.1 → {esc}")), "{path}");
    let kernels = f.get("/kernels", None).body;
    assert!(
        kernels.contains(&format!("data-release=\"{esc}")),
        "{kernels}"
    );
    let fleet = f.get("/fleet", None).body;
    assert!(fleet.contains(&format!("failed ({esc}")), "{fleet}");
}
