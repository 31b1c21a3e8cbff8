//! Step detection on one path's own recent probes: did the
//! latest few probes move away from the ones before them, and what changed
//! on either end when they did.
//!
//! The last [`RECENT`] probes are tested against a baseline of up to
//! [`MAX_BEFORE`] before them (an hour of 1-minute probes). It fires only
//! when a two-sided Mann-Whitney rank test of them against the latest
//! [`RANK_BEFORE`] of the baseline is significant ([`MAX_P`]; exact, every
//! split of the pooled probes counted, at most C(17, 5) = 6188), *and* the
//! medians differ by a real amount ([`Figure::moved`]), *and* the recent
//! median lies beyond all but one in [`BEYOND_PER`] of the baseline's
//! probes (at least one): ranks make it deaf to one outlier of a busy
//! host, medians to a few, the hour's range to a loaded share of its
//! probes, and the effect size keeps a small but consistent drift from
//! reading as a step. With [`MIN_BEFORE`]
//! probes of baseline, a step is found at the [`RECENT`]th probe after it,
//! whatever history came before: the baseline is the path's own, not a
//! 7-day one. After a step the figure's baseline starts again at the step,
//! so one step is reported once.
//!
//! When it fires, the step is put down to the fingerprint changes of either
//! end between the last probe before it and the first after it (see
//! `crate::protocol::fingerprint`), and carries the verdict most probes
//! after it gave, with that verdict's advice. No I/O, no clock: time is
//! the probes' own.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::protocol::fingerprint::{setting, HostFingerprint, SettingChange};

/// Probes tested against the ones before: a step is found at the 4th
/// probe after it (within the 5 the issue asks for); 3 let two dips of a
/// busy host in a row read as a step.
pub const RECENT: usize = 5;
/// Fewest probes before them: complete separation of 4 against 5 has an
/// exact two-sided p of 2/126 = 0.016, under [`MAX_P`].
pub const MIN_BEFORE: usize = 5;
/// Most probes of baseline kept: an hour at the shipped 1-minute interval.
/// A path loaded now and then shows how often within the hour; 12 probes
/// (a quarter hour, the first rule) held too few loaded ones, so that five
/// loaded probes in a row after a quiet quarter hour read as a step on a
/// recorded healthy day (docs/DIAGNOSIS.md, "A recorded healthy day").
pub const MAX_BEFORE: usize = 60;
/// The latest baseline probes the rank test takes: the exact test counts
/// C(RECENT + RANK_BEFORE, RECENT) splits, and older probes add little to
/// it that the baseline's range does not already say.
pub const RANK_BEFORE: usize = 12;
/// One baseline probe in this many (rounded down, at least one) may lie at
/// or beyond the recent median: up to 23 probes that is one, the first
/// rule; an hour of 60 allows 5, a share a busy host's loaded minutes may
/// have without the path having moved.
pub const BEYOND_PER: usize = 12;
/// Largest two-sided p-value that counts as a step.
pub const MAX_P: f64 = 0.05;
/// Relative move of the median that counts (throughput, RTT, latency).
pub const MIN_RELATIVE: f64 = 0.25;
/// Robust standard deviations of the baseline a move must also reach.
pub const NOISE_MULTIPLE: f64 = 3.0;
/// Absolute move of the loss ratio that counts (one percentage point).
pub const MIN_LOSS: f64 = 0.01;
/// Probes whose verdicts make a path's stable verdict.
pub const VERDICT_PROBES: usize = 5;

/// A figure the detector watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    /// Receiver goodput, bit/s.
    Throughput,
    /// UDP loss ratio.
    Loss,
    /// TCP smoothed RTT, seconds.
    Rtt,
    /// Request/response latency p50, seconds.
    Latency,
}

