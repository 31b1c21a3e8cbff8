//! `/api/v1/history?target=&module=&since=&limit=`: the history as JSON,
//! entries with the probe JSON's field names (docs/JSON.md).

use serde::Serialize;

use super::{get, unix, Reply, View};
use crate::service::history::Sample;

/// Jobs in one answer unless `limit` says otherwise, and at most.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

#[derive(Serialize)]
struct Answer<'a> {
    now_seconds: f64,
    since_seconds: f64,
    /// Jobs that matched, of which `jobs` holds the first `limit`.
    jobs_total: usize,
    jobs: Vec<Job<'a>>,
}

#[derive(Serialize)]
struct Job<'a> {
    target: &'a str,
    module: &'a str,
    kind: String,
    samples: Vec<Sample>,
}

/// `since`: Unix seconds, or a duration back from now (`90s`, `6h`, `1d`).
fn since(v: &str, now: f64) -> Option<f64> {
    if let Ok(t) = v.parse::<f64>() {
        return (t.is_finite() && t >= 0.0).then_some(t);
    }
    let (n, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit())?);
    let n: f64 = n.parse().ok()?;
    let mult = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return None,
    };
    Some((now - n * mult).max(0.0))
}

pub(super) fn history(view: &View<'_>, ps: &[(String, String)]) -> Result<Reply, Reply> {
    let now = unix(view.now);
    let from = match get(ps, "since") {
        None | Some("") => 0.0,
        Some(v) => since(v, now).ok_or_else(|| {
            Reply::error(
                400,
                "since must be Unix seconds or a duration back from now (90s, 30m, 6h, 1d)",
            )
        })?,
    };
    let limit = match get(ps, "limit") {
        None | Some("") => DEFAULT_LIMIT,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => return Err(Reply::error(400, format!("limit must be 1 to {MAX_LIMIT}"))),
        },
    };
    let target = get(ps, "target").filter(|t| !t.is_empty());
    let module = get(ps, "module").filter(|m| !m.is_empty());
    let keys: Vec<_> = view
        .jobs
        .iter()
        .map(|j| &j.key)
        .filter(|k| target.is_none_or(|t| k.target == t))
        .filter(|k| module.is_none_or(|m| k.module == m))
        .collect();
    if keys.is_empty() && (target.is_some() || module.is_some()) {
        return Err(Reply::error(
            404,
            "no job with that target and module; see /api/v1/history for all",
        ));
    }
    let jobs = keys
        .iter()
        .take(limit)
        .map(|k| {
            let (kind, samples) = view.history.samples(k, from).unwrap_or_default();
            Job {
                target: &k.target,
                module: &k.module,
                kind,
                samples,
            }
        })
        .collect();
    let answer = Answer {
        now_seconds: now,
        since_seconds: from,
        jobs_total: keys.len(),
        jobs,
    };
    match serde_json::to_string(&answer) {
        Ok(body) => Ok(Reply {
            status: 200,
            content_type: "application/json",
            body,
        }),
        Err(e) => Err(Reply::error(500, format!("rendering JSON failed: {e}"))),
    }
}
