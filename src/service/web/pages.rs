//! The HTML pages: overview, one path, kernel releases, fleet.

use maud::{html, Markup};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::kinds::{view_of, Figure};
use super::svg::{self, Marker, Series};
use super::{
    duration_words, fmt_pct, get, median, page, pager, paging, span_words, time_tag, unix, url,
    JobInfo, Reply, View,
};
use crate::metrics::path::PathTraces;
use crate::metrics::ProbeKey;
use crate::service::history::{JobHistory, Point, StepRecord};
use crate::trace::Trace;

fn matches(info: &JobInfo, q: &str) -> bool {
    q.is_empty() || info.key.target.contains(q) || info.key.module.contains(q)
}

fn path_link(k: &ProbeKey) -> String {
    format!("/path?target={}&module={}", url(&k.target), url(&k.module))
}

/// The shortest span a chart's axis covers, however new the history.
const MIN_SPAN: f64 = 60.0;

/// Where a job's charts start: at its oldest entry within the retention
/// (a little before it, so its dot is not cut by the edge), not at the
/// retention's start, so that a new host's first hour fills the chart
/// instead of being a tick at its right edge.
pub(super) fn window_start(j: &JobHistory, now: f64, retention: f64) -> f64 {
    let oldest = now - retention;
    match j.points().map(|p| p.timestamp).find(|t| *t >= oldest) {
        Some(first) => (first - (now - first) * 0.02)
            .min(now - MIN_SPAN)
            .max(oldest),
        None => now - MIN_SPAN.min(retention),
    }
}

/// The change against the median is shown only over a history of at
/// least this many entries with a figure before the latest...
pub(super) const BASELINE_MIN_ENTRIES: usize = 10;
/// ... spanning at least this long (or the whole retention, if shorter).
pub(super) const BASELINE_MIN_SPAN: f64 = 3600.0;

/// Slice `page` (from 1) of `n` items: (start, end, pages).
fn slice(n: usize, page: usize, size: usize) -> Result<(usize, usize, usize), Reply> {
    let pages = n.div_ceil(size).max(1);
    if page > pages {
        return Err(Reply::error(404, format!("there are {pages} pages")));
    }
    let start = (page - 1) * size;
    Ok((start, (start + size).min(n), pages))
}

/// Where either end's kernel release changed, in time order.
pub(super) fn kernel_changes<'a>(points: impl Iterator<Item = &'a Point>) -> Vec<Marker> {
    let mut out = Vec::new();
    let (mut local, mut remote): (Option<Arc<str>>, Option<Arc<str>>) = (None, None);
    for p in points {
        for (now, last, end) in [
            (&p.local_kernel, &mut local, "this host"),
            (&p.remote_kernel, &mut remote, "peer"),
        ] {
            if let Some(k) = now {
                if let Some(old) = last.as_ref().filter(|o| *o != k) {
                    out.push(Marker {
                        at: p.timestamp,
                        label: format!("{end} kernel {old} → {k}"),
                    });
                }
                *last = Some(k.clone());
            }
        }
    }
    out
}

fn series_of<'a>(j: &'a JobHistory, from: f64, f: impl Fn(&Point) -> f64 + 'a) -> Vec<(f64, f64)> {
    j.points()
        .filter(|p| p.timestamp >= from)
        .map(|p| (p.timestamp, f(p)))
        .filter(|(_, v)| v.is_finite())
        .collect()
}

fn failures_of(j: &JobHistory, from: f64) -> Vec<f64> {
    j.points()
        .filter(|p| p.timestamp >= from && p.failures > 0)
        .map(|p| p.timestamp)
        .collect()
}

