//! The grouped plan ([`super::GroupPlan`]'s hosts grouped by a label, a
//! full mesh inside every group, and between groups one representative
//! per group per cycle, rotating) laid out so that a member joining or
//! leaving moves only its own slots and a bounded few others
//! (churn costs a slot, not a cycle). The circle method of
//! [`super::GroupPlan`] numbers members by sorted order: one join
//! renumbers its group's tournament and its representatives' rotation, and
//! a change of the largest group's size changes the cycle, so hosts that
//! learn of it on either side of a cycle boundary follow two plans for a
//! whole cycle. The service follows this plan from
//! [`super::stable::STABLE_FROM`] members on ([`super::MeshPlan::grouped`]).
//!
//! Both parts pair by the places of the stable full mesh
//! ([`super::stable::Places`]): each member holds a place in its group
//! found from a hash of its name, each group a place among the groups from
//! a hash of its label value, and a pair plays in the round its two places
//! sum to, once each way.
//!
//! - **inside**: every group plays its own rounds at once (groups share no
//!   host), `2 × places × m` slots, every group's places sized for the
//!   largest group; in a smaller group more places are empty and more of
//!   its hosts rest. Every directed pair inside a group once per cycle.
//! - **between**: the groups' places, `2 × places × m` slots. In cycle `c`
//!   a group's representative is the member at the first held place at or
//!   after `c mod places` of its group: a join or a leave changes it only
//!   in the cycles the joiner takes over (the empty places before its own)
//!   or the leaver gave up, so that hosts following the old and the new
//!   list agree on every other group's representative, and on this one's
//!   in most cycles. Every directed pair of groups once per cycle; every
//!   host represents its group (and so measures every other group) at
//!   least once every `places` cycles (about `2 |largest group|`), once
//!   every `|group|` cycles on average.
//!
//! The places (and so the cycle) follow *levels* that step, so that the
//! cycle does not change with every join: every group is sized for
//! [`group_level`]`(s)` of the largest, `s` members (room for one more, in
//! steps of 4 at least: 12 for 8 to 11 members, 104 for 96-103), so that
//! the other groups' sizes may wander freely below it; the groups for
//! [`super::stable::level`]`(g)` (exact up to 16: a group comes or goes
//! far less often than a host). A group of level `L` has `2 (L - 1)`
//! places (at least `L`; from 32 on, whole buckets of 16 lanes), so at a
//! budget of 0.5 the cycle is the budget's:
//! `cycle = max(interval, slots × slot, (2 (L_in - 1) + 2 (L_g - 1)) m ×
//! slot / budget)`, the circle method's for groups of `L_in` and `L_g`
//! groups. Slots are spread evenly over the cycle.
//!
//! Hosts are grouped by a label ([`StableGroupPlan::by_label`]); those
//! without it form one group of their own. Members are also numbered as one
//! sorted list, as in the full plan, so that the scheduler runs every plan
//! the same way ([`super::MeshPlan`]).
//!
//! Pure, like the plan: no clock, no I/O.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::units::plural;

use super::groups::{shares, span, GroupTest};
use super::stable::{cycle_of, level, Places, LANES};
use super::{
    grid_cycle_start, grid_first_cycle_from, grid_period, grid_slot_at, MeshParams, SlotAt, Test,
};

/// Members given with their value of the grouping label, as groups by
/// value: the non-empty values in order, then the empty one (members
/// without the label). A member listed twice with different values goes by
/// the smallest non-empty one, whatever the order of the list.
pub(crate) fn grouped_by_value(
    members: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, Vec<String>)> {
    let mut value: BTreeMap<String, String> = BTreeMap::new();
    for (name, v) in members {
        let keep = value
            .get(&name)
            .is_some_and(|cur| (cur.is_empty(), cur) <= (v.is_empty(), &v));
        if !keep {
            value.insert(name, v);
        }
    }
    let mut groups: BTreeMap<(bool, String), Vec<String>> = BTreeMap::new();
    for (name, v) in value {
        groups.entry((v.is_empty(), v)).or_default().push(name);
    }
    groups.into_iter().map(|((_, v), g)| (v, g)).collect()
}

