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
    paths: crate::metrics::path::PathTable,
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
        paths: crate::metrics::path::PathTable::new(),
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
            paths: Some(&self.paths),
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
    // The failing card's headline is the failure, not its last success.
    let card = &body[down..];
    let card = &card[..card.find("</div>\n").unwrap_or(card.len())];
    let figs = &card[card.find("class=\"figs\"").expect("figs")..];
    let first = figs.find("<span class=\"fig").expect("a headline");
    assert!(
        figs[first..].starts_with("<span class=\"fig failing\">failing<"),
        "{card}"
    );
    assert!(!figs.contains("data-figure="), "{card}");
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

/// An answer holds at most `api::MAX_SAMPLES` entries,
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
    use crate::analysis::result::SideSummary;
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
        figures: Default::default(),
        local: side("6.1"),
        remote: side(text),
        clamped: vec![format!("the responder ({text}) cut the duration to 1 s")],
        interval_seconds: None,
        intervals: Vec::new(),
        warnings: Vec::new(),
        diagnosis: Default::default(),
        protocol_version: Some(3),
        peer_clock: None,
        adaptive: None,
        data_source: None,
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

/// Every peer-controlled string (target name, the peer's
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
        p.verdict = Some(std::sync::Arc::new(crate::service::history::Verdict {
            verdict: HOSTILE.into(),
            advice: Some(HOSTILE.into()),
        }));
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

/// The first dot's x of the series named `name` in `body`.
fn first_dot_x(body: &str, name: &str) -> f64 {
    let at = body
        .find(&format!("data-name=\"{name}\""))
        .unwrap_or_else(|| panic!("no series {name}: {body}"));
    let rest = &body[at..];
    let cx = rest.find("cx=\"").expect("a dot") + 4;
    rest[cx..cx + rest[cx..].find('"').unwrap()]
        .parse()
        .unwrap()
}

/// RR history: `n` probes every `step` seconds up to now.
fn rr_history(h: &History, key: &ProbeKey, kind: &str, n: usize, step: f64) {
    for i in 0..n {
        let t = 2e9 - (n - i) as f64 * step;
        let mut p = point(t, Direction::Send);
        // What an RR probe's result gives: a little throughput of its
        // requests, and the figures that matter.
        p.throughput = 31.6e3;
        p.send = 31.6e3;
        p.rtt = 50e-6;
        p.retransmits = 0.0;
        p.p50 = 120e-6;
        p.p99 = 410e-6;
        p.tps = 8120.0;
        h.record_point(key, kind, p, at(t));
    }
}

/// An RR kind's card leads with p50, p99 and transactions/s,
/// not throughput; its path page charts latency (p50 and p99) and
/// transactions/s, with no retransmit, RTT or throughput chart. A
/// throughput kind keeps its card and charts.
#[test]
fn rr_kinds_show_latency_and_throughput_kinds_keep_throughput() {
    let mut f = fixture();
    for (kind, module) in [("tcp_rr", "rr"), ("udp_rr", "irtt"), ("tcp_crr", "crr")] {
        let key = ProbeKey::new("peer", module);
        rr_history(&f.history, &key, kind, 20, 300.0);
        f.jobs.push(job("peer", module, kind, Some("10.0.0.7")));
    }
    let body = f.get("/", None).body;
    for module in ["rr", "irtt", "crr"] {
        let card = &body[body
            .find(&format!("data-target=\"peer\" data-module=\"{module}\""))
            .unwrap()..];
        let card = &card[..card.find("</svg>").unwrap()];
        assert!(
            card.contains("<span class=\"fig\" data-figure=\"p50\">120 µs</span>"),
            "{card}"
        );
        assert!(
            card.contains("<span class=\"fig\" data-figure=\"p99\">410 µs</span>"),
            "{card}"
        );
        assert!(
            card.contains("<span class=\"fig\" data-figure=\"transactions/s\">8120 /s</span>"),
            "{card}"
        );
        assert!(!card.contains("bit/s"), "{card}");
        // The sparkline follows p50: a point per entry.
        assert!(card.contains("data-points=\"20\""), "{card}");
        // 95 minutes of flat latency: no change to speak of.
        assert!(card.contains("+0 % vs 2 h median"), "{card}");
        let path = f
            .get("/path", Some(&format!("target=peer&module={module}")))
            .body;
        assert!(
            path.contains("<figcaption>transaction latency</figcaption>"),
            "{path}"
        );
        assert!(
            path.contains("data-name=\"p50\" data-points=\"20\""),
            "{path}"
        );
        assert!(
            path.contains("data-name=\"p99\" data-points=\"20\""),
            "{path}"
        );
        assert!(
            path.contains("data-name=\"transactions/s\" data-points=\"20\""),
            "{path}"
        );
        for gone in ["retransmits", "RTT", "send", "throughput"] {
            assert!(
                !path.contains(&format!("data-name=\"{gone}\"")),
                "{gone}: {path}"
            );
        }
        assert!(path.contains(">451 µs</text>"), "a latency axis: {path}");
    }
    // The TCP card is as it was: throughput, and its three charts.
    let tcp = &body[body.find("data-module=\"tcp\" data-kind=\"tcp\"").unwrap()..];
    assert!(
        tcp.contains("<span class=\"fig\" data-figure=\"throughput\">1.00 Gbit/s</span>"),
        "{tcp}"
    );
    let path = f
        .get(
            "/path",
            Some("target=%3Cscript%3Ealert(1)%3C%2Fscript%3E&module=tcp"),
        )
        .body;
    for kept in ["send", "retransmits", "RTT", "this host"] {
        assert!(path.contains(&format!("data-name=\"{kept}\"")), "{kept}");
    }
    assert!(!path.contains("data-name=\"p50\""));
    // The fleet shows each path's own figure.
    let fleet = f.get("/fleet", None).body;
    assert!(fleet.contains(">120 µs</a>"), "{fleet}");
    assert!(!fleet.contains("31.6 kbit/s"), "{fleet}");
}

