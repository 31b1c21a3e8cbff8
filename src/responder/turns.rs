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