impl Figure {
    pub const ALL: [Figure; 4] = [
        Figure::Throughput,
        Figure::Loss,
        Figure::Rtt,
        Figure::Latency,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Figure::Throughput => "throughput",
            Figure::Loss => "loss",
            Figure::Rtt => "rtt",
            Figure::Latency => "latency",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Whether medians `before` → `after` are a move worth reporting.
    pub fn moved(self, before: f64, after: f64) -> bool {
        self.moved_by(before, after, 1.0) != 0
    }

    /// The sign of the move `before` → `after` when it is at least
    /// `scale` times the threshold (1 up, -1 down), else 0.
    fn moved_by(self, before: f64, after: f64, scale: f64) -> i8 {
        let (delta, min) = match self {
            Figure::Loss => (after - before, MIN_LOSS),
            _ if before > 0.0 => ((after - before) / before, MIN_RELATIVE),
            _ => return 0,
        };
        if delta.abs() < min * scale {
            0
        } else if delta > 0.0 {
            1
        } else {
            -1
        }
    }

    /// A value in its unit, for a person: "474.5 Mbit/s", "5.20 ms", "1.20%".
    pub fn format(self, v: f64) -> String {
        match self {
            Figure::Throughput => {
                let (d, u) = crate::units::bit_rate_unit(v);
                format!("{:.1} {u}", v / d)
            }
            Figure::Loss => format!("{:.2}%", v * 100.0),
            Figure::Rtt | Figure::Latency => {
                if v < 1e-3 {
                    format!("{:.0} µs", v * 1e6)
                } else {
                    format!("{:.2} ms", v * 1e3)
                }
            }
        }
    }
}

/// Which end a setting changed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    Local,
    Remote,
}

/// One finished probe as the detector sees it.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// Unix seconds the probe started.
    pub time: f64,
    /// Indexed by [`Figure`]; `None` where the kind has no such figure.
    pub figures: [Option<f64>; 4],
    pub local: Option<Arc<HostFingerprint>>,
    pub remote: Option<Arc<HostFingerprint>>,
    pub verdict: Option<Arc<str>>,
    pub advice: Option<Arc<str>>,
    /// The fingerprints hold only some of the settings: a probe read back
    /// from the history after a restart, which keeps each end's kernel
    /// release and nothing else. A setting it does not hold is unknown,
    /// not absent, so only settings both probes hold are compared.
    pub partial: bool,
}

/// The bytes the changed settings may take in [`Step::describe`]'s
/// sentence, shared between the two ends: it is logged and kept, and cut
/// at 1 KiB there.
pub const DESCRIBE_CHANGES: usize = 640;

/// A detected step, with what changed around it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub figure: Figure,
    /// Unix seconds of the first probe after the step.
    pub since_seconds: f64,
    /// Unix seconds of the probe that made it significant.
    pub detected_seconds: f64,
    pub before: f64,
    pub after: f64,
    /// after / before (NaN-free: 0 when before is 0).
    pub ratio: f64,
    pub p_value: f64,
    /// Probes after the step when it was found.
    pub probes_after: usize,
    /// Settings that changed between the last probe before and the first
    /// after, on either end.
    pub changes: Vec<(End, SettingChange)>,
    /// Kernel releases before and after, of the end whose kernel changed
    /// (this host's when both did, the remote's when neither did).
    pub release_before: Option<String>,
    pub release_after: Option<String>,
    pub verdict: Option<String>,
    pub advice: Option<String>,
}

impl Step {
    /// Whether the figure got worse (throughput down, the others up).
    pub fn worse(&self) -> bool {
        match self.figure {
            Figure::Throughput => self.after < self.before,
            _ => self.after > self.before,
        }
    }

