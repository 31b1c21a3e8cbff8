//! What the status page shows for each probe kind: the card's headline
//! figures and the `/path` page's charts. This is the web module's only
//! match on a kind, so that a new kind (or the kind registry, once it
//! declares its page) changes one place: [`view_of`].

use super::{fmt_bps, fmt_count, fmt_ms, fmt_pct};

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
    pub headline: &'static [Figure],
    pub charts: &'static [Chart],
}

impl KindView {
    pub fn trend(&self) -> &'static Figure {
        &self.headline[0]
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
const P50: Figure = Figure {
    name: "p50",
    value: |p| p.p50,
    unit: fmt_latency,
    higher_is_better: false,
};
const P99: Figure = Figure {
    name: "p99",
    value: |p| p.p99,
    unit: fmt_latency,
    higher_is_better: false,
};
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

static TCP: KindView = KindView {
    headline: &[THROUGHPUT],
    charts: &[
        THROUGHPUT_CHART,
        Chart {
            title: "retransmits per probe",
            series: &[Figure {
                name: "retransmits",
                value: |p| p.retransmits,
                unit: fmt_count,
                higher_is_better: false,
            }],
            fallback: None,
        },
        Chart {
            title: "smoothed RTT",
            series: &[Figure {
                name: "RTT",
                value: |p| p.rtt,
                unit: fmt_ms,
                higher_is_better: false,
            }],
            fallback: None,
        },
    ],
};

static UDP: KindView = KindView {
    headline: &[THROUGHPUT],
    charts: &[
        THROUGHPUT_CHART,
        Chart {
            title: "loss",
            series: &[Figure {
                name: "loss",
                value: |p| p.loss,
                unit: fmt_pct,
                higher_is_better: false,
            }],
            fallback: None,
        },
        Chart {
            title: "jitter",
            series: &[Figure {
                name: "jitter",
                value: |p| p.jitter,
                unit: fmt_ms,
                higher_is_better: false,
            }],
            fallback: None,
        },
    ],
};

static RR: KindView = KindView {
    headline: &[P50, P99, TPS],
    charts: &[
        Chart {
            title: "transaction latency",
            series: &[P50, P99],
            fallback: None,
        },
        Chart {
            title: "transactions per second",
            series: &[TPS],
            fallback: None,
        },
    ],
};

/// The page of `kind` (a module kind's name, as in the configuration).
pub(super) fn view_of(kind: &str) -> &'static KindView {
    match kind {
        "tcp_rr" | "udp_rr" | "tcp_crr" => &RR,
        "udp" | "loopback_udp" | "iperf3_udp" => &UDP,
        // tcp, loopback_tcp, iperf3_tcp, and a kind this table does not
        // know yet: throughput is what every other kind reports.
        _ => &TCP,
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