/// The per-kind table is the one place a kind is matched.
#[test]
fn each_kind_has_its_headline_figures() {
    let names =
        |k: &str| -> Vec<&str> { kinds::view_of(k).headline.iter().map(|f| f.name).collect() };
    for k in ["tcp_rr", "udp_rr", "tcp_crr"] {
        assert_eq!(names(k), ["p50", "p99", "transactions/s"], "{k}");
        assert!(!kinds::view_of(k).trend().higher_is_better);
    }
    for k in [
        "tcp",
        "udp",
        "loopback_tcp",
        "loopback_udp",
        "iperf3_tcp",
        "iperf3_udp",
    ] {
        assert_eq!(names(k), ["throughput"], "{k}");
    }
    let charts =
        |k: &str| -> Vec<&str> { kinds::view_of(k).charts.iter().map(|c| c.title).collect() };
    assert_eq!(
        charts("udp"),
        ["throughput per direction", "loss", "jitter"]
    );
    assert_eq!(
        charts("tcp_rr"),
        ["transaction latency", "transactions per second"]
    );
}

/// A new host's hour of history fills the chart, instead of
/// a tick at the right edge of a 24 h axis.
#[test]
fn charts_fit_the_axis_to_the_history_held() {
    let mut f = fixture();
    let key = ProbeKey::new("new", "tcp");
    for i in 0..10 {
        let t = 2e9 - 600.0 + i as f64 * 60.0;
        let mut p = point(t, Direction::Send);
        p.throughput = 1e9;
        p.send = 1e9;
        f.history.record_point(&key, "tcp", p, at(t));
    }
    f.jobs.push(job("new", "tcp", "tcp", Some("10.0.0.8")));
    let path = f.get("/path", Some("target=new&module=tcp")).body;
    // The plot runs from x = 64 to 716: the oldest entry, 10 min old,
    // sits at its left edge (with 24 h on the axis it was at x = 711).
    let x = first_dot_x(&path, "send");
    assert!((64.0..80.0).contains(&x), "first point at x = {x}");
    assert!(path.contains(">10 min ago</text>"), "{path}");
    assert!(!path.contains("24 h ago"), "{path}");
    // The sparkline too: its first point at the left, not at x = 236.
    let body = f.get("/", Some("q=new")).body;
    let spark = &body[body.find("class=\"spark\"").unwrap()..];
    let pts = &spark[spark.find("<polyline points=\"").unwrap() + 18..];
    let x0: f64 = pts[..pts.find(',').unwrap()].parse().unwrap();
    assert!(x0 < 10.0, "sparkline starts at x = {x0}");
    // A day of history still spans its day.
    let full = ProbeKey::new("old", "tcp");
    for i in 0..48 {
        let t = 2e9 - 86_000.0 + i as f64 * 1800.0;
        let mut p = point(t, Direction::Send);
        p.throughput = 1e9;
        f.history.record_point(&full, "tcp", p, at(t));
    }
    f.jobs.push(job("old", "tcp", "tcp", Some("10.0.0.9")));
    let path = f.get("/path", Some("target=old&module=tcp")).body;
    assert!(path.contains(">24 h ago</text>"), "{path}");
}

