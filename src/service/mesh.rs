//! Mesh mode's plan from the configuration: the members (every peer with
//! an address, static or discovered, this host included), the modules,
//! the slot length and the jobs this host runs, plus the sentences that
//! state the cost (`check-config`, the startup log).
//!
//! With `scheduler.mesh.group_by: LABEL`, the members are grouped by that
//! target label ([`crate::mesh::GroupPlan`], or from 32 members on
//! [`crate::mesh::StableGroupPlan`], which churn disturbs only where it
//! must); those without it form one group of their own, as Prometheus
//! treats an absent label as an empty one.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::config::{Config, Module};
use crate::discovery::DiscoveredTarget;
use crate::mesh::{MeshParams, MeshPlan};
use crate::probe::Target;
use crate::scheduler::mesh::{LocalJob, MeshSchedule};
use crate::scheduler::Job;

use super::jobs::{self, ProbeJob};

/// The measured time of one run of `module`: a `both` module runs twice.
pub fn run_time(module: &Module) -> Duration {
    (module.omit + module.duration) * module.specs().len().max(1) as u32
}

/// The time `module` needs in a slot after its guard: its planned runs
/// ([`Module::planned_slot_run`]) and the set-up (`scheduler.mesh.setup`),
/// of which an adaptive module needs only the end half.
///
/// Why: the set-up's two halves are connecting (the control connection,
/// the handshake, the data streams) and ending (`End`, the drain, the
/// results). A fixed run cannot be shortened, so its slot holds both on
/// top of its whole run, or a slow connect would push its end past the
/// slot's hard deadline and lose the result. An adaptive run is cut: the
/// scheduler tells it to end half a set-up before the slot ends, so
/// whatever its connect takes comes out of its measured time, and a run
/// left short is reported `cut`, not converged, never overlapping the next
/// slot. Only the end half must be held beyond the runs, as the cut's
/// reserve; and that half is more than an adaptive run's end needs, since
/// its senders keep only about 20 ms of the rate unsent
/// (`engine::adaptive::UNSENT_TIME`) where a fixed sender's socket may hold
/// seconds of a slow path. The price: the connects come out of the
/// `expected_duration` (milliseconds on a LAN; on a path where a connect
/// takes a sizeable share of it, raise `expected_duration`).
pub fn slot_need(module: &Module, setup: Duration) -> Duration {
    let setup = if module.adaptive.is_some() {
        setup / 2
    } else {
        setup
    };
    module.planned_slot_run() + setup
}

/// Every member's entry (name and value of the `group_by` label, empty
/// without it or without the key; a name may come twice, statically and
/// by discovery), which one this host is, and the mesh's modules (sorted).
fn members(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: &impl Fn(&Target) -> bool,
) -> (Vec<(String, String)>, Option<String>, Vec<String>) {
    let group_by = config.scheduler.mesh.group_by.as_deref();
    let mut entries = Vec::new();
    let mut me = None;
    let mut modules = BTreeSet::new();
    let mut add = |name: &str,
                   endpoint: &Target,
                   mods: &[String],
                   labels: &std::collections::BTreeMap<String, String>| {
        let value = group_by
            .and_then(|l| labels.get(l))
            .cloned()
            .unwrap_or_default();
        entries.push((name.to_string(), value));
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
            add(t.name(), &e, &t.modules, &t.labels);
        }
    }
    for d in discovered {
        add(&d.name, &d.endpoint, &d.modules, &d.labels);
    }
    (entries, me, modules.into_iter().collect())
}

/// The addresses of every peer this host names, statically or by
/// discovery (mesh members and static targets alike), as host networks.
/// Targets given by name are left out: resolving them here would put a
/// DNS lookup in the responder's admission.
pub fn known_networks(config: &Config, discovered: &[DiscoveredTarget]) -> Vec<ipnet::IpNet> {
    let statics = config
        .targets
        .iter()
        .filter_map(|t| t.endpoint().and_then(Result::ok));
    let found = discovered.iter().map(|d| d.endpoint.clone());
    let mut nets: Vec<ipnet::IpNet> = statics
        .chain(found)
        .filter_map(|e| e.host.parse::<std::net::IpAddr>().ok())
        .map(ipnet::IpNet::from)
        .collect();
    nets.sort();
    nets.dedup();
    nets
}

/// What this host's responder checks probers against in mesh mode: the
/// plan, this host's place in it, and each member's address (`None` for
/// a member given by name); `None` when turns are not enforced.
pub fn turns(
    config: &Config,
    discovered: &[DiscoveredTarget],
    schedule: &MeshSchedule<ProbeJob>,
) -> Option<crate::responder::turns::Turns> {
    if !config.scheduler.mesh.refuse_out_of_turn {
        return None;
    }
    let mut by_name: HashMap<String, std::net::IpAddr> = HashMap::new();
    let statics = config
        .targets
        .iter()
        .filter_map(|t| Some((t.name().to_string(), t.endpoint()?.ok()?)));
    let found = discovered
        .iter()
        .map(|d| (d.name.clone(), d.endpoint.clone()));
    for (name, endpoint) in statics.chain(found) {
        if let Ok(ip) = endpoint.host.parse() {
            by_name.entry(name).or_insert(ip);
        }
    }
    Some(crate::responder::turns::Turns {
        members: schedule
            .plan
            .members()
            .iter()
            .map(|m| by_name.get(m).copied())
            .collect(),
        plan: schedule.plan.clone(),
        me: schedule.me,
        guard: schedule.guard,
    })
}

