//! Mesh turns at the responder: in mesh mode every member computes the
//! same plan, so this host knows when its planned tests are, in either
//! role, and who is meant to probe it in each slot. The host slot is what
//! is protected, not a list of who may ask: the planned prober in its slot
//! is let in; anyone else (a member off its slot, a probe by hand from the
//! CLI or `/probe`, a stranger) is let in only when the plan leaves this
//! host idle for the whole test, and the test is cut where that gap ends.
//! A test that would overlap a planned one is told `busy` with the next
//! free gap, and counted as `out_of_turn`: taking the host slot from a
//! planned test would turn it into a `busy` failure that nobody hears of.

use std::net::IpAddr;
use std::time::Duration;

use crate::mesh::MeshPlan;

/// Time a test by hand needs beyond its run, for its connections, the
/// handshake and the results: asked for with the gap it must fit in.
pub const HAND_SETUP: Duration = Duration::from_secs(1);

/// The plan as the responder checks it.
#[derive(Debug, Clone, PartialEq)]
pub struct Turns {
    pub plan: MeshPlan,
    /// This host's index among the members.
    pub me: usize,
    /// Each member's address, by index; `None` for one given by name,
    /// which cannot be told apart by address (it may probe in any of the
    /// name-given members' slots).
    pub members: Vec<Option<IpAddr>>,
    /// Margin for clock skew at each end of a slot.
    pub guard: Duration,
}

/// Why a prober may take the host slot now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// It is the planned prober of this slot.
    Planned,
    /// The plan leaves this host idle for the test: it must be over by
    /// Unix time `until` (`None`: no planned test of this host follows).
    Gap { until: Option<Duration> },
}

/// A test refused because it would overlap a planned one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What the prober is told: the next free gap and when to retry.
    pub message: String,
    /// How long until that gap.
    pub retry_after: Duration,
}

impl Turns {
    /// Whether `ip` is planned to probe this host in a slot at Unix time
    /// `now`, widened by the guard either way: a peer whose clock is up to
    /// a guard off is still in its turn.
    pub fn planned(&self, ip: IpAddr, now: Duration) -> bool {
        let ip = canonical(ip);
        let mine: Vec<usize> = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, a)| a.is_none_or(|a| canonical(a) == ip))
            .map(|(i, _)| i)
            .collect();
        if mine.is_empty() || self.plan.slots() == 0 {
            return false;
        }
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
                return true;
            }
        }
        false
    }

    /// The members whose own planned tests a test asked for by `ip` must
    /// keep clear of, besides this host: a member asking by address (its
    /// own host slot is as busy as this one's in its planned tests).
    fn askers(&self, ip: Option<IpAddr>) -> Vec<usize> {
        let Some(ip) = ip.map(canonical) else {
            return Vec::new();
        };
        self.members
            .iter()
            .enumerate()
            .filter(|(i, a)| *i != self.me && a.is_some_and(|a| canonical(a) == ip))
            .map(|(i, _)| i)
            .collect()
    }

    /// Whether the plan leaves this host, and the member asking from
    /// `ip` if it is one, idle from Unix time `now` for `need`, a guard
    /// clear of their planned tests on either side: `Ok` with when the
    /// gap ends (a guard before the next planned test of either), or
    /// `Err` with the next time it starts (`None`: no gap is that long).
    pub fn gap(
        &self,
        ip: Option<IpAddr>,
        now: Duration,
        need: Duration,
    ) -> Result<Option<Duration>, Option<Duration>> {
        let mut who = vec![self.me];
        who.extend(self.askers(ip));
        // The earliest time every one of them is free: each one's next
        // gap from the latest so far, until they agree.
        let mut t = now;
        let mut agreed = false;
        for _ in 0..4 * self.plan.slots().max(1) {
            let mut latest = t;
            for &w in &who {
                match self.plan.next_free(w, t, need, self.guard) {
                    Some(f) => latest = latest.max(f),
                    None => return Err(None),
                }
            }
            if latest == t {
                agreed = true;
                break;
            }
            t = latest;
        }
        if !agreed {
            return Err(None);
        }
        if t != now {
            return Err(Some(t));
        }
        Ok(who
            .iter()
            .filter_map(|&w| self.next_planned(w, now))
            .min()
            .map(|t| t.saturating_sub(self.guard)))
    }

    /// The start of member `who`'s first planned test (either role) at or
    /// after Unix time `now`, within two cycles.
    fn next_planned(&self, who: usize, now: Duration) -> Option<Duration> {
        let slots = self.plan.slots();
        if slots == 0 || who >= self.plan.members().len() {
            return None;
        }
        let at = self.plan.slot_at(now);
        let (mut cycle, mut index) = (at.cycle, at.index);
        for _ in 0..=2 * slots + 1 {
            if index >= slots {
                index = 0;
                cycle += 1;
            }
            let start = self.plan.cycle_start(cycle) + self.plan.period() * index as u32;
            if start >= now && self.plan.test_of(who, cycle, index).is_some() {
                return Some(start);
            }
            index += 1;
        }
        None
    }

    /// Whether `ip` may take the host slot at Unix time `now` for a test
    /// of `need` (its run and [`HAND_SETUP`]).
    pub fn check(&self, ip: IpAddr, now: Duration, need: Duration) -> Result<Admit, Refusal> {
        if self.planned(ip, now) {
            return Ok(Admit::Planned);
        }
        self.gap(Some(ip), now, need)
            .map(|until| Admit::Gap { until })
            .map_err(|next| refusal(now, need, next, self.plan.cycle()))
    }
}

