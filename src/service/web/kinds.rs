//! What the status page shows for each probe kind: the card's headline
//! figures and the `/path` page's charts. The kind registry declares which
//! (`ProbeKind::headline`, `ProbeKind::charts`); this module draws each
//! figure and chart, and [`view_of`] asks the registry, so a new kind
//! changes nothing here.

use super::{fmt_bps, fmt_count, fmt_ms, fmt_pct};

use crate::kinds::{self, kind::Headline};
use crate::service::history::Point;

/// One figure of an entry: how to read it from a [`Point`] and print it.
pub(super) struct Figure {
    /// The series name on a chart, and the label beside a headline figure.
    pub name: &'static str,
    pub value: fn(&Point) -> f64,
    pub unit: fn(f64) -> String,
    /// Whether a rise is good news (throughput) or bad (latency): the
    /// colour of the change against the median.
    pub higher_is_better: bool,
}

/// One chart of the `/path` page.
pub(super) struct Chart {
    pub title: &'static str,
    /// Drawn in this order, in colours `s0`, `s1`, …
    pub series: &'static [Figure],
    /// Drawn instead when none of `series` has a point (a result that
    /// gives no per-direction figures).
    pub fallback: Option<Figure>,
}

/// A kind's page: what its card leads with and which charts its path
/// page draws (the CPU chart, common to all, comes after these).
pub(super) struct KindView {
    /// The card's figures. The first one is the trend: the sparkline,
    /// the change against the median, and the fleet and kernel tables
    /// follow it.
    pub headline: Vec<&'static Figure>,
    pub charts: Vec<&'static Chart>,
}

impl KindView {
    pub fn trend(&self) -> &'static Figure {
        self.headline.first().copied().unwrap_or(&THROUGHPUT)
    }
}

const THROUGHPUT: Figure = Figure {
    name: "throughput",
    value: |p| p.throughput,
    unit: fmt_bps,
    higher_is_better: true,
};
const SEND: Figure = Figure {
    name: "send",
    value: |p| p.send,
    unit: fmt_bps,
    higher_is_better: true,
};
const RECEIVE: Figure = Figure {
    name: "receive",
    value: |p| p.receive,
    unit: fmt_bps,
    higher_is_better: true,
};
const P50: Figure = lower("p50", |p| p.p50, fmt_latency);
const P99: Figure = lower("p99", |p| p.p99, fmt_latency);
const TPS: Figure = Figure {
    name: "transactions/s",
    value: |p| p.tps,
    unit: fmt_rate,
    higher_is_better: true,
};

const THROUGHPUT_CHART: Chart = Chart {
    title: "throughput per direction",
    series: &[SEND, RECEIVE],
    fallback: Some(THROUGHPUT),
};

/// A figure where less is better (retransmits, loss, latency).
const fn lower(name: &'static str, value: fn(&Point) -> f64, unit: fn(f64) -> String) -> Figure {
    Figure {
        name,
        value,
        unit,
        higher_is_better: false,
    }
}

/// A chart of `series`, with no fallback.
const fn chart_of(title: &'static str, series: &'static [Figure]) -> Chart {
    Chart {
        title,
        series,
        fallback: None,
    }
}

const RETRANSMITS_CHART: Chart = chart_of(
    "retransmits per probe",
    &[lower("retransmits", |p| p.retransmits, fmt_count)],
);
const RTT_CHART: Chart = chart_of("smoothed RTT", &[lower("RTT", |p| p.rtt, fmt_ms)]);
const LOSS_CHART: Chart = chart_of("loss", &[lower("loss", |p| p.loss, fmt_pct)]);
const JITTER_CHART: Chart = chart_of("jitter", &[lower("jitter", |p| p.jitter, fmt_ms)]);
const LATENCY_CHART: Chart = chart_of("transaction latency", &[P50, P99]);
const TPS_CHART: Chart = chart_of("transactions per second", &[TPS]);

/// How a headline figure the registry names is read and printed.
fn figure(h: Headline) -> &'static Figure {
    match h {
        Headline::ThroughputBitsPerSecond => &THROUGHPUT,
        Headline::LatencyP50Seconds => &P50,
        Headline::LatencyP99Seconds => &P99,
        Headline::TransactionsPerSecond => &TPS,
    }
}

/// How a chart the registry names is drawn.
fn chart(c: kinds::kind::Chart) -> &'static Chart {
    use kinds::kind::Chart as C;
    match c {
        C::ThroughputPerDirection => &THROUGHPUT_CHART,
        C::Retransmits => &RETRANSMITS_CHART,
        C::SmoothedRtt => &RTT_CHART,
        C::Loss => &LOSS_CHART,
        C::Jitter => &JITTER_CHART,
        C::TransactionLatency => &LATENCY_CHART,
        C::TransactionsPerSecond => &TPS_CHART,
    }
}

/// The page of `kind` (a module kind's name, as in the configuration), as
/// its kind declares it; a name the registry does not know (a result
/// recorded by another release) is drawn as throughput, as `tcp`.
pub(super) fn view_of(kind: &str) -> KindView {
    let k = kinds::registry::by_module_name(kind).map_or(kinds::registry::KINDS[0], |(k, _)| k);
    KindView {
        headline: k.headline().iter().map(|&h| figure(h)).collect(),
        charts: k.charts().iter().map(|&c| chart(c)).collect(),
    }
}

/// Transactions per second: "8120 /s", "12.4 k/s".
pub(super) fn fmt_rate(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v >= 1e6 {
        format!("{:.2} M/s", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1} k/s", v / 1e3)
    } else if v >= 100.0 {
        format!("{v:.0} /s")
    } else {
        format!("{v:.1} /s")
    }
}

/// A transaction's latency: in µs below a millisecond, where a LAN's and
/// a loopback's are ("12.3 µs", "410 µs", "2.64 ms").
pub(super) fn fmt_latency(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v == 0.0 {
        "0 µs".into()
    } else if v < 10e-6 {
        format!("{:.2} µs", v * 1e6)
    } else if v < 100e-6 {
        format!("{:.1} µs", v * 1e6)
    } else if v < 1e-3 {
        format!("{:.0} µs", v * 1e6)
    } else if v < 1.0 {
        format!("{:.2} ms", v * 1e3)
    } else {
        format!("{v:.2} s")
    }
}
