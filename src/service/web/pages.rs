//! The HTML pages: overview, one path, kernel releases, fleet.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use super::svg::{self, Marker, Series};
use super::{
    esc, fmt_bps, fmt_count, fmt_ms, fmt_pct, get, median, page, pager, paging, time_tag, unix,
    url, JobInfo, Reply, View,
};
use crate::metrics::ProbeKey;
use crate::service::history::{JobHistory, Point};

fn matches(info: &JobInfo, q: &str) -> bool {
    q.is_empty() || info.key.target.contains(q) || info.key.module.contains(q)
}

fn path_link(k: &ProbeKey) -> String {
    format!(
        "/path?target={}&amp;module={}",
        url(&k.target),
        url(&k.module)
    )
}

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

/// The newest successful throughput, and its change against the median
/// over the history shown.
fn latest_and_change(j: &JobHistory, from: f64) -> Option<(f64, f64)> {
    let latest = j
        .points()
        .rev()
        .find(|p| p.throughput.is_finite())?
        .throughput;
    let mut all: Vec<f64> = series_of(j, from, |p| p.throughput)
        .into_iter()
        .map(|p| p.1)
        .collect();
    let med = median(&mut all);
    let change = if med > 0.0 {
        (latest - med) / med
    } else {
        f64::NAN
    };
    Some((latest, change))
}

fn change_tag(change: f64, what: &str) -> String {
    if !change.is_finite() {
        return String::new();
    }
    let class = if change < -0.1 {
        "down"
    } else if change > 0.1 {
        "up"
    } else {
        "flat"
    };
    format!(
        "<span class=\"delta {class}\">{:+.0} % vs {what}</span>",
        change * 100.0
    )
}

pub(super) fn overview(view: &View<'_>, ps: &[(String, String)]) -> Result<Reply, Reply> {
    let (q, page_no) = paging(ps)?;
    let now = unix(view.now);
    let from = now - view.config.web.history_retention.as_secs_f64();
    let hours = view.config.web.history_retention.as_secs_f64() / 3600.0;
    let body = view.history.with(|hist| -> Result<String, Reply> {
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
        let mut s = format!(
            "<h1>Paths <small>{} · {failing} failing</small></h1>\n",
            view.jobs.len()
        );
        s.push_str(&pager("/", &q, page_no, pages, (start, end), rows.len()));
        s.push_str("<div class=\"cards\">\n");
        for (info, j, failing) in &rows[start..end] {
            card(&mut s, view, info, *j, *failing, from, now, hours);
        }
        s.push_str("</div>\n");
        if view.jobs.is_empty() {
            s.push_str(
                "<p>No probes are configured: add <code>targets:</code> to the configuration.</p>",
            );
        }
        Ok(s)
    })?;
    Ok(Reply::html(page(view, "paths", &body)))
}

