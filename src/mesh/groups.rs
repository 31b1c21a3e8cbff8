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
//! Pure, like the plan: no clock, no I/O.

use std::time::Duration;

use super::{circle_round, MeshParams};

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

impl GroupPlan {
    /// The plan of `groups` (each sorted and deduplicated, empty ones
    /// dropped, and the groups sorted by their first member, so that every
    /// host gets the same plan).
    pub fn new(groups: Vec<Vec<String>>, params: MeshParams) -> GroupPlan {
        let mut groups: Vec<Vec<String>> = groups
            .into_iter()
            .map(|mut g| {
                g.sort();
                g.dedup();
                g
            })
            .filter(|g| !g.is_empty())
            .collect();
        groups.sort();
        let m = params.modules.max(1);
        let largest = groups.iter().map(Vec::len).max().unwrap_or(0);
        let inside = tournament_slots(largest, m);
        let between = tournament_slots(groups.len(), m);
        let slots = inside + between;
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
        GroupPlan {
            groups,
            params,
            inside,
            between,
            cycle,
        }
    }

    pub fn groups(&self) -> &[Vec<String>] {
        &self.groups
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

    /// Time between the starts of two slots.
    pub fn period(&self) -> Duration {
        match self.slots() {
            0 => self.cycle,
            k => self.cycle / k as u32,
        }
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

    /// Share of time the busiest host (a representative of the largest
    /// group) spends in tests.
    pub fn share(&self) -> f64 {
        let m = self.params.modules.max(1);
        let largest = self.groups.iter().map(Vec::len).max().unwrap_or(0);
        let per_host =
            2 * largest.saturating_sub(1) * m + 2 * self.groups.len().saturating_sub(1) * m;
        self.params.slot.as_secs_f64() * per_host as f64 / self.cycle.as_secs_f64()
    }

    /// The plan and its coverage in a sentence.
    pub fn describe(&self) -> String {
        let hosts: usize = self.groups.iter().map(Vec::len).sum();
        let largest = self.groups.iter().map(Vec::len).max().unwrap_or(0);
        format!(
            "{hosts} hosts in {} groups (largest {largest}): a cycle of {} + {} slots of {:.0} s = {:.1} min; \
             every pair inside a group and every pair of groups once per cycle, each host representing its group \
             every {largest} cycles at most; the busiest host in tests {:.0}% of the time",
            self.groups.len(),
            self.inside,
            self.between,
            self.params.slot.as_secs_f64(),
            self.cycle.as_secs_f64() / 60.0,
            self.share() * 100.0
        )
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
        assert!(big.describe().starts_with(
            "10000 hosts in 100 groups (largest 100): a cycle of 198 + 198 slots of 10 s = 132.0 min"
        ), "{}", big.describe());
    }
}
