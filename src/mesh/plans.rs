//! Every mesh plan behind one interface, so that the scheduler and the
//! service run a full mesh ([`Plan`], or [`StablePlan`] from
//! [`super::stable::STABLE_FROM`] members on) and a grouped one
//! ([`GroupPlan`], or [`StableGroupPlan`] from as many members on;
//! `scheduler.mesh.group_by`) the same way: members by index in one
//! sorted list, the same slot grid on the wall clock, and each member's
//! test of a slot. A grouped plan's tests also depend on the cycle (its
//! representatives rotate), so the cycle is passed for both.
//!
//! Pure, like the plans.

use std::time::Duration;

use super::{GroupPlan, MeshParams, Plan, SlotAt, StableGroupPlan, StablePlan, Test};

/// The plan a mesh follows.
#[derive(Debug, Clone, PartialEq)]
pub enum MeshPlan {
    /// Every directed pair once per cycle.
    Full(Plan),
    /// Every directed pair once per cycle, each pair's slot kept when
    /// other members join or leave.
    Stable(StablePlan),
    /// Grouped by a label: full meshes inside the groups, rotating
    /// representatives between them.
    Grouped(GroupPlan),
    /// Grouped, each pair's slot and each cycle's representatives kept
    /// when other members join or leave.
    StableGrouped(StableGroupPlan),
}

impl From<Plan> for MeshPlan {
    fn from(p: Plan) -> Self {
        MeshPlan::Full(p)
    }
}

impl From<StablePlan> for MeshPlan {
    fn from(p: StablePlan) -> Self {
        MeshPlan::Stable(p)
    }
}

impl From<GroupPlan> for MeshPlan {
    fn from(p: GroupPlan) -> Self {
        MeshPlan::Grouped(p)
    }
}

impl From<StableGroupPlan> for MeshPlan {
    fn from(p: StableGroupPlan) -> Self {
        MeshPlan::StableGrouped(p)
    }
}

impl MeshPlan {
    /// The full mesh of `members`: the circle plan below
    /// [`super::stable::STABLE_FROM`] members (the shortest cycle; a churn
    /// costs one short cycle), the stable plan from there on (a churn costs
    /// the slots of the host that came or went).
    pub fn full(members: Vec<String>, params: MeshParams) -> MeshPlan {
        let mut distinct = members.clone();
        distinct.sort();
        distinct.dedup();
        if distinct.len() >= super::stable::STABLE_FROM {
            StablePlan::new(distinct, params).into()
        } else {
            Plan::new(distinct, params).into()
        }
    }

    /// The grouped plan of `members`, each with its value of the grouping
    /// label: by the circle method below [`super::stable::STABLE_FROM`]
    /// members (its cycle is the shortest; a churn costs one short cycle),
    /// the stable grouped plan from there on (a churn costs the slots of the
    /// host that came or went, and a few of its group's), as for a full
    /// mesh.
    pub fn grouped(members: Vec<(String, String)>, params: MeshParams) -> MeshPlan {
        let distinct: std::collections::BTreeSet<&str> =
            members.iter().map(|(n, _)| n.as_str()).collect();
        if distinct.len() >= super::stable::STABLE_FROM {
            StableGroupPlan::by_label(members, params).into()
        } else {
            GroupPlan::by_label(members, params).into()
        }
    }

    /// When this plan, replacing `old` at Unix time `now`, takes over: at
    /// its own first cycle boundary after `old`'s cycle in progress ends,
    /// so that hosts that learn of a change at slightly different times
    /// switch together. The scheduler switches then, and the responder
    /// lets in the new plan's probers only from then on.
    pub fn takes_over_at(&self, old: &MeshPlan, now: Duration) -> Duration {
        let end = old.cycle_start(old.slot_at(now).cycle + 1);
        self.cycle_start(self.first_cycle_from(end))
    }

    /// Every member, sorted.
    pub fn members(&self) -> &[String] {
        match self {
            MeshPlan::Full(p) => p.members(),
            MeshPlan::Stable(p) => p.members(),
            MeshPlan::Grouped(p) => p.members(),
            MeshPlan::StableGrouped(p) => p.members(),
        }
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        match self {
            MeshPlan::Full(p) => p.index_of(name),
            MeshPlan::Stable(p) => p.index_of(name),
            MeshPlan::Grouped(p) => p.index_of(name),
            MeshPlan::StableGrouped(p) => p.index_of(name),
        }
    }

