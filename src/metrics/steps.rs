//! One path's step state: the detector of
//! [`crate::analysis::step`] fed with each successful probe of one
//! (target, module, direction), the steps it found (counted per figure,
//! the newest kept for the `pathprobe_step_last_*` series), each end's
//! latest fingerprint and the path's stable verdict.
//!
//! It lives in the path's `SeriesState`, so that removing the path removes
//! it with its series. Memory is bounded per path: the detector keeps at
//! most 17 probes, consecutive probes share one copy of an unchanged
//! fingerprint, and one step is kept per figure.
//!
//! A peer's release and fingerprint are label values, and Prometheus keeps
//! every value it scrapes: a peer that makes up a new release every probe
//! would make a new series every probe. So the values each path's peer
//! took over the last hour are kept ([`Churn`]); past
//! [`MAX_REMOTE_VALUES`] distinct ones the peer is exported under the one
//! value [`UNSTABLE`] (and counted) until an hour has passed with it
//! steady.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::analysis::step::{Detector, Figure, Observation, Step};
use crate::protocol::fingerprint::HostFingerprint;

use crate::analysis::result::ProbeResult;

/// The detector and what it found on one path.
#[derive(Debug, Clone, Default)]
pub(crate) struct PathSteps {
    /// The figures the kind has (`ProbeKind::step_figures`): their
    /// counters exist at 0 from the start.
    pub figures: &'static [Figure],
    detector: Detector,
    /// Steps found, per figure, since serve started.
    pub detected: BTreeMap<Figure, u64>,
    /// The newest step of each figure.
    pub last: BTreeMap<Figure, Step>,
    /// Each end's fingerprint in the newest probe that carried one.
    pub local: Option<Arc<HostFingerprint>>,
    pub remote: Option<Arc<HostFingerprint>>,
    /// The remote end's releases and fingerprint hashes of the last hour.
    remote_releases: Churn,
    remote_hashes: Churn,
    /// Whether the remote end's release or fingerprint changed too often
    /// in the hour before the newest probe to be exported as it is.
    pub remote_unstable: bool,
    /// Probes whose remote end was exported as [`UNSTABLE`].
    pub remote_unstable_probes: u64,
}

/// The label value a peer whose release or fingerprint churns is exported
/// under, in place of each value it makes up.
pub const UNSTABLE: &str = "unstable";
/// Distinct releases (or fingerprints) a peer may show within
/// [`CHURN_WINDOW`] and still be exported as itself: an upgrade and a
/// roll-back are two.
pub(crate) const MAX_REMOTE_VALUES: usize = 2;
/// How far back the distinct values are counted.
pub(crate) const CHURN_WINDOW_SECONDS: f64 = 3600.0;

/// The distinct values one of a peer's labels took within the window, each
/// with when it was last seen; at most one more than
/// [`MAX_REMOTE_VALUES`] are kept, so memory is bounded whatever the peer
/// sends.
#[derive(Debug, Clone, Default)]
struct Churn {
    seen: VecDeque<(Arc<str>, f64)>,
}

impl Churn {
    /// Notes `value` seen at `now` (Unix seconds); whether the values of
    /// the window are still few enough to export as they are.
    fn observe(&mut self, value: &str, now: f64) -> bool {
        // A clock stepped back leaves the entries "in the future": kept.
        self.seen.retain(|(_, t)| now - t < CHURN_WINDOW_SECONDS);
        match self.seen.iter_mut().find(|(v, _)| &**v == value) {
            Some(e) => e.1 = now,
            None => {
                self.seen.push_back((Arc::from(value), now));
                if self.seen.len() > MAX_REMOTE_VALUES + 1 {
                    self.seen.pop_front();
                }
            }
        }
        self.seen.len() <= MAX_REMOTE_VALUES
    }
}

impl PathSteps {
    /// The state of a path of module kind `kind` (`tcp`, `loopback_udp`,
    /// `iperf3_tcp`, …), every figure's counter at 0.
    pub fn new(kind: &str) -> Self {
        let figures =
            crate::kinds::registry::by_module_name(kind).map_or(&[][..], |(k, _)| k.step_figures());
        PathSteps {
            figures,
            detected: figures.iter().map(|f| (*f, 0)).collect(),
            ..Default::default()
        }
    }

