//! Steps survive a restart: at start, each path's step detector is seeded
//! with its newest probes from the history read back, so that a host that
//! rebooted into a new kernel tests its first probes against the ones it
//! made before, and finds the step at the 5th probe after the restart,
//! naming both releases. Without it the detector would need a fresh
//! baseline first, and the slower level would become that baseline.
//!
//! The history keeps each end's kernel release, not the whole fingerprint,
//! so seeded probes carry fingerprints of that one setting and are marked
//! partial: only settings both probes hold are compared.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::analysis::step::{Observation, MAX_BEFORE, RECENT};
use crate::metrics::ResultStore;
use crate::probe::Direction;
use crate::protocol::fingerprint::{setting, HostFingerprint};

use super::history::{History, Point};

/// Hands each path's newest probes in `history` to `store`, to seed its
/// step detector before its first live probe; returns the paths seeded.
pub fn seed_steps(history: &History, store: &ResultStore) -> usize {
    let seeds = history.with(|jobs| {
        let mut out = Vec::new();
        for (key, job) in jobs {
            for (direction, probes) in newest_probes(job.points()) {
                out.push((key.clone(), job.kind.clone(), direction, probes));
            }
        }
        out
    });
    let n = seeds.len();
    for (key, kind, direction, probes) in seeds {
        store.seed_steps(key, &kind, direction, probes);
    }
    n
}

/// The detector's window of probes per direction, oldest first: single
/// successful probes only (a bucket's mean is not a probe, and a failed
/// probe is never fed live either).
fn newest_probes<'a>(
    points: impl DoubleEndedIterator<Item = &'a Point>,
) -> Vec<(Direction, Vec<Observation>)> {
    let mut by_direction: Vec<(Direction, Vec<&Point>)> = Vec::new();
    for p in points.rev() {
        if p.is_bucket() || p.failures > 0 {
            continue;
        }
        let at = match by_direction.iter().position(|(d, _)| *d == p.direction) {
            Some(i) => i,
            None => {
                by_direction.push((p.direction, Vec::new()));
                by_direction.len() - 1
            }
        };
        let held = &mut by_direction[at].1;
        if held.len() < MAX_BEFORE + RECENT {
            held.push(p);
        }
    }
    // One fingerprint per distinct release, shared by the probes.
    let mut fingerprints: BTreeMap<Arc<str>, Arc<HostFingerprint>> = BTreeMap::new();
    let mut fingerprint = |release: &Option<Arc<str>>| {
        release.as_ref().map(|r| {
            fingerprints
                .entry(r.clone())
                .or_insert_with(|| {
                    Arc::new(HostFingerprint {
                        settings: [(setting::KERNEL.to_string(), r.to_string())].into(),
                    })
                })
                .clone()
        })
    };
    by_direction
        .into_iter()
        .map(|(direction, newest_first)| {
            let probes = newest_first
                .into_iter()
                .rev()
                .map(|p| {
                    let figure = |v: f64| (v.is_finite() && v >= 0.0).then_some(v);
                    Observation {
                        time: p.timestamp,
                        figures: [
                            figure(p.throughput),
                            figure(p.loss),
                            figure(p.rtt),
                            figure(p.p50),
                        ],
                        local: fingerprint(&p.local_kernel),
                        remote: fingerprint(&p.remote_kernel),
                        verdict: p.verdict.as_ref().map(|v| v.verdict.clone()),
                        advice: p.verdict.as_ref().and_then(|v| v.advice.clone()),
                        partial: true,
                    }
                })
                .collect();
            (direction, probes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::step::{Detector, End, Figure};
    use crate::metrics::ProbeKey;
    use std::time::{Duration, UNIX_EPOCH};

    fn at(secs: f64) -> std::time::SystemTime {
        UNIX_EPOCH + Duration::from_secs_f64(secs)
    }

    #[test]
    fn a_reboot_into_a_new_kernel_is_found_at_the_fifth_probe_after_it() {
        let history = History::default();
        let key = ProbeKey::new("b", "tcp_send");
        let t0 = 1.7e9;
        for k in 0..8 {
            let t = t0 + 60.0 * k as f64;
            let mut p = Point::new(t, Direction::Send);
            p.throughput = 100e6 * (1.0 + 0.01 * (k % 3) as f64);
            p.rtt = 0.002;
            p.local_kernel = Some(Arc::from("2.6.32-old"));
            p.remote_kernel = Some(Arc::from("6.1.0"));
            history.record_point(&key, "tcp", p, at(t));
        }
        // Neither a failed probe nor the other direction's is this path's.
        let mut failed = Point::new(t0 + 480.0, Direction::Send);
        failed.failures = 1;
        history.record_point(&key, "tcp", failed, at(t0 + 480.0));
        let mut other = Point::new(t0 + 490.0, Direction::Receive);
        other.throughput = 1e6;
        history.record_point(&key, "tcp", other, at(t0 + 490.0));

        let seeds = history.with(|jobs| newest_probes(jobs[&key].points()));
        let send = &seeds.iter().find(|(d, _)| *d == Direction::Send).unwrap().1;
        assert_eq!(send.len(), 8);
        assert!(send.windows(2).all(|w| w[0].time < w[1].time));
        assert!(send.iter().all(|o| o.partial));

        let mut d = Detector::default();
        for o in send.clone() {
            assert!(d.observe(o).is_empty());
        }
        // After the restart: the new kernel's full fingerprint, slower.
        let live = Arc::new(HostFingerprint {
            settings: [
                ("kernel".to_string(), "6.18.44".to_string()),
                (
                    "net.ipv4.tcp_wmem".to_string(),
                    "4096 16384 4194304".to_string(),
                ),
            ]
            .into(),
        });
        let remote = send[0].remote.clone();
        let mut found = None;
        for k in 0..6 {
            let steps = d.observe(Observation {
                time: t0 + 600.0 + 60.0 * k as f64,
                figures: [Some(12e6), None, Some(0.002), None],
                local: Some(live.clone()),
                remote: remote.clone(),
                ..Default::default()
            });
            if let Some(s) = steps.into_iter().find(|s| s.figure == Figure::Throughput) {
                found = Some((k + 1, s));
                break;
            }
        }
        let (n, s) = found.expect("no step after the restart");
        assert_eq!(n, 5);
        assert_eq!(s.release_before.as_deref(), Some("2.6.32-old"));
        assert_eq!(s.release_after.as_deref(), Some("6.18.44"));
        // The history did not hold tcp_wmem: unknown, not changed.
        assert_eq!(s.changes.len(), 1, "{:?}", s.changes);
        assert_eq!(s.changes[0].0, End::Local);
        assert!(s
            .describe("a", "b")
            .contains("a: kernel 2.6.32-old → 6.18.44"));
    }
}