    /// The settings that changed, one end at a time and this host's
    /// first: "local: net.ipv4.tcp_wmem … → …; remote: kernel 2.6.78 →
    /// 6.18.44"; "no setting changed". Each end has its own share of
    /// `max` bytes (the whole of it when only one end changed); an end
    /// whose changes do not fit its share is summarised ("remote: 21
    /// settings changed"), so that a peer that churns its settings cannot
    /// push this host's own change out of a label or log line cut short.
    pub fn changes_text(&self, local: &str, remote: &str, max: usize) -> String {
        let ends: Vec<(&str, Vec<String>)> = [(End::Local, local), (End::Remote, remote)]
            .into_iter()
            .map(|(end, name)| {
                let c: Vec<String> = self
                    .changes
                    .iter()
                    .filter(|(e, _)| *e == end)
                    .map(|(_, c)| c.describe())
                    .collect();
                (name, c)
            })
            .filter(|(_, c)| !c.is_empty())
            .collect();
        if ends.is_empty() {
            return "no setting changed on either end".into();
        }
        // "; " between the ends comes out of the shares.
        let share = (max / ends.len()).saturating_sub(2);
        ends.iter()
            .map(|(name, c)| {
                let whole = format!("{name}: {}", c.join(", "));
                if whole.len() <= share {
                    whole
                } else if c.len() == 1 {
                    format!("{name}: 1 setting changed")
                } else {
                    format!("{name}: {} settings changed", c.len())
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// One line for logs, the page and alerts: "474.5 Mbit/s → 259.9
    /// Mbit/s (−45%); remote: kernel …; verdict send_buffer; advice: …".
    pub fn describe(&self, local: &str, remote: &str) -> String {
        let pct = (self.ratio - 1.0) * 100.0;
        let mut s = format!(
            "{} {} → {} ({}{:.0}%); {}",
            self.figure.as_str(),
            self.figure.format(self.before),
            self.figure.format(self.after),
            if pct < 0.0 { "−" } else { "+" },
            pct.abs(),
            self.changes_text(local, remote, DESCRIBE_CHANGES)
        );
        if let Some(v) = &self.verdict {
            s.push_str(&format!("; verdict {v}"));
        }
        if let Some(a) = &self.advice {
            s.push_str(&format!("; advice: {a}"));
        }
        s
    }
}

/// How near a path's latest probes came to a step of one figure: a step
/// needs `median_move >= 1`, `weakest_move >= 1` and `p_value <= MAX_P`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Margin {
    /// How far the recent median moved from the baseline's, in units of
    /// the threshold it must reach (the larger of the figure's minimum
    /// and [`NOISE_MULTIPLE`] robust sds of the baseline).
    pub median_move: f64,
    /// The recent probe that moved least the median's way, in units of
    /// three quarters of that threshold (negative: it moved the other way).
    pub weakest_move: f64,
    /// The rank test's two-sided p.
    pub p_value: f64,
    /// Baseline probes at or beyond the recent median, on the side it
    /// moved to, and how many of them a step may have.
    pub beyond: usize,
    pub allowed_beyond: usize,
}

/// The baseline and recent probes of one figure, as [`Detector::test`]
/// and [`Detector::margin`] read them.
struct Split<'a> {
    before: Vec<&'a Observation>,
    recent: Vec<&'a Observation>,
    b: Vec<f64>,
    r: Vec<f64>,
    mb: f64,
    mr: f64,
    scale: f64,
}

/// How much baseline a [`Detector`] keeps and how many of its probes may
/// lie beyond a step's recent median. The shipped one is
/// [`Baseline::HOUR`]; others exist so that a replay can show what the
/// constants change (the first rule was 12 probes, one in 12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Baseline {
    /// Most probes of baseline kept (at least [`MIN_BEFORE`]).
    pub max_probes: usize,
    /// One baseline probe in this many may lie at or beyond the recent
    /// median (at least one).
    pub beyond_per: usize,
}

impl Baseline {
    pub const HOUR: Baseline = Baseline {
        max_probes: MAX_BEFORE,
        beyond_per: BEYOND_PER,
    };

    /// Baseline probes of `n` that may lie at or beyond the recent median.
    pub fn allowed_beyond(&self, n: usize) -> usize {
        n.checked_div(self.beyond_per).unwrap_or(0).max(1)
    }
}

impl Default for Baseline {
    fn default() -> Self {
        Baseline::HOUR
    }
}

impl Split<'_> {
    /// The latest [`RANK_BEFORE`] of the baseline, for the rank test.
    fn rank_baseline(&self) -> &[f64] {
        &self.b[self.b.len().saturating_sub(RANK_BEFORE)..]
    }

    /// Baseline probes at or beyond the recent median: at or below it for
    /// a move down (`sign` < 0), at or above it for a move up.
    fn beyond(&self, sign: i8) -> usize {
        self.b
            .iter()
            .filter(|v| {
                if sign < 0 {
                    **v <= self.mr
                } else {
                    **v >= self.mr
                }
            })
            .count()
    }
}

