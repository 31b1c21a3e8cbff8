//! Mesh turns at the responder: in mesh mode every member computes the
//! same plan, so this host knows who is meant to probe it and in which
//! slot. A prober that is not a member, or a member probing outside its
//! planned slot, would take the host slot from a planned test and turn it
//! into a `busy` failure that nobody hears of: it is refused with the
//! reason said, and counted as `out_of_turn`.

use std::net::IpAddr;
use std::time::Duration;

use crate::mesh::MeshPlan;

/// The plan as the responder checks it.
#[derive(Debug, Clone, PartialEq)]
pub struct Turns {
    pub plan: MeshPlan,
    /// This host's index among the members.
    pub me: usize,
    /// Each member's address, by index; `None` for one given by name,
    /// which cannot be told apart by address (it is then never refused as
    /// a non-member, and may probe in any of the name-given members' slots).
    pub members: Vec<Option<IpAddr>>,
    /// Margin for clock skew at each end of a slot.
    pub guard: Duration,
}

impl Turns {
    /// Whether `ip` may probe this host at Unix time `now`; if not, why.
    pub fn check(&self, ip: IpAddr, now: Duration) -> Result<(), String> {
        let ip = canonical(ip);
        let mine: Vec<usize> = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, a)| a.is_none_or(|a| canonical(a) == ip))
            .map(|(i, _)| i)
            .collect();
        if mine.is_empty() {
            return Err(format!(
                "out of turn: {ip} is not a member of this host's mesh; mesh members probe it in their planned slots"
            ));
        }
        if self.plan.slots() == 0 {
            return Err(format!(
                "out of turn: this host's mesh plans no test of it by {ip}"
            ));
        }
        // The slots that overlap now, widened by the guard either way: a
        // peer whose clock is up to a guard off is still in its turn.
        let mut seen = Vec::new();
        for t in [now.saturating_sub(self.guard), now, now + self.guard] {
            let at = self.plan.slot_at(t);
            if seen.contains(&(at.cycle, at.index)) {
                continue;
            }
            seen.push((at.cycle, at.index));
            let planned = self
                .plan
                .tests(at.cycle, at.index)
                .into_iter()
                .any(|test| test.target == self.me && mine.contains(&test.prober));
            if planned {
                return Ok(());
            }
        }
        Err(format!(
            "out of turn: {ip} has no planned test of this host in the current {:.0} s slot of the mesh plan (is its clock right?)",
            self.plan.period().as_secs_f64()
        ))
    }
}

/// The plans the responder checks probers against: the one in force and
/// the one before it (members switching at slightly different times are
/// not refused), or a new one not yet in force.
///
/// A new plan is in force from the moment this host's own mesh scheduler
/// switches to it ([`MeshPlan::takes_over_at`]), not from when it is
/// learnt: until then this host still runs the old plan's tests, and a
/// prober that only the new plan sends (a host that just joined, starting
/// on the new plan at once) would take the host slot from one of them and
/// turn it `busy` (issue 22's join lab: a member's planned test in the
/// cycle of a join). It is refused out of turn instead, which costs only
/// the newcomer's own pairs, for that one cycle.
#[derive(Debug, Default)]
pub struct TurnBook {
    /// Each plan with the Unix time it takes over, oldest first.
    plans: Vec<(Turns, Duration)>,
}

impl TurnBook {
    /// A new plan learnt at `now` (`None`: not in mesh mode any more, no
    /// turns to keep); the same plan again changes nothing.
    pub fn set(&mut self, turns: Option<Turns>, now: Duration) {
        let Some(new) = turns else {
            self.plans.clear();
            return;
        };
        if self.plans.last().is_some_and(|(t, _)| *t == new) {
            return;
        }
        // A plan still waiting for its cycle is replaced, as the scheduler
        // replaces its pending plan.
        self.plans.retain(|(_, from)| *from <= now);
        let from = match self.plans.last() {
            Some((current, _)) => new.plan.takes_over_at(&current.plan, now),
            // Nothing to switch from: the scheduler starts at once too.
            None => now,
        };
        self.plans.push((new, from));
        if self.plans.len() > 2 {
            self.plans.remove(0);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }

    /// Whether `ip` may probe this host at Unix time `now` by a plan in
    /// force (the newest first); if not, why (the newest plan's reason).
    pub fn check(&self, ip: IpAddr, now: Duration) -> Result<(), String> {
        let mut why = None;
        for (t, from) in self.plans.iter().rev() {
            if *from > now {
                continue;
            }
            match t.check(ip, now) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    why.get_or_insert(e);
                }
            }
        }
        Err(why.unwrap_or_else(|| {
            format!("out of turn: {ip}: this host's mesh plan is not in force yet")
        }))
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::{MeshParams, Plan};