/// The newest entry's `fig`, and its change against the median over the
/// history held since `oldest` with the span of that history, once there
/// is enough of it ([`BASELINE_MIN_ENTRIES`], [`BASELINE_MIN_SPAN`]).
pub(super) fn latest_and_change(
    j: &JobHistory,
    oldest: f64,
    retention: f64,
    fig: &Figure,
) -> Option<(f64, Option<(f64, f64)>)> {
    let all = series_of(j, oldest, fig.value);
    let &(at, latest) = all.last()?;
    let first = all[0].0;
    let span = at - first;
    if all.len() <= BASELINE_MIN_ENTRIES || span < BASELINE_MIN_SPAN.min(retention) {
        return Some((latest, None));
    }
    let mut values: Vec<f64> = all.iter().map(|p| p.1).collect();
    let med = median(&mut values);
    if med > 0.0 {
        Some((latest, Some(((latest - med) / med, span))))
    } else {
        Some((latest, None))
    }
}

fn change_tag(change: f64, what: &str, higher_is_better: bool) -> Markup {
    if !change.is_finite() {
        return html! {};
    }
    let good = if higher_is_better { change } else { -change };
    let class = if good < -0.1 {
        "delta down"
    } else if good > 0.1 {
        "delta up"
    } else {
        "delta flat"
    };
    html! { span class=(class) { (format!("{:+.0} % vs {what}", change * 100.0)) } }
}

/// Steps listed under "What changed" on the overview.
const WHAT_CHANGED: usize = 10;

pub(super) fn overview(view: &View<'_>, ps: &[(String, String)]) -> Result<Reply, Reply> {
    let (q, page_no) = paging(ps)?;
    let now = unix(view.now);
    let retention = view.config.web.history_retention.as_secs_f64();
    let body = view.history.with(|hist| -> Result<Markup, Reply> {
        let mut rows: Vec<(&JobInfo, Option<&JobHistory>, bool)> = view
            .jobs
            .iter()
            .filter(|i| matches(i, &q))
            .map(|i| {
                let j = hist.get(&i.key).filter(|j| !j.is_empty());
                let failing = j.and_then(|j| j.latest()).is_some_and(Point::failed);
                (i, j, failing)
            })
            .collect();
        // Failing paths first: at a thousand paths, they are what one
        // opens the page for.
        rows.sort_by_key(|r| !r.2);
        let failing = rows.iter().filter(|r| r.2).count();
        let (start, end, pages) = slice(rows.len(), page_no, view.config.web.page_size)?;
        // "What changed": the newest steps over every path shown, newest
        // first, so that an upgrade's effect is the first thing read.
        let mut changed: Vec<(&JobInfo, &StepRecord)> = rows
            .iter()
            .filter_map(|(i, j, _)| Some((*i, (*j)?)))
            .flat_map(|(i, j)| j.steps.iter().map(move |s| (i, s)))
            .filter(|(_, s)| s.step.detected_seconds >= now - retention)
            .collect();
        changed.sort_by(|a, b| b.1.step.detected_seconds.total_cmp(&a.1.step.detected_seconds));
        changed.truncate(WHAT_CHANGED);
        Ok(html! {
            h1 { "Paths " small { (view.jobs.len()) " · " (failing) " failing" } }
            "\n"
            @if !changed.is_empty() {
                h2 { "What changed" }
                ul class="changed" {
                    @for (info, s) in &changed {
                        li {
                            (time_tag(s.step.since_seconds, now)) " "
                            a href=(path_link(&info.key)) { (info.key.target) " " (info.key.module) }
                            " " (s.direction.to_string()) ": " (s.summary)
                        }
                    }
                }
                "\n"
            }
            (pager("/", &q, page_no, pages, (start, end), rows.len()))
            div class="cards" {
                "\n"
                @for (info, j, failing) in &rows[start..end] {
                    (card(view, info, *j, *failing, now, retention))
                }
            }
            "\n"
            @if view.jobs.is_empty() {
                p { "No probes are configured: add " code { "targets:" } " to the configuration." }
            }
        })
    })?;
    Ok(Reply::html(page(view, "paths", body)))
}