#[allow(clippy::too_many_arguments)]
fn card(
    s: &mut String,
    view: &View<'_>,
    info: &JobInfo,
    j: Option<&JobHistory>,
    failing: bool,
    from: f64,
    now: f64,
    hours: f64,
) {
    let k = &info.key;
    let class = match (j, failing) {
        (None, _) => "card empty",
        (_, true) => "card fail",
        _ => "card ok",
    };
    let _ = write!(
        s,
        "<div class=\"{class}\" data-target=\"{}\" data-module=\"{}\"><h3><a class=\"target\" href=\"{}\">{}</a> \
         <span class=\"mod\">{} · {}</span></h3>",
        esc(&k.target),
        esc(&k.module),
        path_link(k),
        esc(&k.target),
        esc(&k.module),
        info.kind
    );
    let Some(j) = j else {
        let _ = writeln!(
            s,
            "<div class=\"when\">no results yet, first probe by {}</div></div>",
            time_tag(super::unix(info.first_due), now)
        );
        return;
    };
    match latest_and_change(j, from) {
        Some((latest, change)) => {
            let _ = write!(
                s,
                "<div><span class=\"fig\">{}</span>{}</div>",
                fmt_bps(latest),
                change_tag(change, &format!("{hours:.0} h median"))
            );
        }
        None => s.push_str("<div><span class=\"fig\">–</span></div>"),
    }
    s.push_str(&svg::sparkline(
        from,
        now,
        &series_of(j, from, |p| p.throughput),
        &failures_of(j, from),
    ));
    if let Some(p) = j.latest() {
        let _ = write!(
            s,
            "<div class=\"when\">latest {}",
            time_tag(p.timestamp, now)
        );
        if let Some(v) = &p.verdict {
            let _ = write!(s, " · {}", esc(v));
        }
        s.push_str("</div>");
    }
    let outcomes = view.store.latest_of(k);
    for o in &outcomes {
        match &o.result {
            Err(f) if failing => {
                let _ = write!(
                    s,
                    "<div class=\"reason\">failed ({}): {}</div>",
                    esc(f.reason),
                    esc(&f.message)
                );
            }
            Ok(r) if !r.clamped.is_empty() => {
                let _ = write!(
                    s,
                    "<div class=\"reason\">ok, clamped: {}</div>",
                    esc(&r.clamped.join("; "))
                );
            }
            _ => {}
        }
    }
    if failing && outcomes.iter().all(|o| o.result.is_ok()) {
        // The store was emptied (reload) but the history knows why.
        if let Some(r) = j.latest().and_then(|p| p.reason.as_deref()) {
            let _ = write!(s, "<div class=\"reason\">failed ({})</div>", esc(r));
        }
    }
    s.push_str("</div>\n");
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
    let from = now - view.config.web.history_retention.as_secs_f64();
    let tcp = info.kind.contains("tcp");
    let mut s = format!(
        "<h1>{} <small>{} · {} · every {:?}</small></h1>\n",
        esc(&k.target),
        esc(&k.module),
        info.kind,
        info.interval
    );
    if let Some(h) = &info.host {
        let _ = writeln!(
            s,
            "<p>Peer's own page: <a class=\"peer\" href=\"http://{}/\">{}</a> (if it serves on the default port)</p>",
            esc(&peer_web(h)),
            esc(&peer_web(h))
        );
    }
    let charts = view.history.with(|hist| {
        let Some(j) = hist.get(k).filter(|j| !j.is_empty()) else {
            return format!(
                "<p class=\"when\">no results yet, first probe by {}</p>",
                time_tag(unix(info.first_due), now)
            );
        };
        let markers = kernel_changes(j.points());
        let fails = failures_of(j, from);
        let mut c = String::new();
        let mut tput = vec![
            Series {
                name: "send",
                class: "s0",
                points: series_of(j, from, |p| p.send),
            },
            Series {
                name: "receive",
                class: "s1",
                points: series_of(j, from, |p| p.receive),
            },
        ];
        tput.retain(|s| !s.points.is_empty());
        if tput.is_empty() {
            tput.push(Series {
                name: "throughput",
                class: "s0",
                points: series_of(j, from, |p| p.throughput),
            });
        }
        c.push_str(&svg::chart(
            "throughput per direction",
            from,
            now,
            &tput,
            &fails,
            &markers,
            fmt_bps,
        ));
        let one = |title: &str, name: &'static str, f: fn(&Point) -> f64, unit: fn(f64) -> String| {
            svg::chart(
                title,
                from,
                now,
                &[Series {
                    name,
                    class: "s0",
                    points: series_of(j, from, f),
                }],
                &[],
                &markers,
                unit,
            )
        };
        if tcp {
            c.push_str(&one("retransmits per probe", "retransmits", |p| p.retransmits, fmt_count));
            c.push_str(&one("smoothed RTT", "RTT", |p| p.rtt, fmt_ms));
        } else {
            c.push_str(&one("loss", "loss", |p| p.loss, fmt_pct));
            c.push_str(&one("jitter", "jitter", |p| p.jitter, fmt_ms));
        }
        c.push_str(&svg::chart(
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
        ));
        if !markers.is_empty() {
            c.push_str("<h2>Kernel release changes</h2><ul class=\"kchanges\">");
            for m in &markers {
                let _ = write!(c, "<li>{} {}</li>", time_tag(m.at, now), esc(&m.label));
            }
            c.push_str("</ul>");
        }
        let failed: Vec<&Point> = j.points().filter(|p| p.failures > 0).collect();
        if !failed.is_empty() {
            c.push_str("<h2>Recent failures</h2><ul class=\"failures\">");
            for p in failed.iter().rev().take(10) {
                let _ = write!(
                    c,
                    "<li>{} {} of {} failed: {}</li>",
                    time_tag(p.timestamp, now),
                    p.failures,
                    p.samples,
                    esc(p.reason.as_deref().unwrap_or("?"))
                );
            }
            c.push_str("</ul>");
        }
        let _ = write!(
            c,
            "<p class=\"when\">{} entries held: one per probe for the last {:?}, then {:?} averages.</p>",
            j.len(),
            view.config.web.history_full_resolution,
            view.config.web.history_bucket
        );
        c
    });
    s.push_str(&charts);
    s.push_str("<h2>Latest result in full (as <code>pathprobe probe -v</code>)</h2>\n");
    let outcomes = view.store.latest_of(k);
    if outcomes.is_empty() {
        s.push_str("<p>none since this service started</p>");
    }
    for o in outcomes {
        let text = match &o.result {
            Ok(r) => crate::report::text(r, true),
            Err(f) => format!("failed ({}): {}\n", f.reason, f.message),
        };
        let _ = writeln!(
            s,
            "<h3>{} {}</h3><pre class=\"detail\">{}</pre>",
            o.direction,
            time_tag(unix(o.started), now),
            esc(&text)
        );
    }
    Ok(Reply::html(page(view, &k.target, &s)))
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