    pub fn params(&self) -> &MeshParams {
        match self {
            MeshPlan::Full(p) => p.params(),
            MeshPlan::Stable(p) => p.params(),
            MeshPlan::Grouped(p) => p.params(),
            MeshPlan::StableGrouped(p) => p.params(),
        }
    }

    /// Slots in a cycle.
    pub fn slots(&self) -> usize {
        match self {
            MeshPlan::Full(p) => p.slots(),
            MeshPlan::Stable(p) => p.slots(),
            MeshPlan::Grouped(p) => p.slots(),
            MeshPlan::StableGrouped(p) => p.slots(),
        }
    }

    pub fn cycle(&self) -> Duration {
        match self {
            MeshPlan::Full(p) => p.cycle(),
            MeshPlan::Stable(p) => p.cycle(),
            MeshPlan::Grouped(p) => p.cycle(),
            MeshPlan::StableGrouped(p) => p.cycle(),
        }
    }

    /// Time between the starts of two slots.
    pub fn period(&self) -> Duration {
        match self {
            MeshPlan::Full(p) => p.period(),
            MeshPlan::Stable(p) => p.period(),
            MeshPlan::Grouped(p) => p.period(),
            MeshPlan::StableGrouped(p) => p.period(),
        }
    }

    /// Time a test may take in a slot.
    pub fn slot(&self) -> Duration {
        self.params().slot
    }

    pub fn slot_at(&self, now: Duration) -> SlotAt {
        match self {
            MeshPlan::Full(p) => p.slot_at(now),
            MeshPlan::Stable(p) => p.slot_at(now),
            MeshPlan::Grouped(p) => p.slot_at(now),
            MeshPlan::StableGrouped(p) => p.slot_at(now),
        }
    }

    pub fn cycle_start(&self, cycle: u64) -> Duration {
        match self {
            MeshPlan::Full(p) => p.cycle_start(cycle),
            MeshPlan::Stable(p) => p.cycle_start(cycle),
            MeshPlan::Grouped(p) => p.cycle_start(cycle),
            MeshPlan::StableGrouped(p) => p.cycle_start(cycle),
        }
    }

    pub fn first_cycle_from(&self, t: Duration) -> u64 {
        match self {
            MeshPlan::Full(p) => p.first_cycle_from(t),
            MeshPlan::Stable(p) => p.first_cycle_from(t),
            MeshPlan::Grouped(p) => p.first_cycle_from(t),
            MeshPlan::StableGrouped(p) => p.first_cycle_from(t),
        }
    }

    /// The directed tests of slot `index` of cycle `cycle`.
    pub fn tests(&self, cycle: u64, index: usize) -> Vec<Test> {
        match self {
            MeshPlan::Full(p) => p.tests(index),
            MeshPlan::Stable(p) => p.tests(index),
            MeshPlan::Grouped(p) => p.tests_flat(cycle, index),
            MeshPlan::StableGrouped(p) => p.tests_flat(cycle, index),
        }
    }

    /// Member `me`'s test in slot `index` of cycle `cycle`, if any.
    pub fn test_of(&self, me: usize, cycle: u64, index: usize) -> Option<Test> {
        match self {
            MeshPlan::Full(p) => p.test_of(me, index),
            MeshPlan::Stable(p) => p.test_of(me, index),
            MeshPlan::Grouped(p) => p.test_of(me, cycle, index),
            MeshPlan::StableGrouped(p) => p.test_of(me, cycle, index),
        }
    }

    /// The earliest time at or after `from` from which member `me` has no
    /// planned test (either role) for `need`: no slot of its starts within
    /// a guard after the window, and none ends within a guard before it.
    /// This is where a host may run what the plan does not know about (a
    /// loopback probe) without taking its slot from a peer. `None` when no
    /// gap of the plan is that long (two cycles are searched: a grouped
    /// plan's representatives change from cycle to cycle).
    pub fn next_free(
        &self,
        me: usize,
        from: Duration,
        need: Duration,
        guard: Duration,
    ) -> Option<Duration> {
        let slots = self.slots();
        if slots == 0 || me >= self.members().len() {
            return Some(from);
        }
        let period = self.period();
        // Start from a slot early enough to still hold `from`.
        let at = self.slot_at(from.saturating_sub(self.slot() + guard * 2));
        let (mut cycle, mut index) = (at.cycle, at.index);
        let mut t = from;
        for _ in 0..=2 * slots + 1 {
            if index >= slots {
                index = 0;
                cycle += 1;
            }
            if self.test_of(me, cycle, index).is_some() {
                let start = self.cycle_start(cycle) + period * index as u32;
                if t + need + guard <= start {
                    return Some(t);
                }
                t = t.max(start + self.slot() + guard);
            }
            index += 1;
        }
        None
    }

