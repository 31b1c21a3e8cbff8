//! The mesh schedule as a pure function: which host probes which, with
//! which module, in which slot of wall-clock time.
//!
//! Every host computes the same [`Plan`] from the same sorted member list
//! and the same parameters, and reads the current slot off its UTC clock,
//! so that the fleet follows one collision-free schedule with no
//! coordinator:
//!
//! - time is cut into slots, each long enough for the longest module run
//!   plus set-up and a guard for clock skew;
//! - in each round, the hosts are paired by a round-robin tournament (the
//!   circle method); with an odd count one host rests;
//! - each pair runs one directed test per slot, one slot per module; round
//!   `2k` runs the tournament's round `k` and round `2k + 1` the same pairs
//!   the other way, so that one cycle measures every directed pair once;
//! - a budget (the share of time a host may spend in tests) spreads the
//!   slots apart, which stretches the cycle.
//!
//! With `n` members (`n'` = `n` rounded up to even) and `m` modules:
//! `slots = 2 (n' - 1) m`; `cycle = max(interval, slots × slot / budget)`;
//! slots start `cycle / slots` apart. See docs/MESH.md.
//!
//! No I/O and no clock here: the caller passes the time.

use std::time::Duration;

pub mod groups;
pub mod plans;
pub mod sim;
pub mod stable;
pub mod stable_groups;

pub use groups::GroupPlan;
pub use plans::MeshPlan;
pub use stable::StablePlan;
pub use stable_groups::StableGroupPlan;

/// What a plan is computed from, besides the members.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshParams {
    /// Time one test may take: the longest module run, plus set-up and
    /// the guard for clock skew.
    pub slot: Duration,
    /// Modules each directed pair runs per cycle, one slot each.
    pub modules: usize,
    /// Largest share of time a host may spend in tests, in (0, 1].
    pub budget: f64,
    /// The cycle is at least this long (the configured interval).
    pub min_cycle: Duration,
}

/// One directed test of a slot: `prober` probes `target` with module
/// `module` (indices into the members and the modules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Test {
    pub prober: usize,
    pub target: usize,
    pub module: usize,
}

/// Where a time falls in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotAt {
    /// Cycles since the Unix epoch.
    pub cycle: u64,
    /// Slot within the cycle.
    pub index: usize,
    /// Unix time at which the slot starts.
    pub start: Duration,
}

/// The schedule of one member list.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    members: Vec<String>,
    params: MeshParams,
    slots: usize,
    cycle: Duration,
}

/// The pairs of round `r` (of `n' - 1`) of a round-robin tournament among
/// `n` players by the circle method, each as (first, second). Player 0 stays
/// put and the others turn one place per round; with an odd `n`, the player
/// paired with the phantom `n` rests. The lower index goes first against a
/// partner of the other parity, the higher one otherwise, so that each
/// player probes about as often as it is probed.
pub fn circle_round(n: usize, r: usize) -> Vec<(usize, usize)> {
    if n < 2 {
        return Vec::new();
    }
    let even = n + n % 2;
    let ring = even - 1;
    let at = |pos: usize| -> usize {
        if pos == 0 {
            0
        } else {
            1 + (pos - 1 + r) % ring
        }
    };
    (0..even / 2)
        .filter_map(|i| {
            let (a, b) = (at(i), at(even - 1 - i));
            if a >= n || b >= n {
                return None;
            }
            // The lower index goes first against a partner of the other
            // parity: each player goes first in about half its games.
            let (lo, hi) = (a.min(b), a.max(b));
            Some(if (lo + hi) % 2 == 1 {
                (lo, hi)
            } else {
                (hi, lo)
            })
        })
        .collect()
}

/// The cycle of a plan of `slots` slots: long enough for the slots at the
/// budget, at least the interval asked for, and a whole number of
/// milliseconds per slot, so that every host reads the grid off its clock
/// with the same integer arithmetic.
pub(crate) fn stretched_cycle(params: &MeshParams, slots: usize) -> Duration {
    let budget = if params.budget > 0.0 && params.budget <= 1.0 {
        params.budget
    } else {
        1.0
    };
    let busy = params.slot.saturating_mul(slots as u32);
    let mut cycle = busy
        .div_f64(budget)
        .max(params.min_cycle)
        .max(Duration::from_millis(1));
    if slots > 0 {
        let per = (cycle.as_millis() as u64).div_ceil(slots as u64);
        cycle = Duration::from_millis(per * slots as u64);
    }
    cycle
}

/// Time between the starts of two of `slots` slots spread over `cycle`.
pub(crate) fn grid_period(cycle: Duration, slots: usize) -> Duration {
    match slots {
        0 => cycle,
        k => cycle / k as u32,
    }
}

