//! Reading values out of a text exposition (/metrics), the one way every
//! test does it.

/// One sample line: name, `{labels}` as written (or empty) and value.
/// `None` for comments, blank lines and lines that do not parse.
pub fn parse_sample(line: &str) -> Option<(&str, &str, f64)> {
    if line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let (name, rest) = line.split_at(name_end);
    let (labels, rest) = if rest.starts_with('{') {
        let b = rest.as_bytes();
        let (mut i, mut quoted) = (1, false);
        while i < b.len() && (quoted || b[i] != b'}') {
            match b[i] {
                b'\\' if quoted => i += 1,
                b'"' => quoted = !quoted,
                _ => {}
            }
            i += 1;
        }
        rest.split_at((i + 1).min(rest.len()))
    } else {
        ("", rest)
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some((name, labels, value))
}

/// Samples of `metric` whose labels contain every one of `labels` (each
/// written as in the exposition, e.g. `target="b"`).
pub fn samples<'a>(
    body: &'a str,
    metric: &'a str,
    labels: &'a [&'a str],
) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    body.lines()
        .filter_map(parse_sample)
        .filter(move |(name, l, _)| *name == metric && labels.iter().all(|w| l.contains(w)))
        .map(|(_, l, v)| (l, v))
}

/// The value of the first sample of `metric` with all of `labels`.
pub fn sample(body: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    samples(body, metric, labels).next().map(|(_, v)| v)
}

/// The sum over every sample of `metric` with all of `labels`; 0 if none.
pub fn sum(body: &str, metric: &str, labels: &[&str]) -> f64 {
    samples(body, metric, labels).map(|(_, v)| v).sum()
}

#[test]
fn samples_are_found_by_name_and_labels() {
    let body = "# TYPE a counter\na{x=\"1\",y=\"}\"} 2\na{x=\"2\"} 3\nab 7\nc 1.5\n";
    assert_eq!(sample(body, "a", &["x=\"2\""]), Some(3.0));
    assert_eq!(sample(body, "a", &[]), Some(2.0));
    assert_eq!(sample(body, "c", &[]), Some(1.5));
    assert_eq!(sample(body, "a", &["x=\"3\""]), None);
    assert_eq!(sum(body, "a", &[]), 5.0);
    assert_eq!(parse_sample("a{y=\"}\"} 2"), Some(("a", "{y=\"}\"}", 2.0)));
}
