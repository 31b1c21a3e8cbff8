//! The mesh for fleets too large for a full mesh every few hours: hosts
//! grouped by a label (rack, site), a full mesh inside every group, and
//! between groups one representative per group per cycle, rotating, in
//! the spirit of Pingmesh's levels.
//!
//! A cycle has two parts, both from the circle method of [`super::Plan`]:
//!
//! - **inside**: `2 (s' - 1) m` slots, `s` the largest group (`s'` rounded
//!   up to even). Groups have no host in common, so they all run their own
//!   tournament at once, slot by slot; a smaller group's tournament ends
//!   early and its hosts rest.
//! - **between**: `2 (g' - 1) m` slots, `g` the number of groups. In cycle
//!   `c` group `i`'s representative is its member `c mod |group i|`; the
//!   representatives play a tournament, so that every directed pair of
//!   groups is measured once per cycle, and every host represents its group
//!   once every `|group|` cycles.
//!
//! A representative is in a test in every slot, so the budget stretches
//! the cycle as for a full mesh of the same number of slots:
//! `cycle = max(interval, (2 (s' - 1) + 2 (g' - 1)) m × slot / budget)`.
//! Stated coverage: every directed pair inside a group and every directed
//! pair of groups once per cycle; a given host to a given other group at
//! least once every `|its group|` cycles.
//!
//! Hosts are grouped by a label ([`GroupPlan::by_label`]); those without
//! it form one group of their own. Members are also numbered as one sorted
//! list, as in the full plan, so that the scheduler runs either plan the
//! same way ([`super::MeshPlan`]).
//!
//! Pure, like the plan: no clock, no I/O.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::units::plural;

use super::{
    circle_round, grid_cycle_start, grid_first_cycle_from, grid_period, grid_slot_at,
    stretched_cycle, MeshParams, SlotAt, Test,
};

/// One directed test of a grouped plan, by (group, member) of each end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupTest {
    pub prober: (usize, usize),
    pub target: (usize, usize),
    pub module: usize,
}

/// The schedule of grouped members.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupPlan {
    groups: Vec<Vec<String>>,
    /// Every member, sorted: the index the service keys its jobs by, as
    /// for a full [`super::Plan`].
    members: Vec<String>,
    /// `flat[g][i]`: the index in `members` of member `i` of group `g`.
    flat: Vec<Vec<usize>>,
    /// `place[k]`: (group, member) of `members[k]`.
    place: Vec<(usize, usize)>,
    params: MeshParams,
    inside: usize,
    between: usize,
    cycle: Duration,
}

fn tournament_slots(n: usize, modules: usize) -> usize {
    if n < 2 {
        0
    } else {
        2 * (n + n % 2 - 1) * modules
    }
}

/// The pairs of slot `k` of a directed tournament among `n` (each round
/// both ways, one slot per module), as (prober, target, module).
fn directed(n: usize, modules: usize, k: usize) -> Vec<(usize, usize, usize)> {
    if k >= tournament_slots(n, modules) {
        return Vec::new();
    }
    let (round, module) = (k / modules, k % modules);
    circle_round(n, round / 2)
        .into_iter()
        .map(|(a, b)| if round % 2 == 0 { (a, b) } else { (b, a) })
        .map(|(a, b)| (a, b, module))
        .collect()
}

/// A length of time for a sentence: minutes up to two hours, then hours,
/// then days.
pub(crate) fn span(seconds: f64) -> String {
    if seconds < 7200.0 {
        format!("{:.1} min", seconds / 60.0)
    } else if seconds < 4.0 * 86400.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else {
        format!("{:.1} days", seconds / 86400.0)
    }
}