/// The plan for `config` and `discovered` (grouped with
/// `scheduler.mesh.group_by`), this host's index in it (`None` when this
/// host is not among the members), and the mesh's modules.
pub fn plan(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: impl Fn(&Target) -> bool,
) -> (MeshPlan, Option<usize>, Vec<String>) {
    let (entries, me, modules) = members(config, discovered, &is_local);
    let m = &config.scheduler.mesh;
    // An adaptive module counts as the run it is expected to take (its
    // `expected_duration`, from the config every host shares), not its
    // maximum, with the end half of the set-up: a run still going half a
    // set-up before the slot's end is cut there ([`slot_need`]).
    let longest = modules
        .iter()
        .filter_map(|name| config.module(name))
        .map(|module| slot_need(module, m.setup))
        .max()
        .unwrap_or(m.setup);
    let params = MeshParams {
        slot: longest + m.guard,
        modules: modules.len().max(1),
        budget: m.budget,
        min_cycle: requested_interval(config, discovered),
    };
    let plan: MeshPlan = match m.group_by {
        Some(_) => MeshPlan::grouped(entries, params),
        None => MeshPlan::full(entries.into_iter().map(|(n, _)| n).collect(), params),
    };
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

/// This host's mesh schedule, loopback modules included (run between its
/// planned tests), and the jobs the plain scheduler keeps; `None` when
/// this host is not a member, in which case the plain scheduler runs
/// everything.
pub fn schedule(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: impl Fn(&Target) -> bool + Copy,
) -> Option<(MeshSchedule<ProbeJob>, Vec<Job<ProbeJob>>)> {
    let (plan, me, modules) = plan(config, discovered, is_local);
    let me = me?;
    let mut mesh = HashMap::new();
    let mut local = Vec::new();
    let mut rest = Vec::new();
    for job in jobs::build(config, discovered, is_local) {
        let target = plan.index_of(&job.key.target);
        let module = modules.iter().position(|m| *m == job.key.module);
        match (target, module, job.payload.endpoint.is_some()) {
            (Some(t), Some(m), true) => {
                mesh.insert((t, m), job);
            }
            (_, _, false) => local.push(LocalJob {
                need: run_time(&job.payload.module) + config.scheduler.mesh.setup,
                job,
            }),
            _ => rest.push(job),
        }
    }
    Some((
        MeshSchedule {
            plan,
            me,
            jobs: mesh,
            guard: config.scheduler.mesh.guard,
            // Half the set-up is for the end of a test: `End`, the drain
            // and the results; the other half for connecting.
            end_reserve: config.scheduler.mesh.setup / 2,
            local,
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
        match (&plan, &config.scheduler.mesh.group_by) {
            (MeshPlan::Grouped(_) | MeshPlan::StableGrouped(_), Some(label)) => {
                // What the groups save, against the full mesh they replace.
                let full = MeshPlan::full(plan.members().to_vec(), plan.params().clone());
                out.push(format!(
                    "mesh schedule, grouped by {label}: {}; a full mesh would need a cycle of {}",
                    plan.describe(),
                    crate::mesh::groups::span(full.cycle().as_secs_f64())
                ));
                let (entries, _, _) = members(config, discovered, &is_local);
                let labelled: BTreeSet<&str> = entries
                    .iter()
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(n, _)| n.as_str())
                    .collect();
                let unlabelled: BTreeSet<&str> = entries
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .filter(|n| !labelled.contains(n))
                    .collect();
                if !unlabelled.is_empty() {
                    out.push(format!(
                        "note: hosts without a {label} label form one group of their own: {} of {}",
                        unlabelled.len(),
                        plan.members().len()
                    ));
                }
            }
            _ => out.push(format!("mesh schedule: {}", plan.describe())),
        }
        // Adaptive modules count as their expected run: say so, and what
        // happens to a run that takes longer.
        let (_, _, modules) = members(config, discovered, &is_local);
        let adaptive: Vec<String> = modules
            .iter()
            .filter_map(|name| Some((name, config.module(name)?)))
            .filter(|(_, m)| m.adaptive.is_some())
            .map(|(name, m)| {
                format!(
                    "{name} {} of at most {}",
                    crate::units::format_duration(m.planned_slot_run()),
                    crate::units::format_duration(run_time(m))
                )
            })
            .collect();
        if !adaptive.is_empty() {
            out.push(format!(
                "note: the slot holds what adaptive modules are expected to take ({}; \
                 expected_duration), not their maximum; a run still going {} before its \
                 slot's end is ended there and reported cut, not converged",
                adaptive.join(", "),
                crate::units::format_duration(config.scheduler.mesh.setup / 2)
            ));
        }
        let asked = requested_interval(config, discovered);
        let needed = plan.needed_cycle();
        if needed < plan.cycle() {
            // The interval, not the budget, sets the cycle: say what the
            // budget alone would allow, the figure two configs compare
            // at the same budget (adaptive modules' cycle).
            out.push(format!(
                "note: the interval sets the cycle; at scheduler.mesh.budget of {:.0}% the \
                 plan needs a cycle of only {} ({} of {} s)",
                plan.params().budget * 100.0,
                crate::mesh::groups::span(needed.as_secs_f64()),
                crate::units::plural(plan.slots(), "slot"),
                plan.slot().as_secs_f64()
            ));
        }
        if asked < needed {
            out.push(format!(
                "warning: the interval of {} s is shorter than the mesh cycle of {} s that \
                 {} need at a budget of {:.0}%; the service probes every pair once per cycle",
                asked.as_secs(),
                plan.cycle().as_secs(),
                crate::units::plural(plan.members().len(), "host"),
                plan.params().budget * 100.0
            ));
        }
        // Loopback modules run in this host's gaps between planned tests
        // (another member's stand in for check-config on another host).
        let guard = config.scheduler.mesh.guard;
        for job in jobs::build(config, discovered, is_local)
            .iter()
            .filter(|j| j.payload.endpoint.is_none())
        {
            let need = run_time(&job.payload.module) + config.scheduler.mesh.setup;
            let from = plan.cycle_start(1);
            if plan.next_free(me.unwrap_or(0), from, need, guard).is_none() {
                out.push(format!(
                    "warning: loopback module {} needs {} s (run + setup), longer than any gap \
                     between this host's planned tests; it will not run (a lower \
                     scheduler.mesh.budget widens the gaps)",
                    job.key.module,
                    need.as_secs()
                ));
            }
        }
        if me.is_none() && plan.members().len() > 1 {
            out.push(
                "note: none of the members is an address of this host, so this host \
                 follows the plain schedule (check-config cannot tell on another host)"
                    .into(),
            );
        }
    } else {
        if let Some(label) = &config.scheduler.mesh.group_by {
            out.push(format!(
                "note: scheduler.mesh.group_by: {label} has no effect without discovery.mesh: true \
                 and scheduler.mesh.planned: true"
            ));
        }
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
    use crate::future::BoxFuture;
    use crate::scheduler::mesh::{MeshScheduler, WallClock};
    use crate::scheduler::{Attempt, Runner, Skip};
    use crate::slot::HostSlot;
    use std::sync::{Arc, Mutex};

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
        // The example is feasible as written: no warning; its interval
        // (30 min) is longer than the budget needs, which is said.
        assert_eq!(
            notes[1],
            "note: the interval sets the cycle; at scheduler.mesh.budget of 50% the plan \
             needs a cycle of only 20.4 min (36 slots of 17 s)"
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        let (s, rest) = schedule(&c, &[], me).unwrap();
        assert!(rest.is_empty());
        // Nine peers, two modules each; none for this host itself.
        assert_eq!(s.jobs.len(), 18);
        assert!(s.jobs.keys().all(|(t, _)| *t != s.me));
    }

    /// The shipped mesh example and its adaptive
    /// variant, a file that differs only in its modules (the same hosts,
    /// interval, set-up, guard and budget), through check-config's own
    /// function: at the same budget the cycle the plan needs is at least 3
    /// times shorter. The adaptive slot holds the expected runs and the end
    /// half of the set-up ([`slot_need`]); the fixed one the whole runs and
    /// the whole set-up.
    #[test]
    fn adaptive_modules_make_the_mesh_examples_cycle_three_times_shorter() {
        let load = |file: &str| {
            let path = format!("{}/config/examples/{file}", env!("CARGO_MANIFEST_DIR"));
            Config::load(std::path::Path::new(&path)).unwrap()
        };
        let (fixed, adaptive) = (load("mesh.yml"), load("mesh-adaptive.yml"));
        let me = |t: &Target| t.host == "10.0.0.3";
        // Only the modules differ.
        let mut same = adaptive.clone();
        same.modules = fixed.modules.clone();
        assert_eq!(same, fixed);
        assert_ne!(adaptive.modules, fixed.modules);
        let (f, _, fm) = plan(&fixed, &[], me);
        let (a, _, am) = plan(&adaptive, &[], me);
        assert_eq!((fm, f.slots()), (am, a.slots()));
        let (nf, na) = (notes(&fixed, &[], me), notes(&adaptive, &[], me));
        println!("mesh.yml: {nf:?}\nmesh-adaptive.yml: {na:?}");
        // TCP's two runs of 1 s expected (of at most 5 s each), 2 s of the
        // 4 s set-up (its end half), a 1 s guard; against 2 × 6 s + 4 s +
        // 1 s. Before the adaptive slot held only the end half of the
        // set-up it was 2 + 4 + 1 = 7 s, 2.4 times shorter.
        assert_eq!(f.slot(), Duration::from_secs(17));
        assert_eq!(a.slot(), Duration::from_secs(5));
        assert_eq!(f.needed_cycle(), Duration::from_secs(1224));
        assert_eq!(a.needed_cycle(), Duration::from_secs(360));
        let needed = f.needed_cycle().as_secs_f64() / a.needed_cycle().as_secs_f64();
        println!(
            "cycle needed at a budget of 50%: {:.1} min fixed, {:.1} min adaptive ({needed:.2}x); \
             stated by check-config (both ask for 30 min): {:.1} min, {:.1} min",
            f.needed_cycle().as_secs_f64() / 60.0,
            a.needed_cycle().as_secs_f64() / 60.0,
            f.cycle().as_secs_f64() / 60.0,
            a.cycle().as_secs_f64() / 60.0
        );
        assert!(needed >= 3.0, "{needed}");
        // Both ask for 30 min, which each can keep: the same cycle, the
        // adaptive hosts in tests 10% of the time instead of 34%.
        assert_eq!(f.cycle(), a.cycle());
        assert_eq!(
            na[0],
            "mesh schedule: 10 hosts, 2 modules: a cycle of 36 slots of 5 s (one every 50 s) \
             = 30.0 min; each host in tests 10% of the time"
        );
        assert!(
            na[1].starts_with("note: the slot holds what adaptive modules are expected to take (tcp 2s of at most 10s, udp 1s of at most 5s"),
            "{na:?}"
        );
        assert_eq!(
            na[2],
            "note: the interval sets the cycle; at scheduler.mesh.budget of 50% the plan \
             needs a cycle of only 6.0 min (36 slots of 5 s)"
        );
        // Feasible as written: no warning.
        assert_eq!(na.len(), 3, "{na:?}");
    }

    /// A fixed module keeps the whole set-up beside its run and an adaptive
    /// one its end half; in one plan the slot is the larger need.
    #[test]
    fn an_adaptive_slot_holds_the_end_half_of_the_set_up() {
        let yaml = |modules: &str| {
            Config::from_yaml(
                &format!(
                    "modules: {{{modules}}}\n\
                     scheduler: {{mesh: {{setup: 4s, guard: 1s}}}}\n\
                     discovery: {{mesh: true}}\n\
                     targets:\n\
                     \x20 - {{address: 10.0.0.1, modules: [a]}}\n\
                     \x20 - {{address: 10.0.0.2, modules: [a]}}\n"
                ),
                "t.yml",
            )
            .unwrap()
        };
        let slot = |modules: &str| plan(&yaml(modules), &[], |_| false).0.slot();
        // Adaptive, 1 s expected: 1 + 2 + 1.
        assert_eq!(
            slot("a: {kind: tcp, duration: auto}"),
            Duration::from_secs(4)
        );
        // Fixed, 1 s: 1 + 4 + 1.
        assert_eq!(slot("a: {kind: tcp, duration: 1s}"), Duration::from_secs(6));
        // Adaptive of 3 s expected beside a fixed 1 s: 3 + 2 against
        // 1 + 4, plus the guard.
        assert_eq!(
            slot("a: {kind: tcp, duration: auto, max_duration: 5s, expected_duration: 3s}, b: {kind: udp, duration: 1s}"),
            Duration::from_secs(6)
        );
        assert_eq!(
            slot("a: {kind: tcp, duration: auto, max_duration: 5s, expected_duration: 4s}, b: {kind: udp, duration: 1s}"),
            Duration::from_secs(7)
        );
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
        assert!(n[0].contains("10 hosts, 1 module: a cycle of 18 slots of 11 s (one every 22 s) = 6.6 min; each host in tests 50% of the time"), "{n:?}");
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

    /// Eight hosts: racks a and b of three (one of b found by discovery),
    /// and two without the label (one discovered, as DNS finds them),
    /// plus a host of rack a found again by DNS with no labels.
    fn grouped() -> (Config, Vec<DiscoveredTarget>, Vec<&'static str>) {
        let yaml = "modules: {tcp: {kind: tcp, duration: 5s, omit: 1s}}\n\
                    scheduler: {default_interval: 5m, mesh: {group_by: rack}}\n\
                    discovery: {mesh: true}\n\
                    targets:\n\
                    \x20 - {address: 10.0.0.1, modules: [tcp], labels: {rack: a}}\n\
                    \x20 - {address: 10.0.0.2, modules: [tcp], labels: {rack: a}}\n\
                    \x20 - {address: 10.0.0.3, modules: [tcp], labels: {rack: a}}\n\
                    \x20 - {address: 10.0.1.1, modules: [tcp], labels: {rack: b}}\n\
                    \x20 - {address: 10.0.1.2, modules: [tcp], labels: {rack: b}}\n\
                    \x20 - {address: 10.0.9.1, modules: [tcp]}\n";
        let c = Config::from_yaml(yaml, "g.yml").unwrap();
        let found = |host: &str, rack: Option<&str>| DiscoveredTarget {
            name: host.to_string(),
            endpoint: Target {
                host: host.to_string(),
                port: 5301,
            },
            modules: vec!["tcp".into()],
            interval: None,
            labels: rack
                .map(|r| [("rack".to_string(), r.to_string())].into())
                .unwrap_or_default(),
        };
        let discovered = vec![
            found("10.0.0.1", None),
            found("10.0.1.3", Some("b")),
            found("10.0.9.2", None),
        ];
        let hosts = vec![
            "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.9.1",
            "10.0.9.2",
        ];
        (c, discovered, hosts)
    }

    #[test]
    fn every_host_of_a_grouped_config_computes_the_same_plan_and_states_its_cost() {
        let (c, d, hosts) = grouped();
        let schedules: Vec<MeshSchedule<ProbeJob>> = hosts
            .iter()
            .map(|&h| schedule(&c, &d, move |t: &Target| t.host == h).unwrap().0)
            .collect();
        let plan = &schedules[0].plan;
        let MeshPlan::Grouped(g) = plan else {
            panic!("not grouped: {plan:?}")
        };
        assert_eq!(
            g.groups(),
            [
                vec!["10.0.0.1", "10.0.0.2", "10.0.0.3"],
                vec!["10.0.1.1", "10.0.1.2", "10.0.1.3"],
                vec!["10.0.9.1", "10.0.9.2"],
            ]
        );
        // 6 + 4 + 1 s slots; 2 × 3 rounds inside, 2 × 3 between.
        assert_eq!(plan.slot(), Duration::from_secs(11));
        assert_eq!(plan.slots(), 12);
        // 12 × 11 s at half budget is 264 s; the 5 min interval wins.
        assert_eq!(plan.cycle(), Duration::from_secs(300));
        for (s, h) in schedules.iter().zip(&hosts) {
            assert_eq!(&s.plan, plan, "{h}");
            assert_eq!(plan.members()[s.me], *h);
            // A job for every peer, none for itself.
            assert_eq!(s.jobs.len(), 7, "{h}");
            assert!(s.jobs.keys().all(|(t, _)| *t != s.me));
        }
        let n = notes(&c, &d, |t| t.host == "10.0.0.2");
        assert_eq!(
            n,
            [
                "mesh schedule, grouped by rack: 8 hosts in 3 groups (largest 3), 1 module: \
                 a cycle of 6 + 6 slots of 11 s (one every 25 s) = 5.0 min; every pair inside a group \
                 and every pair of groups once per cycle, each host to each other group once every \
                 3 cycles (15.0 min) at most; each host in tests 18% of the time on average, at most \
                 29% (a representative of the largest group); a full mesh would need a cycle of 5.1 min",
                "note: hosts without a rack label form one group of their own: 2 of 8",
                "note: the interval sets the cycle; at scheduler.mesh.budget of 50% the plan \
                 needs a cycle of only 4.4 min (12 slots of 11 s)",
            ]
        );
        // Without the key: one full mesh of the same hosts.
        let mut full = c.clone();
        full.scheduler.mesh.group_by = None;
        let (p, _, _) = super::plan(&full, &d, |_| false);
        assert!(matches!(p, MeshPlan::Full(_)));
        assert_eq!(p.members(), plan.members());
        // The key without mesh mode is named as having no effect.
        let mut plain = c.clone();
        plain.discovery.mesh = false;
        assert_eq!(
            notes(&plain, &d, |_| false),
            [
                "note: scheduler.mesh.group_by: rack has no effect without discovery.mesh: true \
              and scheduler.mesh.planned: true"
            ]
        );
    }

    /// Records each host's runs on the shared (paused) wall clock.
    struct Log {
        me: String,
        clock: WallClock,
        runs: Arc<Mutex<Vec<(String, String, Duration)>>>,
        skips: Arc<Mutex<Vec<String>>>,
    }

    impl Runner<ProbeJob> for Log {
        fn attempt(&self, job: &Job<ProbeJob>) -> BoxFuture<Attempt> {
            self.runs.lock().unwrap().push((
                self.me.clone(),
                job.key.target.clone(),
                (self.clock)(),
            ));
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Attempt::Done
            })
        }
        fn skipped(&self, job: &Job<ProbeJob>, why: Skip) {
            self.skips
                .lock()
                .unwrap()
                .push(format!("{} → {}: {why:?}", self.me, job.key.target));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_grouped_fleet_never_puts_a_host_in_two_tests_and_covers_every_group() {
        let (c, d, hosts) = grouped();
        let (plan, _, _) = plan(&c, &d, |_| false);
        let MeshPlan::Grouped(g) = plan.clone() else {
            panic!("not grouped")
        };
        let base = plan.cycle_start(plan.first_cycle_from(Duration::from_secs(1_800_000_000)));
        let t0 = tokio::time::Instant::now();
        let clock: WallClock = Arc::new(move || base + t0.elapsed());
        let runs = Arc::new(Mutex::new(Vec::new()));
        let skips = Arc::new(Mutex::new(Vec::new()));
        let mut fleet = Vec::new();
        for &h in &hosts {
            let (s, rest) = schedule(&c, &d, move |t: &Target| t.host == h).unwrap();
            assert!(rest.is_empty());
            let log = Arc::new(Log {
                me: h.to_string(),
                clock: clock.clone(),
                runs: runs.clone(),
                skips: skips.clone(),
            });
            fleet.push(MeshScheduler::start(
                log,
                HostSlot::new(),
                clock.clone(),
                Some(s),
            ));
        }
        // Three cycles: every host of the largest group represents it once.
        tokio::time::sleep(plan.cycle() * 3).await;
        for m in fleet {
            m.shutdown().await;
        }
        assert!(
            skips.lock().unwrap().is_empty(),
            "{:?}",
            skips.lock().unwrap()
        );
        let runs = runs.lock().unwrap().clone();
        let guard = c.scheduler.mesh.guard;
        let first = plan.slot_at(base).cycle;
        let mut busy: HashMap<(u64, usize), BTreeSet<usize>> = HashMap::new();
        let mut per_cycle: HashMap<u64, BTreeSet<(usize, usize)>> = HashMap::new();
        let mut host_to_group: BTreeSet<(usize, usize)> = BTreeSet::new();
        for (p, t, at) in &runs {
            let (pi, ti) = (plan.index_of(p).unwrap(), plan.index_of(t).unwrap());
            let slot = plan.slot_at(*at);
            // One guard into its slot, by the plan every host computed.
            assert!(
                *at >= slot.start + guard && *at < slot.start + guard + Duration::from_millis(50),
                "{p} → {t} at {at:?}, slot {slot:?}"
            );
            assert_eq!(
                plan.test_of(pi, slot.cycle, slot.index),
                Some(crate::mesh::Test {
                    prober: pi,
                    target: ti,
                    module: 0
                }),
                "{p} → {t} in {slot:?}"
            );
            let hosts_in_slot = busy.entry((slot.cycle, slot.index)).or_default();
            assert!(hosts_in_slot.insert(pi), "{p} in two tests in {slot:?}");
            assert!(hosts_in_slot.insert(ti), "{t} in two tests in {slot:?}");
            assert!(per_cycle.entry(slot.cycle).or_default().insert((pi, ti)));
            host_to_group.insert((pi, g.place(ti).unwrap().0));
        }
        // Each cycle: the 3 × 2 + 3 × 2 + 2 × 1 directed pairs inside the
        // groups, and one test per directed pair of groups.
        assert_eq!(per_cycle.len(), 3, "{per_cycle:?}");
        for cy in first..first + 3 {
            let pairs = &per_cycle[&cy];
            let inside = pairs
                .iter()
                .filter(|(p, t)| g.place(*p).unwrap().0 == g.place(*t).unwrap().0)
                .count();
            let between: BTreeSet<(usize, usize)> = pairs
                .iter()
                .map(|(p, t)| (g.place(*p).unwrap().0, g.place(*t).unwrap().0))
                .filter(|(a, b)| a != b)
                .collect();
            assert_eq!(inside, 14, "cycle {cy}");
            assert_eq!(between.len(), 6, "cycle {cy}");
            assert_eq!(pairs.len(), 20, "cycle {cy}");
        }
        // Within |largest group| cycles, every host probed every group.
        assert_eq!(host_to_group.len(), hosts.len() * 3);
    }

    #[test]
    fn loopback_modules_join_the_mesh_schedule_and_one_too_long_is_named() {
        let yaml = "modules:\n  tcp: {kind: tcp, duration: 5s, omit: 1s}\n  lo: {kind: loopback_tcp, duration: LEN}\n\
                    scheduler: {default_interval: 10s, mesh: {budget: 0.5}}\ndiscovery: {mesh: true}\n\
                    targets:\n  - {modules: [lo]}\n  - {address: 10.0.0.1, modules: [tcp]}\n\
                    \x20 - {address: 10.0.0.2, modules: [tcp]}\n";
        let me = |t: &Target| t.host == "10.0.0.1";
        // Two hosts, slots of 11 s every 22 s (a 10 s interval asks for
        // less than the 44 s cycle): gaps of 11 s less two
        // guards, 9 s, for a loopback run of 5 s + 4 s of set-up.
        let fits = Config::from_yaml(&yaml.replace("LEN", "5s"), "l.yml").unwrap();
        let (s, rest) = schedule(&fits, &[], me).unwrap();
        assert!(rest.is_empty());
        assert_eq!(s.local.len(), 1);
        assert_eq!(s.local[0].job.key.module, "lo");
        assert_eq!(s.local[0].need, Duration::from_secs(9));
        assert!(notes(&fits, &[], me)
            .iter()
            .all(|n| !n.contains("loopback")));
        let long = Config::from_yaml(&yaml.replace("LEN", "6s"), "l.yml").unwrap();
        let n = notes(&long, &[], me);
        assert!(
            n.iter().any(|n| n.starts_with(
                "warning: loopback module lo needs 10 s (run + setup), longer than any gap"
            )),
            "{n:?}"
        );
    }

    /// `n` hosts 10.0.0.1.. probing each other with one TCP module.
    fn fleet_of(n: usize, interval: &str) -> Config {
        let mut y = format!(
            "modules: {{tcp: {{kind: tcp, duration: 5s, omit: 1s}}}}\n\
             scheduler: {{default_interval: {interval}}}\ndiscovery: {{mesh: true}}\ntargets:\n"
        );
        for i in 1..=n {
            y.push_str(&format!("  - {{address: 10.0.0.{i}, modules: [tcp]}}\n"));
        }
        Config::from_yaml(&y, "fleet.yml").unwrap()
    }

    #[test]
    fn a_large_mesh_follows_the_stable_plan_and_states_it() {
        let c = fleet_of(40, "10m");
        let (forty, _, _) = plan(&c, &[], |t| t.host == "10.0.0.1");
        let MeshPlan::Stable(p) = &forty else {
            panic!("not stable: {forty:?}")
        };
        // 40 hosts: level 40, 80 places, 160 slots of 11 s back to back.
        assert_eq!((p.level(), p.places(), p.slots()), (40, 80, 160));
        assert_eq!(forty.cycle(), Duration::from_secs(1760));
        let n = notes(&c, &[], |t| t.host == "10.0.0.1");
        assert!(n[0].starts_with("mesh schedule: 40 hosts, 1 module: a cycle of 160 slots of 11 s (one every 11 s) = 29.3 min; each host in tests 49% of the time; stable under churn"), "{n:?}");
        assert!(
            n[1].starts_with(
                "warning: the interval of 600 s is shorter than the mesh cycle of 1760 s"
            ),
            "{n:?}"
        );
        // An interval that holds the cycle: no warning (the slots are back
        // to back, the budget kept by the spare places), only what the
        // budget alone would need.
        let n = notes(&fleet_of(40, "30m"), &[], |t| t.host == "10.0.0.1");
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(
            n[1].starts_with("note: the interval sets the cycle; at scheduler.mesh.budget of 50%"),
            "{n:?}"
        );
        // Fewer than 32 hosts keep the circle plan.
        let (small, _, _) = plan(&fleet_of(31, "10m"), &[], |_| false);
        assert!(matches!(small, MeshPlan::Full(_)));
    }

    /// 38 hosts run the service's schedules
    /// on paused time; a 39th joins, and half the hosts learn of it 10 s
    /// before a cycle boundary, the others 20 s after (so they follow the
    /// old list for one cycle more). Every directed pair of the 38 is still
    /// run once in every cycle, and only the joiner's and the members that
    /// changed lanes ever share a slot with another test.
    #[tokio::test(start_paused = true)]
    async fn a_host_joining_a_large_mesh_costs_no_other_pair_a_cycle() {
        let old = fleet_of(38, "10m");
        let new = fleet_of(39, "10m");
        let (plan_old, _, _) = plan(&old, &[], |_| false);
        let (plan_new, _, _) = plan(&new, &[], |_| false);
        assert_eq!(plan_old.cycle(), plan_new.cycle());
        let cycle = plan_old.cycle();
        let base =
            plan_old.cycle_start(plan_old.first_cycle_from(Duration::from_secs(1_800_000_000)));
        let t0 = tokio::time::Instant::now();
        let clock: WallClock = Arc::new(move || base + t0.elapsed());
        let runs = Arc::new(Mutex::new(Vec::new()));
        let skips = Arc::new(Mutex::new(Vec::new()));
        let host = |i: usize| format!("10.0.0.{i}");
        let start = |h: String, c: &Config| {
            let me = h.as_str();
            let (s, _) = schedule(c, &[], move |t: &Target| t.host == me).unwrap();
            let log = Arc::new(Log {
                me: h,
                clock: clock.clone(),
                runs: runs.clone(),
                skips: skips.clone(),
            });
            MeshScheduler::start(log, HostSlot::new(), clock.clone(), Some(s))
        };
        let mut fleet: Vec<_> = (1..=38).map(|i| start(host(i), &old)).collect();
        // Cycle 0 on the old list; 10 s before its end, the joiner starts
        // and the odd hosts learn of it.
        tokio::time::sleep(cycle - Duration::from_secs(10)).await;
        fleet.push(start(host(39), &new));
        let update = |i: usize, f: &Vec<MeshScheduler<ProbeJob>>| {
            let me = host(i);
            let me = me.as_str();
            let (s, _) = schedule(&new, &[], move |t: &Target| t.host == me).unwrap();
            f[i - 1].update(Some(s));
        };
        for i in (1..=38).step_by(2) {
            update(i, &fleet);
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
        for i in (2..=38).step_by(2) {
            update(i, &fleet);
        }
        tokio::time::sleep(cycle * 3 - Duration::from_secs(20)).await;
        for m in fleet {
            m.shutdown().await;
        }
        assert!(
            skips.lock().unwrap().is_empty(),
            "{:?}",
            skips.lock().unwrap()
        );
        let runs = runs.lock().unwrap().clone();
        let first = plan_old.slot_at(base).cycle;
        // Members whose place moved (a lane taken by the joiner).
        let (MeshPlan::Stable(a), MeshPlan::Stable(b)) = (&plan_old, &plan_new) else {
            panic!("not stable")
        };
        let moved: BTreeSet<String> = (1..=38)
            .map(host)
            .filter(|h| a.place(a.index_of(h).unwrap()) != b.place(b.index_of(h).unwrap()))
            .collect();
        let mut per_cycle: HashMap<(u64, String, String), usize> = HashMap::new();
        let mut by_host: HashMap<String, Vec<Duration>> = HashMap::new();
        for (p, t, at) in &runs {
            let c = plan_old.slot_at(*at).cycle;
            *per_cycle.entry((c, p.clone(), t.clone())).or_default() += 1;
            by_host.entry(p.clone()).or_default().push(*at);
            by_host.entry(t.clone()).or_default().push(*at);
        }
        for c in first..first + 4 {
            for i in 1..=38 {
                for j in 1..=38 {
                    if i != j {
                        let n = per_cycle.get(&(c, host(i), host(j))).copied().unwrap_or(0);
                        assert_eq!(n, 1, "cycle {} {} → {}", c - first, host(i), host(j));
                    }
                }
            }
        }
        // The joiner probes and is probed by all 38 in each cycle on the
        // new list (from cycle 1 on, by those that know it).
        let joiner = runs
            .iter()
            .filter(|(p, t, _)| *p == host(39) || *t == host(39))
            .count();
        assert!(joiner >= 2 * 38 * 2, "{joiner}");
        // Overlapping tests (a run lasts 5 s here): only where the joiner
        // or a member that changed lanes is one of the hosts.
        let mut overlaps = 0;
        for (h, mut at) in by_host {
            at.sort();
            for w in at.windows(2) {
                if w[1] < w[0] + Duration::from_secs(5) {
                    overlaps += 1;
                    assert!(
                        h == host(39) || moved.contains(&h),
                        "{h} in two tests at {w:?}"
                    );
                }
            }
        }
        println!(
            "39th host joining 38: {} runs over 4 cycles, every pair of the 38 once per cycle; {} members changed lanes; {overlaps} overlapping tests",
            runs.len(),
            moved.len()
        );
    }

    /// `n` hosts 10.0.0.1.. in racks `r0`..`r3` (host `i` in rack `i mod 4`),
    /// grouped by rack, probing each other with one TCP module.
    fn racks_of(n: usize, interval: &str) -> Config {
        let mut y = format!(
            "modules: {{tcp: {{kind: tcp, duration: 5s, omit: 1s}}}}\n\
             scheduler: {{default_interval: {interval}, mesh: {{group_by: rack}}}}\n\
             discovery: {{mesh: true}}\ntargets:\n"
        );
        for i in 1..=n {
            y.push_str(&format!(
                "  - {{address: 10.0.0.{i}, modules: [tcp], labels: {{rack: r{}}}}}\n",
                i % 4
            ));
        }
        Config::from_yaml(&y, "racks.yml").unwrap()
    }

    #[test]
    fn a_large_grouped_mesh_follows_the_stable_grouped_plan_and_states_it() {
        let c = racks_of(38, "10m");
        let (p, _, _) = plan(&c, &[], |t| t.host == "10.0.0.1");
        let MeshPlan::StableGrouped(g) = &p else {
            panic!("not stable: {p:?}")
        };
        // Racks of 10 and 9: sized for 11 (level 12, 22 places, 44 slots
        // inside); 4 racks (6 places, 12 slots between). A representative's
        // 2 × 9 + 2 × 3 tests at most, sized 2 × 11 + 2 × 3 at the budget:
        // 28 × 11 s / 0.5 = 616 s.
        assert_eq!(g.levels(), (12, 4));
        assert_eq!((g.inside_slots(), g.slots()), (44, 56));
        assert_eq!(p.cycle(), Duration::from_secs(616));
        let n = notes(&c, &[], |t| t.host == "10.0.0.1");
        assert!(
            n[0].starts_with(
                "mesh schedule, grouped by rack: 38 hosts in 4 groups (largest 10), 1 module: \
                 a cycle of 44 + 12 slots of 11 s (one every 11 s) = 10.3 min;"
            ),
            "{n:?}"
        );
        assert!(
            n[0].contains("; stable under churn (groups sized for up to 11 hosts"),
            "{n:?}"
        );
        // Fewer than 32 hosts keep the circle method.
        let (small, _, _) = plan(&racks_of(31, "10m"), &[], |_| false);
        assert!(matches!(small, MeshPlan::Grouped(_)));
    }

    /// For the grouped plan, in process: 38 hosts in 4
    /// racks run the service's schedules on paused time; a 39th joins one
    /// rack, and half the hosts learn of it 10 s before a cycle boundary,
    /// the others 20 s after (so they follow the old list for one cycle
    /// more). Every directed pair inside a rack of the 38 but those of
    /// members whose place the joiner moved and of its rack's
    /// representatives is still run once in every cycle, every directed
    /// pair of racks at least once, and only tests with one of those hosts
    /// or the joiner ever overlap.
    #[tokio::test(start_paused = true)]
    async fn a_host_joining_a_large_grouped_mesh_costs_no_other_pair_a_cycle() {
        let old = racks_of(38, "10m");
        let new = racks_of(39, "10m");
        let (plan_old, _, _) = plan(&old, &[], |_| false);
        let (plan_new, _, _) = plan(&new, &[], |_| false);
        assert_eq!(plan_old.cycle(), plan_new.cycle());
        let cycle = plan_old.cycle();
        let base =
            plan_old.cycle_start(plan_old.first_cycle_from(Duration::from_secs(1_800_000_000)));
        let t0 = tokio::time::Instant::now();
        let clock: WallClock = Arc::new(move || base + t0.elapsed());
        let runs = Arc::new(Mutex::new(Vec::new()));
        let skips = Arc::new(Mutex::new(Vec::new()));
        let host = |i: usize| format!("10.0.0.{i}");
        let start = |h: String, c: &Config| {
            let me = h.as_str();
            let (s, _) = schedule(c, &[], move |t: &Target| t.host == me).unwrap();
            let log = Arc::new(Log {
                me: h,
                clock: clock.clone(),
                runs: runs.clone(),
                skips: skips.clone(),
            });
            MeshScheduler::start(log, HostSlot::new(), clock.clone(), Some(s))
        };
        let mut fleet: Vec<_> = (1..=38).map(|i| start(host(i), &old)).collect();
        tokio::time::sleep(cycle - Duration::from_secs(10)).await;
        fleet.push(start(host(39), &new));
        let update = |i: usize, f: &Vec<MeshScheduler<ProbeJob>>| {
            let me = host(i);
            let me = me.as_str();
            let (s, _) = schedule(&new, &[], move |t: &Target| t.host == me).unwrap();
            f[i - 1].update(Some(s));
        };
        for i in (1..=38).step_by(2) {
            update(i, &fleet);
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
        for i in (2..=38).step_by(2) {
            update(i, &fleet);
        }
        tokio::time::sleep(cycle * 3 - Duration::from_secs(20)).await;
        for m in fleet {
            m.shutdown().await;
        }
        assert!(
            skips.lock().unwrap().is_empty(),
            "{:?}",
            skips.lock().unwrap()
        );
        let runs = runs.lock().unwrap().clone();
        let first = plan_old.slot_at(base).cycle;
        let (MeshPlan::StableGrouped(a), MeshPlan::StableGrouped(b)) = (&plan_old, &plan_new)
        else {
            panic!("not stable")
        };
        let rack = |h: &str| {
            let i: usize = h.rsplit('.').next().unwrap().parse().unwrap();
            i % 4
        };
        // Members whose place the joiner moved, and its rack's
        // representatives in either plan, in the cycle of the join.
        let place = |p: &crate::mesh::StableGroupPlan, h: &str| {
            let (g, i) = p.place(p.index_of(h)?)?;
            p.member_place(g, i)
        };
        let mut excused: BTreeSet<String> = (1..=38)
            .map(host)
            .filter(|h| place(a, h) != place(b, h))
            .collect();
        let moved = excused.len();
        let joined = rack(&host(39));
        for c in first..first + 4 {
            for p in [a, b] {
                let g = p
                    .group_names()
                    .iter()
                    .position(|n| *n == format!("r{joined}"))
                    .unwrap();
                excused.insert(p.groups()[g][p.representative(g, c)].clone());
            }
        }
        excused.insert(host(39));
        let mut inside: HashMap<(u64, String, String), usize> = HashMap::new();
        let mut between: HashMap<(u64, usize, usize), usize> = HashMap::new();
        let mut by_host: HashMap<String, Vec<(Duration, String)>> = HashMap::new();
        for (p, t, at) in &runs {
            let c = plan_old.slot_at(*at).cycle;
            if rack(p) == rack(t) {
                *inside.entry((c, p.clone(), t.clone())).or_default() += 1;
            } else {
                *between.entry((c, rack(p), rack(t))).or_default() += 1;
            }
            by_host.entry(p.clone()).or_default().push((*at, t.clone()));
            by_host.entry(t.clone()).or_default().push((*at, p.clone()));
        }
        for c in first..first + 4 {
            for i in 1..=38 {
                for j in 1..=38 {
                    let (hi, hj) = (host(i), host(j));
                    if i != j
                        && rack(&hi) == rack(&hj)
                        && !excused.contains(&hi)
                        && !excused.contains(&hj)
                    {
                        let n = inside.get(&(c, host(i), host(j))).copied().unwrap_or(0);
                        assert_eq!(n, 1, "cycle {} {} → {}", c - first, host(i), host(j));
                    }
                }
            }
            for r in 0..4 {
                for q in 0..4 {
                    if r != q {
                        let n = between.get(&(c, r, q)).copied().unwrap_or(0);
                        assert!(n >= 1, "cycle {} r{r} → r{q}: {n}", c - first);
                    }
                }
            }
        }
        // The joiner probes and is probed by its rack's 9 in each cycle on
        // the new list (from cycle 1 on, by those that know it).
        let joiner = runs
            .iter()
            .filter(|(p, t, _)| *p == host(39) || *t == host(39))
            .count();
        assert!(joiner >= 2 * 9 * 2, "{joiner}");
        // Overlapping tests (a run lasts 5 s here): only where one of the
        // hosts is excused.
        let mut overlaps = 0;
        for (h, mut at) in by_host {
            at.sort();
            for w in at.windows(2) {
                if w[1].0 < w[0].0 + Duration::from_secs(5) {
                    overlaps += 1;
                    assert!(
                        [&h, &w[0].1, &w[1].1].iter().any(|x| excused.contains(*x)),
                        "{h} in two tests at {w:?}"
                    );
                }
            }
        }
        println!(
            "39th host joining 38 in 4 racks: {} runs over 4 cycles, every pair inside a rack of the 38 \
             and every pair of racks once per cycle; {moved} members moved places; {overlaps} overlapping tests",
            runs.len()
        );
    }

    /// An adaptive probe still running at its slot's end
    /// is ended with `End` and reported cut, not converged, and the next
    /// slot's test against the same responder is not met busy. Real probes
    /// on loopback (TCP paced at 200 Mbit/s, a precision of 1 ppm that no
    /// run reaches, a maximum of 8 s) under the real mesh scheduler and
    /// runner; the wall clock is shifted so that this host's two slots
    /// come at once. Slots of 1.5 s expected + the end half of a 1 s
    /// set-up + a 0.2 s guard.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_adaptive_probe_still_running_at_its_slots_end_is_cut_and_the_next_slot_is_free() {
        use crate::config::TraceSection;
        use crate::metrics::{ProbeKey, ResultStore, ServiceState};
        use crate::protocol::adaptive::StopReason;
        use crate::responder::{bind, Responder, ResponderConfig};
        use crate::service::history::{History, Retention};
        use crate::service::runner::ProbeRunner;
        use crate::service::tracer::PathTracer;

        let (tcp, udp) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let responder = Responder::new(tcp, udp, ResponderConfig::default()).unwrap();
        let peer = responder.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(responder.serve(async {
            let _ = stop_rx.await;
        }));
        // This host's own entry: a port nobody probes (the peer runs no
        // scheduler), so that it is the one to probe in its slots.
        let me_port = 9;
        let module = "{kind: tcp, duration: auto, max_duration: 8s, precision: 0.0001%, \
                      expected_duration: 1500ms, bitrate: 200M}";
        let yaml = format!(
            "modules:\n  a: {module}\n  b: {module}\n\
             scheduler: {{default_interval: 8s, mesh: {{budget: 1, setup: 1s, guard: 200ms}}}}\n\
             discovery: {{mesh: true}}\n\
             targets:\n  - {{address: '127.0.0.1:{me_port}', modules: [a, b]}}\n  \
             - {{address: '{peer}', modules: [a, b]}}\n"
        );
        let c = Config::from_yaml(&yaml, "cut.yml").unwrap();
        let is_me = move |t: &Target| t.port == me_port;
        let (s, rest) = schedule(&c, &[], is_me).unwrap();
        assert!(rest.is_empty());
        let slot = Duration::from_millis(2200);
        assert_eq!(s.plan.slot(), slot);
        assert_eq!(s.end_reserve, Duration::from_millis(500));
        // This host's slots of the cycle: one per module, back to back.
        let mine: Vec<usize> = (0..s.plan.slots())
            .filter(|&k| s.plan.test_of(s.me, 0, k).is_some_and(|t| t.prober == s.me))
            .collect();
        assert_eq!(mine.len(), 2, "{mine:?}");
        assert_eq!(mine[1], mine[0] + 1);
        let first = s.plan.cycle_start(1000) + s.plan.period() * mine[0] as u32;
        // Unix time that reaches this host's first slot 300 ms from now.
        let t0 = std::time::Instant::now();
        let base = first - Duration::from_millis(300);
        let clock: WallClock = Arc::new(move || base + t0.elapsed());
        let state = Arc::new(ServiceState::new(std::time::SystemTime::now()));
        let store = Arc::new(ResultStore::new());
        let runner = Arc::new(ProbeRunner {
            store: store.clone(),
            state: state.clone(),
            history: Arc::new(History::new(Retention::default())),
            tracer: Arc::new(PathTracer::new(&TraceSection::default(), state.paths())),
            rates: Default::default(),
        });
        let m = MeshScheduler::start(runner, state.host_slot(), clock, Some(s.clone()));
        // Both slots, and a little more for the second's results.
        tokio::time::sleep(Duration::from_millis(300) + slot * 2 + Duration::from_millis(300))
            .await;
        m.shutdown().await;
        let _ = stop_tx.send(());
        let _ = server.await;

        let target = peer.to_string();
        let key = |module: &str| ProbeKey::new(target.clone(), module);
        for module in ["a", "b"] {
            for o in store.latest_of(&key(module)) {
                match &o.result {
                    Ok(r) => println!("{module}: {:?}", r.adaptive),
                    Err(f) => println!("{module}: failed {f:?}"),
                }
            }
        }
        for (i, module) in ["a", "b"].into_iter().enumerate() {
            let outcomes = store.latest_of(&ProbeKey::new(target.clone(), module));
            assert_eq!(outcomes.len(), 1, "{module}: {outcomes:?}");
            let o = &outcomes[0];
            // Not busy, not dropped at the slot's end: a result.
            let r = o
                .result
                .as_ref()
                .unwrap_or_else(|f| panic!("{module} failed: {f:?}"));
            let a = r.adaptive.as_ref().expect("an adaptive outcome");
            println!(
                "slot {i} ({module}): stop {} converged {} after {:.2} s of data, {} bytes; \
                 the run took {:.2} s of a {:.1} s slot",
                a.stop_reason,
                a.converged,
                a.elapsed_seconds,
                a.bytes,
                o.duration.as_secs_f64(),
                slot.as_secs_f64()
            );
            assert_eq!(a.stop_reason, StopReason::Cut, "{module}");
            assert!(!a.converged, "{module}");
            // Cut at the slot's end less the reserve, after its start a
            // guard into the slot: about 1.5 s of data of its 8 s maximum.
            assert!(
                (1.0..1.8).contains(&a.elapsed_seconds),
                "{module}: {}",
                a.elapsed_seconds
            );
            // Over within its slot (less the guard it started into it).
            assert!(o.duration < slot - Duration::from_millis(200), "{o:?}");
            assert!(r.bytes > 0);
        }
        // Nothing else recorded: no busy or timed-out run of either.
        assert_eq!(store.latest().len(), 2);
    }
}
