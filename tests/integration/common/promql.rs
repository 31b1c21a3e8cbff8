//! Series names in PromQL expressions and in a /metrics scrape, for tests
//! that hold rules and dashboards to the names the exporter really exposes.
//!
//! One reader with two strictnesses ([`Mode`]): rules may hold Grafana-free
//! PromQL only, but the reader tolerates what it cannot place; dashboards'
//! queries are read after their template variables are filled in, and
//! there a leftover `$`, an unterminated string or an unclosed bracket is an
//! error. It is a small lexer, not a
//! parser; promtool (or Prometheus' API) is what proves an expression parses.
//! It recognises what a name can sit next to in valid PromQL: strings,
//! comments, label matchers in `{}`, ranges and subqueries in `[]`, numbers
//! and durations, function calls, aggregation and set operators, label lists
//! after `by`, `without`, `on`, `ignoring`, `group_left` and `group_right`,
//! and (leniently) Grafana variables (`$var`, `${var}`, `$__rate_interval`).

use std::collections::BTreeSet;

/// Aggregation operators: followed by `(` or by `by`/`without`, never names.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LIST_KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Other words that are not series names.
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "offset", "bool", "atan2", "inf", "nan", "start", "end",
];

/// How much the reader demands of an expression.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Skips Grafana variables and reads to the end of an unterminated
    /// string or bracket.
    Lenient,
    /// A `$` outside strings (an unsubstituted template variable), an
    /// unterminated string or an unbalanced bracket is an error.
    Strict,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':'
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

/// Index after the string literal that opens at `i` (quote at `b[i]`).
fn skip_string(b: &[u8], start: usize, mode: Mode) -> Result<usize, String> {
    let q = b[start];
    let mut i = start + 1;
    while i < b.len() {
        if b[i] == b'\\' && q != b'`' {
            i += 2;
            continue;
        }
        if b[i] == q {
            return Ok(i + 1);
        }
        i += 1;
    }
    match mode {
        Mode::Lenient => Ok(b.len()),
        Mode::Strict => Err(format!("unterminated string at {start}")),
    }
}

/// Index after the bracket group that opens at `i`, strings respected.
fn skip_group(b: &[u8], start: usize, open: u8, close: u8, mode: Mode) -> Result<usize, String> {
    let mut depth = 0usize;
    let mut i = start;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' | b'`' => {
                i = skip_string(b, i, mode)?;
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    match mode {
        Mode::Lenient => Ok(b.len()),
        Mode::Strict => Err(format!(
            "unbalanced {}{} at {start}",
            open as char, close as char
        )),
    }
}

fn skip_space(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The value of a string literal (escapes other than `\"`, `\'` and `\\`
/// are kept as written; metric names contain none).
fn string_value(lit: &str) -> String {
    let inner = &lit[1..lit.len().saturating_sub(1).max(1)];
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `__name__="x"` matchers inside a `{...}` group: exact names only.
fn names_in_matchers(group: &str, out: &mut BTreeSet<String>) {
    // The group was skipped whole before, so its strings are terminated.
    let skip_string = |b: &[u8], i: usize| skip_string(b, i, Mode::Lenient).unwrap_or(b.len());
    let b = group.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' | b'`' => {
                i = skip_string(b, i);
                continue;
            }
            c if is_ident_start(c) => {
                let start = i;
                while i < b.len() && is_ident(b[i]) {
                    i += 1;
                }
                if &group[start..i] != "__name__" {
                    continue;
                }
                let j = skip_space(b, i);
                // `=` but not `=~`, `!=` or `!~`.
                if j < b.len() && b[j] == b'=' && b.get(j + 1) != Some(&b'~') {
                    let k = skip_space(b, j + 1);
                    if k < b.len() && matches!(b[k], b'"' | b'\'' | b'`') {
                        let end = skip_string(b, k);
                        out.insert(string_value(&group[k..end]));
                        i = end;
                    }
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
}

/// Every series name an expression selects, leniently ([`Mode::Lenient`]):
/// for rules.
pub fn series_names(expr: &str) -> BTreeSet<String> {
    names(expr, Mode::Lenient).expect("the lenient reader accepts everything")
}

/// Every metric name an expression reads, strictly ([`Mode::Strict`]): for
/// dashboards' queries, template variables substituted first.
pub fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    names(expr, Mode::Strict)
}