/// A card's "module · kind" line: the kind only when the module's name
/// does not already say it.
fn module_and_kind(module: &str, kind: &str) -> String {
    if module == kind {
        module.to_string()
    } else {
        format!("{module} · {kind}")
    }
}

fn card(
    view: &View<'_>,
    info: &JobInfo,
    j: Option<&JobHistory>,
    failing: bool,
    now: f64,
    retention: f64,
) -> Markup {
    let k = &info.key;
    let class = match (j, failing) {
        (None, _) => "card empty",
        (_, true) => "card fail",
        _ => "card ok",
    };
    let kv = view_of(info.kind);
    let outcomes = view.store.latest_of(k);
    html! {
        div class=(class) data-target=(k.target) data-module=(k.module) data-kind=(info.kind) {
            h3 {
                a class="target" href=(path_link(k)) { (k.target) }
                " "
                span class="mod" { (module_and_kind(&k.module, info.kind)) }
            }
            @if let Some(j) = j {
                @let from = window_start(j, now, retention);
                @let oldest = now - retention;
                // A failing path leads with the failure: its last figure
                // is stale, and shown as such, small, after it.
                @if failing {
                    div class="figs" {
                        span class="fig failing" { "failing" }
                        @if let Some(f) = kv.headline.first() {
                            @if let Some((value, _)) = latest_and_change(j, oldest, retention, f) {
                                " "
                                small class="stale" { "last ok " (f.name) " " ((f.unit)(value)) }
                            }
                        }
                    }
                } @else {
                div class="figs" {
                    @for (i, f) in kv.headline.iter().enumerate() {
                        @let latest = latest_and_change(j, oldest, retention, f);
                        @if kv.headline.len() > 1 {
                            small class="figname" { (f.name) } " "
                        }
                        span class="fig" data-figure=(f.name) {
                            (latest.map_or("–".to_string(), |l| (f.unit)(l.0)))
                        }
                        @if i == 0 {
                            @if let Some((_, Some((change, span)))) = latest {
                                (change_tag(change, &format!("{} median", span_words(span)), f.higher_is_better))
                            }
                        }
                        " "
                    }
                }
                }
                (svg::sparkline(from, now, &series_of(j, from, kv.trend().value), &failures_of(j, from)))
                @if let Some(p) = j.latest() {
                    div class="when" {
                        "latest " (time_tag(p.timestamp, now))
                        @if let Some(v) = &p.verdict { " · " (v.verdict.as_ref()) }
                    }
                }
                @for o in &outcomes {
                    @match &o.result {
                        Err(f) if failing => {
                            div class="reason" { "failed (" (f.reason) "): " (f.message) }
                        }
                        Ok(r) if !r.clamped.is_empty() => {
                            div class="reason" { "ok, clamped: " (r.clamped.join("; ")) }
                        }
                        _ => {}
                    }
                }
                @if failing && outcomes.iter().all(|o| o.result.is_ok()) {
                    // The store was emptied (reload) but the history knows why.
                    @if let Some(r) = j.latest().and_then(|p| p.reason.as_deref()) {
                        div class="reason" { "failed (" (r) ")" }
                    }
                }
            } @else {
                div class="when" { "no results yet, first probe by " (time_tag(unix(info.first_due), now)) }
            }
        }
        "\n"
    }
}

