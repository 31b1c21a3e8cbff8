//! Mesh mode's plan from the configuration: the members (every peer with
//! an address, static or discovered, this host included), the modules,
//! the slot length and the jobs this host runs, plus the sentences that
//! state the cost (`check-config`, the startup log).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::config::{Config, Module};
use crate::discovery::DiscoveredTarget;
use crate::mesh::{MeshParams, Plan};
use crate::probe::Target;
use crate::scheduler::mesh::MeshSchedule;
use crate::scheduler::Job;

use super::jobs::{self, ProbeJob};

/// The measured time of one run of `module`: a `both` module runs twice.
pub fn run_time(module: &Module) -> Duration {
    (module.omit + module.duration) * module.specs().len().max(1) as u32
}

/// Every member's name (sorted), which one this host is, and the mesh's
/// modules (sorted).
fn members(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: &impl Fn(&Target) -> bool,
) -> (Vec<String>, Option<String>, Vec<String>) {
    let mut names = BTreeSet::new();
    let mut me = None;
    let mut modules = BTreeSet::new();
    let mut add = |name: &str, endpoint: &Target, mods: &[String]| {
        names.insert(name.to_string());
        if is_local(endpoint) && me.is_none() {
            me = Some(name.to_string());
        }
        modules.extend(
            mods.iter()
                .filter(|m| config.module(m).is_some_and(|m| !m.is_loopback()))
                .cloned(),
        );
    };
    for t in &config.targets {
        if let Some(Ok(e)) = t.endpoint() {
            add(t.name(), &e, &t.modules);
        }
    }
    for d in discovered {
        add(&d.name, &d.endpoint, &d.modules);
    }
    (
        names.into_iter().collect(),
        me,
        modules.into_iter().collect(),
    )
}

/// The plan for `config` and `discovered`, and this host's index in it
/// (`None` when this host is not among the members).
pub fn plan(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: impl Fn(&Target) -> bool,
) -> (Plan, Option<usize>, Vec<String>) {
    let (members, me, modules) = members(config, discovered, &is_local);
    let m = &config.scheduler.mesh;
    let longest = modules
        .iter()
        .filter_map(|name| config.module(name))
        .map(run_time)
        .max()
        .unwrap_or_default();
    let plan = Plan::new(
        members,
        MeshParams {
            slot: longest + m.setup + m.guard,
            modules: modules.len().max(1),
            budget: m.budget,
            min_cycle: requested_interval(config, discovered),
        },
    );
    let me = me.and_then(|n| plan.index_of(&n));
    (plan, me, modules)
}

/// The shortest interval any peer asks for: the cycle the user wants.
fn requested_interval(config: &Config, discovered: &[DiscoveredTarget]) -> Duration {
    config
        .targets
        .iter()
        .filter(|t| matches!(t.endpoint(), Some(Ok(_))))
        .map(|t| config.interval_of(t))
        .chain(
            discovered
                .iter()
                .map(|d| d.interval.unwrap_or(config.scheduler.default_interval)),
        )
        .min()
        .unwrap_or(config.scheduler.default_interval)
}

/// This host's mesh schedule, and the jobs the plain scheduler keeps
/// (loopback modules); `None` when this host is not a member, in which
/// case the plain scheduler runs everything.
pub fn schedule(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: impl Fn(&Target) -> bool + Copy,
) -> Option<(MeshSchedule<ProbeJob>, Vec<Job<ProbeJob>>)> {
    let (plan, me, modules) = plan(config, discovered, is_local);
    let me = me?;
    let mut mesh = HashMap::new();
    let mut rest = Vec::new();
    for job in jobs::build(config, discovered, is_local) {
        let target = plan.index_of(&job.key.target);
        let module = modules.iter().position(|m| *m == job.key.module);
        match (target, module, job.payload.endpoint.is_some()) {
            (Some(t), Some(m), true) => {
                mesh.insert((t, m), job);
            }
            _ => rest.push(job),
        }
    }
    Some((
        MeshSchedule {
            plan,
            me,
            jobs: mesh,
            guard: config.scheduler.mesh.guard,
        },
        rest,
    ))
}

