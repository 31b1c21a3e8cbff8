//! A full-mesh plan that churn disturbs only where it must: each member
//! holds a *place* found from a hash of its name, and the slot of a pair
//! depends only on the two places, so a member joining or leaving leaves
//! every other pair's slot where it was.
//!
//! The circle method of [`super::Plan`] numbers the members by their sorted
//! order: one host joining renumbers every host after it and reshuffles the
//! whole cycle, so hosts that learn of the change on either side of a cycle
//! boundary follow two unrelated plans for a cycle (the coverage
//! period grew from one cycle to three at 100 hosts, 5.8% of tests `busy`).
//!
//! Here the places form the group `Z_p × Z_16` (`p` *buckets* of 16
//! *lanes*), with twice as many places as members or more:
//!
//! - a member's bucket is a hash of its name mod `p`; its lane is the first
//!   free one from a second hash, the bucket's members taken in the order
//!   of (that hash, name). A bucket with more than 16 members (about 0.4%
//!   of buckets at half load) spills the rest into the next free places.
//! - Pair `{i, j}` plays in colour `(b_i + b_j) mod p`, lane
//!   `(l_i + l_j) mod 16`, once in each direction: places are distinct, so
//!   in one colour and lane a member has at most one partner (the place
//!   that sums with its own to it). A member whose partner place is empty,
//!   or itself, rests.
//! - Slot `((2 colour + direction) × 16 + lane) × m + module`: a cycle of
//!   `2 × places × m` slots, back to back (each member is in a test in
//!   fewer than half of them, which is the budget's share).
//!
//! A joiner takes a free place, so its pairs fall where its partners rest,
//! and collide with nobody who still follows the old list. A member whose
//! lane it took moves to another lane of the same bucket: its pairs stay
//! in the same colour, a fraction of a cycle (`1 / 2p`) from their old
//! slot, so its coverage gap grows by that at most.
//!
//! The number of places (and so the cycle) must not change with every
//! join: it follows a *level* `L ≥ n` that steps in eighths of a power of
//! two (104 for 97–104 hosts, 1,024 for 961–1,024): places `= 2L` rounded
//! up to 16, cycle `= max(interval, 2 × places × m × slot, 2 (L - 1) m ×
//! slot / budget)`. A member list that crosses a level re-plans every pair,
//! as any change did before. Below [`STABLE_FROM`] members the service
//! keeps the circle plan: its cycle is the shortest possible and a churn
//! there costs one short cycle.
//!
//! Pure, like the other plans: no clock, no I/O.

use std::time::Duration;

use super::{
    grid_cycle_start, grid_first_cycle_from, grid_period, grid_slot_at, MeshParams, SlotAt, Test,
};

/// Lanes per bucket.
pub const LANES: usize = 16;

/// From this many members on, a full mesh follows the stable plan.
pub const STABLE_FROM: usize = 32;

/// The level of `n` members: `n` rounded up to an eighth of the power of
/// two below it (exact up to 16), so that one member more or less rarely
/// changes it.
pub fn level(n: usize) -> usize {
    if n <= 16 {
        return n;
    }
    let top = usize::BITS - 1 - n.leading_zeros();
    let step = 1usize << (top - 3);
    n.div_ceil(step) * step
}

/// FNV-1a, 64 bits: the same on every host and every release (the std
/// hasher is neither).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Members' places in `Z_buckets × Z_lanes`, from hashes of their names,
/// and the pairing by sums that both the stable full mesh and the grouped
/// plan ([`super::GroupPlan`], inside each group and between the groups)
/// play: a member's place depends on the members of its own bucket only,
/// so a join or a leave moves few others.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Places {
    buckets: usize,
    lanes: usize,
    /// `place[i]`: member `i`'s place, `bucket × lanes + lane`
    /// (`usize::MAX` if none was free: not with more places than members).
    place: Vec<usize>,
    /// `at[place]`: the member holding it.
    at: Vec<Option<usize>>,
}