/// One path's recent probes and its stable verdict.
#[derive(Debug, Clone, Default)]
pub struct Detector {
    window: VecDeque<Observation>,
    baseline: Baseline,
}

impl Detector {
    /// A detector with another baseline than the shipped one, for replays
    /// that compare rules.
    pub fn with_baseline(baseline: Baseline) -> Detector {
        Detector {
            window: VecDeque::new(),
            baseline: Baseline {
                max_probes: baseline.max_probes.max(MIN_BEFORE),
                ..baseline
            },
        }
    }

    /// Adds a probe; returns the steps it completes (at most one a figure).
    pub fn observe(&mut self, obs: Observation) -> Vec<Step> {
        if !obs.time.is_finite() {
            return Vec::new();
        }
        self.window.push_back(obs);
        while self.window.len() > self.baseline.max_probes + RECENT {
            self.window.pop_front();
        }
        let mut steps = Vec::new();
        for figure in Figure::ALL {
            if let Some(step) = self.test(figure) {
                // The baseline starts again at the step: the probes before
                // it say nothing about the level now.
                let since = step.since_seconds;
                for o in self.window.iter_mut().filter(|o| o.time < since) {
                    o.figures[figure.index()] = None;
                }
                steps.push(step);
            }
        }
        steps
    }

    /// The verdict most of the last [`VERDICT_PROBES`] probes gave (ties to
    /// the newer), with the newest advice given with it: one outlier on a
    /// loaded host does not flip it.
    pub fn stable_verdict(&self) -> Option<(Arc<str>, Option<Arc<str>>)> {
        let last: Vec<&Observation> = self.window.iter().rev().take(VERDICT_PROBES).collect();
        let mut best: Option<(&Arc<str>, usize)> = None;
        for o in &last {
            let Some(v) = &o.verdict else { continue };
            let n = last
                .iter()
                .filter(|p| p.verdict.as_ref() == Some(v))
                .count();
            if best.is_none_or(|(_, m)| n > m) {
                best = Some((v, n));
            }
        }
        let (v, _) = best?;
        let advice = last
            .iter()
            .find(|o| o.verdict.as_ref() == Some(v))
            .and_then(|o| o.advice.clone());
        Some((v.clone(), advice))
    }

    /// How near the latest probes came to a step of `figure`, by each of
    /// the three tests [`Detector::observe`] makes (`None` with too few
    /// probes): a replay of a recorded day reports how much room the
    /// detector left on it.
    pub fn margin(&self, figure: Figure) -> Option<Margin> {
        let w = self.split(figure)?;
        let threshold = |v: f64, scale: f64| {
            let delta = match figure {
                Figure::Loss => v - w.mb,
                _ => (v - w.mb) / w.mb,
            };
            let min = match figure {
                Figure::Loss => MIN_LOSS,
                _ => MIN_RELATIVE,
            };
            delta / (min * scale)
        };
        let median_move = threshold(w.mr, w.scale);
        let weakest_move =
            w.r.iter()
                .map(|v| threshold(*v, 0.75 * w.scale) * median_move.signum())
                .fold(f64::INFINITY, f64::min);
        let sign = if median_move < 0.0 { -1 } else { 1 };
        Some(Margin {
            median_move: median_move.abs(),
            weakest_move,
            p_value: mann_whitney_p(&w.r, w.rank_baseline()),
            beyond: w.beyond(sign),
            allowed_beyond: self.baseline.allowed_beyond(w.b.len()),
        })
    }