fn releases(j: &JobHistory) -> Vec<Release> {
    let mut out: Vec<Release> = Vec::new();
    for p in j.points() {
        let (Some(k), true) = (&p.local_kernel, p.throughput.is_finite()) else {
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
        r.values.push(p.throughput);
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
    let mut s = format!(
        "<h1>Kernel releases <small>this host runs {}</small></h1>\n\
         <p>Per release of this host's kernel, each path's throughput over the history held \
         (older entries are averages), and the change of its median against the release before. \
         CPU per Gbit/s is the data threads' CPU (fraction of one CPU) per Gbit/s moved.</p>\n",
        esc(&running)
    );
    let rows: Vec<&JobInfo> = view.jobs.iter().filter(|i| matches(i, &q)).collect();
    let (start, end, pages) = slice(rows.len(), page_no, view.config.web.page_size)?;
    s.push_str(&pager(
        "/kernels",
        &q,
        page_no,
        pages,
        (start, end),
        rows.len(),
    ));
    s.push_str(
        "<table class=\"kernels\"><tr><th>path</th><th>module</th><th>kernel release</th><th>since</th>\
         <th>samples</th><th>median</th><th>min</th><th>max</th><th>change</th>\
         <th>CPU per Gbit/s here</th><th>peer</th></tr>\n",
    );
    view.history.with(|hist| {
        for info in &rows[start..end] {
            let k = &info.key;
            let rel = hist.get(k).map(releases).unwrap_or_default();
            if rel.is_empty() {
                let _ = writeln!(
                    s,
                    "<tr><td><a href=\"{}\">{}</a></td><td>{}</td><td colspan=\"9\">no results yet</td></tr>",
                    path_link(k),
                    esc(&k.target),
                    esc(&k.module)
                );
                continue;
            }
            let mut prev: Option<f64> = None;
            for mut r in rel {
                let (min, max) = r
                    .values
                    .iter()
                    .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(*v), b.max(*v)));
                let med = median(&mut r.values);
                let change = prev
                    .filter(|p| *p > 0.0)
                    .map_or(String::new(), |p| change_tag((med - p) / p, "previous"));
                prev = Some(med);
                let loopback = if info.host.is_none() { " (loopback)" } else { "" };
                let _ = writeln!(
                    s,
                    "<tr data-release=\"{}\"><td><a href=\"{}\">{}</a>{loopback}</td><td>{}</td><td>{}</td><td>{}</td>\
                     <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                     <td>{change}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                    esc(&r.name),
                    path_link(k),
                    esc(&k.target),
                    esc(&k.module),
                    esc(&r.name),
                    time_tag(r.first, now),
                    r.samples,
                    fmt_bps(med),
                    fmt_bps(min),
                    fmt_bps(max),
                    fmt_pct(median(&mut r.cpu_per_gbps)),
                    fmt_pct(median(&mut r.remote_cpu_per_gbps)),
                );
            }
        }
    });
    s.push_str("</table>\n");
    Ok(Reply::html(page(view, "kernel releases", &s)))
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
    let mut s = format!(
        "<h1>Fleet <small>from {} (this host) to {} peers</small></h1>\n\
         <p>The latest throughput from this host to each peer, by module. A host sees only its own \
         row of the mesh: each peer's page shows its own.</p>\n",
        esc(view.host),
        dests.len()
    );
    if dests.is_empty() && q.is_empty() {
        s.push_str("<p>No peers: this host probes only itself (loopback). Add targets or discovery to probe peers.</p>");
        return Ok(Reply::html(page(view, "fleet", &s)));
    }
    let list: Vec<_> = dests.into_iter().collect();
    let (start, end, pages) = slice(list.len(), page_no, view.config.web.page_size)?;
    s.push_str(&pager(
        "/fleet",
        &q,
        page_no,
        pages,
        (start, end),
        list.len(),
    ));
    let _ = write!(
        s,
        "<table class=\"fleet\"><tr><th>{} →</th>",
        esc(view.host)
    );
    for m in &modules {
        let _ = write!(s, "<th>{}</th>", esc(m));
    }
    s.push_str("</tr>\n");
    view.history.with(|hist| {
        for (target, (host, jobs)) in &list[start..end] {
            let _ = write!(s, "<tr><td>{}", esc(target));
            if let Some(h) = host {
                let _ = write!(
                    s,
                    " <a class=\"peer\" href=\"http://{}/\">its page</a>",
                    esc(&peer_web(h))
                );
            }
            s.push_str("</td>");
            for m in &modules {
                let Some(info) = jobs.iter().find(|i| i.key.module == *m) else {
                    s.push_str("<td></td>");
                    continue;
                };
                let latest = hist.get(&info.key).and_then(|j| j.latest());
                match latest {
                    None => s.push_str("<td class=\"when\">no results yet</td>"),
                    Some(p) if p.failed() => {
                        let _ = write!(
                            s,
                            "<td class=\"fail reason\"><a href=\"{}\">failed ({})</a> {}</td>",
                            path_link(&info.key),
                            esc(p.reason.as_deref().unwrap_or("?")),
                            time_tag(p.timestamp, now)
                        );
                    }
                    Some(p) => {
                        let _ = write!(
                            s,
                            "<td class=\"num\"><a href=\"{}\">{}</a> {}</td>",
                            path_link(&info.key),
                            fmt_bps(p.throughput),
                            time_tag(p.timestamp, now)
                        );
                    }
                }
            }
            s.push_str("</tr>\n");
        }
    });
    s.push_str("</table>\n");
    Ok(Reply::html(page(view, "fleet", &s)))
}