impl Places {
    /// The places of `names` (by index) among `buckets × lanes`: a
    /// member's bucket is an FNV-1a hash of its name mod `buckets`, its
    /// lane the first free one from a second hash, the bucket's members
    /// taken in the order of (that hash, name); a full bucket spills into
    /// the next free places.
    pub(crate) fn new(names: &[String], buckets: usize, lanes: usize) -> Places {
        let (buckets, lanes) = (buckets.max(1), lanes.max(1));
        let places = buckets * lanes;
        let n = names.len();
        let hashes: Vec<u64> = names.iter().map(|s| fnv1a(s.as_bytes())).collect();
        let bucket = |h: u64| (h % buckets as u64) as usize;
        // The second hash takes high bits the bucket's modulus barely uses.
        let home = |h: u64| ((h >> 40) % lanes as u64) as usize;
        let mut at: Vec<Option<usize>> = vec![None; places];
        let mut place = vec![usize::MAX; n];
        let mut by_bucket: Vec<Vec<usize>> = vec![Vec::new(); buckets];
        for (i, h) in hashes.iter().enumerate() {
            by_bucket[bucket(*h)].push(i);
        }
        let mut spilled = Vec::new();
        for (b, list) in by_bucket.iter_mut().enumerate() {
            list.sort_by(|&x, &y| (home(hashes[x]), &names[x]).cmp(&(home(hashes[y]), &names[y])));
            for &i in list.iter() {
                let start = home(hashes[i]);
                let free = (0..lanes)
                    .map(|k| b * lanes + (start + k) % lanes)
                    .find(|&p| at[p].is_none());
                match free {
                    Some(p) => {
                        at[p] = Some(i);
                        place[i] = p;
                    }
                    None => spilled.push(i),
                }
            }
        }
        // Spills take the next free place after their bucket, in the order
        // of their bucket; there are more places than members.
        for i in spilled {
            let from = (bucket(hashes[i]) + 1) * lanes;
            if let Some(p) = (0..places)
                .map(|k| (from + k) % places)
                .find(|&p| at[p].is_none())
            {
                at[p] = Some(i);
                place[i] = p;
            }
        }
        Places {
            buckets,
            lanes,
            place,
            at,
        }
    }

    /// Places: buckets × lanes.
    pub(crate) fn count(&self) -> usize {
        self.buckets * self.lanes
    }

    /// Member `i`'s place, if it has one.
    pub(crate) fn of(&self, i: usize) -> Option<usize> {
        self.place.get(i).copied().filter(|&p| p != usize::MAX)
    }

    /// The member holding place `p`.
    pub(crate) fn holder(&self, p: usize) -> Option<usize> {
        self.at.get(p).copied().flatten()
    }

    /// (colour, direction, lane) of round `u` of `2 × count` (each
    /// colour's lanes one way, then the other).
    fn decode(&self, u: usize) -> (usize, usize, usize) {
        let (rest, lane) = (u / self.lanes, u % self.lanes);
        (rest / 2, rest % 2, lane)
    }

    /// The place that sums with `p` to (colour, lane).
    fn partner_place(&self, p: usize, colour: usize, lane: usize) -> usize {
        let (b, l) = (p / self.lanes, p % self.lanes);
        let pb = (colour + self.buckets - b) % self.buckets;
        let pl = (lane + self.lanes - l) % self.lanes;
        pb * self.lanes + pl
    }

    /// Who probes whom in direction `dir` between members `i` and `j`:
    /// alternating by the parity of their places, so that each member
    /// probes about as often as it is probed.
    fn orient(&self, i: usize, j: usize, dir: usize) -> (usize, usize) {
        let (pi, pj) = (self.place[i], self.place[j]);
        let (lo, hi) = if pi < pj { (i, j) } else { (j, i) };
        let first = if (pi + pj) % 2 == 1 {
            (lo, hi)
        } else {
            (hi, lo)
        };
        if dir == 0 {
            first
        } else {
            (first.1, first.0)
        }
    }