impl GroupPlan {
    /// The plan of `groups` (each sorted and deduplicated, a name in two
    /// groups kept in the one that sorts first, empty ones dropped, and
    /// the groups sorted by their first member, so that every host gets
    /// the same plan).
    pub fn new(groups: Vec<Vec<String>>, params: MeshParams) -> GroupPlan {
        let mut groups: Vec<Vec<String>> = groups
            .into_iter()
            .map(|mut g| {
                g.sort();
                g.dedup();
                g
            })
            .collect();
        groups.sort();
        let mut seen = HashSet::new();
        for g in &mut groups {
            g.retain(|name| seen.insert(name.clone()));
        }
        groups.retain(|g| !g.is_empty());
        groups.sort();
        let mut members: Vec<String> = groups.iter().flatten().cloned().collect();
        members.sort();
        let flat: Vec<Vec<usize>> = groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|name| members.binary_search(name).unwrap_or_default())
                    .collect()
            })
            .collect();
        let mut place = vec![(0, 0); members.len()];
        for (g, idx) in flat.iter().enumerate() {
            for (i, &k) in idx.iter().enumerate() {
                place[k] = (g, i);
            }
        }
        let m = params.modules.max(1);
        let largest = groups.iter().map(Vec::len).max().unwrap_or(0);
        let inside = tournament_slots(largest, m);
        let between = tournament_slots(groups.len(), m);
        let cycle = stretched_cycle(&params, inside + between);
        GroupPlan {
            groups,
            members,
            flat,
            place,
            params,
            inside,
            between,
            cycle,
        }
    }

    /// The plan of `members`, each given with its value of the grouping
    /// label: one group per value. A member without the label comes with
    /// the empty value, so that all of those form one group (an absent
    /// label and an empty one are the same, as in Prometheus). A member
    /// listed twice with different values goes by the smallest non-empty
    /// one, whatever the order of the list.
    pub fn by_label(
        members: impl IntoIterator<Item = (String, String)>,
        params: MeshParams,
    ) -> GroupPlan {
        let mut value: BTreeMap<String, String> = BTreeMap::new();
        for (name, v) in members {
            let keep = value
                .get(&name)
                .is_some_and(|cur| (cur.is_empty(), cur) <= (v.is_empty(), &v));
            if !keep {
                value.insert(name, v);
            }
        }
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, v) in value {
            groups.entry(v).or_default().push(name);
        }
        GroupPlan::new(groups.into_values().collect(), params)
    }

    pub fn groups(&self) -> &[Vec<String>] {
        &self.groups
    }

    /// Every member, sorted.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// The index of `name` among [`Self::members`].
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.members.binary_search_by(|m| m.as_str().cmp(name)).ok()
    }

    /// (group, member) of member `index`.
    pub fn place(&self, index: usize) -> Option<(usize, usize)> {
        self.place.get(index).copied()
    }

    pub fn params(&self) -> &MeshParams {
        &self.params
    }

    /// Slots in a cycle: inside the groups, then between them.
    pub fn slots(&self) -> usize {
        self.inside + self.between
    }

    /// Slots of the part inside the groups.
    pub fn inside_slots(&self) -> usize {
        self.inside
    }

    pub fn cycle(&self) -> Duration {
        self.cycle
    }

    /// Time a test may take in a slot.
    pub fn slot(&self) -> Duration {
        self.params.slot
    }

    /// Time between the starts of two slots.
    pub fn period(&self) -> Duration {
        grid_period(self.cycle, self.slots())
    }

    /// The slot that Unix time `now` falls in.
    pub fn slot_at(&self, now: Duration) -> SlotAt {
        grid_slot_at(self.cycle, self.slots(), now)
    }

    /// Unix time at which cycle `cycle` starts.
    pub fn cycle_start(&self, cycle: u64) -> Duration {
        grid_cycle_start(self.cycle, cycle)
    }

    /// The first cycle that starts at or after `t`.
    pub fn first_cycle_from(&self, t: Duration) -> u64 {
        grid_first_cycle_from(self.cycle, t)
    }

    /// Group `group`'s representative in cycle `cycle`.
    pub fn representative(&self, group: usize, cycle: u64) -> usize {
        (cycle % self.groups[group].len() as u64) as usize
    }

    /// The directed tests of slot `index` of cycle `cycle`.
    pub fn tests(&self, cycle: u64, index: usize) -> Vec<GroupTest> {
        let m = self.params.modules.max(1);
        if index < self.inside {
            self.groups
                .iter()
                .enumerate()
                .flat_map(|(g, members)| {
                    directed(members.len(), m, index)
                        .into_iter()
                        .map(move |(a, b, module)| GroupTest {
                            prober: (g, a),
                            target: (g, b),
                            module,
                        })
                })
                .collect()
        } else {
            directed(self.groups.len(), m, index - self.inside)
                .into_iter()
                .map(|(a, b, module)| GroupTest {
                    prober: (a, self.representative(a, cycle)),
                    target: (b, self.representative(b, cycle)),
                    module,
                })
                .collect()
        }
    }

    /// [`Self::tests`] by index among [`Self::members`].
    pub fn tests_flat(&self, cycle: u64, index: usize) -> Vec<Test> {
        self.tests(cycle, index)
            .into_iter()
            .map(|t| self.flatten(t))
            .collect()
    }

    fn flatten(&self, t: GroupTest) -> Test {
        Test {
            prober: self.flat[t.prober.0][t.prober.1],
            target: self.flat[t.target.0][t.target.1],
            module: t.module,
        }
    }

    /// Member `me`'s part of slot `index` of cycle `cycle` (by index among
    /// [`Self::members`]), computed from its own group and, when it
    /// represents it, the groups' tournament only.
    pub fn test_of(&self, me: usize, cycle: u64, index: usize) -> Option<Test> {
        let (g, i) = self.place(me)?;
        let m = self.params.modules.max(1);
        let found = if index < self.inside {
            directed(self.groups[g].len(), m, index)
                .into_iter()
                .find(|&(a, b, _)| a == i || b == i)
                .map(|(a, b, module)| GroupTest {
                    prober: (g, a),
                    target: (g, b),
                    module,
                })
        } else if self.representative(g, cycle) == i {
            directed(self.groups.len(), m, index - self.inside)
                .into_iter()
                .find(|&(a, b, _)| a == g || b == g)
                .map(|(a, b, module)| GroupTest {
                    prober: (a, self.representative(a, cycle)),
                    target: (b, self.representative(b, cycle)),
                    module,
                })
        } else {
            None
        };
        found.map(|t| self.flatten(t))
    }

    /// Share of time the busiest host (a representative of the largest
    /// group) spends in tests.
    pub fn share(&self) -> f64 {
        shares(&self.groups, self.members.len(), &self.params, self.cycle).busiest()
    }

    /// Share of time a host spends in tests, averaged over the hosts and
    /// over the cycles (a host represents its group one cycle in
    /// `|group|`).
    pub fn mean_share(&self) -> f64 {
        shares(&self.groups, self.members.len(), &self.params, self.cycle).mean()
    }

    /// The plan, its cost and its coverage in a sentence.
    pub fn describe(&self) -> String {
        let largest = self.groups.iter().map(Vec::len).max().unwrap_or(0);
        let cycle = self.cycle.as_secs_f64();
        format!(
            "{} in {} (largest {largest}), {}: a cycle of {} + {} slots of {:.0} s \
             (one every {:.0} s) = {}; every pair inside a group and every pair of groups once per cycle, \
             each host to each other group once every {} ({}) at most; \
             each host in tests {:.0}% of the time on average, at most {:.0}% (a representative of the largest group)",
            plural(self.members.len(), "host"),
            plural(self.groups.len(), "group"),
            plural(self.params.modules, "module"),
            self.inside,
            self.between,
            self.params.slot.as_secs_f64(),
            self.period().as_secs_f64(),
            span(cycle),
            plural(largest, "cycle"),
            span(cycle * largest as f64),
            self.mean_share() * 100.0,
            self.share() * 100.0
        )
    }
}

