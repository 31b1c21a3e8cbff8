//! The status page at `/` and its JSON API, drawn from the jobs' history
//! ([`super::history`]) with no Grafana and no internet needed: CSS and a
//! few lines of script are embedded, charts are SVG drawn here.
//!
//! - `/`: a card per path, with a sparkline over the history held, the
//!   latest figures (by kind: see [`kinds`]) and, over enough history, the
//!   change against the path's own median; failures first and in red,
//!   with their reason. Filter (`q=`) and pages (`page=`).
//! - `/path?target=&module=`: the kind's charts (throughput per direction,
//!   retransmits and RTT, loss and jitter, or RR latency), CPU of both
//!   ends, kernel release changes marked; the latest trace of the path
//!   (`trace:`), hop by hop; the latest result in full.
//! - `/kernels`: per kernel release of this host, each path's samples,
//!   median, min, max, change against the previous release, and CPU per
//!   Gbit/s.
//! - `/fleet`: the latest throughput from this host to each peer.
//! - `/api/v1/history?target=&module=&since=`: the history as JSON.
//!
//! Read-only: every route is a GET that only reads. Every page is built
//! with [`maud`], which escapes every value spliced into the markup: a
//! name from configuration, discovery or a peer cannot become markup
//! unless the code says `PreEscaped`, which only the embedded CSS and
//! script and markup built by maud itself are.
//!
//! What a kind's card and path page show (throughput, or latency for the
//! RR kinds) is decided in one table, [`kinds`].

#![allow(missing_docs)]

mod api;
mod kinds;
mod pages;
pub mod svg;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::config::Config;
use crate::metrics::{ProbeKey, ResultStore};

use super::history::History;

/// What the page knows of a job beyond its history: from the schedule.
#[derive(Debug, Clone)]
pub struct JobInfo {
    pub key: ProbeKey,
    /// The module's kind.
    pub kind: &'static str,
    pub interval: Duration,
    /// The peer's host, for a link to its own page; `None` for loopback.
    pub host: Option<String>,
    /// When its first probe is due at the latest (the scheduler may run
    /// it sooner).
    pub first_due: SystemTime,
}

/// What a page is drawn from.
pub struct View<'a> {
    pub config: &'a Config,
    pub history: &'a History,
    pub store: &'a ResultStore,
    pub jobs: &'a [JobInfo],
    /// This host's name.
    pub host: &'a str,
    pub now: SystemTime,
    /// The traced paths (`trace:`), for the path page's latest trace.
    pub paths: Option<&'a crate::metrics::path::PathTable>,
}

/// A response: status, content type, body.
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Reply {
    fn html(body: String) -> Reply {
        Reply {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body,
        }
    }

    fn error(status: u16, message: impl Into<String>) -> Reply {
        let mut body = message.into();
        body.push('\n');
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body,
        }
    }
}

/// The routes this module serves.
pub const ROUTES: &[&str] = &["/", "/path", "/kernels", "/fleet", "/api/v1/history"];

/// The longest query string taken; a longer one is a 414.
const MAX_QUERY: usize = 4096;
/// The longest single parameter value.
const MAX_VALUE: usize = 1024;

/// Query parameters, checked: only `allowed` names, each at most once,
/// values bounded.
fn params(query: Option<&str>, allowed: &[&str]) -> Result<Vec<(String, String)>, Reply> {
    let q = query.unwrap_or("");
    if q.len() > MAX_QUERY {
        return Err(Reply::error(
            414,
            format!("query longer than {MAX_QUERY} bytes"),
        ));
    }
    let ps = crate::http::query_params(Some(q));
    for (i, (k, v)) in ps.iter().enumerate() {
        if !allowed.contains(&k.as_str()) {
            return Err(Reply::error(
                400,
                format!(
                    "unknown parameter {:?}; this page takes: {}",
                    trunc(k, 64),
                    allowed.join(", ")
                ),
            ));
        }
        if ps[..i].iter().any(|(n, _)| n == k) {
            return Err(Reply::error(400, format!("parameter {k:?} given twice")));
        }
        if v.len() > MAX_VALUE {
            return Err(Reply::error(
                400,
                format!("parameter {k:?} is longer than {MAX_VALUE} bytes"),
            ));
        }
    }
    Ok(ps)
}

fn get<'p>(ps: &'p [(String, String)], k: &str) -> Option<&'p str> {
    ps.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