/// The level a group of `n` members is sized for: room for one more, a
/// multiple of 4 (and of the full mesh's eighths from 32 on), so that a
/// group's size wandering by a member or two leaves its places, and the
/// cycle, where they were.
pub fn group_level(n: usize) -> usize {
    level(n + 1).next_multiple_of(4)
}

/// (buckets, lanes) for `level` players: `2 (level - 1)` places, at least
/// `level`, in one bucket below 32 places and in buckets of 16 lanes from
/// there on (rounded down: the budget, not the places, sets the cycle).
fn places_for(level: usize) -> (usize, usize) {
    let want = (2 * level.saturating_sub(1)).max(level).max(1);
    if want < 2 * LANES {
        (1, want)
    } else {
        (want / LANES, LANES)
    }
}

/// Member `i`'s game in round `u` of `places`, as (prober, target). Here
/// the two directions of a pair take adjacent slots (round `u` is colour
/// `u / 2 lanes`, lane `(u / 2) mod lanes`, direction `u mod 2`): a member
/// moved to the next free lane, whose pairs' directions may swap with the
/// parity of its place, moves its tests by a few slots, not by half the
/// colour's.
fn game(places: &Places, i: usize, u: usize) -> Option<(usize, usize)> {
    let (rest, dir) = (u / 2, u % 2);
    let lanes = places.lanes();
    places.game_at(i, rest / lanes, dir, rest % lanes)
}

/// Every game of round `u` of `places` ([`game`]).
fn games(places: &Places, u: usize) -> Vec<(usize, usize)> {
    places.games_by(|i| game(places, i, u))
}

/// `out[x]`: the member at the first held place at or after `x`
/// (cyclically), the representative of cycles `c ≡ x`.
fn rotation(places: &Places) -> Vec<usize> {
    let p = places.count();
    let mut out = vec![0; p];
    let mut next = None;
    // Twice round, backwards: the first pass finds the holder that the
    // places after the last held one wrap round to.
    for x in (0..2 * p).rev() {
        let x = x % p;
        if let Some(i) = places.holder(x) {
            next = Some(i);
        }
        if let Some(i) = next {
            out[x] = i;
        }
    }
    out
}

/// The schedule of grouped members, stable under churn.
#[derive(Debug, Clone, PartialEq)]
pub struct StableGroupPlan {
    /// Each group's value of the label.
    names: Vec<String>,
    groups: Vec<Vec<String>>,
    /// Every member, sorted: the index the service keys its jobs by, as
    /// for a full [`super::Plan`].
    members: Vec<String>,
    /// `flat[g][i]`: the index in `members` of member `i` of group `g`.
    flat: Vec<Vec<usize>>,
    /// `place[k]`: (group, member) of `members[k]`.
    place: Vec<(usize, usize)>,
    params: MeshParams,
    inside_level: usize,
    between_level: usize,
    /// Each group's members' places.
    inside_places: Vec<Places>,
    /// Each group's representative by `cycle mod places`.
    reps: Vec<Vec<usize>>,
    /// The groups' places.
    between_places: Places,
    inside: usize,
    between: usize,
    cycle: Duration,
}