pub(super) fn path(view: &View<'_>, ps: &[(String, String)]) -> Result<Reply, Reply> {
    let (Some(target), Some(module)) = (get(ps, "target"), get(ps, "module")) else {
        return Err(Reply::error(400, "expected /path?target=NAME&module=NAME"));
    };
    let Some(info) = view
        .jobs
        .iter()
        .find(|i| i.key.target == target && i.key.module == module)
    else {
        return Err(Reply::error(404, "no job with that target and module"));
    };
    let k = &info.key;
    let now = unix(view.now);
    let retention = view.config.web.history_retention.as_secs_f64();
    let kv = view_of(info.kind);
    let charts = view.history.with(|hist| {
        let Some(j) = hist.get(k).filter(|j| !j.is_empty()) else {
            return html! {
                p class="when" { "no results yet, first probe by " (time_tag(unix(info.first_due), now)) }
            };
        };
        let from = window_start(j, now, retention);
        let kernels = kernel_changes(j.points());
        let mut markers = kernels.clone();
        // A step is marked where it began, beside the kernel changes.
        markers.extend(j.steps.iter().map(|s| Marker {
            at: s.step.since_seconds,
            label: format!("step: {} {}", s.direction, s.step.figure.as_str()),
        }));
        markers.sort_by(|a, b| a.at.total_cmp(&b.at));
        let fails = failures_of(j, from);
        let classes = ["s0", "s1", "s2", "s3"];
        let drawn: Vec<Markup> = kv
            .charts
            .iter()
            .enumerate()
            .map(|(n, c)| {
                let mut series: Vec<Series<'_>> = c
                    .series
                    .iter()
                    .zip(classes)
                    .map(|(f, class)| Series {
                        name: f.name,
                        class,
                        points: series_of(j, from, f.value),
                    })
                    .collect();
                series.retain(|s| !s.points.is_empty());
                if series.is_empty() {
                    if let Some(f) = &c.fallback {
                        series.push(Series {
                            name: f.name,
                            class: "s0",
                            points: series_of(j, from, f.value),
                        });
                    }
                }
                if series.is_empty() {
                    // An empty chart still says what it would show.
                    series.extend(c.series.iter().zip(classes).map(|(f, class)| Series {
                        name: f.name,
                        class,
                        points: Vec::new(),
                    }));
                }
                let unit = c.series.first().or(c.fallback.as_ref()).map_or(fmt_pct as fn(f64) -> String, |f| f.unit);
                // Failures are marked on the first chart only.
                let f: &[f64] = if n == 0 { &fails } else { &[] };
                svg::chart(c.title, from, now, &series, f, &markers, unit)
            })
            .collect();
        let cpu = svg::chart(
            "CPU of the data threads (fraction of one CPU)",
            from,
            now,
            &[
                Series {
                    name: "this host",
                    class: "s0",
                    points: series_of(j, from, |p| p.local_cpu),
                },
                Series {
                    name: "peer",
                    class: "s1",
                    points: series_of(j, from, |p| p.remote_cpu),
                },
            ],
            &[],
            &markers,
            fmt_pct,
        );
        let failed: Vec<&Point> = j.points().filter(|p| p.failures > 0).collect();
        html! {
            @for c in &drawn { (c) }
            (cpu)
            @if !j.steps.is_empty() {
                h2 { "What changed" }
                ul class="changed" {
                    @for s in j.steps.iter().rev() {
                        li {
                            (time_tag(s.step.since_seconds, now)) " " (s.direction.to_string()) ": "
                            (s.summary) " (found " (time_tag(s.step.detected_seconds, now)) ", "
                            (s.step.probes_after) " probes after it, p = " (format!("{:.3}", s.step.p_value)) ")"
                        }
                    }
                }
            }
            @if !kernels.is_empty() {
                h2 { "Kernel release changes" }
                ul class="kchanges" {
                    @for m in &kernels { li { (time_tag(m.at, now)) " " (m.label) } }
                }
            }
            @if !failed.is_empty() {
                h2 { "Recent failures" }
                ul class="failures" {
                    @for p in failed.iter().rev().take(10) {
                        li {
                            (time_tag(p.timestamp, now)) " " (p.failures) " of " (p.samples)
                            " failed: " (p.reason.as_deref().unwrap_or("?"))
                        }
                    }
                }
            }
            p class="when" {
                (j.len()) " entries held: one per probe for the last "
                (duration_words(view.config.web.history_full_resolution))
                ", then " (duration_words(view.config.web.history_bucket)) " averages."
            }
        }
    });
    let outcomes = view.store.latest_of(k);
    let body = html! {
        h1 {
            (k.target) " "
            small { (module_and_kind(&k.module, info.kind)) " · every " (duration_words(info.interval)) }
        }
        "\n"
        @if let Some(h) = &info.host {
            p {
                "Peer's own page: "
                a class="peer" href=(format!("http://{}/", peer_web(h))) { (peer_web(h)) }
                " (if it serves on the default port)"
            }
            "\n"
        }
        (charts)
        @if let Some(t) = view.paths.and_then(|p| p.traces(&k.target, &k.module)) {
            (trace_section(&t, now))
        }
        h2 { "Latest result in full (as " code { "pathprobe probe -v" } ")" }
        "\n"
        @if outcomes.is_empty() {
            p { "none since this service started" }
        }
        @for o in &outcomes {
            @let text = match &o.result {
                Ok(r) => crate::report::text(r, true),
                Err(f) => format!("failed ({}): {}\n", f.reason, f.message),
            };
            h3 { (o.direction.to_string()) " " (time_tag(unix(o.started), now)) }
            pre class="detail" { (text) }
            "\n"
        }
    };
    Ok(Reply::html(page(view, &k.target, body)))
}

