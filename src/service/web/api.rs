//! `/api/v1/history?target=&module=&since=&limit=&cursor=`: the history
//! as JSON, entries with the probe JSON's field names (docs/JSON.md), a
//! page at a time: at most [`MAX_SAMPLES`] entries an answer, with a
//! `next` link to the rest. Without the bound one GET of a large history
//! was 50 MB, and twenty clients that never read it held a gigabyte.

use serde::Serialize;

use super::{get, unix, Reply, View};
use crate::service::history::{Sample, StepRecord};

/// Jobs in one answer unless `limit` says otherwise, and at most.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
/// Entries in one answer, over all its jobs: about 1 MB of JSON.
pub const MAX_SAMPLES: usize = 2000;

#[derive(Serialize)]
struct Answer<'a> {
    now_seconds: f64,
    since_seconds: f64,
    /// Jobs that matched, of which `jobs` holds the first `limit`.
    jobs_total: usize,
    jobs: Vec<Job<'a>>,
    /// Where the next page starts (`cursor=`), and the whole query for it;
    /// absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

#[derive(Serialize)]
struct Job<'a> {
    target: &'a str,
    module: &'a str,
    kind: String,
    samples: Vec<Sample>,
    /// The steps the detector found on the job's paths from `since` on,
    /// oldest first (at most `history::MAX_STEPS`); on the job's first
    /// page only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    steps: Vec<StepRecord>,
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
    // `cursor=J` or `J:T`: start at the J-th matching job, and in it after
    // the entry at T (Unix seconds), as a previous page's `next_cursor` said.
    let (first_job, after) = match get(ps, "cursor") {
        None | Some("") => (0, None),
        Some(v) => parse_cursor(v).ok_or_else(|| {
            Reply::error(
                400,
                "cursor must be as a previous answer's next_cursor gave it",
            )
        })?,
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
    let mut budget = MAX_SAMPLES;
    let mut jobs = Vec::new();
    let mut next_cursor = None;
    for (i, k) in keys.iter().enumerate().skip(first_job).take(limit) {
        if budget == 0 {
            next_cursor = Some(i.to_string());
            break;
        }
        let after = if i == first_job { after } else { None };
        let (kind, samples, more) = view
            .history
            .samples_page(k, from, after, budget)
            .unwrap_or_default();
        budget -= samples.len();
        if more {
            // Resume in this job after its last entry given here.
            let last = samples.last().map(|s| s.timestamp_seconds).or(after);
            next_cursor = Some(match last {
                Some(t) => format!("{i}:{t}"),
                None => i.to_string(),
            });
        }
        jobs.push(Job {
            target: &k.target,
            module: &k.module,
            kind,
            samples,
            steps: if after.is_none() {
                view.history.steps(k, from)
            } else {
                Vec::new()
            },
        });
        if more {
            break;
        }
    }
    if next_cursor.is_none() && first_job.saturating_add(limit) < keys.len() {
        next_cursor = Some((first_job + limit).to_string());
    }
    let next = next_cursor.as_ref().map(|c| {
        let mut q: Vec<String> = ps
            .iter()
            .filter(|(k, _)| k != "cursor")
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        q.push(format!("cursor={}", encode(c)));
        format!("/api/v1/history?{}", q.join("&"))
    });
    let answer = Answer {
        now_seconds: now,
        since_seconds: from,
        jobs_total: keys.len(),
        jobs,
        next_cursor,
        next,
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

fn parse_cursor(v: &str) -> Option<(usize, Option<f64>)> {
    let (job, t) = match v.split_once(':') {
        Some((j, t)) => (j, Some(t)),
        None => (v, None),
    };
    let job = job.parse().ok()?;
    let t = match t {
        Some(t) => Some(t.parse::<f64>().ok().filter(|t| t.is_finite())?),
        None => None,
    };
    Some((job, t))
}

/// Percent-encodes a query component (all but unreserved characters).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
