//! Charts drawn on the server as inline SVG: no script and no external
//! asset is needed to see them. Built with maud, which escapes every
//! label (a kernel release or a name from a peer) as it is spliced in.

use maud::{html, Markup};

/// One line of a chart: `(unix seconds, value)`, NaN values left out.
pub struct Series<'a> {
    pub name: &'a str,
    /// A CSS class giving its colour (`s0`..`s3`).
    pub class: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// A vertical marker: where a kernel release changed.
#[derive(Clone)]
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
) -> Markup {
    let span = (to - from).max(1.0);
    let max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let top = if max > 0.0 { max * 1.1 } else { 1.0 };
    let x = |t: f64| LEFT + (t - from) / span * (W - LEFT - 4.0);
    let y = |v: f64| TOP + (1.0 - v / top) * (H - TOP - BOTTOM);
    let f1 = |v: f64| format!("{v:.1}");
    html! {
        figure class="chart" {
            figcaption { (title) }
            svg viewBox=(format!("0 0 {W} {H}")) width=(W) height=(H) role="img" aria-label=(title) {
                rect class="plot" x=(LEFT) y=(TOP) width=(W - LEFT - 4.0) height=(H - TOP - BOTTOM) {}
                @for frac in [0.0, 0.5, 1.0] {
                    @let v = top * frac;
                    line class="grid" x1=(LEFT) x2=(W - 4.0) y1=(f1(y(v))) y2=(f1(y(v))) {}
                    text class="axis" x=(LEFT - 4.0) y=(f1(y(v) + 4.0)) text-anchor="end" { (unit(v)) }
                }
                text class="axis" x=(LEFT) y=(H - 4.0) {
                    (super::span_words(span)) " ago"
                }
                text class="axis" x=(W - 4.0) y=(H - 4.0) text-anchor="end" { "now" }
                @for m in markers {
                    @let mx = x(m.at);
                    g class="kmark" {
                        line x1=(f1(mx)) x2=(f1(mx)) y1=(TOP) y2=(H - BOTTOM) {}
                        text x=(f1(mx + 3.0)) y=(TOP + 10.0) { (m.label) }
                        title { (m.label) }
                    }
                }
                @for f in failures {
                    @let fx = f1(x(*f));
                    line class="failtick" x1=(fx) x2=(fx) y1=(H - BOTTOM - 8.0) y2=(H - BOTTOM) {}
                }
                @for (i, se) in series.iter().enumerate() {
                    @let pts: Vec<String> = se.points.iter().map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v))).collect();
                    g class=(format!("series {}", se.class)) data-name=(se.name) data-points=(se.points.len()) {
                        polyline points=(pts.join(" ")) {}
                        @for (t, v) in &se.points {
                            circle cx=(f1(x(*t))) cy=(f1(y(*v))) r="1.6" {}
                        }
                    }
                    text class=(format!("legend {}", se.class)) x=(LEFT + 6.0 + 150.0 * i as f64) y=(TOP + 12.0) { (se.name) }
                }
            }
        }
        "\n"
    }
}

/// A small line of the trend figure over `[from, to]` for an overview
/// card.
pub fn sparkline(from: f64, to: f64, points: &[(f64, f64)], failures: &[f64]) -> Markup {
    const SW: f64 = 240.0;
    const SH: f64 = 40.0;
    let span = (to - from).max(1.0);
    let max = points.iter().map(|p| p.1).fold(0.0, f64::max);
    let top = if max > 0.0 { max * 1.1 } else { 1.0 };
    let pts: Vec<String> = points
        .iter()
        .map(|(t, v)| {
            format!(
                "{:.1},{:.1}",
                (t - from) / span * SW,
                2.0 + (1.0 - v / top) * (SH - 4.0)
            )
        })
        .collect();
    html! {
        svg class="spark" viewBox=(format!("0 0 {SW} {SH}")) width=(SW) height=(SH) data-points=(points.len()) {
            rect class="plot" width=(SW) height=(SH) {}
            polyline points=(pts.join(" ")) {}
            @for f in failures {
                @let fx = format!("{:.1}", (f - from) / span * SW);
                line class="failtick" x1=(fx) x2=(fx) y1=(SH - 8.0) y2=(SH) {}
            }
        }
    }
}