/// The path's latest trace (docs/TRACE.md): each hop's TTL,
/// the address that answered or `*`, and each packet's RTT or `*`. A `*`
/// is a router that did not answer, which routers owe nobody: not loss.
/// When the latest trace did not reach the target, the hops /metrics
/// still holds (those of the latest that did) are listed under it.
fn trace_section(t: &PathTraces, now: f64) -> Markup {
    let hops_of = |tr: &Trace| -> Vec<String> {
        tr.hops
            .iter()
            .map(|h| h.address.map_or_else(|| "*".to_string(), |a| a.to_string()))
            .collect()
    };
    html! {
        h2 { "Latest trace" }
        "\n"
        @match &t.latest {
            None => { p class="when" { "not traced yet" } }
            Some(last) => {
                p class="trace-head" {
                    (last.protocol.as_str()) " "
                    (last.source.map_or_else(|| "?".to_string(), |s| s.to_string()))
                    " → " (last.destination) ": " (last.end_words()) "; "
                    (last.packets) " packets in " (format!("{:.0}", last.elapsed_ms)) " ms"
                    @if let Some(at) = t.at { ", " (time_tag(unix(at), now)) }
                    @if !last.flow_matched { " (source port busy: not the probe's flow)" }
                }
                table class="trace" {
                    tr { th { "hop" } th { "address" } th { "RTT" } }
                    @for h in &last.hops {
                        tr.silent[h.address.is_none()] {
                            td { (h.ttl) }
                            td {
                                @match h.address {
                                    Some(a) => { (a.to_string()) }
                                    None => { "*" }
                                }
                            }
                            td {
                                (h.rtt_ms.iter()
                                    .map(|r| r.map_or_else(|| "*".to_string(), |ms| format!("{ms:.3} ms")))
                                    .collect::<Vec<_>>()
                                    .join("  "))
                            }
                        }
                    }
                }
                p class="when" {
                    "A * is no answer: routers rate-limit the ICMP a trace needs, or never send it, so it is not loss. "
                    (t.changes) " path changes since the service started."
                }
                @if let Some(held) = t.reached.as_ref().filter(|_| !last.reached()) {
                    p class="when" {
                        "The hops on /metrics are still those of the latest trace that reached the target: "
                        (hops_of(held).join(", "))
                    }
                }
            }
        }
        "\n"
    }
}

/// The peer's web address, on the default port: a guess, said as one.
fn peer_web(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]:9813")
    } else {
        format!("{host}:9813")
    }
}

/// One kernel release's figures on one path.
struct Release {
    name: Arc<str>,
    first: f64,
    samples: u64,
    values: Vec<f64>,
    cpu_per_gbps: Vec<f64>,
    remote_cpu_per_gbps: Vec<f64>,
}

