//! A model of a fleet following a mesh plan through membership churn, for
//! the simulator (`examples/mesh_sim.rs`) and the tests that hold the
//! plans to their churn figures (docs/MESH.md).
//!
//! Per host: a clock off by up to ±`skew`; a test occupies its two hosts
//! for `occupancy` from a guard into its slot by the prober's clock; a test
//! that finds either host in another one is refused (`busy`, counted), as
//! the host slot does. With churn, once per cycle one host leaves and a new
//! one joins; each host learns of it up to `learn` later (a discovery
//! refresh) and follows the new list from the next cycle boundary after
//! that, as the scheduler does. Half the changes fall `10 s` before a
//! boundary, so that hosts on both sides of it follow different lists for
//! a whole cycle: the pessimistic case.
//!
//! A grouped plan runs the same model ([`run_grouped`]): host `i` is in
//! group `i mod groups` (the joiners too, so that sizes wander), and its
//! coverage is that of the pairs the plan promises every cycle: directed
//! pairs inside a group, and directed pairs of groups by whichever
//! members.
//!
//! Pure and seeded: the same figures on every run.

use std::collections::{HashMap, HashSet};

use super::MeshPlan;

/// xorshift64*: reproducible runs.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The hosts' behaviour, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// Time a test occupies both hosts (run plus set-up).
    pub occupancy: f64,
    /// A test starts this far into its slot (`scheduler.mesh.guard`).
    pub guard: f64,
    /// Each host's clock is off by up to this, either way.
    pub skew: f64,
    /// A host learns of a change up to this much later.
    pub learn: f64,
}

impl Default for Model {
    /// TCP 1+5 s with 2 s of set-up used, a 1 s guard, ±50 ms of skew and
    /// a 30 s discovery refresh: docs/MESH.md's model.
    fn default() -> Self {
        Model {
            occupancy: 8.0,
            guard: 1.0,
            skew: 0.05,
            learn: 30.0,
        }
    }
}

/// What a run showed.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Cycle of the first plan, in seconds.
    pub cycle: f64,
    /// Tests started.
    pub tests: u64,
    /// Tests refused because a host was in another one.
    pub busy: u64,
    /// Longest gap between clean measurements of a directed pair whose two
    /// hosts stayed throughout (from the start, and to the end); in a
    /// grouped plan, of the pairs inside a group.
    pub coverage: f64,
    /// Grouped plans: longest gap between clean measurements of a directed
    /// pair of groups, by any of their members (0 for a full mesh).
    pub coverage_groups: f64,
    /// Share of time in tests: mean over hosts (those joined late or gone
    /// early count too), and the busiest host's.
    pub share_mean: f64,
    pub share_max: f64,
}

impl Figures {
    /// Share of tests refused.
    pub fn busy_share(&self) -> f64 {
        if self.tests == 0 {
            0.0
        } else {
            self.busy as f64 / self.tests as f64
        }
    }
}

/// Host `i`'s name.
pub fn name(i: usize) -> String {
    format!("h{i:05}")
}

/// The index of a host named by [`name`].
fn index(name: &str) -> usize {
    name.get(1..).and_then(|i| i.parse().ok()).unwrap_or(0)
}

/// `members` (named by [`name`]) with their group's label value: host `i`
/// in group `i mod groups`, for the grouped plans' `by_label`.
pub fn labelled(members: Vec<String>, groups: usize) -> Vec<(String, String)> {
    members
        .into_iter()
        .map(|m| {
            let g = index(&m) % groups.max(1);
            (m, format!("g{g:03}"))
        })
        .collect()
}

/// `n` hosts over `cycles` cycles of the plans `make` builds from each
/// member list; with `churn`, one host leaves and one joins per cycle.
pub fn run(
    n: usize,
    cycles: u64,
    churn: bool,
    model: Model,
    make: &dyn Fn(Vec<String>) -> MeshPlan,
    rng: &mut Rng,
) -> Figures {
    simulate(n, cycles, churn, model, make, None, rng)
}

/// [`run`] for a grouped plan whose `make` puts host `i` in group
/// `i mod groups` ([`labelled`]): coverage of the pairs inside a group and
/// of the pairs of groups.
pub fn run_grouped(
    n: usize,
    groups: usize,
    cycles: u64,
    churn: bool,
    model: Model,
    make: &dyn Fn(Vec<String>) -> MeshPlan,
    rng: &mut Rng,
) -> Figures {
    simulate(n, cycles, churn, model, make, Some(groups.max(1)), rng)
}

