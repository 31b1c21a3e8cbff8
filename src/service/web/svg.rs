//! Charts drawn on the server as inline SVG: no script and no external
//! asset is needed to see them. Every label is escaped by the caller's
//! [`super::esc`].

use std::fmt::Write as _;

use super::esc;

/// One line of a chart: `(unix seconds, value)`, NaN values left out.
pub struct Series<'a> {
    pub name: &'a str,
    /// A CSS class giving its colour (`s0`..`s3`).
    pub class: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// A vertical marker: where a kernel release changed.
pub struct Marker {
    pub at: f64,
    pub label: String,
}

const W: f64 = 720.0;
const H: f64 = 150.0;
const LEFT: f64 = 64.0;
const BOTTOM: f64 = 20.0;
const TOP: f64 = 8.0;

/// A chart over `[from, to]`: the series as polylines (each point also a
/// dot, so one probe shows), failures as red ticks at the bottom, markers
/// as dashed verticals. `unit` formats the axis labels.
pub fn chart(
    title: &str,
    from: f64,
    to: f64,
    series: &[Series<'_>],
    failures: &[f64],
    markers: &[Marker],
    unit: fn(f64) -> String,
) -> String {
    let span = (to - from).max(1.0);
    let max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let top = if max > 0.0 { max * 1.1 } else { 1.0 };
    let x = |t: f64| LEFT + (t - from) / span * (W - LEFT - 4.0);
    let y = |v: f64| TOP + (1.0 - v / top) * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = write!(
        s,
        "<figure class=\"chart\"><figcaption>{}</figcaption>\
         <svg viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{}\">\
         <rect class=\"plot\" x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\"/>",
        esc(title),
        esc(title),
        W - LEFT - 4.0,
        H - TOP - BOTTOM
    );
    for frac in [0.0, 0.5, 1.0] {
        let v = top * frac;
        let _ = write!(
            s,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"axis\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - 4.0,
            LEFT - 4.0,
            y(v) + 4.0,
            esc(&unit(v)),
            y = y(v)
        );
    }
    let hours = span / 3600.0;
    let _ = write!(
        s,
        "<text class=\"axis\" x=\"{LEFT}\" y=\"{}\">{}</text><text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"end\">now</text>",
        H - 4.0,
        if hours >= 1.0 { format!("{hours:.0} h ago") } else { format!("{:.0} min ago", span / 60.0) },
        W - 4.0,
        H - 4.0
    );
    for m in markers {
        let mx = x(m.at);
        let _ = write!(
            s,
            "<g class=\"kmark\"><line x1=\"{mx:.1}\" x2=\"{mx:.1}\" y1=\"{TOP}\" y2=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{}\">{}</text><title>{}</title></g>",
            H - BOTTOM,
            mx + 3.0,
            TOP + 10.0,
            esc(&m.label),
            esc(&m.label)
        );
    }
    for f in failures {
        let fx = x(*f);
        let _ = write!(
            s,
            "<line class=\"failtick\" x1=\"{fx:.1}\" x2=\"{fx:.1}\" y1=\"{}\" y2=\"{}\"/>",
            H - BOTTOM - 8.0,
            H - BOTTOM
        );
    }
    for (i, se) in series.iter().enumerate() {
        let mut pts = String::new();
        let mut dots = String::new();
        for (t, v) in &se.points {
            let (px, py) = (x(*t), y(*v));
            let _ = write!(pts, "{px:.1},{py:.1} ");
            let _ = write!(dots, "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"1.6\"/>");
        }
        let _ = write!(
            s,
            "<g class=\"series {}\" data-name=\"{}\" data-points=\"{}\">\
             <polyline points=\"{}\"/>{dots}</g>\
             <text class=\"legend {}\" x=\"{}\" y=\"{}\">{}</text>",
            se.class,
            esc(se.name),
            se.points.len(),
            pts.trim_end(),
            se.class,
            LEFT + 6.0 + 150.0 * i as f64,
            TOP + 12.0,
            esc(se.name)
        );
    }
    s.push_str("</svg></figure>\n");
    s
}

/// A small line of throughput over `[from, to]` for an overview card.
pub fn sparkline(from: f64, to: f64, points: &[(f64, f64)], failures: &[f64]) -> String {
    const SW: f64 = 240.0;
    const SH: f64 = 40.0;
    let span = (to - from).max(1.0);
    let max = points.iter().map(|p| p.1).fold(0.0, f64::max);
    let top = if max > 0.0 { max * 1.1 } else { 1.0 };
    let mut pts = String::new();
    for (t, v) in points {
        let _ = write!(
            pts,
            "{:.1},{:.1} ",
            (t - from) / span * SW,
            2.0 + (1.0 - v / top) * (SH - 4.0)
        );
    }
    let mut s = format!(
        "<svg class=\"spark\" viewBox=\"0 0 {SW} {SH}\" width=\"{SW}\" height=\"{SH}\" data-points=\"{}\">\
         <rect class=\"plot\" width=\"{SW}\" height=\"{SH}\"/><polyline points=\"{}\"/>",
        points.len(),
        pts.trim_end()
    );
    for f in failures {
        let fx = (f - from) / span * SW;
        let _ = write!(
            s,
            "<line class=\"failtick\" x1=\"{fx:.1}\" x2=\"{fx:.1}\" y1=\"{}\" y2=\"{SH}\"/>",
            SH - 8.0
        );
    }
    s.push_str("</svg>");
    s
}