/// A release's row: the release, its median, (min, max), and the change
/// of its median against the release before.
type ReleaseRow = (Release, f64, (f64, f64), Option<Markup>);

/// Each release's row, in order.
fn release_rows(rel: Vec<Release>, trend: &Figure) -> Vec<ReleaseRow> {
    let mut prev: Option<f64> = None;
    rel.into_iter()
        .map(|mut r| {
            let range = r
                .values
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(*v), b.max(*v)));
            let med = median(&mut r.values);
            let change = prev
                .filter(|p| *p > 0.0)
                .map(|p| change_tag((med - p) / p, "previous", trend.higher_is_better));
            prev = Some(med);
            (r, med, range, change)
        })
        .collect()
}

/// Per release, the kind's trend figure (`value`), and CPU per Gbit/s
/// moved.
fn releases(j: &JobHistory, value: fn(&Point) -> f64) -> Vec<Release> {
    let mut out: Vec<Release> = Vec::new();
    for p in j.points() {
        let (Some(k), true) = (&p.local_kernel, value(p).is_finite()) else {
            continue;
        };
        let r = match out.iter().position(|r| r.name == *k) {
            Some(i) => &mut out[i],
            None => {
                out.push(Release {
                    name: k.clone(),
                    first: p.timestamp,
                    samples: 0,
                    values: Vec::new(),
                    cpu_per_gbps: Vec::new(),
                    remote_cpu_per_gbps: Vec::new(),
                });
                out.last_mut().expect("just pushed")
            }
        };
        r.samples += u64::from(p.samples.saturating_sub(p.failures));
        r.values.push(value(p));
        if p.throughput > 0.0 {
            if p.local_cpu.is_finite() {
                r.cpu_per_gbps.push(p.local_cpu / (p.throughput / 1e9));
            }
            if p.remote_cpu.is_finite() {
                r.remote_cpu_per_gbps
                    .push(p.remote_cpu / (p.throughput / 1e9));
            }
        }
    }
    out.sort_by(|a, b| a.first.total_cmp(&b.first));
    out
}

pub(super) fn kernels(view: &View<'_>, ps: &[(String, String)]) -> Result<Reply, Reply> {
    let (q, page_no) = paging(ps)?;
    let now = unix(view.now);
    let running = crate::host::kernel_release();
    let rows: Vec<&JobInfo> = view.jobs.iter().filter(|i| matches(i, &q)).collect();
    let (start, end, pages) = slice(rows.len(), page_no, view.config.web.page_size)?;
    let table = view.history.with(|hist| {
        html! {
            @for info in &rows[start..end] {
                @let k = &info.key;
                @let trend = view_of(info.kind).trend();
                @let rel = hist.get(k).map(|j| releases(j, trend.value)).unwrap_or_default();
                @if rel.is_empty() {
                    tr {
                        td { a href=(path_link(k)) { (k.target) } }
                        td { (k.module) }
                        td colspan="9" { "no results yet" }
                    }
                    "\n"
                }
                @for (mut r, med, (min, max), change) in release_rows(rel, trend) {
                    tr data-release=(r.name) {
                        td {
                            a href=(path_link(k)) { (k.target) }
                            @if info.host.is_none() { " (loopback)" }
                        }
                        td { (k.module) }
                        td { (r.name) }
                        td { (time_tag(r.first, now)) }
                        td class="num" { (r.samples) }
                        td class="num" { ((trend.unit)(med)) }
                        td class="num" { ((trend.unit)(min)) }
                        td class="num" { ((trend.unit)(max)) }
                        td { @if let Some(c) = change { (c) } }
                        td class="num" { (fmt_pct(median(&mut r.cpu_per_gbps))) }
                        td class="num" { (fmt_pct(median(&mut r.remote_cpu_per_gbps))) }
                    }
                    "\n"
                }
            }
        }
    });
    let body = html! {
        h1 { "Kernel releases " small { "this host runs " (running) } }
        "\n"
        p {
            "Per release of this host's kernel, each path's headline figure (throughput, or \
             the median latency for request/response kinds) over the history held \
             (older entries are averages), and the change of its median against the release before. \
             CPU per Gbit/s is the data threads' CPU (fraction of one CPU) per Gbit/s moved."
        }
        "\n"
        (pager("/kernels", &q, page_no, pages, (start, end), rows.len()))
        table class="kernels" {
            tr {
                th { "path" } th { "module" } th { "kernel release" } th { "since" }
                th { "samples" } th { "median" } th { "min" } th { "max" } th { "change" }
                th { "CPU per Gbit/s here" } th { "peer" }
            }
            "\n"
            (table)
        }
        "\n"
    };
    Ok(Reply::html(page(view, "kernel releases", body)))
}