    /// Member `i`'s game of round `u` (of `2 × count`), as (prober,
    /// target): with the member whose place sums with its own to the
    /// round's colour and lane; `None` when that place is empty or its
    /// own, or past the rounds.
    pub(crate) fn game(&self, i: usize, u: usize) -> Option<(usize, usize)> {
        if u >= 2 * self.count() {
            return None;
        }
        let (colour, dir, lane) = self.decode(u);
        self.game_at(i, colour, dir, lane)
    }

    /// Member `i`'s game in (colour, direction, lane), as (prober, target).
    pub(crate) fn game_at(
        &self,
        i: usize,
        colour: usize,
        dir: usize,
        lane: usize,
    ) -> Option<(usize, usize)> {
        if colour >= self.buckets || lane >= self.lanes {
            return None;
        }
        let p = self.of(i)?;
        let j = self.holder(self.partner_place(p, colour, lane))?;
        (j != i).then(|| self.orient(i, j, dir))
    }

    /// The rounds' lanes per colour.
    pub(crate) fn lanes(&self) -> usize {
        self.lanes
    }

    /// Every game of round `u`, as (prober, target).
    pub(crate) fn games(&self, u: usize) -> Vec<(usize, usize)> {
        self.games_by(|i| self.game(i, u))
    }

    /// Every game `game` gives a member, each once, as (prober, target).
    pub(crate) fn games_by(
        &self,
        game: impl Fn(usize) -> Option<(usize, usize)>,
    ) -> Vec<(usize, usize)> {
        (0..self.place.len())
            .filter_map(|i| {
                let (a, b) = game(i)?;
                // Each game once: from its lower index.
                (i == a.min(b)).then_some((a, b))
            })
            .collect()
    }
}

/// The schedule of one member list, stable under churn.
#[derive(Debug, Clone, PartialEq)]
pub struct StablePlan {
    members: Vec<String>,
    params: MeshParams,
    level: usize,
    places: Places,
    slots: usize,
    cycle: Duration,
}

impl StablePlan {
    /// The plan of `members` (sorted and deduplicated here).
    pub fn new(mut members: Vec<String>, params: MeshParams) -> StablePlan {
        members.sort();
        members.dedup();
        let n = members.len();
        let level = level(n).max(1);
        let places = (2 * level).div_ceil(LANES).max(1) * LANES;
        let m = params.modules.max(1);
        let slots = if n < 2 { 0 } else { 2 * places * m };
        let cycle = cycle_of(&params, level, slots);
        let places = Places::new(&members, places / LANES, LANES);
        StablePlan {
            members,
            params,
            level,
            places,
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

    /// The level the places and the cycle were sized for.
    pub fn level(&self) -> usize {
        self.level
    }

    /// Places: buckets × lanes.
    pub fn places(&self) -> usize {
        self.places.count()
    }

    /// Member `i`'s place (bucket × 16 + lane).
    pub fn place(&self, i: usize) -> Option<usize> {
        self.places.of(i)
    }

    pub fn slots(&self) -> usize {
        self.slots
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
        cycle_of(&params, self.level, self.slots)
    }

    pub fn period(&self) -> Duration {
        grid_period(self.cycle, self.slots)
    }

    pub fn slot(&self) -> Duration {
        self.params.slot
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.members.binary_search_by(|m| m.as_str().cmp(name)).ok()
    }

    pub fn slot_at(&self, now: Duration) -> SlotAt {
        grid_slot_at(self.cycle, self.slots, now)
    }

    pub fn cycle_start(&self, cycle: u64) -> Duration {
        grid_cycle_start(self.cycle, cycle)
    }

    pub fn first_cycle_from(&self, t: Duration) -> u64 {
        grid_first_cycle_from(self.cycle, t)
    }

    /// The directed tests of slot `index` of a cycle.
    pub fn tests(&self, index: usize) -> Vec<Test> {
        if index >= self.slots {
            return Vec::new();
        }
        let m = self.params.modules.max(1);
        self.places
            .games(index / m)
            .into_iter()
            .map(|(prober, target)| Test {
                prober,
                target,
                module: index % m,
            })
            .collect()
    }

    /// Member `me`'s test in slot `index`, if any.
    pub fn test_of(&self, me: usize, index: usize) -> Option<Test> {
        if index >= self.slots {
            return None;
        }
        let m = self.params.modules.max(1);
        let (prober, target) = self.places.game(me, index / m)?;
        Some(Test {
            prober,
            target,
            module: index % m,
        })
    }

    /// Share of time a member spends in tests (every member's: each plays
    /// every other once per direction and module).
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
            "{}, {}: a cycle of {} of {:.0} s (one every {:.0} s) = {:.1} min; each host in tests {:.0}% of the time; stable under churn ({} for up to {}: a host joining or leaving moves no other pair out of its colour)",
            crate::units::plural(self.members.len(), "host"),
            crate::units::plural(self.params.modules, "module"),
            crate::units::plural(self.slots, "slot"),
            self.params.slot.as_secs_f64(),
            self.period().as_secs_f64(),
            self.cycle.as_secs_f64() / 60.0,
            self.share() * 100.0,
            crate::units::plural(self.places(), "place"),
            crate::units::plural(self.level, "host")
        )
    }
}