    /// The probes with `figure` split into the baseline and the recent
    /// ones, their medians and the noise scale of the threshold.
    fn split(&self, figure: Figure) -> Option<Split<'_>> {
        let i = figure.index();
        let all: Vec<&Observation> = self
            .window
            .iter()
            .filter(|o| o.figures[i].is_some())
            .collect();
        if all.len() < MIN_BEFORE + RECENT {
            return None;
        }
        let (before, recent) = all.split_at(all.len() - RECENT);
        let before = before[before.len().saturating_sub(self.baseline.max_probes)..].to_vec();
        let recent = recent.to_vec();
        let value = |o: &&Observation| o.figures[i].unwrap_or(f64::NAN);
        let b: Vec<f64> = before.iter().map(value).collect();
        let r: Vec<f64> = recent.iter().map(value).collect();
        let (mb, mr) = (median(&b), median(&r));
        // The move must beat the path's own noise too: a busy host's
        // spread (its robust sd, 1.4826 × the median absolute deviation)
        // times [`NOISE_MULTIPLE`], when that is more than the threshold.
        let mad = median(&b.iter().map(|v| (v - mb).abs()).collect::<Vec<_>>());
        let scale = match figure {
            Figure::Loss => 1.0,
            _ if mb > 0.0 => (NOISE_MULTIPLE * 1.4826 * mad / mb / MIN_RELATIVE).max(1.0),
            _ => return None,
        };
        Some(Split {
            before,
            recent,
            b,
            r,
            mb,
            mr,
            scale,
        })
    }

    fn test(&self, figure: Figure) -> Option<Step> {
        let i = figure.index();
        let value = |o: &&Observation| o.figures[i].unwrap_or(f64::NAN);
        let split = self.split(figure)?;
        let Split {
            before,
            recent,
            b,
            r,
            mb,
            mr,
            scale,
        } = &split;
        let (mb, mr, scale) = (*mb, *mr, *scale);
        let sign = figure.moved_by(mb, mr, scale);
        if sign == 0 {
            return None;
        }
        // The recent median must also lie beyond all but a few of the
        // baseline's probes: a busy host loads a minority of its probes,
        // which the MAD does not see, and five loaded ones in a row (the
        // recorded healthy day had such runs: docs/DIAGNOSIS.md) are no
        // step while the hour holds more probes as low than its share of
        // outliers. That share (one in [`BEYOND_PER`], at least one) keeps
        // a few outliers in the baseline from delaying a real step.
        if split.beyond(sign) > self.baseline.allowed_beyond(b.len()) {
            return None;
        }
        // Every recent probe moved the same way, by at least three
        // quarters of it: two or three dips of a busy host in a row move
        // the median but leave another probe at the old level.
        if r.iter()
            .any(|v| figure.moved_by(mb, *v, 0.75 * scale) != sign)
        {
            return None;
        }
        let p = mann_whitney_p(r, split.rank_baseline());
        if p > MAX_P {
            return None;
        }
        // The step is at the first recent probe nearer the new level.
        let first = recent
            .iter()
            .position(|o| (value(o) - mr).abs() < (value(o) - mb).abs())
            .unwrap_or(0);
        let after = &recent[first..];
        let last_before = recent[..first].last().or(before.last()).copied()?;
        let first_after = after[0];
        let changes = |end: End| -> Vec<(End, SettingChange)> {
            let pick = |o: &Observation| match end {
                End::Local => o.local.clone(),
                End::Remote => o.remote.clone(),
            };
            let partial = last_before.partial || first_after.partial;
            match (pick(last_before), pick(first_after)) {
                (Some(x), Some(y)) => x
                    .changes(&y)
                    .into_iter()
                    .filter(|c| !partial || (c.before.is_some() && c.after.is_some()))
                    .map(|c| (end, c))
                    .collect(),
                _ => Vec::new(),
            }
        };
        let mut all_changes = changes(End::Remote);
        all_changes.extend(changes(End::Local));
        let kernel = |end: End| {
            all_changes
                .iter()
                .find(|(e, c)| *e == end && c.setting == setting::KERNEL)
                .map(|(_, c)| (c.before.clone(), c.after.clone()))
        };
        // This host's own kernel change first: a peer's (which may be
        // made up) must not hide it.
        let (release_before, release_after) = kernel(End::Local)
            .or_else(|| kernel(End::Remote))
            .unwrap_or_else(|| {
                let k = first_after
                    .remote
                    .as_ref()
                    .and_then(|f| f.get(setting::KERNEL).map(str::to_string));
                (k.clone(), k)
            });
        // The verdict most probes after the step gave, and its advice.
        let mut verdict: Option<(&Arc<str>, usize)> = None;
        for o in after {
            let Some(v) = &o.verdict else { continue };
            let n = after
                .iter()
                .filter(|p| p.verdict.as_ref() == Some(v))
                .count();
            if verdict.is_none_or(|(_, m)| n > m) {
                verdict = Some((v, n));
            }
        }
        let advice = verdict.and_then(|(v, _)| {
            after
                .iter()
                .rev()
                .find(|o| o.verdict.as_ref() == Some(v))
                .and_then(|o| o.advice.as_ref().map(|a| a.to_string()))
        });
        Some(Step {
            figure,
            since_seconds: first_after.time,
            detected_seconds: recent[recent.len() - 1].time,
            before: mb,
            after: mr,
            ratio: if mb > 0.0 { mr / mb } else { 0.0 },
            p_value: p,
            probes_after: after.len(),
            changes: all_changes,
            release_before,
            release_after,
            verdict: verdict.map(|(v, _)| v.to_string()),
            advice,
        })
    }
}