/// The slot of a grid of `slots` slots per `cycle` that Unix time `now`
/// falls in.
pub(crate) fn grid_slot_at(cycle: Duration, slots: usize, now: Duration) -> SlotAt {
    let cycle_ms = cycle.as_millis().max(1);
    let now_ms = now.as_millis();
    let c = (now_ms / cycle_ms) as u64;
    let into = now_ms % cycle_ms;
    let period_ms = grid_period(cycle, slots).as_millis().max(1);
    let index = ((into / period_ms) as usize).min(slots.saturating_sub(1));
    let start_ms = c as u128 * cycle_ms + index as u128 * period_ms;
    SlotAt {
        cycle: c,
        index,
        start: Duration::from_millis(start_ms as u64),
    }
}

pub(crate) fn grid_cycle_start(cycle: Duration, c: u64) -> Duration {
    Duration::from_millis((c as u128 * cycle.as_millis()) as u64)
}

pub(crate) fn grid_first_cycle_from(cycle: Duration, t: Duration) -> u64 {
    let c = cycle.as_millis().max(1);
    t.as_millis().div_ceil(c) as u64
}

impl Plan {
    /// The plan of `members` (sorted and deduplicated here, so that every
    /// host gets the same order whatever order it found them in).
    pub fn new(mut members: Vec<String>, params: MeshParams) -> Plan {
        members.sort();
        members.dedup();
        let n = members.len();
        let rounds = if n < 2 { 0 } else { 2 * (n + n % 2 - 1) };
        let slots = rounds * params.modules;
        let cycle = stretched_cycle(&params, slots);
        Plan {
            members,
            params,
            slots,
            cycle,
        }
    }

    pub fn members(&self) -> &[String] {
        &self.members
    }

    pub fn params(&self) -> &MeshParams {
        &self.params
    }

    /// Slots in a cycle.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Length of a cycle.
    pub fn cycle(&self) -> Duration {
        self.cycle
    }

    /// Time between the starts of two slots (at least the slot itself).
    pub fn period(&self) -> Duration {
        grid_period(self.cycle, self.slots)
    }

    /// Time a test may take in a slot.
    pub fn slot(&self) -> Duration {
        self.params.slot
    }

    /// Rounds in a cycle (each has one slot per module).
    pub fn rounds(&self) -> usize {
        self.slots.checked_div(self.params.modules).unwrap_or(0)
    }

    /// The directed tests of slot `index` of a cycle.
    pub fn tests(&self, index: usize) -> Vec<Test> {
        if index >= self.slots {
            return Vec::new();
        }
        let round = index / self.params.modules;
        let module = index % self.params.modules;
        circle_round(self.members.len(), round / 2)
            .into_iter()
            .map(|(a, b)| {
                if round.is_multiple_of(2) {
                    (a, b)
                } else {
                    (b, a)
                }
            })
            .map(|(prober, target)| Test {
                prober,
                target,
                module,
            })
            .collect()
    }

    /// Member `me`'s part of slot `index`: the test it runs or serves, if
    /// any.
    pub fn test_of(&self, me: usize, index: usize) -> Option<Test> {
        self.tests(index)
            .into_iter()
            .find(|t| t.prober == me || t.target == me)
    }