    /// The cycle the plan needs, whatever the interval asked for: its
    /// slots at the budget (the stable plan's are back to back already,
    /// the budget being in its spare places).
    pub fn needed_cycle(&self) -> Duration {
        match self {
            MeshPlan::Stable(p) => p.needed_cycle(),
            MeshPlan::StableGrouped(p) => p.needed_cycle(),
            _ => {
                let natural = self.slot().saturating_mul(self.slots() as u32);
                natural.div_f64(self.params().budget.clamp(f64::MIN_POSITIVE, 1.0))
            }
        }
    }

    /// Share of time the busiest member spends in tests.
    pub fn share(&self) -> f64 {
        match self {
            MeshPlan::Full(p) => p.share(),
            MeshPlan::Stable(p) => p.share(),
            MeshPlan::Grouped(p) => p.share(),
            MeshPlan::StableGrouped(p) => p.share(),
        }
    }

    /// The plan in a sentence.
    pub fn describe(&self) -> String {
        match self {
            MeshPlan::Full(p) => p.describe(),
            MeshPlan::Stable(p) => p.describe(),
            MeshPlan::Grouped(p) => p.describe(),
            MeshPlan::StableGrouped(p) => p.describe(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(budget: f64) -> MeshParams {
        MeshParams {
            slot: Duration::from_secs(10),
            modules: 1,
            budget,
            min_cycle: Duration::ZERO,
        }
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("h{i}")).collect()
    }

    /// Whether [t, t + need) keeps a guard away from every slot of `me`.
    fn clear(p: &MeshPlan, me: usize, t: Duration, need: Duration, guard: Duration) -> bool {
        let first = p.slot_at(t).cycle.saturating_sub(1);
        (first..first + 4).all(|c| {
            (0..p.slots()).all(|k| {
                let start = p.cycle_start(c) + p.period() * k as u32;
                p.test_of(me, c, k).is_none()
                    || t + need + guard <= start
                    || start + p.slot() + guard <= t
            })
        })
    }

    #[test]
    fn free_windows_keep_clear_of_every_planned_test() {
        let guard = Duration::from_secs(1);
        let base = Duration::from_secs(1_800_000_000);
        let plans: Vec<MeshPlan> = vec![
            // Four hosts: in a test every slot, 10 s gaps between.
            Plan::new(names(4), params(0.5)).into(),
            // Five: each rests two slots in a row per cycle.
            Plan::new(names(5), params(0.5)).into(),
            GroupPlan::new(vec![names(3), vec!["x".into(), "y".into()]], params(0.5)).into(),
            StableGroupPlan::new(
                vec![
                    ("a".into(), names(3)),
                    ("b".into(), vec!["x".into(), "y".into()]),
                ],
                params(0.5),
            )
            .into(),
        ];
        for p in &plans {
            for me in 0..p.members().len() {
                for need in [1, 5, 8, 25] {
                    let need = Duration::from_secs(need);
                    for step in 0..40u64 {
                        let from = base + Duration::from_millis(step * 7_300);
                        let Some(t) = p.next_free(me, from, need, guard) else {
                            continue;
                        };
                        assert!(t >= from);
                        assert!(clear(p, me, t, need, guard), "{me} at {t:?} for {need:?}");
                        // Nothing clear was skipped: a second earlier is not.
                        if t > from {
                            assert!(!clear(p, me, t - Duration::from_secs(1), need, guard));
                        }
                    }
                }
            }
        }
        // The gaps between back-to-back-at-half-budget slots: 20 s apart,
        // 10 s long, less a guard each side: 8 s fit, 9 s never do.
        let four = &plans[0];
        assert!(four
            .next_free(0, base, Duration::from_secs(8), guard)
            .is_some());
        assert_eq!(four.next_free(0, base, Duration::from_secs(9), guard), None);
        // An odd count's rests hold more.
        assert!(plans[1]
            .next_free(0, base, Duration::from_secs(25), guard)
            .is_some());
        // No plan, no limit.
        let alone: MeshPlan = Plan::new(names(1), params(0.5)).into();
        assert_eq!(
            alone.next_free(0, base, Duration::from_secs(99), guard),
            Some(base)
        );
    }
}
