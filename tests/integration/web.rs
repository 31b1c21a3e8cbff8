//! The status page in a real browser: `serve` starts with a history seeded
//! through the library (a file it reads back), runs one real probe per
//! job, and headless Chromium loads every page. The rendered DOM is
//! checked (points per chart, kernel-release markers, the failing path,
//! the `<script>` target as text, the page's script having run with no
//! console error), and screenshots (kept under target/web-screenshots/)
//! are checked for drawn charts.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pathprobe::metrics::ProbeKey;
use pathprobe::probe::Direction;
use pathprobe::service::history::{History, Point, Retention};

use crate::common::browser::{self, Image};
use crate::common::serve::InProcess;

const EVIL: &str = "<script>alert(1)</script>";
const H: f64 = 3600.0;

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

fn at(s: f64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs_f64(s)
}

/// A day of history, one probe every 10 min: the TCP path to the peer
/// named `<script>` drops from 5.4 to 2.9 Gbit/s when this host's kernel
/// goes from 2.6.12 to the release it runs now (the seed case of the
/// kernel view); `broken` was fine until now; loopback UDP is clean.
fn seed(path: &Path) {
    let h = History::new(Retention::default());
    let now = unix(SystemTime::now());
    let release = pathprobe::host::kernel_release();
    for i in 0..144 {
        let t = now - 24.0 * H + 300.0 + i as f64 * 600.0;
        let old = t < now - 12.0 * H;
        let mut p = Point::new(t, Direction::Send);
        p.throughput = if old { 5.4e9 } else { 2.9e9 };
        p.send = p.throughput;
        p.retransmits = (i % 7) as f64;
        p.rtt = 0.0003 + (i % 5) as f64 * 1e-5;
        p.local_cpu = 0.6;
        p.remote_cpu = 0.4;
        p.local_kernel = Some(if old { "2.6.12" } else { release.as_str() }.into());
        p.remote_kernel = Some(release.as_str().into());
        h.record_point(&ProbeKey::new(EVIL, "tcp"), "tcp", p.clone(), at(t));
        p.local_kernel = Some(release.as_str().into());
        p.throughput = 1e9;
        p.send = 1e9;
        h.record_point(&ProbeKey::new("broken", "tcp"), "tcp", p, at(t));
        let mut u = Point::new(t, Direction::Send);
        u.throughput = 5e7;
        u.send = 5e7;
        u.loss = if i % 20 == 0 { 0.002 } else { 0.0 };
        u.jitter = 2e-5 + (i % 3) as f64 * 1e-5;
        u.local_cpu = 0.1;
        u.remote_cpu = 0.1;
        u.local_kernel = Some(release.as_str().into());
        u.remote_kernel = Some(release.as_str().into());
        h.record_point(
            &ProbeKey::new("loopback", "lo_udp"),
            "loopback_udp",
            u,
            at(t),
        );
    }
    h.save(path, SystemTime::now()).unwrap();
}