/// The time in tests of a grouped plan's hosts, which the circle and the
/// stable grouped plans share: a member of a group of `s` is in `2 (s - 1)
/// m` test-slots a cycle, and `2 (g - 1) m` more in the cycles it
/// represents its group, one member per group and cycle.
pub(super) struct Shares<'a> {
    groups: &'a [Vec<String>],
    members: usize,
    params: &'a MeshParams,
    cycle: Duration,
}

pub(super) fn shares<'a>(
    groups: &'a [Vec<String>],
    members: usize,
    params: &'a MeshParams,
    cycle: Duration,
) -> Shares<'a> {
    Shares {
        groups,
        members,
        params,
        cycle,
    }
}

impl Shares<'_> {
    /// Test-slots per cycle of a member of a group of `size`: its group's
    /// pairs, and the groups' when it represents it.
    fn per_host(&self, size: usize, representing: bool) -> usize {
        let m = self.params.modules.max(1);
        let between = if representing {
            2 * self.groups.len().saturating_sub(1) * m
        } else {
            0
        };
        2 * size.saturating_sub(1) * m + between
    }

    /// Share of time the busiest host (a representative of the largest
    /// group) spends in tests.
    pub(super) fn busiest(&self) -> f64 {
        let largest = self.groups.iter().map(Vec::len).max().unwrap_or(0);
        if self.members < 2 {
            return 0.0;
        }
        self.params.slot.as_secs_f64() * self.per_host(largest, true) as f64
            / self.cycle.as_secs_f64()
    }

    /// Share of time a host spends in tests, averaged over the hosts and
    /// over the cycles.
    pub(super) fn mean(&self) -> f64 {
        if self.members < 2 {
            return 0.0;
        }
        let slots: f64 = self
            .groups
            .iter()
            .map(|g| {
                let s = g.len();
                let rep = self.per_host(s, true) - self.per_host(s, false);
                (s * self.per_host(s, false)) as f64 + rep as f64
            })
            .sum();
        self.params.slot.as_secs_f64() * slots / self.members as f64 / self.cycle.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    type Member = (usize, usize);

    fn plan(sizes: &[usize]) -> GroupPlan {
        let groups = sizes
            .iter()
            .enumerate()
            .map(|(g, &s)| (0..s).map(|i| format!("g{g:03}h{i:03}")).collect())
            .collect();
        GroupPlan::new(
            groups,
            MeshParams {
                slot: Duration::from_secs(10),
                modules: 1,
                budget: 0.5,
                min_cycle: Duration::ZERO,
            },
        )
    }

    #[test]
    fn one_test_per_host_and_every_pair_inside_and_between_once_per_cycle() {
        for sizes in [vec![4, 4, 4], vec![5, 3, 6, 2], vec![7], vec![1, 1, 1]] {
            let p = plan(&sizes);
            let g = sizes.len();
            for cycle in 0..3u64 {
                let mut inside: HashMap<(Member, Member), usize> = HashMap::new();
                let mut between: HashMap<(usize, usize), usize> = HashMap::new();
                for k in 0..p.slots() {
                    let mut busy = BTreeSet::new();
                    for t in p.tests(cycle, k) {
                        assert!(busy.insert(t.prober), "{sizes:?} slot {k}");
                        assert!(busy.insert(t.target), "{sizes:?} slot {k}");
                        if t.prober.0 == t.target.0 {
                            assert!(k < p.inside_slots());
                            *inside.entry((t.prober, t.target)).or_default() += 1;
                        } else {
                            assert!(k >= p.inside_slots());
                            assert_eq!(t.prober.1, p.representative(t.prober.0, cycle));
                            *between.entry((t.prober.0, t.target.0)).or_default() += 1;
                        }
                    }
                }
                let pairs: usize = sizes.iter().map(|s| s * (s - 1)).sum();
                assert_eq!(inside.len(), pairs, "{sizes:?}");
                assert_eq!(between.len(), g * (g - 1), "{sizes:?}");
                assert!(inside.values().chain(between.values()).all(|&c| c == 1));
            }
        }
    }

    #[test]
    fn representatives_rotate_and_the_cycle_is_stated() {
        let p = plan(&[3, 2]);
        let reps: Vec<(usize, usize)> = (0..6)
            .map(|c| (p.representative(0, c), p.representative(1, c)))
            .collect();
        assert_eq!(reps, [(0, 0), (1, 1), (2, 0), (0, 1), (1, 0), (2, 1)]);
        // 100 groups of 100: 198 + 198 slots of 10 s at half budget.
        let big = plan(&[100; 100]);
        assert_eq!(big.slots(), 396);
        assert_eq!(big.cycle(), Duration::from_secs(7920));
        assert!((big.share() - 0.5).abs() < 1e-9);
        assert_eq!(
            big.describe(),
            "10000 hosts in 100 groups (largest 100), 1 module: a cycle of 198 + 198 slots of 10 s \
             (one every 20 s) = 2.2 h; every pair inside a group and every pair of groups once per cycle, \
             each host to each other group once every 100 cycles (9.2 days) at most; \
             each host in tests 25% of the time on average, at most 50% (a representative of the largest group)"
        );
    }

    #[test]
    fn a_label_makes_the_groups_and_hosts_without_it_form_one() {
        let params = plan(&[1]).params().clone();
        let entry = |n: &str, v: &str| (n.to_string(), v.to_string());
        let p = GroupPlan::by_label(
            [
                entry("d", "r2"),
                entry("a", "r1"),
                entry("x", ""),
                entry("c", "r2"),
                entry("b", "r1"),
                entry("y", ""),
                // Listed again, without the label (DNS discovery has none)
                // and with another value: the smallest non-empty one wins.
                entry("a", ""),
                entry("c", "r3"),
                entry("c", "r1"),
            ],
            params.clone(),
        );
        assert_eq!(p.groups(), [vec!["a", "b", "c"], vec!["d"], vec!["x", "y"]]);
        assert_eq!(p.members(), ["a", "b", "c", "d", "x", "y"]);
        assert_eq!(p.place(p.index_of("d").unwrap()), Some((1, 0)));
        // The same entries in another order make the same plan.
        let q = GroupPlan::by_label(
            [
                entry("c", "r1"),
                entry("y", ""),
                entry("c", "r3"),
                entry("b", "r1"),
                entry("a", ""),
                entry("x", ""),
                entry("c", "r2"),
                entry("a", "r1"),
                entry("d", "r2"),
            ],
            params.clone(),
        );
        assert_eq!(p, q);
        // A name in two groups stays in the first.
        let r = GroupPlan::new(
            vec![vec!["b".into(), "a".into()], vec!["a".into(), "c".into()]],
            params,
        );
        assert_eq!(r.groups(), [vec!["a", "b"], vec!["c"]]);
    }

    #[test]
    fn each_member_computes_its_own_part_of_the_flat_tests() {
        let p = plan(&[5, 3, 6, 2, 1]);
        let n = p.members().len();
        assert_eq!(n, 17);
        for cycle in 0..7u64 {
            for k in 0..p.slots() {
                let all = p.tests_flat(cycle, k);
                for me in 0..n {
                    let mine = all.iter().find(|t| t.prober == me || t.target == me);
                    assert_eq!(
                        p.test_of(me, cycle, k).as_ref(),
                        mine,
                        "cycle {cycle} slot {k} host {me}"
                    );
                }
            }
        }
        // The grid is read off the clock as for a full plan.
        let at = p.slot_at(p.cycle_start(9) + p.period() * 3 + Duration::from_millis(5));
        assert_eq!((at.cycle, at.index), (9, 3));
        assert_eq!(
            p.first_cycle_from(p.cycle_start(9) + Duration::from_millis(1)),
            10
        );
        // Shares: every host in its group's tournament, plus the groups'
        // in one cycle of |group|.
        let per = |s: f64| 2.0 * (s - 1.0) + 2.0 * 4.0 / s;
        let mean =
            (5.0 * per(5.0) + 3.0 * per(3.0) + 6.0 * per(6.0) + 2.0 * per(2.0) + per(1.0)) / 17.0;
        let cycle = p.cycle().as_secs_f64();
        assert!((p.mean_share() - mean * 10.0 / cycle).abs() < 1e-9);
        assert!((p.share() - (2.0 * 5.0 + 2.0 * 4.0) * 10.0 / cycle).abs() < 1e-9);
    }
}