/// "−62 % vs 24 h median" after 26 seconds. The rule: the
/// change is shown once the history holds more than
/// `BASELINE_MIN_ENTRIES` entries with the figure spanning at least
/// `BASELINE_MIN_SPAN` (1 h), and it names the span it compares with.
#[test]
fn the_change_against_the_median_waits_for_enough_history() {
    let mut f = fixture();
    let young = ProbeKey::new("young", "tcp");
    for (i, bps) in [1e9, 1e9, 0.38e9].into_iter().enumerate() {
        let t = 2e9 - 26.0 + i as f64 * 13.0;
        let mut p = point(t, Direction::Send);
        p.throughput = bps;
        f.history.record_point(&young, "tcp", p, at(t));
    }
    // Many entries, but only 50 minutes of them.
    let busy = ProbeKey::new("busy", "tcp");
    for i in 0..50 {
        let t = 2e9 - 3000.0 + i as f64 * 60.0;
        let mut p = point(t, Direction::Send);
        p.throughput = if i == 49 { 0.38e9 } else { 1e9 };
        f.history.record_point(&busy, "tcp", p, at(t));
    }
    let old = ProbeKey::new("old", "tcp");
    for i in 0..30 {
        let t = 2e9 - 5.0 * 3600.0 + i as f64 * 600.0;
        let mut p = point(t, Direction::Send);
        p.throughput = if i == 29 { 0.38e9 } else { 1e9 };
        f.history.record_point(&old, "tcp", p, at(t));
    }
    f.jobs = vec![
        job("young", "tcp", "tcp", Some("a")),
        job("busy", "tcp", "tcp", Some("b")),
        job("old", "tcp", "tcp", Some("c")),
    ];
    let body = f.get("/", None).body;
    let card = |t: &str| {
        let c = &body[body.find(&format!("data-target=\"{t}\"")).unwrap()..];
        c[..c.find("</svg>").unwrap()].to_string()
    };
    assert!(card("young").contains("380 Mbit/s"), "{}", card("young"));
    assert!(!card("young").contains("median"), "{}", card("young"));
    assert!(!card("busy").contains("median"), "{}", card("busy"));
    assert!(
        card("old").contains("<span class=\"delta down\">-62 % vs 5 h median</span>"),
        "{}",
        card("old")
    );
}

/// Durations as words, not "7200s, then 900s averages".
#[test]
fn durations_read_as_words() {
    let d = |s: u64| duration_words(Duration::from_secs(s));
    assert_eq!(d(7200), "2 h");
    assert_eq!(d(900), "15 min");
    assert_eq!(d(90), "1 min 30 s");
    assert_eq!(d(3605), "1 h");
    assert_eq!(d(86_400), "24 h");
    assert_eq!(d(3 * 86_400 + 7200), "3 d 2 h");
    assert_eq!(duration_words(Duration::from_millis(300)), "300 ms");
    assert_eq!(span_words(26.4), "26 s");
    assert_eq!(span_words(612.0), "10 min");
    assert_eq!(span_words(86_100.0), "24 h");
    let f = fixture();
    let path = f
        .get(
            "/path",
            Some("target=%3Cscript%3Ealert(1)%3C%2Fscript%3E&module=tcp"),
        )
        .body;
    assert!(
        path.contains("one per probe for the last 2 h, then 15 min averages."),
        "{path}"
    );
    assert!(path.contains(" · every 1 min</small>"), "{path}");
    assert!(!path.contains("7200s") && !path.contains("900s"), "{path}");
}

/// "tcp · tcp" says the kind twice.
/// "to 1 peer", "to 3 peers".
#[test]
fn the_fleet_counts_its_peers_in_the_right_number() {
    let mut f = fixture();
    let head = |f: &Fixture| {
        let body = f.get("/fleet", None).body;
        let at = body.find("(this host) to ").expect("the fleet's heading");
        body[at..].split('<').next().unwrap().to_string()
    };
    assert_eq!(head(&f), "(this host) to 3 peers");
    f.jobs.truncate(1);
    assert_eq!(head(&f), "(this host) to 1 peer");
}