/// The median; NaN for none.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Mann-Whitney U of `a` against `b`: pairs with a above b, ties half.
fn u_statistic(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .map(|x| {
            b.iter()
                .map(|y| match x.total_cmp(y) {
                    std::cmp::Ordering::Greater => 1.0,
                    std::cmp::Ordering::Equal => 0.5,
                    std::cmp::Ordering::Less => 0.0,
                })
                .sum::<f64>()
        })
        .sum()
}

/// Exact two-sided p-value of the rank test of `a` against `b`: the share
/// of all ways to deal the pooled values into groups of their sizes whose
/// U is at least as far from its mean as the observed. Ties are kept as
/// they are (a permutation test), so a run of equal figures is never
/// significant. Only for small groups: `a` of [`RECENT`], `b` of at most
/// [`RANK_BEFORE`].
pub fn mann_whitney_p(a: &[f64], b: &[f64]) -> f64 {
    let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    let (n, m) = (a.len(), b.len());
    if n == 0 || m == 0 || n + m > 24 {
        return 1.0;
    }
    let mean = (n * m) as f64 / 2.0;
    let observed = (u_statistic(a, b) - mean).abs();
    let (mut extreme, mut total) = (0u64, 0u64);
    // Every n-subset of the pooled indices, by a bitmask walk (Gosper's hack).
    let mut mask: u32 = (1 << n) - 1;
    let limit: u32 = 1 << (n + m);
    while mask < limit {
        let (mut x, mut y) = (Vec::with_capacity(n), Vec::with_capacity(m));
        for (k, v) in pooled.iter().enumerate() {
            if mask & (1 << k) != 0 {
                x.push(*v);
            } else {
                y.push(*v);
            }
        }
        total += 1;
        if (u_statistic(&x, &y) - mean).abs() >= observed - 1e-9 {
            extreme += 1;
        }
        let c = mask & mask.wrapping_neg();
        let r = mask + c;
        mask = (((r ^ mask) >> 2) / c) | r;
    }
    extreme as f64 / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(kernel: &str, wmem: &str) -> Option<Arc<HostFingerprint>> {
        Some(Arc::new(HostFingerprint {
            settings: [
                ("kernel".to_string(), kernel.to_string()),
                ("net.ipv4.tcp_wmem".to_string(), wmem.to_string()),
            ]
            .into(),
        }))
    }

    fn obs(t: f64, bits: f64, remote: Option<Arc<HostFingerprint>>, verdict: &str) -> Observation {
        Observation {
            time: t,
            figures: [Some(bits), None, Some(0.005), None],
            local: fp("6.1.0", "4096 16384 4194304"),
            remote,
            verdict: Some(Arc::from(verdict)),
            advice: (verdict == "send_buffer")
                .then(|| Arc::from("raise net.ipv4.tcp_wmem max on the sender")),
            partial: false,
        }
    }

    /// A small deterministic generator (xorshift), so the noise tests
    /// replay exactly.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
        /// Roughly normal, mean 0, sd 1 (sum of 12 uniforms).
        fn normal(&mut self) -> f64 {
            (0..12).map(|_| self.next()).sum::<f64>() - 6.0
        }
    }

    #[test]
    fn exact_p_values_match_the_tables() {
        // 3 all above 5: 1 of C(8,3) = 56 splits each way.
        let p = mann_whitney_p(&[10.0, 11.0, 12.0], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert!((p - 2.0 / 56.0).abs() < 1e-12, "{p}");
        // Interleaved: nothing.
        let p = mann_whitney_p(&[1.0, 3.0, 5.0], &[2.0, 4.0, 6.0, 0.0, 7.0]);
        assert!(p > 0.5, "{p}");
        // All ties: never significant.
        assert_eq!(mann_whitney_p(&[1.0; 3], &[1.0; 8]), 1.0);
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
    }

    #[test]
    fn the_seed_step_is_found_at_the_fifth_probe_and_attributed() {
        let old = fp("2.6.78", "4096 16384 4194304");
        let new = fp("6.18.44", "4096 16384 196608");
        let mut d = Detector::default();
        let levels = [474e6, 470e6, 478e6, 471e6, 476e6, 473e6];
        for (k, v) in levels.iter().enumerate() {
            assert!(d
                .observe(obs(60.0 * k as f64, *v, old.clone(), "network"))
                .is_empty());
        }
        let mut found = None;
        for (k, v) in [262e6, 258e6, 260e6, 259e6, 261e6, 260e6]
            .iter()
            .enumerate()
        {
            let t = 60.0 * (6 + k) as f64;
            let steps = d.observe(obs(t, *v, new.clone(), "send_buffer"));
            if let Some(s) = steps.into_iter().find(|s| s.figure == Figure::Throughput) {
                found = Some((k + 1, s));
                break;
            }
        }
        let (n, s) = found.expect("no step");
        assert_eq!(n, 5, "found after {n} probes");
        assert_eq!(s.since_seconds, 360.0);
        assert_eq!(s.release_before.as_deref(), Some("2.6.78"));
        assert_eq!(s.release_after.as_deref(), Some("6.18.44"));
        assert!((s.ratio - 260.0 / 473.5).abs() < 0.01, "{}", s.ratio);
        assert!(s.worse());
        assert_eq!(s.verdict.as_deref(), Some("send_buffer"));
        let text = s.describe("a", "b");
        assert!(
            text.contains("throughput 473.5 Mbit/s → 260.0 Mbit/s (−45%)"),
            "{text}"
        );
        assert!(text.contains("b: kernel 2.6.78 → 6.18.44, net.ipv4.tcp_wmem 4096 16384 4194304 → 4096 16384 196608"), "{text}");
        assert!(
            text.contains("verdict send_buffer; advice: raise net.ipv4.tcp_wmem"),
            "{text}"
        );
        assert!(
            !text.contains("a: "),
            "the local end changed nothing: {text}"
        );
        // The RTT did not move: no step for it. And reported once: the
        // next probes at the new level find nothing.
        for k in 0..10 {
            let steps = d.observe(obs(
                600.0 + 60.0 * k as f64,
                260e6,
                new.clone(),
                "send_buffer",
            ));
            assert!(steps.is_empty(), "{steps:?}");
        }
    }

    #[test]
    fn quiet_on_a_day_of_a_busy_hosts_noise() {
        // Five days of 1-minute probes: 12% spread, and one probe in 20
        // cut by up to half by a busy host; kernels unchanged.
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut d = Detector::default();
        let f = fp("6.1.0", "4096 16384 4194304");
        let mut steps = 0;
        for k in 0..5 * 1440 {
            let mut v = 900e6 * (1.0 + 0.12 * rng.normal());
            if rng.next() < 0.05 {
                v *= 0.5 + 0.5 * rng.next();
            }
            let found = d.observe(obs(60.0 * k as f64, v.max(1e6), f.clone(), "network"));
            steps += found.len();
        }
        assert_eq!(steps, 0);
    }

    /// An hour of a path whose every 4th probe in its first 48 minutes
    /// was loaded (×0.5), a quiet quarter hour, then `run` at `level`
    /// times the quiet level; returns the steps, each with the probe of
    /// the run that found it (1 = its first).
    fn often_loaded_then(d: &mut Detector, level: f64, run: usize) -> Vec<(usize, Step)> {
        let mut rng = Rng(0x5eed_1234);
        let f = fp("6.1.0", "4096 16384 4194304");
        let mut found = Vec::new();
        for k in 0..60 + run {
            let loaded = k >= 60 || (k < 48 && k % 4 == 3);
            let factor = if k >= 60 {
                level
            } else if loaded {
                0.5
            } else {
                1.0
            };
            let v = 190e6 * factor * (1.0 + 0.02 * rng.normal());
            for s in d.observe(obs(60.0 * k as f64, v, f.clone(), "network")) {
                found.push((k + 1 - 60, s));
            }
        }
        found
    }

    #[test]
    fn a_run_of_loaded_probes_on_a_path_often_loaded_is_no_step() {
        // The recorded healthy day's false steps in small: five loaded
        // probes after a quiet quarter hour are how this path is, as the
        // hour's 12 loaded probes show.
        let steps = often_loaded_then(&mut Detector::default(), 0.5, 5);
        assert!(steps.is_empty(), "{steps:?}");
        // The first rule, 12 probes of baseline, saw only the quiet
        // quarter hour and read the run as a step.
        let old = Baseline {
            max_probes: 12,
            beyond_per: 12,
        };
        let steps = often_loaded_then(&mut Detector::with_baseline(old), 0.5, 5);
        assert_eq!(
            steps
                .iter()
                .map(|(k, s)| (*k, s.figure))
                .collect::<Vec<_>>(),
            [(5, Figure::Throughput)]
        );
        // A drop below the loaded probes on the same path is still a step,
        // found at the 5th probe after it.
        let steps = often_loaded_then(&mut Detector::default(), 0.3, 5);
        let (k, s) = steps.first().expect("the drop to 0.3 was not found");
        assert_eq!((*k, s.figure), (5, Figure::Throughput), "{steps:?}");
        assert!((s.ratio - 0.3).abs() < 0.02, "{}", s.ratio);
    }

    #[test]
    fn the_baseline_allows_one_outlier_in_twelve() {
        let hour = Baseline::HOUR;
        assert_eq!(hour.max_probes, 60);
        // Up to 23 probes it is the first rule: one outlier.
        for n in 5..=23 {
            assert_eq!(hour.allowed_beyond(n), 1, "{n}");
        }
        assert_eq!(hour.allowed_beyond(24), 2);
        assert_eq!(hour.allowed_beyond(60), 5);
        // A rule from a replay never divides by zero nor allows none.
        let odd = Baseline {
            max_probes: 0,
            beyond_per: 0,
        };
        assert_eq!(odd.allowed_beyond(60), 1);
        let mut d = Detector::with_baseline(odd);
        for k in 0..20 {
            d.observe(obs(k as f64, 1e6, fp("6.1.0", "a"), "network"));
        }
        assert_eq!(d.window.len(), MIN_BEFORE + RECENT);
    }

    #[test]
    fn a_fingerprint_change_without_a_move_is_no_step() {
        let mut d = Detector::default();
        let mut rng = Rng(7);
        for k in 0..30 {
            let f = if k < 15 {
                fp("6.1.0", "a")
            } else {
                fp("6.8.0", "b")
            };
            let v = 500e6 * (1.0 + 0.05 * rng.normal());
            assert!(d.observe(obs(60.0 * k as f64, v, f, "network")).is_empty());
        }
    }

    #[test]
    fn stable_verdict_is_the_mode_not_the_latest_outlier() {
        let mut d = Detector::default();
        let f = fp("6.1.0", "a");
        for k in 0..4 {
            d.observe(obs(k as f64, 1e6, f.clone(), "send_buffer"));
        }
        d.observe(obs(5.0, 1e6, f.clone(), "network"));
        let (v, advice) = d.stable_verdict().unwrap();
        assert_eq!(&*v, "send_buffer");
        assert!(advice.is_some());
        for k in 0..3 {
            d.observe(obs(6.0 + k as f64, 1e6, f.clone(), "network"));
        }
        assert_eq!(&*d.stable_verdict().unwrap().0, "network");
    }
}