impl StableGroupPlan {
    /// The plan of `groups`, each named by its value of the label: members
    /// sorted and deduplicated, groups of one name merged, empty ones
    /// dropped, the non-empty names in order and then the empty one, a
    /// member in two groups kept in the first, so that every host gets the
    /// same plan.
    pub fn new(groups: Vec<(String, Vec<String>)>, params: MeshParams) -> StableGroupPlan {
        let mut by_name: BTreeMap<(bool, String), Vec<String>> = BTreeMap::new();
        for (name, g) in groups {
            by_name
                .entry((name.is_empty(), name))
                .or_default()
                .extend(g);
        }
        let mut seen = HashSet::new();
        let (mut names, mut lists) = (Vec::new(), Vec::new());
        for ((_, name), mut g) in by_name {
            g.sort();
            g.dedup();
            g.retain(|n| seen.insert(n.clone()));
            if !g.is_empty() {
                names.push(name);
                lists.push(g);
            }
        }
        let groups: Vec<Vec<String>> = lists;
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
        // One level for every group, the largest's: a smaller group's size
        // may wander across its own level's steps, and it keeps its places
        // while the largest stays within its own (which sets the cycle).
        let inside_level = groups
            .iter()
            .map(|g| group_level(g.len()))
            .max()
            .unwrap_or(1);
        let (buckets, lanes) = places_for(inside_level);
        let inside_places: Vec<Places> = groups
            .iter()
            .map(|g| Places::new(g, buckets, lanes))
            .collect();
        let reps = inside_places.iter().map(rotation).collect();
        let between_level = level(groups.len()).max(1);
        let (b, l) = places_for(between_level);
        let between_places = Places::new(&names, b, l);
        let largest = groups.iter().map(Vec::len).max().unwrap_or(0);
        let inside = if largest >= 2 {
            2 * buckets * lanes * m
        } else {
            0
        };
        let between = if groups.len() >= 2 {
            2 * between_places.count() * m
        } else {
            0
        };
        let mut plan = StableGroupPlan {
            names,
            groups,
            members,
            flat,
            place,
            params,
            inside_level,
            between_level,
            inside_places,
            reps,
            between_places,
            inside,
            between,
            cycle: Duration::ZERO,
        };
        plan.cycle = cycle_of(&plan.params, plan.busiest_level(), plan.slots());
        plan
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
    ) -> StableGroupPlan {
        StableGroupPlan::new(grouped_by_value(members), params)
    }

    pub fn groups(&self) -> &[Vec<String>] {
        &self.groups
    }