#[test]
fn a_card_names_the_kind_once() {
    let mut f = fixture();
    f.jobs
        .push(job("10.0.0.11", "fast", "tcp", Some("10.0.0.11")));
    let body = f.get("/", None).body;
    assert!(body.contains("<span class=\"mod\">tcp</span>"), "{body}");
    assert!(!body.contains("tcp · tcp"), "{body}");
    assert!(
        body.contains("<span class=\"mod\">fast · tcp</span>"),
        "{body}"
    );
    let path = f.get("/path", Some("target=down&module=tcp")).body;
    assert!(path.contains("<small>tcp · every"), "{path}");
}

/// Probes fed as the runner records them (store, then history)
/// make a step that the API, both pages and a saved history show, and
/// every entry carries the path's stable verdict and its advice.
#[test]
fn a_step_shows_in_the_api_the_pages_and_a_saved_history() {
    use crate::analysis::diagnosis::{diagnose, Evidence};
    use crate::protocol::fingerprint::HostFingerprint;
    let fp = |kernel: &str, wmem: &str| HostFingerprint {
        settings: [
            ("kernel".to_string(), kernel.to_string()),
            (
                "net.ipv4.tcp_wmem".to_string(),
                format!("4096 16384 {wmem}"),
            ),
        ]
        .into(),
    };
    let mut f = fixture();
    f.jobs.push(job("b", "tcp", "tcp", Some("10.0.0.2")));
    let key = ProbeKey::new("b", "tcp");
    let t0 = 2e9 - 20.0 * 60.0;
    for i in 0..12 {
        let changed = i >= 6;
        let mut r = result_with(crate::probe::Kind::Tcp, "b");
        r.throughput_bits_per_second = if changed { 260e6 } else { 474e6 } + (i % 3) as f64 * 1e6;
        r.remote.fingerprint = Some(if changed {
            fp("6.18.44", "196608")
        } else {
            fp("2.6.78", "4194304")
        });
        r.remote.kernel_release = r.remote.fingerprint.as_ref().unwrap().settings["kernel"].clone();
        r.diagnosis = Some(diagnose(&Evidence {
            kind: Some(crate::probe::Kind::Tcp),
            busy: Some(1.0),
            rwnd_limited: Some(0.0),
            sndbuf_limited: Some(if changed { 0.46 } else { 0.0 }),
            sender_tcp_wmem_max: Some(if changed { 196608 } else { 4194304 }),
            ..Default::default()
        }));
        let o = outcome(t0 + 60.0 * i as f64, Ok(r));
        crate::service::runner::record(&f.store, &f.history, &key, &key, o);
    }
    let api: serde_json::Value =
        serde_json::from_str(&f.get("/api/v1/history", Some("target=b&module=tcp")).body).unwrap();
    let job = &api["jobs"][0];
    let steps = job["steps"].as_array().expect("steps in the API");
    assert_eq!(steps.len(), 1, "{steps:?}");
    let s = &steps[0];
    assert_eq!(s["figure"], "throughput");
    assert_eq!(s["since_seconds"], t0 + 360.0);
    // Found at the 5th probe after the change (the 11th in all).
    assert_eq!(s["detected_seconds"], t0 + 600.0);
    assert_eq!(s["release_before"], "2.6.78");
    assert_eq!(s["release_after"], "6.18.44");
    assert_eq!(s["verdict"], "send_buffer");
    let summary = s["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("throughput 475.0 Mbit/s → 261.0 Mbit/s (−45%); b: kernel 2.6.78 → 6.18.44, net.ipv4.tcp_wmem 4096 16384 4194304 → 4096 16384 196608; verdict send_buffer; advice: the send buffer limited 46% of the time: raise -w, or net.ipv4.tcp_wmem max on the sender (now 196608)"),
        "{summary}"
    );
    // Every entry has the stable verdict: after the change it follows
    // the new verdict only once most of the last 5 probes gave it.
    let samples = job["samples"].as_array().unwrap();
    let verdicts: Vec<&str> = samples
        .iter()
        .map(|s| s["verdict"].as_str().unwrap_or("-"))
        .collect();
    let first_sb = verdicts.iter().position(|v| *v == "send_buffer");
    assert_eq!(first_sb, Some(8), "{verdicts:?}");
    assert!(samples[11]["advice"]
        .as_str()
        .is_some_and(|a| a.contains("net.ipv4.tcp_wmem max on the sender (now 196608)")));

    let page = f.get("/path", Some("target=b&module=tcp")).body;
    assert!(page.contains("<h2>What changed</h2>"), "{page}");
    assert!(page.contains("b: kernel 2.6.78 → 6.18.44"), "{page}");
    assert!(page.contains("step: send throughput"), "{page}");
    let home = f.get("/", None).body;
    assert!(home.contains("<h2>What changed</h2>"), "{home}");
    assert!(home.contains("(−45%)"), "{home}");

    // The step outlives a restart with the history file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.json");
    f.history.save(&path, f.now).unwrap();
    let back = History::new(Retention::default());
    back.load(&path, f.now).unwrap();
    assert_eq!(back.steps(&key, 0.0), f.history.steps(&key, 0.0));
    assert_eq!(back.samples(&key, 0.0), f.history.samples(&key, 0.0));
}