/// The cycle: the slots back to back, at least the interval, and long
/// enough for `level` members at the budget; a whole number of
/// milliseconds per slot.
pub(crate) fn cycle_of(params: &MeshParams, level: usize, slots: usize) -> Duration {
    let budget = if params.budget > 0.0 && params.budget <= 1.0 {
        params.budget
    } else {
        1.0
    };
    let m = params.modules.max(1) as u32;
    let back_to_back = params.slot.saturating_mul(slots as u32);
    let for_budget = params
        .slot
        .saturating_mul(2 * level.saturating_sub(1) as u32 * m)
        .div_f64(budget);
    let mut cycle = back_to_back
        .max(for_budget)
        .max(params.min_cycle)
        .max(Duration::from_millis(1));
    if slots > 0 {
        let per = (cycle.as_millis() as u64).div_ceil(slots as u64);
        cycle = Duration::from_millis(per * slots as u64);
    }
    cycle
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    fn params(modules: usize) -> MeshParams {
        MeshParams {
            slot: Duration::from_secs(11),
            modules,
            budget: 0.5,
            min_cycle: Duration::ZERO,
        }
    }

    fn names(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| format!("h{i:05}")).collect()
    }

    #[test]
    fn levels_step_in_eighths() {
        assert_eq!(level(10), 10);
        assert_eq!(level(17), 18);
        assert_eq!(level(32), 32);
        assert_eq!(level(33), 36);
        assert_eq!(level(97), 104);
        assert_eq!(level(100), 104);
        assert_eq!(level(104), 104);
        assert_eq!(level(105), 112);
        assert_eq!(level(1000), 1024);
        assert_eq!(level(10_000), 10_240);
        for n in 1..5000 {
            assert!(level(n) >= n && level(n) * 8 <= n * 9 + 8, "{n}");
        }
    }

    #[test]
    fn every_directed_pair_once_per_cycle_and_one_test_per_host_per_slot() {
        for n in [2, 3, 5, 32, 33, 100, 257] {
            for modules in [1, 2] {
                let p = StablePlan::new(names(0..n), params(modules));
                assert_eq!(p.slots(), 2 * p.places() * modules);
                let mut seen: HashMap<Test, usize> = HashMap::new();
                for k in 0..p.slots() {
                    let tests = p.tests(k);
                    let mut busy = BTreeSet::new();
                    for t in &tests {
                        assert_ne!(t.prober, t.target);
                        assert!(busy.insert(t.prober), "n={n} slot {k}");
                        assert!(busy.insert(t.target), "n={n} slot {k}");
                        assert_eq!(p.test_of(t.prober, k), Some(*t));
                        assert_eq!(p.test_of(t.target, k), Some(*t));
                        *seen.entry(*t).or_default() += 1;
                    }
                    for h in 0..n {
                        if !busy.contains(&h) {
                            assert_eq!(p.test_of(h, k), None);
                        }
                    }
                }
                assert_eq!(seen.len(), n * (n - 1) * modules, "n={n}");
                assert!(seen.values().all(|&c| c == 1), "n={n}");
            }
        }
    }

    #[test]
    fn a_join_or_a_leave_moves_only_its_own_pairs_and_a_few_lanes() {
        let base = StablePlan::new(names(0..100), params(1));
        // The slot of every directed pair, by name.
        let slots_by_name = |p: &StablePlan| -> HashMap<(String, String), usize> {
            let mut out = HashMap::new();
            for k in 0..p.slots() {
                for t in p.tests(k) {
                    out.insert(
                        (p.members()[t.prober].clone(), p.members()[t.target].clone()),
                        k,
                    );
                }
            }
            out
        };
        let before = slots_by_name(&base);
        let mut moved_members = 0;
        let mut moved_pairs = 0;
        let round = 2 * LANES;
        for change in 0..40 {
            // One leaves, one joins: the simulator's churn.
            let mut list = names(0..100);
            list.remove((change * 37) % 100);
            list.push(format!("h{:05}", 100 + change));
            let after = StablePlan::new(list, params(1));
            assert_eq!(after.cycle(), base.cycle());
            assert_eq!(after.slots(), base.slots());
            let now = slots_by_name(&after);
            let mut moved = BTreeSet::new();
            for (pair, k) in &now {
                let Some(old) = before.get(pair) else {
                    continue;
                };
                if old != k {
                    moved_pairs += 1;
                    // Never out of its colour and direction.
                    assert_eq!(old / round, k / round, "{pair:?}");
                    for name in [&pair.0, &pair.1] {
                        let i = after.index_of(name).unwrap();
                        let j = base.index_of(name).unwrap();
                        if after.place(i) != base.place(j) {
                            moved.insert(name.clone());
                        }
                    }
                }
            }
            moved_members += moved.len();
        }
        // A few members moved lanes over 40 changes, not all of them.
        assert!(moved_members <= 40, "{moved_members} moved");
        println!("40 changes: {moved_members} members moved lanes, {moved_pairs} directed pairs");
    }

    #[test]
    fn the_cycle_is_the_budget_of_its_level_and_stays_put_within_it() {
        let p = StablePlan::new(names(0..100), params(1));
        assert_eq!(p.level(), 104);
        assert_eq!(p.places(), 208);
        assert_eq!(p.slots(), 416);
        // 416 slots of 11 s back to back: 76.3 min (a circle plan of 100
        // hosts: 72.6 min).
        assert_eq!(p.cycle(), Duration::from_secs(416 * 11));
        assert!(p.share() <= 0.5);
        for n in 97..=104 {
            assert_eq!(
                StablePlan::new(names(0..n), params(1)).cycle(),
                p.cycle(),
                "{n}"
            );
        }
        // An interval longer than the cycle wins.
        let mut slow = params(1);
        slow.min_cycle = Duration::from_secs(7200);
        let s = StablePlan::new(names(0..100), slow);
        // (Rounded up to whole milliseconds per slot.)
        assert!(s.cycle() >= Duration::from_secs(7200));
        assert!(s.cycle() < Duration::from_secs(7200) + Duration::from_millis(416));
        assert!(s.describe().starts_with(
            "100 hosts, 1 module: a cycle of 416 slots of 11 s (one every 17 s) = 120.0 min"
        ));
        // A budget of 1 cannot pack the places tighter than back to back.
        let mut full = params(1);
        full.budget = 1.0;
        assert_eq!(StablePlan::new(names(0..100), full).cycle(), p.cycle());
        assert_eq!(StablePlan::new(names(0..1), params(1)).slots(), 0);
    }
}