/// Every series name an expression selects: metric names and recorded
/// series names (with colons), including `{__name__="x"}`. Function,
/// aggregation, keyword and label names are left out.
pub fn names(expr: &str, mode: Mode) -> Result<BTreeSet<String>, String> {
    let b = expr.as_bytes();
    if mode == Mode::Strict {
        // A `$` outside strings (where it may anchor a regex) is a template
        // variable, also inside `[]`, which the scan below skips whole.
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'"' | b'\'' | b'`' => i = skip_string(b, i, mode)?,
                b'$' => return Err(format!("unsubstituted template variable in {expr:?}")),
                _ => i += 1,
            }
        }
    }
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'"' | b'\'' | b'`' => i = skip_string(b, i, mode)?,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'{' => {
                let end = skip_group(b, i, b'{', b'}', mode)?;
                names_in_matchers(&expr[i..end], &mut names);
                i = end;
            }
            // Ranges, subqueries and Grafana's old [[var]]: no names inside.
            b'[' => i = skip_group(b, i, b'[', b']', mode)?,
            b'$' => {
                i += 1;
                if i < b.len() && b[i] == b'{' {
                    i = skip_group(b, i, b'{', b'}', mode)?;
                } else {
                    while i < b.len() && is_ident(b[i]) {
                        i += 1;
                    }
                }
            }
            // Numbers and durations: 1e9, 0x1f, 1.5, 5m, 1h30m.
            c if c.is_ascii_digit()
                || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) =>
            {
                while i < b.len() {
                    let d = b[i];
                    let exponent_sign = (d == b'+' || d == b'-')
                        && matches!(b[i - 1], b'e' | b'E')
                        && !expr[..i].ends_with("0x");
                    if d.is_ascii_alphanumeric() || d == b'.' || d == b'_' || exponent_sign {
                        i += 1;
                    } else {
                        break;
                    }
                }
            }
            c if is_ident_start(c) => {
                let start = i;
                while i < b.len() && is_ident(b[i]) {
                    i += 1;
                }
                let word = &expr[start..i];
                let lower = word.to_ascii_lowercase();
                let next = skip_space(b, i);
                // PromQL keywords and aggregations are case-insensitive.
                if LABEL_LIST_KEYWORDS.contains(&lower.as_str()) {
                    if next < b.len() && b[next] == b'(' {
                        i = skip_group(b, next, b'(', b')', mode)?;
                    }
                } else if b.get(next) == Some(&b'(')
                    || AGGREGATIONS.contains(&lower.as_str())
                    || KEYWORDS.contains(&lower.as_str())
                {
                    // A function or aggregation call, or a keyword.
                } else {
                    names.insert(word.to_string());
                }
            }
            _ => i += 1,
        }
    }
    Ok(names)
}

/// Sample names in a text exposition (/metrics), as PromQL sees them, and
/// for histograms and summaries also the series names their TYPE implies
/// (`_bucket`, `_sum`, `_count`), which exist once a sample is observed.
pub fn exposed_names(body: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (it.next(), it.next()) {
                let suffixes: &[&str] = match kind {
                    "histogram" => &["_bucket", "_sum", "_count"],
                    "summary" => &["", "_sum", "_count"],
                    _ => &[""],
                };
                names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_refuses_what_lenient_reads_past() {
        for (expr, lenient) in [
            ("rate(x[$__rate_interval])", &["x"][..]),
            ("x{a=~\"${target}\"} + $y", &["x"][..]),
            ("x[5m", &["x"][..]),
            ("x{a=\"b", &["x"][..]),
        ] {
            assert_eq!(series_names(expr), set(lenient), "{expr}");
            assert!(metric_names(expr).is_err(), "{expr}");
        }
        assert_eq!(metric_names("x{a=~\"b$\"}").unwrap(), set(&["x"]));
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_among_functions_operators_and_label_lists() {
        let e = "quantile_over_time(0.5, pathprobe:x:y[7d:1h]) \
                 * ignoring (flow, side) group_left (release) topk without (release) \
                 (1, pathprobe_probe_kernel_info{side=\"local\", release=~\"a.b\"}) > 1e+9 \
                 and on () up{job=\"pathprobe\"} offset 5m # a comment naming fake_metric\n\
                 or sum by (target) (rate(a_total[$__rate_interval])) / ${scale} \
                 unless {__name__=\"b_seconds\", target=\"$target\"} * Inf \
                 or histogram_quantile(0.9, sum by (le) (c_bucket{x=\"sum(d)\"})) \
                 OR SUM BY (a) (e) AND ON (b) Group_Left (c) f";
        assert_eq!(
            series_names(e),
            set(&[
                "a_total",
                "b_seconds",
                "c_bucket",
                "e",
                "f",
                "pathprobe:x:y",
                "pathprobe_probe_kernel_info",
                "up"
            ])
        );
    }

    #[test]
    fn exposition_names() {
        let body = "# HELP a_seconds x\n# TYPE a_seconds histogram\n\
                    a_seconds_bucket{le=\"1\"} 1\na_seconds_sum 1\na_seconds_count 1\n\
                    b{x=\"y z\"} 2\nc 3 1700000000\n";
        assert_eq!(
            exposed_names(body),
            set(&[
                "a_seconds_bucket",
                "a_seconds_count",
                "a_seconds_sum",
                "b",
                "c"
            ])
        );
    }
}