fn trunc(s: &str, n: usize) -> &str {
    let mut end = s.len().min(n);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Serves `path` if it is one of [`ROUTES`].
pub fn handle(view: &View<'_>, path: &str, query: Option<&str>) -> Option<Reply> {
    let reply = match path {
        "/" => params(query, &["q", "page"]).and_then(|p| pages::overview(view, &p)),
        "/path" => params(query, &["target", "module"]).and_then(|p| pages::path(view, &p)),
        "/kernels" => params(query, &["q", "page"]).and_then(|p| pages::kernels(view, &p)),
        "/fleet" => params(query, &["q", "page"]).and_then(|p| pages::fleet(view, &p)),
        "/api/v1/history" => params(query, &["target", "module", "since", "limit", "cursor"])
            .and_then(|p| api::history(view, &p)),
        _ => return None,
    };
    Some(reply.unwrap_or_else(|e| e))
}

/// Percent-encodes a query value.
pub fn url(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub(crate) fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// "3 min ago", "in 20 s": the same words the page's script keeps fresh.
pub fn relative(secs_ago: f64) -> String {
    let a = secs_ago.abs().round();
    if a < 10.0 {
        return "just now".into();
    }
    let t = if a < 90.0 {
        format!("{a:.0} s")
    } else if a < 5400.0 {
        format!("{:.0} min", a / 60.0)
    } else if a < 172_800.0 {
        format!("{:.0} h", a / 3600.0)
    } else {
        format!("{:.0} d", a / 86400.0)
    };
    if secs_ago >= 0.0 {
        format!("{t} ago")
    } else {
        format!("in {t}")
    }
}

/// A `<time>` the script turns into local time (title) and keeps relative.
fn time_tag(at: f64, now: f64) -> Markup {
    html! { time data-ts=(format!("{at:.0}")) { (relative(now - at)) } }
}

/// A duration as words: "2 h", "15 min", "1 h 30 min", "45 s", "3 d";
/// hours up to two days ("24 h", "36 h"), as a day's chart reads.
pub fn duration_words(d: Duration) -> String {
    let s = d.as_secs();
    if s == 0 {
        return format!("{} ms", d.as_millis());
    }
    let units: &[(u64, &str)] = if s >= 2 * 86_400 {
        &[(86_400, "d"), (3600, "h"), (60, "min"), (1, "s")]
    } else {
        &[(3600, "h"), (60, "min"), (1, "s")]
    };
    let mut out = Vec::new();
    let mut rest = s;
    for &(unit, name) in units {
        if rest >= unit {
            out.push(format!("{} {name}", rest / unit));
            rest %= unit;
        } else if !out.is_empty() {
            // "1 h 0 min 5 s" says nothing the "1 h" does not.
            break;
        }
        // Two units say enough: "3 d 2 h", not "3 d 2 h 3 min 4 s".
        if out.len() == 2 {
            break;
        }
    }
    out.join(" ")
}

/// A span of history, rounded: whole hours from an hour up, else whole
/// minutes, else seconds ("24 h", "10 min", "26 s").
pub fn span_words(secs: f64) -> String {
    let rounded = if secs >= 3600.0 {
        (secs / 3600.0).round() * 3600.0
    } else if secs >= 60.0 {
        (secs / 60.0).round() * 60.0
    } else {
        secs.round().max(1.0)
    };
    duration_words(Duration::from_secs_f64(rounded))
}

pub fn fmt_bps(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let (div, unit) = crate::units::bit_rate_unit(v);
    let x = v / div;
    if x >= 100.0 {
        format!("{x:.0} {unit}")
    } else if x >= 10.0 {
        format!("{x:.1} {unit}")
    } else {
        format!("{x:.2} {unit}")
    }
}

fn fmt_ms(v: f64) -> String {
    format!("{:.2} ms", v * 1e3)
}

fn fmt_pct(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

fn fmt_count(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The median of `v` (which it sorts); NaN when empty.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// The page around `body`: navigation, embedded CSS and script.
fn page(view: &View<'_>, title: &str, body: Markup) -> String {
    let refresh = view.config.web.refresh.as_secs();
    let now = unix(view.now);
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if refresh > 0 {
                    meta http-equiv="refresh" content=(refresh);
                }
                meta name="viewport" content="width=device-width";
                title { (title) " · pathprobe on " (view.host) }
                // Our own stylesheet, embedded at build time.
                style { (PreEscaped(CSS)) }
            }
            body {
                nav {
                    b { "pathprobe" } " on " (view.host) " "
                    a href="/" { "paths" } " "
                    a href="/kernels" { "kernels" } " "
                    a href="/fleet" { "fleet" } " "
                    a href="/metrics" { "/metrics" } " "
                    a href="/api/v1/history" { "/api/v1/history" } " "
                    span class="ver" { (env!("CARGO_PKG_VERSION")) }
                }
                "\n"
                main { (body) }
                "\n"
                footer {
                    "rendered " (time_tag(now, now)) " · "
                    code { "/probe?target=NAME|HOST[:PORT]&module=NAME[&debug=true]" }
                    " runs one probe now · "
                    a href="/-/healthy" { "/-/healthy" } " "
                    a href="/-/ready" { "/-/ready" }
                }
                // Our own script, embedded at build time.
                script { (PreEscaped(JS)) }
            }
        }
    };
    let mut out = doc.into_string();
    out.push('\n');
    out
}

/// `q` filter and `page` number, checked.
fn paging(ps: &[(String, String)]) -> Result<(String, usize), Reply> {
    let q = get(ps, "q").unwrap_or("").trim().to_string();
    let page = match get(ps, "page") {
        None | Some("") => 1,
        Some(p) => match p.parse::<usize>() {
            Ok(n) if (1..=1_000_000).contains(&n) => n,
            _ => return Err(Reply::error(400, "page must be a number from 1")),
        },
    };
    Ok((q, page))
}

/// The filter form and page links for `path`.
fn pager(
    path: &str,
    q: &str,
    page: usize,
    pages: usize,
    shown: (usize, usize),
    total: usize,
) -> Markup {
    let link = |p: usize| format!("{path}?q={}&page={p}", url(q));
    html! {
        form class="filter" method="get" action=(path) {
            input name="q" value=(q) placeholder="filter by target or module";
            " "
            button { "filter" }
            " "
            span class="count" {
                (if total == 0 { 0 } else { shown.0 + 1 }) "–" (shown.1) " of " (total)
            }
            " "
            @if page > 1 {
                a href=(link(page - 1)) { "« previous" } " "
            }
            @if page < pages {
                a href=(link(page + 1)) { "next »" }
            }
        }
        "\n"
    }
}

#[cfg(test)]
mod tests;