/// What the schedule costs, in sentences, and warnings when it cannot
/// keep the configured interval.
pub fn notes(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: impl Fn(&Target) -> bool + Copy,
) -> Vec<String> {
    let mut out = Vec::new();
    if config.discovery.mesh && config.scheduler.mesh.planned {
        let (plan, me, _) = plan(config, discovered, is_local);
        out.push(format!("mesh schedule: {}", plan.describe()));
        let asked = requested_interval(config, discovered);
        let natural = plan.slot().saturating_mul(plan.slots() as u32);
        let needed = natural.div_f64(plan.params().budget.clamp(f64::MIN_POSITIVE, 1.0));
        if asked < needed {
            out.push(format!(
                "warning: the interval of {} s is shorter than the mesh cycle of {} s that \
                 {} hosts need at a budget of {:.0}%; the service probes every pair once per cycle",
                asked.as_secs(),
                plan.cycle().as_secs(),
                plan.members().len(),
                plan.params().budget * 100.0
            ));
        }
        if me.is_none() && plan.members().len() > 1 {
            out.push(
                "note: none of the members is an address of this host, so this host \
                 follows the plain schedule (check-config cannot tell on another host)"
                    .into(),
            );
        }
    } else {
        // The plain scheduler: one probe at a time, so a host's runs per
        // interval must fit in it.
        let jobs = jobs::build(config, discovered, is_local);
        let share: f64 = jobs
            .iter()
            .map(|j| run_time(&j.payload.module).as_secs_f64() / j.interval.as_secs_f64())
            .sum::<f64>()
            / config.scheduler.max_concurrent_probes.max(1) as f64;
        if share > 1.0 {
            out.push(format!(
                "warning: this host's probes need {:.0}% of their intervals, more than there is; \
                 runs will be skipped (lengthen the intervals, or use discovery.mesh)",
                share * 100.0
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_mesh_example_states_its_cycle() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/examples/mesh.yml");
        let c = Config::load(std::path::Path::new(path)).unwrap();
        let me = |t: &Target| t.host == "10.0.0.3";
        let (plan, idx, modules) = plan(&c, &[], me);
        assert_eq!(plan.members().len(), 10);
        assert_eq!(modules, vec!["tcp", "udp"]);
        assert_eq!(idx, plan.index_of("10.0.0.3"));
        // tcp both of 1+5 s twice = 12 s, + 4 s set-up + 1 s guard.
        assert_eq!(plan.slot(), Duration::from_secs(17));
        assert_eq!(plan.slots(), 2 * 9 * 2);
        let notes = notes(&c, &[], me);
        assert_eq!(
            notes[0],
            format!("mesh schedule: {}", plan.describe()),
            "{notes:?}"
        );
        // The example is feasible as written: no warning.
        assert_eq!(notes.len(), 1, "{notes:?}");
        let (s, rest) = schedule(&c, &[], me).unwrap();
        assert!(rest.is_empty());
        // Nine peers, two modules each; none for this host itself.
        assert_eq!(s.jobs.len(), 18);
        assert!(s.jobs.keys().all(|(t, _)| *t != s.me));
    }

    #[test]
    fn a_short_interval_is_named_and_the_plain_overload_too() {
        let yaml = "modules: {tcp: {kind: tcp, duration: 5s, omit: 1s}}\n\
                    scheduler: {default_interval: 1m}\ndiscovery: {mesh: MESH}\n\
                    targets:\n";
        let mut y = yaml.to_string();
        for i in 1..=10 {
            y.push_str(&format!("  - {{address: 10.0.0.{i}, modules: [tcp]}}\n"));
        }
        let mesh = Config::from_yaml(&y.replace("MESH", "true"), "m.yml").unwrap();
        let n = notes(&mesh, &[], |t| t.host == "10.0.0.1");
        // 18 slots of 6+4+1 = 11 s at half budget: 396 s > 60 s.
        assert!(n[0].contains("10 hosts, 1 modules: a cycle of 18 slots of 11 s (one every 22 s) = 6.6 min; each host in tests 50% of the time"), "{n:?}");
        assert!(
            n[1].starts_with(
                "warning: the interval of 60 s is shorter than the mesh cycle of 396 s"
            ),
            "{n:?}"
        );
        let plain = Config::from_yaml(&y.replace("MESH", "false"), "p.yml").unwrap();
        let n = notes(&plain, &[], |_| false);
        // 10 × 6 s per 60 s is 100%: fits, just.
        assert!(n.is_empty(), "{n:?}");
        let busy =
            Config::from_yaml(&y.replace("MESH", "false").replace("1m", "50s"), "p.yml").unwrap();
        let n = notes(&busy, &[], |_| false);
        assert!(
            n[0].starts_with("warning: this host's probes need 120%"),
            "{n:?}"
        );
    }
}
