//! The status page at `/` and its JSON API, drawn from the jobs' history
//! ([`super::history`]) with no Grafana and no internet needed: CSS and a
//! few lines of script are embedded, charts are SVG drawn here.
//!
//! - `/`: a card per path, with a 24 h sparkline, the latest figure and
//!   its change against the path's own 24 h median; failures first and in
//!   red, with their reason. Filter (`q=`) and pages (`page=`).
//! - `/path?target=&module=`: charts of throughput per direction,
//!   retransmits and RTT (TCP) or loss and jitter (UDP), CPU of both ends,
//!   kernel release changes marked; the latest result in full.
//! - `/kernels`: per kernel release of this host, each path's samples,
//!   median, min, max, change against the previous release, and CPU per
//!   Gbit/s.
//! - `/fleet`: the latest throughput from this host to each peer.
//! - `/api/v1/history?target=&module=&since=`: the history as JSON.
//!
//! Read-only: every route is a GET that only reads. Every name that comes
//! from configuration, discovery or a peer is escaped ([`esc`]).

#![allow(missing_docs)]

mod api;
mod pages;
pub mod svg;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
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
fn time_tag(at: f64, now: f64) -> String {
    format!("<time data-ts=\"{at:.0}\">{}</time>", relative(now - at))
}

pub fn fmt_bps(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let (div, unit) = if v >= 1e9 {
        (1e9, "Gbit/s")
    } else if v >= 1e6 {
        (1e6, "Mbit/s")
    } else if v >= 1e3 {
        (1e3, "kbit/s")
    } else {
        (1.0, "bit/s")
    };
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
fn page(view: &View<'_>, title: &str, body: &str) -> String {
    let refresh = view.config.web.refresh.as_secs();
    let meta = if refresh > 0 {
        format!("<meta http-equiv=\"refresh\" content=\"{refresh}\">")
    } else {
        String::new()
    };
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{meta}\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>{} · pathprobe on {}</title><style>{CSS}</style></head><body>\n\
         <nav><b>pathprobe</b> on {} <a href=\"/\">paths</a> <a href=\"/kernels\">kernels</a> \
         <a href=\"/fleet\">fleet</a> <a href=\"/metrics\">/metrics</a> \
         <a href=\"/api/v1/history\">/api/v1/history</a> <span class=\"ver\">{}</span></nav>\n\
         <main>{body}</main>\n\
         <footer>rendered {} · <code>/probe?target=HOST[:PORT]&amp;module=NAME[&amp;debug=true]</code> runs one probe now · \
         <a href=\"/-/healthy\">/-/healthy</a> <a href=\"/-/ready\">/-/ready</a></footer>\
         <script>{JS}</script></body></html>\n",
        esc(title),
        esc(view.host),
        esc(view.host),
        env!("CARGO_PKG_VERSION"),
        time_tag(unix(view.now), unix(view.now)),
    )
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
) -> String {
    let link =
        |p: usize, text: &str| format!("<a href=\"{path}?q={}&amp;page={p}\">{text}</a>", url(q));
    let mut s = format!(
        "<form class=\"filter\" method=\"get\" action=\"{path}\"><input name=\"q\" value=\"{}\" placeholder=\"filter by target or module\"> \
         <button>filter</button> <span class=\"count\">{}–{} of {total}</span> ",
        esc(q),
        if total == 0 { 0 } else { shown.0 + 1 },
        shown.1
    );
    if page > 1 {
        s.push_str(&link(page - 1, "« previous"));
        s.push(' ');
    }
    if page < pages {
        s.push_str(&link(page + 1, "next »"));
    }
    s.push_str("</form>\n");
    s
}

#[cfg(test)]
mod tests;