    /// Each group's value of the label, in the order of [`Self::groups`].
    pub fn group_names(&self) -> &[String] {
        &self.names
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

    /// The place of member `member` of group `group` among its group's.
    pub fn member_place(&self, group: usize, member: usize) -> Option<usize> {
        self.inside_places.get(group)?.of(member)
    }

    /// The place of group `group` among the groups'.
    pub fn group_place(&self, group: usize) -> Option<usize> {
        self.between_places.of(group)
    }

    /// The levels the places and the cycle were sized for: of the largest
    /// group's, and of the groups'.
    pub fn levels(&self) -> (usize, usize) {
        (self.inside_level, self.between_level)
    }

    /// Cycles within which every member of group `group` represents it at
    /// least once: its places.
    pub fn rotation(&self, group: usize) -> usize {
        self.reps.get(group).map_or(0, Vec::len)
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

    /// The cycle without the interval's floor.
    pub fn needed_cycle(&self) -> Duration {
        let params = MeshParams {
            min_cycle: Duration::ZERO,
            ..self.params.clone()
        };
        cycle_of(&params, self.busiest_level(), self.slots())
    }

    /// The busiest host, a representative of a group at the largest level,
    /// plays `2 (L_in - 1) m + 2 (L_g - 1) m` tests a cycle: as many as in a
    /// full mesh of `L_in + L_g - 1`, which is what the budget must hold.
    fn busiest_level(&self) -> usize {
        let mut busiest = 1;
        if self.inside > 0 {
            busiest += self.inside_level - 1;
        }
        if self.between > 0 {
            busiest += self.between_level - 1;
        }
        busiest
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

    /// Group `group`'s representative in cycle `cycle` (a member index
    /// within the group).
    pub fn representative(&self, group: usize, cycle: u64) -> usize {
        let r = &self.reps[group];
        r[(cycle % r.len().max(1) as u64) as usize]
    }

    /// The directed tests of slot `index` of cycle `cycle`.
    pub fn tests(&self, cycle: u64, index: usize) -> Vec<GroupTest> {
        let m = self.params.modules.max(1);
        if index < self.inside {
            let (u, module) = (index / m, index % m);
            self.inside_places
                .iter()
                .enumerate()
                .flat_map(|(g, places)| {
                    games(places, u).into_iter().map(move |(a, b)| GroupTest {
                        prober: (g, a),
                        target: (g, b),
                        module,
                    })
                })
                .collect()
        } else if index < self.slots() {
            let k = index - self.inside;
            let (u, module) = (k / m, k % m);
            games(&self.between_places, u)
                .into_iter()
                .map(|(a, b)| GroupTest {
                    prober: (a, self.representative(a, cycle)),
                    target: (b, self.representative(b, cycle)),
                    module,
                })
                .collect()
        } else {
            Vec::new()
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
    /// [`Self::members`]), computed from its own group's places and, when
    /// it represents it, the groups' only.
    pub fn test_of(&self, me: usize, cycle: u64, index: usize) -> Option<Test> {
        let (g, i) = self.place(me)?;
        let m = self.params.modules.max(1);
        let found = if index < self.inside {
            let (a, b) = game(&self.inside_places[g], i, index / m)?;
            GroupTest {
                prober: (g, a),
                target: (g, b),
                module: index % m,
            }
        } else if index < self.slots() && self.representative(g, cycle) == i {
            let k = index - self.inside;
            let (a, b) = game(&self.between_places, g, k / m)?;
            GroupTest {
                prober: (a, self.representative(a, cycle)),
                target: (b, self.representative(b, cycle)),
                module: k % m,
            }
        } else {
            return None;
        };
        Some(self.flatten(found))
    }

    /// Share of time the busiest host (a representative of the largest
    /// group) spends in tests.
    pub fn share(&self) -> f64 {
        shares(&self.groups, self.members.len(), &self.params, self.cycle).busiest()
    }

    /// Share of time a host spends in tests, averaged over the hosts and
    /// over the cycles (one representative per group and cycle).
    pub fn mean_share(&self) -> f64 {
        shares(&self.groups, self.members.len(), &self.params, self.cycle).mean()
    }

    /// The plan, its cost and its coverage in a sentence.
    pub fn describe(&self) -> String {
        let largest = self.groups.iter().map(Vec::len).max().unwrap_or(0);
        let rotation = (0..self.groups.len())
            .map(|g| self.rotation(g))
            .max()
            .unwrap_or(0);
        let cycle = self.cycle.as_secs_f64();
        format!(
            "{} in {} (largest {largest}), {}: a cycle of {} + {} slots of {:.0} s \
             (one every {:.0} s) = {}; every pair inside a group and every pair of groups once per cycle, \
             each host to each other group once every {} ({}) on average and at least once every {} ({}); \
             each host in tests {:.0}% of the time on average, at most {:.0}% (a representative of the largest group); \
             stable under churn (groups sized for up to {} hosts, {} for up to {}: a host joining or leaving \
             moves no other pair of its group out of its colour, and changes its group's representative \
             only in the cycles it takes or leaves)",
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
            plural(rotation, "cycle"),
            span(cycle * rotation as f64),
            self.mean_share() * 100.0,
            self.share() * 100.0,
            self.inside_level - 1,
            plural(self.between_places.count(), "group place"),
            plural(self.between_level, "group")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    type Member = (usize, usize);

    fn params(modules: usize) -> MeshParams {
        MeshParams {
            slot: Duration::from_secs(10),
            modules,
            budget: 0.5,
            min_cycle: Duration::ZERO,
        }
    }

    fn plan(sizes: &[usize]) -> StableGroupPlan {
        let groups = sizes
            .iter()
            .enumerate()
            .map(|(g, &s)| {
                (
                    format!("r{g:03}"),
                    (0..s).map(|i| format!("g{g:03}h{i:03}")).collect(),
                )
            })
            .collect();
        StableGroupPlan::new(groups, params(1))
    }

    /// No host in two tests of a slot, every directed pair inside a group
    /// and every directed pair of groups once in each of `cycles`, and each
    /// member's own view ([`StableGroupPlan::test_of`]) the same as the fleet's.
    fn check(p: &StableGroupPlan, cycles: &[u64]) {
        let sizes: Vec<usize> = p.groups().iter().map(Vec::len).collect();
        let g = sizes.len();
        let m = p.params().modules;
        for &cycle in cycles {
            let mut inside: HashMap<(Member, Member, usize), usize> = HashMap::new();
            let mut between: HashMap<(usize, usize, usize), usize> = HashMap::new();
            for k in 0..p.slots() {
                let mut busy = BTreeSet::new();
                for t in p.tests(cycle, k) {
                    assert!(busy.insert(t.prober), "{sizes:?} slot {k}");
                    assert!(busy.insert(t.target), "{sizes:?} slot {k}");
                    if t.prober.0 == t.target.0 {
                        assert!(k < p.inside_slots());
                        *inside.entry((t.prober, t.target, t.module)).or_default() += 1;
                    } else {
                        assert!(k >= p.inside_slots());
                        assert_eq!(t.prober.1, p.representative(t.prober.0, cycle));
                        assert_eq!(t.target.1, p.representative(t.target.0, cycle));
                        *between
                            .entry((t.prober.0, t.target.0, t.module))
                            .or_default() += 1;
                    }
                }
                let all = p.tests_flat(cycle, k);
                for me in 0..p.members().len() {
                    let mine = all.iter().find(|t| t.prober == me || t.target == me);
                    assert_eq!(p.test_of(me, cycle, k).as_ref(), mine, "{me} in {k}");
                }
            }
            let pairs: usize = sizes.iter().map(|s| s * (s - 1)).sum();
            assert_eq!(inside.len(), pairs * m, "{sizes:?}");
            assert_eq!(between.len(), g * (g - 1) * m, "{sizes:?}");
            assert!(inside.values().chain(between.values()).all(|&c| c == 1));
        }
    }

    #[test]
    fn one_test_per_host_and_every_pair_inside_and_between_once_per_cycle() {
        for sizes in [
            vec![4, 4, 4],
            vec![5, 3, 6, 2],
            vec![7],
            vec![1, 1, 1],
            vec![40, 17, 33],
            vec![100, 100, 3],
        ] {
            check(&plan(&sizes), &[0, 1, 2]);
        }
        // Random member lists: random names in up to 12 groups of random
        // labels, some members listed twice.
        // xorshift64 (not the simulator's: this file must not import it).
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..40 {
            let groups = 1 + (next() % 12) as usize;
            let n = 2 + (next() % 160) as usize;
            let entries: Vec<(String, String)> = (0..n)
                .map(|_| {
                    (
                        format!("{:x}", next() % 4096),
                        format!("r{}", next() % groups as u64),
                    )
                })
                .collect();
            let p = StableGroupPlan::by_label(entries, params(1 + round % 2));
            check(&p, &[0, 1, 1_000_003]);
        }
    }

    #[test]
    fn every_host_represents_its_group_within_the_stated_rotation() {
        let p = plan(&[100, 37, 10, 1]);
        // All sized for the largest: 100 members, level 104, 206 places
        // wanted, 12 buckets of 16.
        assert_eq!(p.levels(), (104, 4));
        assert_eq!(p.rotation(0), 192);
        assert_eq!(p.rotation(3), 192);
        for g in 0..4 {
            let size = p.groups()[g].len();
            let r = p.rotation(g) as u64;
            let mut turns: Vec<Vec<u64>> = vec![Vec::new(); size];
            for c in 0..3 * r {
                turns[p.representative(g, c)].push(c);
                assert_eq!(p.representative(g, c), p.representative(g, c + r));
            }
            for (i, t) in turns.iter().enumerate() {
                // At least once in every `r` cycles, from the start too.
                assert!(!t.is_empty(), "group {g} member {i}");
                assert!(t[0] < r, "group {g} member {i}: {t:?}");
                for w in t.windows(2) {
                    assert!(w[1] - w[0] <= r, "group {g} member {i}: {t:?}");
                }
            }
        }
        // One representative per group and cycle: the mean share counts one
        // cycle in |group| per host.
        let cycle = p.cycle().as_secs_f64();
        let per = |s: f64| 2.0 * (s - 1.0) + 2.0 * 3.0 / s;
        let mean = (100.0 * per(100.0) + 37.0 * per(37.0) + 10.0 * per(10.0) + per(1.0)) / 148.0;
        assert!((p.mean_share() - mean * 10.0 / cycle).abs() < 1e-9);
    }

    #[test]
    fn the_cycle_is_the_budget_of_its_levels_and_stays_put_within_them() {
        // 100 groups of 100: 104 + 104 levels, 192 places each, 384 + 384
        // slots; the budget's cycle is that of a full mesh of 207 hosts,
        // 2 × 206 × 10 s / 0.5 = 137.3 min, 1.04 times the circle method's for 100
        // groups of 100 (198 + 198 slots, 132.0 min).
        // (Rounded up to whole milliseconds per slot.)
        let big = plan(&[100; 100]);
        assert_eq!(big.slots(), 768);
        assert_eq!(big.cycle(), Duration::from_millis(10_730 * 768));
        assert!((big.share() - 2.0 * 198.0 * 10.0 / 8240.64).abs() < 1e-9);
        assert_eq!(
            big.describe(),
            "10000 hosts in 100 groups (largest 100), 1 module: a cycle of 384 + 384 slots of 10 s \
             (one every 11 s) = 2.3 h; every pair inside a group and every pair of groups once per cycle, \
             each host to each other group once every 100 cycles (9.5 days) on average and at least once \
             every 192 cycles (18.3 days); each host in tests 24% of the time on average, at most 48% \
             (a representative of the largest group); stable under churn (groups sized for up to 103 hosts, \
             192 group places for up to 104 groups: a host joining or leaving moves no other pair of its \
             group out of its colour, and changes its group's representative only in the cycles it takes or leaves)"
        );
        // Any largest group of 96 to 103 keeps the cycle, and so do the
        // other groups' sizes.
        for s in 96..=103 {
            let mut sizes = vec![90; 100];
            sizes[7] = s;
            assert_eq!(plan(&sizes).cycle(), big.cycle(), "{s}");
        }
        // 10 groups of 10: level 12 inside (22 places), 10 between (18):
        // 2 × (11 + 9) × 10 s / 0.5 = 13.3 min, 1.11 times the circle
        // method's (12.0 min).
        let small = plan(&[10; 10]);
        assert_eq!((small.inside_slots(), small.slots()), (44, 80));
        assert_eq!(small.cycle(), Duration::from_secs(800));
        // An interval longer than the cycle wins; needed_cycle ignores it.
        let mut slow = small.params().clone();
        slow.min_cycle = Duration::from_secs(3600);
        let s = StableGroupPlan::new(
            small
                .group_names()
                .iter()
                .cloned()
                .zip(small.groups().iter().cloned())
                .collect(),
            slow,
        );
        assert_eq!(s.cycle(), Duration::from_secs(3600));
        assert_eq!(s.needed_cycle(), small.cycle());
        // A lone member has nothing to play.
        assert_eq!(plan(&[1]).slots(), 0);
    }

    #[test]
    fn a_label_makes_the_groups_and_hosts_without_it_form_one() {
        let entry = |n: &str, v: &str| (n.to_string(), v.to_string());
        let p = StableGroupPlan::by_label(
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
            params(1),
        );
        assert_eq!(p.groups(), [vec!["a", "b", "c"], vec!["d"], vec!["x", "y"]]);
        assert_eq!(p.group_names(), ["r1", "r2", ""]);
        assert_eq!(p.members(), ["a", "b", "c", "d", "x", "y"]);
        assert_eq!(p.place(p.index_of("d").unwrap()), Some((1, 0)));
        let q = StableGroupPlan::by_label(
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
            params(1),
        );
        assert_eq!(p, q);
        // A name in two groups stays in the first.
        let r = StableGroupPlan::new(
            vec![
                ("s2".into(), vec!["a".into(), "c".into()]),
                ("s1".into(), vec!["b".into(), "a".into()]),
            ],
            params(1),
        );
        assert_eq!(r.groups(), [vec!["a", "b"], vec!["c"]]);
    }

    /// One host leaves and another joins, 40 times, in
    /// 10 groups of 38. Every pair inside a group that neither the changed
    /// hosts nor a member whose place they moved is part of keeps its slot,
    /// and a moved one stays in its colour; a group's representative
    /// changes only in cycles whose old or new representative is one of
    /// those, and other groups' never.
    #[test]
    fn a_join_or_a_leave_moves_only_its_own_slots_and_a_few_others() {
        let entries: Vec<(String, String)> = (0..10)
            .flat_map(|g| (0..38).map(move |i| (format!("g{g:02}h{i:03}"), format!("r{g:02}"))))
            .collect();
        let base = StableGroupPlan::by_label(entries.clone(), params(1));
        // 39 at most: level 40, 78 places wanted, 4 buckets of 16.
        assert_eq!(base.levels(), (40, 10));
        assert_eq!(base.rotation(0), 64);
        let slots_by_name = |p: &StableGroupPlan| -> HashMap<(String, String), usize> {
            let mut out = HashMap::new();
            for k in 0..p.inside_slots() {
                for t in p.tests_flat(0, k) {
                    let name = |i: usize| p.members()[i].clone();
                    out.insert((name(t.prober), name(t.target)), k);
                }
            }
            out
        };
        let place_of = |p: &StableGroupPlan, name: &str| {
            let (g, i) = p.place(p.index_of(name)?)?;
            p.member_place(g, i)
        };
        let rep =
            |p: &StableGroupPlan, g: usize, c: u64| p.groups()[g][p.representative(g, c)].clone();
        let before = slots_by_name(&base);
        let (mut moved_members, mut moved_pairs, mut changed_reps) = (0, 0, 0);
        let colour = 2 * LANES;
        for change in 0..40usize {
            let mut list = entries.clone();
            let (gone, _) = list.remove((change * 37) % list.len());
            let joiner = format!("g{:02}j{change:03}", (change * 7) % 10);
            list.push((joiner.clone(), format!("r{:02}", (change * 7) % 10)));
            let after = StableGroupPlan::by_label(list, params(1));
            assert_eq!(after.cycle(), base.cycle());
            assert_eq!(after.slots(), base.slots());
            assert_eq!(after.group_names(), base.group_names());
            let moved: BTreeSet<String> = after
                .members()
                .iter()
                .filter(|n| place_of(&after, n) != place_of(&base, n) && **n != joiner)
                .cloned()
                .collect();
            moved_members += moved.len();
            for (pair, k) in slots_by_name(&after) {
                let Some(&old) = before.get(&pair) else {
                    continue;
                };
                if old != k {
                    moved_pairs += 1;
                    assert!(
                        moved.contains(&pair.0) || moved.contains(&pair.1),
                        "{pair:?} moved from {old} to {k}"
                    );
                    assert_eq!(old / colour, k / colour, "{pair:?}");
                }
            }
            for g in 0..10 {
                for c in 0..base.rotation(g) as u64 {
                    let (old, new) = (rep(&base, g, c), rep(&after, g, c));
                    if old != new {
                        changed_reps += 1;
                        assert!(
                            old == gone
                                || new == joiner
                                || moved.contains(&old)
                                || moved.contains(&new),
                            "group {g} cycle {c}: {old} → {new}"
                        );
                    }
                }
            }
        }
        // Over 40 changes: one or two members moved places per change (55
        // in the run that set the bound), a hundred of the 14,060 directed
        // pairs moved slot per change, and a group's representative changed
        // in 4 or 5 of the 640 (group, cycle)s per change (180).
        println!(
            "40 changes: {moved_members} members moved places, {moved_pairs} directed pairs moved slot, \
             {changed_reps} (group, cycle) representatives of 40 × 640 changed"
        );
        assert!(moved_members <= 80, "{moved_members}");
        assert!(changed_reps <= 40 * 8, "{changed_reps}");
    }
}