    /// Feeds one finished probe that started at `started`, with its
    /// result (`None` when it failed); returns the steps it completes. A
    /// failed probe has no figures and is not fed: a path that fails is
    /// the failure alerts' business, not a step of its figures.
    pub fn observe(
        &mut self,
        started: std::time::SystemTime,
        result: Option<&ProbeResult>,
    ) -> Vec<Step> {
        let Some(r) = result else {
            return Vec::new();
        };
        // One copy per distinct fingerprint, not one per probe.
        let share = |held: &mut Option<Arc<HostFingerprint>>, new: &Option<HostFingerprint>| {
            if let Some(f) = new {
                if held.as_deref() != Some(f) {
                    *held = Some(Arc::new(f.clone()));
                }
            }
            new.as_ref().and(held.clone())
        };
        let local = share(&mut self.local, &r.local.fingerprint);
        let remote = share(&mut self.remote, &r.remote.fingerprint);
        let now = started
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let release_steady = r.remote.kernel_release.is_empty()
            || self.remote_releases.observe(&r.remote.kernel_release, now);
        let hash_steady = remote
            .as_ref()
            .is_none_or(|f| self.remote_hashes.observe(&f.hash(), now));
        self.remote_unstable = !(release_steady && hash_steady);
        if self.remote_unstable {
            self.remote_unstable_probes += 1;
        }
        let mut figures = [None; 4];
        for f in self.figures {
            let v = match f {
                Figure::Throughput => Some(r.throughput_bits_per_second),
                Figure::Loss => r.udp.as_ref().map(|u| u.loss_ratio),
                Figure::Rtt => r.tcp.as_ref().and_then(|t| t.rtt_seconds),
                Figure::Latency => r
                    .rr()
                    .and_then(|rr| rr.latency.as_ref())
                    .or_else(|| r.udp_rr().and_then(|u| u.rtt.as_ref()))
                    .map(|l| l.p50),
            };
            // A peer's figures are hostile input: only finite,
            // non-negative ones are ranked.
            figures[*f as usize] = v.filter(|x| x.is_finite() && *x >= 0.0);
        }
        let diagnosis = r.diagnosis.as_ref();
        let obs = Observation {
            // Seconds since the epoch (0 for a clock before it), here
            // rather than from the rendering code, which reads this file.
            time: started
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            figures,
            local,
            remote,
            verdict: diagnosis.map(|d| Arc::from(d.limit.as_str())),
            advice: diagnosis
                .filter(|d| !d.advice.is_empty())
                .map(|d| Arc::from(d.advice.join("; "))),
            partial: false,
        };
        let steps = self.detector.observe(obs);
        for s in &steps {
            *self.detected.entry(s.figure).or_insert(0) += 1;
            self.last.insert(s.figure, s.clone());
        }
        steps
    }

    /// Replays probes read back from the history (oldest first) into the
    /// detector, before any live probe: a restarted host then tests its
    /// first probes against the ones it made before the restart, so a
    /// reboot into a new kernel is found at the 5th probe after it. Steps
    /// the replay finds were reported before the restart (they are in the
    /// history) and are not reported again; the replay only restarts the
    /// baseline at them, as it did then.
    pub fn seed(&mut self, probes: Vec<Observation>) {
        for mut o in probes {
            // Only the figures the kind's live probes feed.
            for f in Figure::ALL {
                if !self.figures.contains(&f) {
                    o.figures[f as usize] = None;
                }
            }
            let _ = self.detector.observe(o);
        }
    }

    /// How near the path's latest probes came to a step of `figure` (the
    /// replay of a recorded day reports it).
    #[cfg(test)]
    pub fn margin(&self, figure: Figure) -> Option<crate::analysis::step::Margin> {
        self.detector.margin(figure)
    }

    /// A remote release or hash as exported: itself, or [`UNSTABLE`] while
    /// the peer churns.
    pub fn remote_label<'a>(&self, value: &'a str) -> &'a str {
        if self.remote_unstable {
            UNSTABLE
        } else {
            value
        }
    }

    /// The verdict most of the path's recent probes gave, with its advice.
    pub fn stable_verdict(&self) -> Option<(Arc<str>, Option<Arc<str>>)> {
        self.detector.stable_verdict()
    }
}