pub(super) fn fleet(view: &View<'_>, ps: &[(String, String)]) -> Result<Reply, Reply> {
    let (q, page_no) = paging(ps)?;
    let now = unix(view.now);
    // Destinations (peers), with their jobs by module.
    let mut dests: BTreeMap<&str, (Option<&str>, Vec<&JobInfo>)> = BTreeMap::new();
    for i in view
        .jobs
        .iter()
        .filter(|i| i.host.is_some() && matches(i, &q))
    {
        let e = dests
            .entry(i.key.target.as_str())
            .or_insert((i.host.as_deref(), Vec::new()));
        e.1.push(i);
    }
    let mut modules: Vec<&str> = dests
        .values()
        .flat_map(|d| d.1.iter().map(|i| i.key.module.as_str()))
        .collect();
    modules.sort_unstable();
    modules.dedup();
    let head = html! {
        h1 { "Fleet " small { "from " (view.host) " (this host) to " (crate::units::plural(dests.len(), "peer")) } }
        "\n"
        p {
            "The latest figure from this host to each peer, by module: throughput, or the \
             median latency for request/response kinds. A host sees only its own \
             row of the mesh: each peer's page shows its own."
        }
        "\n"
    };
    if dests.is_empty() && q.is_empty() {
        let body = html! {
            (head)
            p { "No peers: this host probes only itself (loopback). Add targets or discovery to probe peers." }
        };
        return Ok(Reply::html(page(view, "fleet", body)));
    }
    let list: Vec<_> = dests.into_iter().collect();
    let (start, end, pages) = slice(list.len(), page_no, view.config.web.page_size)?;
    let rows = view.history.with(|hist| {
        html! {
            @for (target, (host, jobs)) in &list[start..end] {
                tr {
                    td {
                        (target)
                        @if let Some(h) = host {
                            " "
                            a class="peer" href=(format!("http://{}/", peer_web(h))) { "its page" }
                        }
                    }
                    @for m in &modules {
                        @match jobs.iter().find(|i| i.key.module == *m) {
                            None => td {},
                            Some(info) => {
                                @let trend = view_of(info.kind).trend();
                                @match hist.get(&info.key).and_then(|j| j.latest()) {
                                    None => td class="when" { "no results yet" },
                                    Some(p) if p.failed() => td class="fail reason" {
                                        a href=(path_link(&info.key)) {
                                            "failed (" (p.reason.as_deref().unwrap_or("?")) ")"
                                        }
                                        " " (time_tag(p.timestamp, now))
                                    },
                                    Some(p) => td class="num" {
                                        a href=(path_link(&info.key)) { ((trend.unit)((trend.value)(p))) }
                                        " " (time_tag(p.timestamp, now))
                                    },
                                }
                            }
                        }
                    }
                }
                "\n"
            }
        }
    });
    let body = html! {
        (head)
        (pager("/fleet", &q, page_no, pages, (start, end), list.len()))
        table class="fleet" {
            tr {
                th { (view.host) " →" }
                @for m in &modules { th { (m) } }
            }
            "\n"
            (rows)
        }
        "\n"
    };
    Ok(Reply::html(page(view, "fleet", body)))
}