fn simulate(
    n: usize,
    cycles: u64,
    churn: bool,
    model: Model,
    make: &dyn Fn(Vec<String>) -> MeshPlan,
    groups: Option<usize>,
    rng: &mut Rng,
) -> Figures {
    // Host `h`'s group: all in one for a full mesh.
    let group_of = |h: usize| groups.map_or(0, |g| h % g);
    let total = n + if churn { cycles as usize } else { 0 };
    let skew: Vec<f64> = (0..total)
        .map(|_| (rng.unit() * 2.0 - 1.0) * model.skew)
        .collect();
    let mut versions: Vec<Vec<usize>> = vec![(0..n).collect()];
    let first = make(versions[0].iter().map(|&i| name(i)).collect());
    let cycle = first.cycle().as_secs_f64();
    let horizon = cycle * cycles as f64;
    // adopt[v][h]: time from which host h follows version v.
    let mut adopt: Vec<Vec<f64>> = vec![vec![0.0; total]];
    if churn {
        for c in 0..cycles.saturating_sub(1) {
            let mut members = versions.last().cloned().unwrap_or_default();
            let leaving = (rng.next_u64() % members.len() as u64) as usize;
            members.remove(leaving);
            members.push(n + c as usize);
            members.sort();
            let at = cycle * c as f64
                + if rng.unit() < 0.5 {
                    cycle - 10.0
                } else {
                    cycle * rng.unit()
                };
            let times = (0..total)
                .map(|_| {
                    let learned = at + rng.unit() * model.learn;
                    ((learned / cycle).floor() + 1.0) * cycle
                })
                .collect();
            versions.push(members);
            adopt.push(times);
        }
    }
    let plans: Vec<MeshPlan> = versions
        .iter()
        .map(|m| make(m.iter().map(|&i| name(i)).collect()))
        .collect();
    let version_of = |h: usize, t: f64| -> usize {
        (0..plans.len())
            .rev()
            .find(|&v| adopt[v][h] <= t)
            .unwrap_or(0)
    };
    // A host joins and leaves at the first adoption of the version that
    // adds or drops it.
    let change: Vec<f64> = adopt
        .iter()
        .map(|a| a.iter().cloned().fold(f64::MAX, f64::min))
        .collect();
    let mut joined = vec![f64::MAX; total];
    let mut left = vec![f64::MAX; total];
    for (v, m) in versions.iter().enumerate() {
        let set: HashSet<usize> = m.iter().copied().collect();
        for h in 0..total {
            if set.contains(&h) && joined[h] == f64::MAX {
                joined[h] = if v == 0 { 0.0 } else { change[v] };
            } else if !set.contains(&h) && joined[h] < f64::MAX && left[h] == f64::MAX {
                left[h] = change[v];
            }
        }
    }
    let alive = |h: usize, t: f64| joined[h] <= t && t < left[h];
    // (start, prober, target)
    let mut tests: Vec<(f64, u32, u32)> = Vec::new();
    for (v, plan) in plans.iter().enumerate() {
        let period = plan.period().as_secs_f64();
        let span = plan.cycle().as_secs_f64();
        for c in 0..(horizon / span).ceil() as u64 {
            for k in 0..plan.slots() {
                let local = span * c as f64 + period * k as f64 + model.guard;
                for t in plan.tests(c, k) {
                    let p = versions[v][t.prober];
                    let q = versions[v][t.target];
                    let start = local - skew[p];
                    if start < horizon
                        && version_of(p, start) == v
                        && alive(p, start)
                        && alive(q, start)
                    {
                        tests.push((start, p as u32, q as u32));
                    }
                }
            }
        }
    }
    tests.sort_by(|a, b| a.0.total_cmp(&b.0));
    let stayed: Vec<bool> = (0..total)
        .map(|h| h < n && versions.iter().all(|m| m.contains(&h)))
        .collect();
    let mut until = vec![f64::MIN; total];
    let mut busy_time = vec![0.0; total];
    let mut last: HashMap<(u32, u32), (f64, f64)> = HashMap::new();
    let mut last_groups: HashMap<(usize, usize), (f64, f64)> = HashMap::new();
    let mut f = Figures {
        cycle,
        ..Figures::default()
    };
    for &(start, p, q) in &tests {
        f.tests += 1;
        let (pi, qi) = (p as usize, q as usize);
        if until[pi] > start || until[qi] > start {
            f.busy += 1;
            continue;
        }
        let end = start + model.occupancy;
        until[pi] = end;
        until[qi] = end;
        busy_time[pi] += model.occupancy;
        busy_time[qi] += model.occupancy;
        let (gp, gq) = (group_of(pi), group_of(qi));
        let e = if gp != gq {
            // A pair of groups is promised whoever represents them.
            last_groups.entry((gp, gq)).or_insert((0.0, 0.0))
        } else if stayed[pi] && stayed[qi] {
            last.entry((p, q)).or_insert((0.0, 0.0))
        } else {
            continue;
        };
        e.1 = e.1.max(start - e.0);
        e.0 = start;
    }
    // The longest gap of any pair, the one to the end included.
    let gap = |m: &mut dyn Iterator<Item = &(f64, f64)>| {
        m.map(|(l, gap)| gap.max(horizon - l)).fold(0.0, f64::max)
    };
    // Directed pairs of stayers in one group, and of groups.
    let mut stayers: HashMap<usize, usize> = HashMap::new();
    for h in (0..total).filter(|&h| stayed[h]) {
        *stayers.entry(group_of(h)).or_default() += 1;
    }
    let pairs: usize = stayers.values().map(|s| s * s.saturating_sub(1)).sum();
    f.coverage = if last.len() < pairs {
        f64::INFINITY
    } else {
        gap(&mut last.values())
    };
    let g = groups.map_or(1, |g| g.min(total));
    f.coverage_groups = if last_groups.len() < g * (g - 1) {
        f64::INFINITY
    } else {
        gap(&mut last_groups.values())
    };
    let shares: Vec<f64> = busy_time.iter().map(|b| b / horizon).collect();
    f.share_max = shares.iter().cloned().fold(0.0, f64::max);
    f.share_mean = shares.iter().sum::<f64>() / shares.len().max(1) as f64;
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::{GroupPlan, MeshParams, Plan, StableGroupPlan, StablePlan};
    use std::time::Duration;

    fn params() -> MeshParams {
        MeshParams {
            slot: Duration::from_secs(11),
            modules: 1,
            budget: 0.5,
            min_cycle: Duration::ZERO,
        }
    }

    fn circle(m: Vec<String>) -> MeshPlan {
        Plan::new(m, params()).into()
    }

    fn stable(m: Vec<String>) -> MeshPlan {
        StablePlan::new(m, params()).into()
    }

    /// With one host leaving and one joining per cycle,
    /// the circle plan's coverage period grows to about three cycles and
    /// several percent of tests are `busy`; the stable plan keeps coverage
    /// within 1.2 × the circle plan's cycle and `busy` under 1%.
    #[test]
    fn churn_costs_the_stable_plan_a_slot_not_a_cycle() {
        let sizes: &[(usize, u64)] = if cfg!(debug_assertions) {
            &[(100, 6)]
        } else {
            &[(100, 6), (1000, 3)]
        };
        for &(n, cycles) in sizes {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            let before = run(n, cycles, true, Model::default(), &circle, &mut rng);
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            let after = run(n, cycles, true, Model::default(), &stable, &mut rng);
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            let calm = run(n, cycles, false, Model::default(), &stable, &mut rng);
            let today = before.cycle;
            println!(
                "{n} hosts, {cycles} cycles, churn: circle plan cycle {:.1} min, coverage {:.1} min ({:.2}×), busy {} of {} ({:.2}%); stable plan cycle {:.1} min, coverage {:.1} min ({:.2}× the circle's cycle, {:.2}× its own), busy {} of {} ({:.2}%); without churn {:.1} min, busy {}",
                today / 60.0,
                before.coverage / 60.0,
                before.coverage / today,
                before.busy,
                before.tests,
                before.busy_share() * 100.0,
                after.cycle / 60.0,
                after.coverage / 60.0,
                after.coverage / today,
                after.coverage / after.cycle,
                after.busy,
                after.tests,
                after.busy_share() * 100.0,
                calm.coverage / 60.0,
                calm.busy
            );
            // The bug: churn costs the circle plan whole cycles (and at
            // 100 hosts, whose 5 changes include ones just before a
            // boundary, `busy` tests).
            assert!(before.coverage > 1.5 * today, "{n}: {before:?}");
            if n == 100 {
                assert!(before.busy_share() > 0.01, "{n}: {before:?}");
            }
            // The fix.
            assert!(after.coverage <= 1.2 * today, "{n}: {after:?}");
            assert!(after.busy_share() < 0.01, "{n}: {after:?}");
            // Without churn, no collision and every pair once a cycle.
            assert_eq!(calm.busy, 0);
            assert!(calm.coverage <= calm.cycle * 1.001, "{calm:?}");
        }
    }

    /// Groups of about √N (10 of
    /// 10, 32 of 31-32), one host leaving and one joining per cycle. By
    /// the circle method a change renumbers its group, and a change of
    /// the largest group's size changes the cycle: pairs go unmeasured for
    /// a cycle or more. At 1,000 hosts the stable grouped plan keeps the
    /// coverage of the pairs inside a group and of the pairs of groups
    /// within 1.2 × the circle method's cycle, and `busy` under 1%. At 100
    /// hosts it does not: in groups of 10 a join or a leave often moves
    /// another member's place (one bucket of 22 places), and a pair of a
    /// moved member that meets a host on the other list in the cycle of
    /// the change misses that cycle; it only does better than the circle
    /// method there.
    #[test]
    fn churn_costs_the_grouped_plan_a_slot_not_a_cycle() {
        let sizes: &[(usize, u64)] = if cfg!(debug_assertions) {
            &[(100, 6)]
        } else {
            &[(100, 6), (1000, 4)]
        };
        for &(n, cycles) in sizes {
            let size = (n as f64).sqrt().round() as usize;
            let groups = n.div_ceil(size);
            let circle = move |m: Vec<String>| -> MeshPlan {
                GroupPlan::by_label(labelled(m, groups), params()).into()
            };
            let stable = move |m: Vec<String>| -> MeshPlan {
                StableGroupPlan::by_label(labelled(m, groups), params()).into()
            };
            let seed = 0x9e37_79b9_7f4a_7c15;
            let model = Model::default();
            let before = run_grouped(n, groups, cycles, true, model, &circle, &mut Rng(seed));
            let after = run_grouped(n, groups, cycles, true, model, &stable, &mut Rng(seed));
            let calm = run_grouped(n, groups, cycles, false, model, &stable, &mut Rng(seed));
            let today = before.cycle;
            let worst = |f: &Figures| f.coverage.max(f.coverage_groups);
            println!(
                "{n} hosts in {groups} groups, {cycles} cycles, churn: circle method cycle {:.1} min, \
                 coverage inside {:.1} min, of groups {:.1} min ({:.2}×), busy {} of {} ({:.2}%); \
                 stable cycle {:.1} min, coverage inside {:.1} min, of groups {:.1} min ({:.2}× the circle's cycle, \
                 {:.2}× its own), busy {} of {} ({:.2}%); without churn {:.1} / {:.1} min, busy {}",
                today / 60.0,
                before.coverage / 60.0,
                before.coverage_groups / 60.0,
                worst(&before) / today,
                before.busy,
                before.tests,
                before.busy_share() * 100.0,
                after.cycle / 60.0,
                after.coverage / 60.0,
                after.coverage_groups / 60.0,
                worst(&after) / today,
                worst(&after) / after.cycle,
                after.busy,
                after.tests,
                after.busy_share() * 100.0,
                calm.coverage / 60.0,
                calm.coverage_groups / 60.0,
                calm.busy
            );
            // The bug: churn costs the circle method whole cycles.
            assert!(worst(&before) > 1.5 * today, "{n}: {before:?}");
            // The fix: within 1.2 cycles at 1,000 hosts, better at 100.
            if n >= 1000 {
                assert!(worst(&after) <= 1.2 * today, "{n}: {after:?}");
            } else {
                assert!(worst(&after) < worst(&before), "{n}: {after:?}");
            }
            assert!(after.busy_share() < 0.01, "{n}: {after:?}");
            // Without churn, no collision and every pair once a cycle.
            assert_eq!(calm.busy, 0);
            assert!(worst(&calm) <= calm.cycle * 1.001, "{calm:?}");
        }
    }
}