    fn turns(me: usize) -> Turns {
        let members: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let plan = MeshPlan::Full(Plan::new(
            members,
            MeshParams {
                slot: Duration::from_secs(4),
                modules: 1,
                budget: 1.0,
                min_cycle: Duration::ZERO,
            },
        ));
        Turns {
            plan,
            me,
            members: (1..=3).map(|i| Some(IpAddr::from([10, 0, 0, i]))).collect(),
            guard: Duration::from_secs(1),
        }
    }

    /// Issue 22's join: host d joins a, b and c. Host a learns of it
    /// mid-cycle and keeps running the old plan to the cycle's end; d,
    /// starting fresh, follows the new plan at once. Until a switches, d's
    /// planned probes of a are out of turn (they would take a's slot from
    /// an old-plan test); from the takeover they get in.
    #[test]
    fn a_new_plan_lets_its_probers_in_only_once_this_host_follows_it() {
        let old = turns(0);
        let mut new = turns(0);
        new.plan = MeshPlan::Full(Plan::new(
            ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect(),
            old.plan.params().clone(),
        ));
        new.members.push(Some(IpAddr::from([10, 0, 0, 4])));
        let d = IpAddr::from([10, 0, 0, 4]);
        let mut book = TurnBook::default();
        let start = old.plan.cycle_start(7);
        book.set(Some(old.clone()), start);
        let learnt = start + old.plan.period() * 2 + old.plan.period() / 2;
        book.set(Some(new.clone()), learnt);
        let takeover = new.plan.takes_over_at(&old.plan, learnt);
        assert!(takeover >= old.plan.cycle_start(8), "{takeover:?}");
        // The middle of d's slot on a in the new plan's cycle `c`.
        let d_on_a = |c: u64| {
            (0..new.plan.slots())
                .find(|&k| {
                    new.plan
                        .tests(c, k)
                        .iter()
                        .any(|t| t.prober == 3 && t.target == 0)
                })
                .map(|k| {
                    new.plan.cycle_start(c) + new.plan.period() * k as u32 + new.plan.period() / 2
                })
                .expect("d probes a once a cycle")
        };
        let before = d_on_a(new.plan.slot_at(learnt).cycle);
        assert!(before < takeover);
        // The new plan alone would let d in: the case is real.
        assert_eq!(new.check(d, before), Ok(()));
        let e = book.check(d, before).unwrap_err();
        assert!(e.contains("out of turn"), "{e}");
        let after = d_on_a(new.plan.first_cycle_from(takeover));
        assert_eq!(book.check(d, after), Ok(()));
        // b's old-plan slots on a stay open up to the takeover.
        let b = IpAddr::from([10, 0, 0, 2]);
        let c = old.plan.slot_at(learnt).cycle;
        let open = (0..old.plan.slots())
            .map(|k| old.plan.cycle_start(c) + old.plan.period() * k as u32 + old.plan.period() / 2)
            .filter(|&t| book.check(b, t).is_ok())
            .count();
        assert_eq!(open, 1);
        // The same plan again changes nothing; no plan at all lets anyone in
        // (the responder checks turns only while it has some).
        book.set(Some(new.clone()), after);
        assert_eq!(book.check(d, after), Ok(()));
        book.set(None, after);
        assert!(book.is_empty());
    }

    #[test]
    fn only_the_planned_prober_in_its_slot_gets_in() {
        let t = turns(0);
        let plan = &t.plan;
        let a = |i: u8| IpAddr::from([10, 0, 0, i]);
        // A non-member is refused at any time.
        let e = t
            .check(IpAddr::from([10, 9, 9, 9]), plan.cycle_start(5))
            .unwrap_err();
        assert!(e.contains("not a member"), "{e}");
        let mut allowed = 0;
        let mut refused = 0;
        for index in 0..plan.slots() {
            // Mid-slot: more than a guard from either end.
            let mid = plan.cycle_start(7) + plan.period() * index as u32 + plan.period() / 2;
            assert!(plan.period() / 2 > t.guard);
            for prober in 1..3 {
                let planned = plan
                    .tests(7, index)
                    .iter()
                    .any(|x| x.target == 0 && x.prober == prober);
                match t.check(a(prober as u8 + 1), mid) {
                    Ok(()) => {
                        assert!(planned, "member {prober} let in out of its slot {index}");
                        allowed += 1;
                    }
                    Err(e) => {
                        assert!(!planned, "member {prober} refused in its slot: {e}");
                        assert!(e.contains("out of turn"), "{e}");
                        refused += 1;
                    }
                }
            }
        }
        // Both other members probe `a` once a cycle, and are refused in
        // every other slot.
        assert_eq!(allowed, 2);
        assert_eq!(refused, 2 * plan.slots() - 2);
        // An IPv4 member reaching a dual-stack socket is itself.
        let mapped: IpAddr = "::ffff:10.0.0.9".parse().unwrap();
        assert!(t.check(mapped, plan.cycle_start(1)).is_err());
    }
}