    /// The index of `name` among the members.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.members.binary_search_by(|m| m.as_str().cmp(name)).ok()
    }

    /// The slot that Unix time `now` falls in.
    pub fn slot_at(&self, now: Duration) -> SlotAt {
        grid_slot_at(self.cycle, self.slots, now)
    }

    /// Unix time at which cycle `cycle` starts.
    pub fn cycle_start(&self, cycle: u64) -> Duration {
        grid_cycle_start(self.cycle, cycle)
    }

    /// The first cycle of this plan that starts at or after `t`: where a
    /// new member list takes over from the old one.
    pub fn first_cycle_from(&self, t: Duration) -> u64 {
        grid_first_cycle_from(self.cycle, t)
    }

    /// Share of time a member spends in tests (either role): the busiest
    /// member's, which with an odd count is every member's.
    pub fn share(&self) -> f64 {
        let n = self.members.len();
        if n < 2 || self.cycle.is_zero() {
            return 0.0;
        }
        let per_host = 2 * (n - 1) * self.params.modules;
        self.params.slot.as_secs_f64() * per_host as f64 / self.cycle.as_secs_f64()
    }

    /// The plan in a sentence, for `check-config` and the startup log.
    pub fn describe(&self) -> String {
        format!(
            "{}, {}: a cycle of {} of {:.0} s (one every {:.0} s) = {:.1} min; each host in tests {:.0}% of the time",
            crate::units::plural(self.members.len(), "host"),
            crate::units::plural(self.params.modules, "module"),
            crate::units::plural(self.slots, "slot"),
            self.params.slot.as_secs_f64(),
            self.period().as_secs_f64(),
            self.cycle.as_secs_f64() / 60.0,
            self.share() * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    fn plan(n: usize, modules: usize, budget: f64) -> Plan {
        Plan::new(
            (0..n).map(|i| format!("h{i:04}")).collect(),
            MeshParams {
                slot: Duration::from_secs(10),
                modules,
                budget,
                min_cycle: Duration::ZERO,
            },
        )
    }

    #[test]
    fn every_directed_pair_once_per_cycle_and_one_test_per_host_per_slot() {
        for n in [2, 3, 4, 5, 6, 7, 10, 11, 32, 33] {
            for modules in [1, 2] {
                let p = plan(n, modules, 1.0);
                assert_eq!(p.slots(), 2 * (n + n % 2 - 1) * modules, "n={n}");
                let mut seen: HashMap<Test, usize> = HashMap::new();
                for k in 0..p.slots() {
                    let tests = p.tests(k);
                    let mut busy = BTreeSet::new();
                    for t in &tests {
                        assert_ne!(t.prober, t.target);
                        assert!(busy.insert(t.prober), "n={n} slot {k}: {tests:?}");
                        assert!(busy.insert(t.target), "n={n} slot {k}: {tests:?}");
                        *seen.entry(*t).or_default() += 1;
                    }
                    // Everyone plays; with an odd count exactly one rests.
                    assert_eq!(busy.len(), n - n % 2, "n={n} slot {k}");
                }
                assert_eq!(seen.len(), n * (n - 1) * modules, "n={n}");
                assert!(seen.values().all(|&c| c == 1), "n={n}");
            }
        }
        // With an odd count, each host rests in as many rounds as the others.
        let p = plan(5, 1, 1.0);
        let mut rests = [0; 5];
        for k in 0..p.slots() {
            for (h, r) in rests.iter_mut().enumerate() {
                if p.test_of(h, k).is_none() {
                    *r += 1;
                }
            }
        }
        assert_eq!(rests, [2; 5]);
    }

    #[test]
    fn directions_alternate_within_a_round() {
        // Each host probes about as often as it is probed in every half.
        let p = plan(10, 1, 1.0);
        let mut probes = [0usize; 10];
        for k in (0..p.slots()).step_by(2) {
            for t in p.tests(k) {
                probes[t.prober] += 1;
            }
        }
        // 9 rounds in the first direction: each host probes 3 to 6 times.
        assert!(probes.iter().all(|&c| (3..=6).contains(&c)), "{probes:?}");
    }

    #[test]
    fn the_budget_stretches_the_cycle_and_the_interval_is_a_floor() {
        let full = plan(10, 2, 1.0);
        // 2 × 9 × 2 = 36 slots of 10 s.
        assert_eq!(full.cycle(), Duration::from_secs(360));
        assert!((full.share() - 1.0).abs() < 1e-9);
        let half = plan(10, 2, 0.5);
        assert_eq!(half.cycle(), Duration::from_secs(720));
        assert_eq!(half.period(), Duration::from_secs(20));
        assert!((half.share() - 0.5).abs() < 1e-9);
        // An odd count rests one host per slot, so shares are a bit lower.
        let odd = plan(5, 1, 0.5);
        assert_eq!(odd.slots(), 10);
        assert_eq!(odd.cycle(), Duration::from_secs(200));
        assert!((odd.share() - 0.4).abs() < 1e-9);
        // An interval longer than the cycle wins; shorter does not.
        let mut params = half.params().clone();
        params.min_cycle = Duration::from_secs(3600);
        let slow = Plan::new(half.members().to_vec(), params.clone());
        assert_eq!(slow.cycle(), Duration::from_secs(3600));
        params.min_cycle = Duration::from_secs(60);
        assert_eq!(
            Plan::new(half.members().to_vec(), params).cycle(),
            half.cycle()
        );
        assert_eq!(
            half.describe(),
            "10 hosts, 2 modules: a cycle of 36 slots of 10 s (one every 20 s) = 12.0 min; each host in tests 50% of the time"
        );
        // Nobody to probe: no slots.
        assert_eq!(plan(1, 1, 0.5).slots(), 0);
        assert!(plan(1, 1, 0.5).tests(0).is_empty());
    }

    #[test]
    fn the_wall_clock_picks_the_slot_and_members_sort() {
        let p = plan(4, 1, 0.5);
        // 6 slots of 10 s spread to 20 s: a 120 s cycle.
        assert_eq!(p.cycle(), Duration::from_secs(120));
        let at = p.slot_at(Duration::from_secs(1_000_000_005));
        assert_eq!(at.cycle, 1_000_000_005 / 120);
        let into = 1_000_000_005 % 120;
        assert_eq!(at.index, (into / 20) as usize);
        assert_eq!(
            at.start,
            Duration::from_secs(at.cycle * 120 + at.index as u64 * 20)
        );
        assert_eq!(p.first_cycle_from(p.cycle_start(7)), 7);
        assert_eq!(
            p.first_cycle_from(p.cycle_start(7) + Duration::from_millis(1)),
            8
        );
        // The same members in another order make the same plan.
        let shuffled = Plan::new(
            vec![
                "h0003".into(),
                "h0001".into(),
                "h0000".into(),
                "h0002".into(),
                "h0001".into(),
            ],
            p.params().clone(),
        );
        assert_eq!(shuffled, p);
        assert_eq!(p.index_of("h0002"), Some(2));
    }
}