fn api(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Entries of `job` (from the API) the page's 24 h window shows with
/// `field`.
fn with_field(job: &serde_json::Value, field: &str, from: f64) -> usize {
    job["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["timestamp_seconds"].as_f64().unwrap() >= from && s.get(field).is_some())
        .count()
}

fn screenshots_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/web-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn dom(url: String) -> browser::Run {
    tokio::task::spawn_blocking(move || browser::dom(&url))
        .await
        .unwrap()
}

/// The `data-points` of the series named `name` in the first chart that
/// has one.
fn points_of(dom: &str, name: &str) -> usize {
    let tag = format!("data-name=\"{name}\" data-points=\"");
    let at = dom.find(&tag).unwrap_or_else(|| panic!("no series {name}"));
    let rest = &dom[at + tag.len()..];
    rest[..rest.find('"').unwrap()].parse().unwrap()
}

#[test]
fn console_errors_are_seen() {
    // The scanner must catch a broken script, or its silence below means
    // nothing.
    if !browser::available() {
        eprintln!("skipped: chromium is not installed");
        return;
    }
    let r = browser::dom("data:text/html,<p>x</p><script>nosuchfunction()</script>");
    assert_eq!(r.console_errors.len(), 1, "{:?}", r.console_errors);
    assert!(r.console_errors[0].contains("nosuchfunction"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_pages_render_history_in_a_real_browser() {
    if !browser::available() {
        eprintln!("skipped: chromium is not installed");
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.json");
    seed(&history);
    let start = unix(SystemTime::now());
    let run = InProcess::start(&format!(
        r#"
modules:
  tcp: {{kind: tcp, duration: 300ms}}
  lo_udp: {{kind: loopback_udp, duration: 300ms, bitrate: 50M}}
targets:
  - {{name: "{EVIL}", address: "PEER", modules: [tcp], interval: 24h}}
  - {{name: broken, address: "127.0.0.1:1", modules: [tcp], interval: 24h}}
  - {{modules: [lo_udp], interval: 24h}}
web: {{history_file: "{}"}}
"#,
        history.display()
    ))
    .await;
    let base = format!("http://{}", run.http);

    // Each job runs once right away, then not for a day: wait for those
    // runs, after which the history holds still.
    let all = loop {
        let (status, body) = run.request("GET", "/api/v1/history").await;
        assert_eq!(status, 200, "{body}");
        let v = api(&body);
        let ran = v["jobs"].as_array().unwrap().iter().all(|j| {
            j["samples"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["timestamp_seconds"].as_f64().unwrap() >= start - 1.0)
        });
        if ran && v["jobs_total"] == 3 {
            break v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the jobs' first probes did not all come: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let job = |t: &str| {
        all["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["target"] == t)
            .unwrap()
            .clone()
    };
    let (evil, broken, lo) = (job(EVIL), job("broken"), job("loopback"));
    // The seeded day, downsampled, plus the real probe.
    let seeded = evil["samples"].as_array().unwrap().len();
    assert!((80..=120).contains(&seeded), "{seeded}");
    assert_eq!(
        broken["samples"].as_array().unwrap().last().unwrap()["reason"],
        "refused"
    );
    let from = unix(SystemTime::now()) - 24.0 * H;

    // Overview: the failing path first and highlighted, the <script>
    // target as text, one sparkline point per entry with a figure.
    let r = dom(format!("{base}/")).await;
    assert!(r.console_errors.is_empty(), "{:?}", r.console_errors);
    let d = &r.dom;
    assert!(
        d.contains("class=\"card fail\" data-target=\"broken\""),
        "{d}"
    );
    assert!(d.contains("failed (refused)"), "{d}");
    assert!(d.find("data-target=\"broken\"") < d.find("data-target=\"&lt;script&gt;"));
    assert!(
        d.contains("&lt;script&gt;alert(1)&lt;/script&gt;</a>"),
        "{d}"
    );
    assert_eq!(
        d.matches("<script").count(),
        1,
        "only the page's own script: {d}"
    );
    let spark = format!(
        "class=\"spark\" viewBox=\"0 0 240 40\" width=\"240\" height=\"40\" data-points=\"{}\"",
        with_field(&evil, "throughput_bits_per_second", from)
    );
    assert!(d.contains(&spark), "{spark}\n{d}");
    // The script ran: it gives every time its local form as a title.
    assert!(
        d.contains("<time data-ts=\"") && d.contains("\" title=\""),
        "{d}"
    );
    assert!(
        d.contains("just now</time>") || d.contains(" ago</time>"),
        "{d}"
    );

    // The TCP path: points per chart, and this host's kernel change
    // marked on each of its four charts.
    let path = format!(
        "{base}/path?target={}&module=tcp",
        pathprobe::service::web::url(EVIL)
    );
    let r = dom(path.clone()).await;
    assert!(r.console_errors.is_empty(), "{:?}", r.console_errors);
    let d = &r.dom;
    assert_eq!(
        points_of(d, "send"),
        with_field(&evil, "send_throughput_bits_per_second", from)
    );
    assert_eq!(
        points_of(d, "retransmits"),
        with_field(&evil, "retransmits", from)
    );
    assert_eq!(points_of(d, "RTT"), with_field(&evil, "rtt_seconds", from));
    assert_eq!(d.matches("class=\"kmark\"").count(), 4, "{d}");
    let change = format!(
        "this host kernel 2.6.12 → {}",
        pathprobe::host::kernel_release()
    );
    assert!(d.contains(&change), "{change}\n{d}");
    assert!(d.contains("class=\"detail\""), "the latest -v detail: {d}");
    assert_eq!(d.matches("<script").count(), 1);

    // The UDP loopback path: loss and jitter, no kernel change.
    let r = dom(format!("{base}/path?target=loopback&module=lo_udp")).await;
    assert!(r.console_errors.is_empty(), "{:?}", r.console_errors);
    assert_eq!(
        points_of(&r.dom, "loss"),
        with_field(&lo, "loss_ratio", from)
    );
    assert_eq!(
        points_of(&r.dom, "jitter"),
        with_field(&lo, "jitter_seconds", from)
    );
    assert!(!r.dom.contains("class=\"kmark\""));

    // The kernel view: the seed case, 5.4 → 2.9 Gbit/s, -46 %.
    let r = dom(format!("{base}/kernels")).await;
    assert!(r.console_errors.is_empty(), "{:?}", r.console_errors);
    let d = &r.dom;
    assert!(d.contains("data-release=\"2.6.12\""), "{d}");
    assert!(d.contains("5.40 Gbit/s"), "{d}");
    assert!(d.contains("-46 % vs previous"), "{d}");
    assert!(d.contains("(loopback)"), "{d}");

    // The fleet view: this host's row to its two peers.
    let r = dom(format!("{base}/fleet")).await;
    assert!(r.console_errors.is_empty(), "{:?}", r.console_errors);
    let d = &r.dom;
    assert!(d.contains("to 2 peers"), "{d}");
    assert!(d.contains("class=\"fail reason\""), "{d}");
    assert!(d.contains("href=\"http://127.0.0.1:9813/\""), "{d}");
    assert!(!d.contains(">loopback<"), "{d}");

    // Screenshots: the chart areas (found by their background) have the
    // series and the marker drawn in them.
    let shots = screenshots_dir();
    for (name, url, min_regions, (w, h)) in [
        // The cards stand in one row: their sparklines make one area.
        ("overview.png", format!("{base}/"), 1, (900, 400)),
        ("path.png", path, 4, (780, 1000)),
    ] {
        let file = shots.join(name);
        let f = file.clone();
        let r = tokio::task::spawn_blocking(move || browser::screenshot(&url, &f, w, h))
            .await
            .unwrap();
        assert!(r.console_errors.is_empty(), "{:?}", r.console_errors);
        let img = Image::read(&file);
        let regions = img.regions([243, 246, 249]);
        assert!(
            regions.len() >= min_regions,
            "{name}: chart areas {regions:?}"
        );
        for reg in regions.iter().take(min_regions) {
            // An area with nothing drawn has none; a sparkline of a few
            // points has a few dozen (CI once saw 28).
            let blue = img.count_near(*reg, [42, 111, 176], 40);
            assert!(blue > 10, "{name}: nothing drawn in {reg:?} ({blue} px)");
        }
        if name == "path.png" {
            let purple = img.count_near(regions[0], [122, 63, 176], 40);
            assert!(purple > 10, "no kernel marker drawn ({purple} px)");
        }
    }

    // At shutdown the history is saved, the real probes with it, and reads
    // back.
    run.shutdown().await;
    let back = History::new(Retention::default());
    let n = back.load(&history, SystemTime::now()).unwrap();
    assert!(n > seeded, "{n}");
    assert!(started.elapsed() < Duration::from_secs(240));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_history_file_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("not-ours.json");
    std::fs::write(&history, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    let run = InProcess::start(&format!(
        "modules: {{lo: {{kind: loopback_tcp, duration: 200ms}}}}\ntargets: [{{modules: [lo]}}]\n\
         web: {{history_file: \"{}\", history_save_interval: 1s}}\n",
        history.display()
    ))
    .await;
    // The service runs, probes, and keeps its history in memory.
    let start = Instant::now();
    loop {
        let (status, body) = run.request("GET", "/api/v1/history").await;
        assert_eq!(status, 200);
        if api(&body)["jobs"][0]["samples"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    run.shutdown().await;
    // Past a save interval and a shutdown, the file is as it was.
    assert_eq!(
        std::fs::read_to_string(&history).unwrap(),
        "root:x:0:0:root:/root:/bin/bash\n"
    );
}

/// The samples of `module`'s job on target `peer` in the history API.
async fn samples_of(run: &InProcess, module: &str) -> Vec<serde_json::Value> {
    let (status, body) = run
        .request(
            "GET",
            &format!("/api/v1/history?target=peer&module={module}"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let v = api(&body);
    v["jobs"][0]["samples"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// What the card's `<span class="fig" data-figure="NAME">` reads.
fn figure_of<'a>(dom: &'a str, card: &str, name: &str) -> &'a str {
    let at = dom
        .find(card)
        .unwrap_or_else(|| panic!("no card {card}: {dom}"));
    let tag = format!("data-figure=\"{name}\">");
    let f = at
        + dom[at..]
            .find(&tag)
            .unwrap_or_else(|| panic!("no {name}: {dom}"))
        + tag.len();
    &dom[f..f + dom[f..].find('<').unwrap()]
}

/// Issue 21: real tcp_rr and udp_rr probes against a responder make the
/// history; in Chromium their cards lead with p50, p99 and
/// transactions/s (no "kbit/s"), and their path pages draw a latency
/// chart (p50, p99) with a point per probe and no retransmit or RTT chart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_paths_show_latency_in_a_real_browser() {
    if !browser::available() {
        eprintln!("skipped: chromium is not installed");
        return;
    }
    let started = Instant::now();
    let run = InProcess::start(
        r#"
modules:
  rr: {kind: tcp_rr, duration: 300ms}
  irtt: {kind: udp_rr, duration: 300ms}
targets:
  - {name: peer, address: "PEER", modules: [rr, irtt], interval: 1s}
web: {refresh: 0s}
"#,
    )
    .await;
    let base = format!("http://{}", run.http);
    // A few probes of each, with their latency figures.
    for module in ["rr", "irtt"] {
        loop {
            let s = samples_of(&run, module).await;
            let with = s
                .iter()
                .filter(|s| s.get("latency_p50_seconds").is_some())
                .count();
            if with >= 3 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "{module}: three RR probes did not come: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let before_rr = samples_of(&run, "rr").await;
    let r = dom(format!("{base}/")).await;
    let after_rr = samples_of(&run, "rr").await;
    assert!(r.console_errors.is_empty(), "{:?}", r.console_errors);
    let d = &r.dom;
    // Every p50 the page could have drawn from: the latest at either
    // fetch, or one in between.
    // The card's figure, in seconds.
    let secs = |f: &str| -> f64 {
        let (v, unit) = f.split_once(' ').unwrap_or_else(|| panic!("{f}"));
        let v: f64 = v.parse().unwrap_or_else(|_| panic!("{f}"));
        match unit {
            "µs" => v * 1e-6,
            "ms" => v * 1e-3,
            "s" => v,
            _ => panic!("not a latency: {f}"),
        }
    };
    for (module, kind) in [("rr", "tcp_rr"), ("irtt", "udp_rr")] {
        let card = format!("data-module=\"{module}\" data-kind=\"{kind}\"");
        let p50 = figure_of(d, &card, "p50");
        let p99 = figure_of(d, &card, "p99");
        let tps = figure_of(d, &card, "transactions/s");
        eprintln!("{module} card: p50 {p50}, p99 {p99}, {tps}");
        for f in [p50, p99] {
            let v = secs(f);
            assert!(v > 0.0 && v < 1.0, "{module}: {f}");
        }
        assert!(secs(p50) <= secs(p99), "{module}: {p50} > {p99}");
        let t: f64 = tps
            .trim_end_matches(" /s")
            .trim_end_matches(" k/s")
            .parse()
            .unwrap_or_else(|_| panic!("{module}: {tps}"));
        assert!(t > 0.0, "{module}: {tps}");
        let at = d.find(&card).unwrap();
        let this = &d[at..at + d[at..].find("</svg>").unwrap()];
        assert!(!this.contains("bit/s"), "{module}: {this}");
    }
    // The card's p50 is a probe's: the latest at either fetch (to the
    // precision shown).
    let p50 = secs(figure_of(d, "data-module=\"rr\"", "p50"));
    assert!(
        before_rr.iter().chain(&after_rr).any(|s| {
            s["latency_p50_seconds"]
                .as_f64()
                .is_some_and(|v| (v - p50).abs() <= v * 0.01 + 0.5e-8)
        }),
        "the card's p50 {p50} s is no probe's"
    );

    for module in ["rr", "irtt"] {
        let before = samples_of(&run, module).await;
        let r = dom(format!("{base}/path?target=peer&module={module}")).await;
        let after = samples_of(&run, module).await;
        assert!(r.console_errors.is_empty(), "{:?}", r.console_errors);
        let d = &r.dom;
        assert!(
            d.contains("<figcaption>transaction latency</figcaption>"),
            "{d}"
        );
        let count = |s: &[serde_json::Value]| {
            s.iter()
                .filter(|s| s.get("latency_p50_seconds").is_some())
                .count()
        };
        let (p50, p99) = (points_of(d, "p50"), points_of(d, "p99"));
        eprintln!("{module} path: p50 {p50} points, p99 {p99} points");
        assert!(
            (count(&before)..=count(&after)).contains(&p50) && p50 >= 3,
            "{module}: {p50} p50 points, {} to {} probes",
            count(&before),
            count(&after)
        );
        assert_eq!(p50, p99);
        assert!(points_of(d, "transactions/s") >= 3);
        for gone in ["retransmits", "RTT", "send"] {
            assert!(
                !d.contains(&format!("data-name=\"{gone}\"")),
                "{module}: {gone} chart: {d}"
            );
        }
    }
    // Drawn: the latency chart's area has its series in it.
    let file = screenshots_dir().join("path-rr.png");
    let (url, f) = (format!("{base}/path?target=peer&module=rr"), file.clone());
    let r = tokio::task::spawn_blocking(move || browser::screenshot(&url, &f, 780, 700))
        .await
        .unwrap();
    assert!(r.console_errors.is_empty(), "{:?}", r.console_errors);
    let img = Image::read(&file);
    let regions = img.regions([243, 246, 249]);
    assert!(!regions.is_empty(), "no chart area");
    let blue = img.count_near(regions[0], [42, 111, 176], 40);
    assert!(
        blue > 30,
        "no latency line drawn in {:?} ({blue} px)",
        regions[0]
    );
    run.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(240));
}

/// Issue 25.11: `/probe?target=NAME` with a configured target's name
/// probes that target (it failed to resolve NAME as a host), and
/// `debug=true` gives the probe's parameters in the configuration's words,
/// not a Rust `ProbeSpec { … }`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_takes_a_target_name_and_debug_reads_as_config() {
    let run = InProcess::start(
        "modules:\n  tcp: {kind: tcp, duration: 300ms}\n\
         targets:\n  - {name: peer-one, address: \"PEER\", modules: [tcp], interval: 24h}\n\
         web: {refresh: 0s}\n",
    )
    .await;
    let (status, body) = run
        .request("GET", "/probe?target=peer-one&module=tcp")
        .await;
    assert_eq!(status, 200, "{body}");
    // The sample line itself (its HELP line also starts with these words).
    let success = |b: &str| {
        b.lines()
            .any(|l| l.starts_with("pathprobe_probe_success{") && l.ends_with("} 1"))
    };
    assert!(
        success(&body),
        "the name resolved to the configured address: {body}"
    );
    let (status, debug) = run
        .request("GET", "/probe?target=peer-one&module=tcp&debug=true")
        .await;
    assert_eq!(status, 200, "{debug}");
    eprintln!("{debug}");
    let line = debug
        .lines()
        .find(|l| l.starts_with("- send probe: "))
        .unwrap_or_else(|| panic!("{debug}"));
    assert!(
        line.starts_with("- send probe: kind: tcp, protocol: pathprobe, duration: 300ms, "),
        "{line}"
    );
    assert!(line.contains("connect_timeout: "), "{line}");
    for rust in ["ProbeSpec", "Some(", "None", " { ", "Duration", "secs:"] {
        assert!(!debug.contains(rust), "{rust:?} in: {debug}");
    }
    // An address still works as before.
    let (status, body) = run
        .request("GET", &format!("/probe?target={}&module=tcp", run.peer))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(success(&body), "{body}");
    run.shutdown().await;
}

/// From the first instant the HTTP listener answers, a configured job's
/// history is either there (200) or the service says it is starting
/// (503), never "no such job" (404): a CI run once read that 404 in the
/// instants before the first schedule was in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_job_is_never_unknown_while_serve_starts() {
    let run = InProcess::spawn(
        r#"
modules:
  rr: {kind: tcp_rr, duration: 300ms}
targets:
  - {name: peer, address: "PEER", modules: [rr], interval: 1s}
"#,
        pathprobe::responder::ResponderConfig::default(),
    )
    .await;
    let started = Instant::now();
    let mut seen = Vec::new();
    loop {
        let (status, body) = run
            .request("GET", "/api/v1/history?target=peer&module=rr")
            .await;
        assert!(status == 200 || status == 503, "{status}: {body}");
        if status == 503 {
            assert!(body.contains("Starting"), "{body}");
        }
        seen.push(status);
        if status == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never ready: {seen:?}"
        );
    }
    eprintln!("answers while starting: {seen:?}");
    run.shutdown().await;
}
