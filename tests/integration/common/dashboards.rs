//! Reading the Grafana dashboards in dashboards/ the way Grafana would run
//! them: every PromQL expression they hold (panel targets, template variable
//! queries, annotation queries) and template variables filled in (the
//! metric names a query reads come from `promql::metric_names`). Shared by
//! the dashboards module (static checks, promtool, live scrape) and the
//! end-to-end test that runs each query through a real Prometheus.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The dashboards directory of this checkout.
pub fn dashboards_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards")
}

/// Every `*.json` file in dashboards/, sorted by name.
pub fn dashboard_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dashboards_dir())
        .expect("dashboards/ exists")
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// Parses one dashboard file, with the file name in the error.
pub fn load(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Every panel of a dashboard, rows' nested panels included (a collapsed
/// row keeps its panels inside it), rows themselves left out.
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a [Value], out: &mut Vec<&'a Value>) {
        for p in list {
            if p["type"] != "row" {
                out.push(p);
            }
            if let Some(inner) = p["panels"].as_array() {
                walk(inner, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        dashboard["panels"]
            .as_array()
            .map_or(&[][..], Vec::as_slice),
        &mut out,
    );
    out
}

/// Every PromQL expression of a dashboard, with where it comes from:
/// - panel targets: (panel title, expr);
/// - query template variables: ("variable NAME", PromQL of the query), where
///   `label_values(SELECTOR, label)` gives SELECTOR and `query_result(EXPR)`
///   gives EXPR, the part Prometheus evaluates;
/// - annotation queries: ("annotation NAME", expr).
///
/// Template variables are left in; see [`substitute_variables`].
pub fn panel_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in panels(dashboard) {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        for target in panel["targets"].as_array().map_or(&[][..], Vec::as_slice) {
            if let Some(expr) = target["expr"].as_str() {
                out.push((title.to_string(), expr.to_string()));
            }
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
    {
        if var["type"] != "query" {
            continue;
        }
        // Grafana stores the query as a string (old) or as an object (new).
        let query = var["query"]
            .as_str()
            .or_else(|| var["query"]["query"].as_str())
            .unwrap_or_default();
        let name = var["name"].as_str().unwrap_or_default();
        let promql = variable_promql(query).unwrap_or_else(|| query.to_string());
        out.push((format!("variable {name}"), promql));
    }
    for anno in dashboard["annotations"]["list"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
    {
        if let Some(expr) = anno["expr"].as_str() {
            let name = anno["name"].as_str().unwrap_or_default();
            out.push((format!("annotation {name}"), expr.to_string()));
        }
    }
    out
}

/// The PromQL inside a Grafana Prometheus variable query:
/// `label_values(SELECTOR, label)` → SELECTOR, `query_result(EXPR)` → EXPR.
/// None for forms that evaluate no PromQL (`label_values(label)`,
/// `label_names()`) and for anything else.
pub fn variable_promql(query: &str) -> Option<String> {
    let q = query.trim();
    if let Some(inner) = q
        .strip_prefix("query_result(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return Some(inner.trim().to_string());
    }
    let inner = q
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))?;
    // The label is after the last comma outside braces and strings.
    let mut depth = 0i32;
    let mut in_string = false;
    let mut split = None;
    let bytes = inner.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'{' | b'(' if !in_string => depth += 1,
            b'}' | b')' if !in_string => depth -= 1,
            b',' if !in_string && depth == 0 => split = Some(i),
            _ => {}
        }
        i += 1;
    }
    split.map(|at| inner[..at].trim().to_string())
}

/// Values that make every dashboard query runnable: the dashboards' own
/// variables at "All" (their allValue is the regex `.*`, and every use is a
/// `=~` matcher) and Grafana's built-in interval variables at values fit
/// for a short test (1m steps over a 1h range).
pub fn default_values() -> Vec<(&'static str, &'static str)> {
    vec![
        ("instance", ".*"),
        ("target", ".*"),
        ("module", ".*"),
        ("__rate_interval", "1m"),
        ("__interval", "1m"),
        ("__interval_ms", "60000"),
        ("__range", "1h"),
        ("__range_s", "3600"),
        ("__range_ms", "3600000"),
    ]
}

/// Replaces Grafana template variables in `expr` with `values`:
/// `$name`, `${name}` and `${name:format}` (the format is ignored: the
/// dashboards use variables only in `=~` matchers and ranges, where the
/// value is used as given). A name is the longest run of `[A-Za-z0-9_]`
/// after `$`, so `$__range` does not eat the start of `$__range_s`.
/// Unknown variables are left as written.
pub fn substitute_variables(expr: &str, values: &[(&str, &str)]) -> String {
    let lookup = |name: &str| values.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(braced) = after.strip_prefix('{') {
            if let Some(end) = braced.find('}') {
                let name = braced[..end].split(':').next().unwrap_or_default();
                if let Some(v) = lookup(name) {
                    out.push_str(v);
                    rest = &braced[end + 1..];
                    continue;
                }
            }
        } else {
            let len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            if let Some(v) = lookup(&after[..len]) {
                out.push_str(v);
                rest = &after[len..];
                continue;
            }
        }
        out.push('$');
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Queries that may legitimately return nothing on a healthy setup with
/// one kernel release and loopback targets only (the default config): they
/// show failures, rejections, skipped runs, kernel changes, remote paths,
/// receive flows or bidir probes, and there are none. Each entry is a title
/// as [`panel_queries`] gives it and, for panels whose other queries must
/// return data, a piece of the one query that may not.
pub const MAY_BE_EMPTY: &[(&str, Option<&str>)] = &[
    ("Failed probes by reason over the time range", None),
    (
        "Latest result per path",
        Some("pathprobe_probe_failure_info"),
    ),
    (
        "Sender CPU (%TX) and receiver CPU (%RX)",
        Some("direction=\"bidir\""),
    ),
    ("Per-path throughput (bit/s)", None),
    // '% vs previous' needs two releases in the range.
    ("Throughput per kernel release", Some(" unless ")),
    ("annotation Kernel release changed", None),
    ("Mesh: destination → source (bit/s)", None),
    ("Failing probes now", None),
    (
        "Busy: responder rejections and busy probes per 15 minutes",
        Some("result=\"busy\""),
    ),
    ("Skipped scheduled runs per 15 minutes", None),
    // Mesh mode only, and receive probes only.
    ("Mesh cycle and slot", None),
    ("Mesh: age of the newest result, destination → source", None),
    // Needs traces (trace.enabled) and the localization rules; empty on a
    // healthy mesh.
    ("Suspect hops", None),
];

/// Whether a query from [`panel_queries`] may return nothing on a healthy
/// setup (see [`MAY_BE_EMPTY`]); an end-to-end test should still run it
/// (it must evaluate without error) but not demand data from it. So may
/// every query of a request/response series: the default configuration
/// runs no probe of those kinds (see [`super::rr`]).
pub fn may_be_empty(title: &str, expr: &str) -> bool {
    MAY_BE_EMPTY
        .iter()
        .any(|(t, piece)| *t == title && piece.is_none_or(|p| expr.contains(p)))
        || super::promql::metric_names(expr)
            .is_ok_and(|names| names.iter().any(|n| super::rr::rr_only(n)))
}