/// What a test that does not fit is told: when the next gap that fits it
/// starts, as a time of day in UTC and as a wait.
fn refusal(now: Duration, need: Duration, next: Option<Duration>, cycle: Duration) -> Refusal {
    match next {
        Some(at) => {
            let wait = at.saturating_sub(now);
            Refusal {
                message: format!(
                    "busy: a planned mesh test of this member or of the prober is due within \
                     this test's {:.0} s; their next free gap starts at {} UTC, retry in {} s",
                    need.as_secs_f64().ceil(),
                    time_of_day(at),
                    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
                ),
                retry_after: wait,
            }
        }
        None => Refusal {
            message: format!(
                "busy: no gap between the planned mesh tests of this member and the prober \
                 is {:.0} s long; ask for a shorter test",
                need.as_secs_f64().ceil()
            ),
            retry_after: cycle,
        },
    }
}

/// Unix time as `HH:MM:SS` of its UTC day.
fn time_of_day(t: Duration) -> String {
    let s = t.as_secs() % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
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
/// turn it `busy` (the join lab: a member's planned test in the
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

    /// Whether `ip` may take the host slot at Unix time `now` for a test
    /// of `need`: as the planned prober of a plan in force, or in a gap
    /// that every plan kept leaves idle (the one before, for members that
    /// switched later; one waiting for its cycle, for tests that would run
    /// into it), cut at the earliest end of those gaps.
    pub fn check(&self, ip: IpAddr, now: Duration, need: Duration) -> Result<Admit, Refusal> {
        let in_force = self.plans.iter().filter(|(_, from)| *from <= now);
        if in_force.clone().any(|(t, _)| t.planned(ip, now)) {
            return Ok(Admit::Planned);
        }
        self.gap(Some(ip), now, need)
            .map(|until| Admit::Gap { until })
    }

    /// Whether every plan kept leaves this host (and the member asking
    /// from `ip`, if one does) idle from Unix time `now` for `need`: `Ok`
    /// with the earliest end of those gaps (`None`: no planned test
    /// follows), or the refusal naming the next gap.
    pub fn gap(
        &self,
        ip: Option<IpAddr>,
        now: Duration,
        need: Duration,
    ) -> Result<Option<Duration>, Refusal> {
        let mut until: Option<Duration> = None;
        let mut next: Option<Option<Duration>> = None;
        for (t, _) in &self.plans {
            match t.gap(ip, now, need) {
                Ok(end) => {
                    if let Some(end) = end {
                        until = Some(until.map_or(end, |u| u.min(end)));
                    }
                }
                // The latest of the plans' next gaps: none is free before.
                Err(at) => {
                    next = Some(match (next, at) {
                        (None, at) => at,
                        (Some(Some(a)), Some(b)) => Some(a.max(b)),
                        _ => None,
                    })
                }
            }
        }
        match next {
            None => Ok(until),
            Some(at) => {
                let cycle = self
                    .plans
                    .last()
                    .map_or(Duration::from_secs(60), |(t, _)| t.plan.cycle());
                Err(refusal(now, need, at, cycle))
            }
        }
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

    const NEED: Duration = Duration::from_secs(1);

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

    /// Whether member `me` has a planned test (either role) overlapping
    /// `[from, to]`, widened by the guard.
    fn overlaps_planned(t: &Turns, from: Duration, to: Duration) -> bool {
        let p = &t.plan;
        let c = p.slot_at(from).cycle;
        (c.saturating_sub(1)..c + 3).any(|cycle| {
            (0..p.slots()).any(|k| {
                let start = p.cycle_start(cycle) + p.period() * k as u32;
                p.test_of(t.me, cycle, k).is_some()
                    && start < to + t.guard
                    && start + p.slot() + t.guard > from
            })
        })
    }

    /// A join: host d joins a, b and c. Host a learns of it
    /// mid-cycle and keeps running the old plan to the cycle's end; d,
    /// starting fresh, follows the new plan at once. Until a switches, d's
    /// planned probes of a would take a's slot from an old-plan test and
    /// are told busy; from the takeover they are the planned ones.
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
        assert_eq!(new.check(d, before, NEED), Ok(Admit::Planned));
        let e = book.check(d, before, NEED).unwrap_err();
        assert!(e.message.starts_with("busy:"), "{e:?}");
        let after = d_on_a(new.plan.first_cycle_from(takeover));
        assert_eq!(book.check(d, after, NEED), Ok(Admit::Planned));
        // b's old-plan slots on a stay planned up to the takeover.
        let b = IpAddr::from([10, 0, 0, 2]);
        let c = old.plan.slot_at(learnt).cycle;
        let open = (0..old.plan.slots())
            .map(|k| old.plan.cycle_start(c) + old.plan.period() * k as u32 + old.plan.period() / 2)
            .filter(|&t| book.check(b, t, NEED) == Ok(Admit::Planned))
            .count();
        assert_eq!(open, 1);
        // The same plan again changes nothing; no plan at all lets anyone in
        // (the responder checks turns only while it has some).
        book.set(Some(new.clone()), after);
        assert_eq!(book.check(d, after, NEED), Ok(Admit::Planned));
        book.set(None, after);
        assert!(book.is_empty());
    }

    /// Admission is by the host slot's state, not by who asks: in a slot
    /// where this host has a planned test only its planned prober gets in;
    /// where the plan leaves it (and a member asking, its own slot) idle
    /// for the whole test, anyone does (a probe by hand, a member off its
    /// slot, a stranger), to be cut before the next planned test; everyone
    /// else is told the next gap, and a retry then is let in. Checked every
    /// 250 ms over a cycle of a plan at budget 1 (this host rests in two
    /// slots) and at budget 0.4 (every slot has room after its test).
    #[test]
    fn only_the_planned_prober_gets_a_planned_slot_and_anyone_an_idle_gap() {
        for budget in [1.0, 0.4] {
            let mut t = turns(0);
            t.plan = MeshPlan::Full(Plan::new(
                ["a", "b", "c"].iter().map(|s| s.to_string()).collect(),
                MeshParams {
                    budget,
                    ..t.plan.params().clone()
                },
            ));
            let plan = &t.plan;
            let a = |i: u8| IpAddr::from([10, 0, 0, i]);
            let stranger = IpAddr::from([10, 9, 9, 9]);
            let mut planned_slots = std::collections::BTreeSet::new();
            let (mut member_gaps, mut stranger_gaps, mut refused) = (0, 0, 0);
            let start = plan.cycle_start(7);
            let mut now = start;
            while now < start + plan.cycle() {
                let slot = plan.slot_at(now);
                for prober in 1..4 {
                    let ip = if prober < 3 {
                        a(prober as u8 + 1)
                    } else {
                        stranger
                    };
                    let who = |k: usize| [0, prober].contains(&k) && k < 3;
                    let its_turn = plan
                        .tests(slot.cycle, slot.index)
                        .iter()
                        .any(|x| x.target == 0 && x.prober == prober);
                    let mid =
                        now >= slot.start + t.guard && now + t.guard < slot.start + plan.slot();
                    match t.check(ip, now, NEED) {
                        Ok(Admit::Planned) => {
                            assert!(prober < 3, "a stranger is nobody's planned prober");
                            // Near a slot's ends the guard lets in the
                            // neighbouring slot's prober too.
                            if mid {
                                assert!(its_turn, "{prober} let into slot {}", slot.index);
                                planned_slots.insert((slot.index, prober));
                            }
                        }
                        Ok(Admit::Gap { until }) => {
                            let until = until.expect("the plan has tests ahead");
                            assert!(until >= now + NEED, "{until:?}");
                            for k in (0..3).filter(|&k| who(k)) {
                                let me = Turns { me: k, ..t.clone() };
                                assert!(!overlaps_planned(&me, now, until), "{k} at {now:?}");
                            }
                            if prober < 3 {
                                member_gaps += 1;
                            } else {
                                stranger_gaps += 1;
                            }
                        }
                        Err(e) => {
                            assert!(!(its_turn && mid), "{prober} refused in its turn: {e:?}");
                            assert!(e.message.starts_with("busy:"), "{e:?}");
                            assert!(!e.message.contains("clock"), "{e:?}");
                            // Refused only for a planned test in the way.
                            assert!(
                                (0..3).filter(|&k| who(k)).any(|k| {
                                    let me = Turns { me: k, ..t.clone() };
                                    overlaps_planned(&me, now, now + NEED)
                                }),
                                "{prober} at {now:?}: {e:?}"
                            );
                            // The gap it is told of lets it in.
                            if !e.message.contains("no gap") {
                                let retry = now + e.retry_after;
                                // (As the planned prober, within a guard of
                                // its slot, or in the gap.)
                                assert!(
                                    t.check(ip, retry, NEED).is_ok(),
                                    "{prober} at {now:?}: {e:?}"
                                );
                            }
                            refused += 1;
                        }
                    }
                }
                now += Duration::from_millis(250);
            }
            // Both other members probe `a` once a cycle, in their slot.
            assert_eq!(planned_slots.len(), 2, "budget {budget}: {planned_slots:?}");
            assert!(stranger_gaps > 0, "budget {budget}");
            assert!(refused > 0, "budget {budget}");
            // At budget 1 two members are never idle together (a 3-mesh
            // pairs two of the three in every slot); below it they are.
            assert_eq!(member_gaps > 0, budget < 1.0, "budget {budget}");
            // A test longer than any gap is told so.
            let e = t
                .check(stranger, start, Duration::from_secs(600))
                .unwrap_err();
            assert!(e.message.contains("no gap"), "{e:?}");
            // An IPv4 member reaching a dual-stack socket is itself.
            let mapped: IpAddr = "::ffff:10.0.0.2".parse().unwrap();
            let mid = start + plan.slot() / 2;
            assert_eq!(t.planned(mapped, mid), t.planned(a(2), mid));
        }
    }

    #[test]
    fn times_of_day_are_utc() {
        assert_eq!(
            time_of_day(Duration::from_secs(86_400 * 3 + 3_723)),
            "01:02:03"
        );
    }
}