/// The path page shows the path's latest trace, hop by hop:
/// each address or `*`, each packet's RTT or `*`, how it ended; a trace
/// that did not reach says which hops /metrics still holds.
#[test]
fn path_page_shows_the_latest_trace_with_silent_hops_marked() {
    use crate::trace::{Hop, Proto, Stop, Trace};
    let f = fixture();
    let hop = |ttl: u8, addr: Option<&str>, rtt: Vec<Option<f64>>| Hop {
        ttl,
        address: addr.map(|a| a.parse().unwrap()),
        rtt_ms: rtt,
    };
    let reached = Trace {
        protocol: Proto::Tcp,
        destination: "10.0.0.10:5301".parse().unwrap(),
        source: Some("10.0.0.1:41234".parse().unwrap()),
        flow_matched: true,
        stop: Stop::Reached,
        hops: vec![
            hop(1, Some("10.0.1.1"), vec![Some(0.182), Some(0.25)]),
            hop(2, None, vec![None, None]),
            hop(3, Some("10.0.0.10"), vec![Some(0.4)]),
        ],
        packets: 5,
        elapsed_ms: 31.0,
    };
    f.paths.register([("fresh", "tcp")]);
    // Before any trace: the section says so.
    let body = f.get("/path", Some("target=fresh&module=tcp")).body;
    assert!(
        body.contains("Latest trace") && body.contains("not traced yet"),
        "{body}"
    );
    f.paths.record("fresh", "tcp", &reached, f.now);
    let body = f.get("/path", Some("target=fresh&module=tcp")).body;
    for want in [
        "tcp 10.0.0.1:41234 → 10.0.0.10:5301: reached in 3 hops; 5 packets in 31 ms",
        "<td>1</td><td>10.0.1.1</td><td>0.182 ms  0.250 ms</td>",
        // The silent hop: a marker, greyed, and no loss said anywhere.
        "<tr class=\"silent\"><td>2</td><td>*</td><td>*  *</td></tr>",
        "<td>3</td><td>10.0.0.10</td><td>0.400 ms</td>",
        "so it is not loss",
        "0 path changes",
    ] {
        assert!(body.contains(want), "{want:?} not in:\n{body}");
    }
    assert!(!body.contains("still those of"), "{body}");
    // A later trace that did not reach is shown, and the held hops named.
    let lost = Trace {
        stop: Stop::Gap,
        hops: vec![hop(1, Some("10.0.1.1"), vec![Some(0.2), None])],
        packets: 10,
        ..reached.clone()
    };
    f.paths.record("fresh", "tcp", &lost, f.now);
    let body = f.get("/path", Some("target=fresh&module=tcp")).body;
    assert!(
        body.contains("not reached: silent hops in a row; 10 packets"),
        "{body}"
    );
    assert!(body.contains("<td>0.200 ms  *</td>"), "{body}");
    assert!(
        body.contains(
            "still those of the latest trace that reached the target: 10.0.1.1, *, 10.0.0.10"
        ),
        "{body}"
    );
    // A path that is not traced has no section.
    let body = f.get("/path", Some("target=down&module=tcp")).body;
    assert!(!body.contains("Latest trace"), "{body}");
}
