//! The sentence that states what the schedule costs in bytes (check-config
//! and the startup log), beside the time shares [`super::mesh::notes`]
//! states: the bytes per cycle and per hour this host's tests are expected
//! to move, in both roles, from [`crate::scheduler::budget::planned_bytes`]
//! (paced modules at their rate, unpaced ones at
//! `scheduler.link_rate_guess`, as before their first run; an adaptive
//! module over its `expected_duration`, not its maximum), against
//! `scheduler.max_bytes_per_hour`. The admission of each run still
//! reserves an adaptive module's maximum
//! ([`crate::scheduler::budget::expected_bytes`]).

use std::time::Duration;

use crate::config::Config;
use crate::discovery::DiscoveredTarget;
use crate::probe::Target;
use crate::scheduler::budget::planned_bytes;

use super::jobs;

/// The expected bytes of one schedule: per cycle (the mesh cycle, or the
/// shortest interval of the plain schedule) and per hour, by role.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpectedBytes {
    /// The cycle the per-cycle figures are for.
    pub cycle: Duration,
    /// This host's own probes in one cycle.
    pub probing_per_cycle: f64,
    /// Tests it serves in one cycle (mesh mode only: in the plain schedule
    /// who probes this host is not in its configuration).
    pub serving_per_cycle: Option<f64>,
    /// Both roles over an hour.
    pub per_hour: f64,
}

/// What `config`'s schedule is expected to move here.
pub fn expected(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: impl Fn(&Target) -> bool + Copy,
) -> ExpectedBytes {
    let guess = config.scheduler.link_rate_guess;
    // An adaptive module is expected to take its expected run (the one a
    // mesh slot holds), not its maximum: outside a mesh as well, since
    // that is what its runs take once converged.
    let of = |name: &str| {
        config
            .module(name)
            .map_or(0, |m| planned_bytes(m, &|_| None, guess)) as f64
    };
    let hour = 3600.0;
    if config.discovery.mesh && config.scheduler.mesh.planned {
        let (plan, me, modules) = super::mesh::plan(config, discovered, is_local);
        if plan.members().len() > 1 {
            // The busiest host stands in for one that is not a member.
            let me = me.unwrap_or(0);
            let (mut probing, mut serving) = (0.0, 0.0);
            for index in 0..plan.slots() {
                for t in plan.tests(1, index) {
                    let bytes = modules.get(t.module).map_or(0.0, |m| of(m));
                    if t.prober == me {
                        probing += bytes;
                    }
                    if t.target == me {
                        serving += bytes;
                    }
                }
            }
            // Loopback modules run in the gaps and cost the links nothing.
            let cycle = plan.cycle();
            let secs = cycle.as_secs_f64().max(1e-3);
            return ExpectedBytes {
                cycle,
                probing_per_cycle: probing,
                serving_per_cycle: Some(serving),
                per_hour: (probing + serving) * hour / secs,
            };
        }
    }
    let jobs = jobs::build(config, discovered, is_local);
    let cycle = jobs
        .iter()
        .map(|j| j.interval)
        .min()
        .unwrap_or(config.scheduler.default_interval);
    let (mut per_cycle, mut per_hour) = (0.0, 0.0);
    for j in &jobs {
        let bytes = planned_bytes(&j.payload.module, &|_| None, guess) as f64;
        let secs = j.interval.as_secs_f64().max(1e-3);
        per_hour += bytes * hour / secs;
        per_cycle += bytes * cycle.as_secs_f64() / secs;
    }
    ExpectedBytes {
        cycle,
        probing_per_cycle: per_cycle,
        serving_per_cycle: None,
        per_hour,
    }
}

/// Bytes as a person reads them: "1.3 TB", "750 MB", "12 kB" (decimal,
/// three figures).
pub fn approx_bytes(bytes: f64) -> String {
    for (div, unit) in [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")] {
        if bytes >= div {
            let v = bytes / div;
            return if v >= 100.0 {
                format!("{v:.0} {unit}")
            } else if v >= 10.0 {
                format!("{v:.1} {unit}")
            } else {
                format!("{v:.2} {unit}")
            };
        }
    }
    format!("{bytes:.0} B")
}

/// The sentence, with a warning when the budget cannot hold the schedule.
pub fn note(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: impl Fn(&Target) -> bool + Copy,
) -> String {
    let e = expected(config, discovered, is_local);
    let cycle = match e.serving_per_cycle {
        Some(serving) => format!(
            "{} per mesh cycle of {:.0} s ({} probing, {} serving)",
            approx_bytes(e.probing_per_cycle + serving),
            e.cycle.as_secs_f64(),
            approx_bytes(e.probing_per_cycle),
            approx_bytes(serving)
        ),
        None => format!(
            "{} per {:.0} s of its own probes (the tests it serves are not in its \
             configuration)",
            approx_bytes(e.probing_per_cycle),
            e.cycle.as_secs_f64()
        ),
    };
    let basis = format!(
        "unpaced modules at scheduler.link_rate_guess of {}bit/s",
        crate::units::format_rate(config.scheduler.link_rate_guess)
    );
    let limit = config.scheduler.max_bytes_per_hour;
    if limit == 0 {
        return format!(
            "bytes: this host's tests are expected to move {cycle}, {} per hour ({basis}); \
             scheduler.max_bytes_per_hour: unlimited",
            approx_bytes(e.per_hour)
        );
    }
    let share = limit as f64 / e.per_hour.max(1.0);
    if share >= 1.0 {
        format!(
            "bytes: this host's tests are expected to move {cycle}, {} per hour ({basis}), \
             {:.0}% of scheduler.max_bytes_per_hour of {}",
            approx_bytes(e.per_hour),
            100.0 / share,
            approx_bytes(limit as f64)
        )
    } else {
        format!(
            "warning: this host's tests are expected to move {cycle}, {} per hour ({basis}), \
             more than scheduler.max_bytes_per_hour of {}: about {:.0}% of the runs fit, \
             the rest are skipped (reason byte_budget) or refused (budget_exhausted)",
            approx_bytes(e.per_hour),
            approx_bytes(limit as f64),
            share * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approx_bytes_reads_as_a_person_writes() {
        assert_eq!(approx_bytes(1.3e12), "1.30 TB");
        assert_eq!(approx_bytes(750e6), "750 MB");
        assert_eq!(approx_bytes(12_345.0), "12.3 kB");
        assert_eq!(approx_bytes(12.0), "12 B");
    }

    /// The shipped mesh example: 10 hosts, TCP both ways (1 s + 5 s each
    /// way) and UDP at its rate; adaptive TCP puts its TCP at about 1.3 TB a
    /// cycle over the mesh on 10 GbE.
    #[test]
    fn the_shipped_mesh_example_states_its_bytes() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/examples/mesh.yml");
        let c = Config::load(std::path::Path::new(path)).unwrap();
        let me = |t: &Target| t.host == "10.0.0.3";
        let e = expected(&c, &[], me);
        // 9 peers each way; every module's bytes, from the same function.
        let per_peer: f64 = c
            .modules
            .values()
            .filter(|m| !m.is_loopback())
            .map(|m| planned_bytes(m, &|_| None, c.scheduler.link_rate_guess) as f64)
            .sum();
        assert!(per_peer > 0.0);
        assert_eq!(e.probing_per_cycle, 9.0 * per_peer);
        assert_eq!(e.serving_per_cycle, Some(9.0 * per_peer));
        let hours = e.cycle.as_secs_f64() / 3600.0;
        assert!((e.per_hour * hours - 18.0 * per_peer).abs() < 1.0);
        let n = note(&c, &[], me);
        assert!(n.contains("serving") && n.contains("unlimited"), "{n}");

        // A budget of a tenth of the hour's bytes: about 10% of runs fit.
        let mut tight = c.clone();
        tight.scheduler.max_bytes_per_hour = (e.per_hour / 10.0) as u64;
        let n = note(&tight, &[], me);
        assert!(
            n.starts_with("warning:") && n.contains("about 10% of the runs fit"),
            "{n}"
        );
    }

    /// An adaptive module's stated
    /// bytes per hour are its runs' expected time (1 s at the defaults),
    /// not its 5 s maximum: 60 runs an hour of 125 MB at a 1 Gbit/s guess
    /// are 7.5 GB, where dividing by the maximum stated 37.5 GB.
    #[test]
    fn a_plain_schedule_states_an_adaptive_modules_expected_runs() {
        let yaml = |duration: &str| {
            format!(
                "modules:\n  tcp: {{kind: tcp, duration: {duration}}}\n\
                 scheduler: {{default_interval: 1m, link_rate_guess: 1G}}\n\
                 targets:\n  - {{address: 192.0.2.7, modules: [tcp]}}\n"
            )
        };
        let none = |_: &Target| false;
        let adaptive = Config::from_yaml(&yaml("auto"), "test").unwrap();
        let e = expected(&adaptive, &[], none);
        println!("adaptive, plain schedule: {e:?}");
        assert_eq!(e.cycle, Duration::from_secs(60));
        assert_eq!(e.serving_per_cycle, None);
        assert!((e.probing_per_cycle - 125e6).abs() < 1.0, "{e:?}");
        assert!((e.per_hour - 7.5e9).abs() < 1e3, "{e:?}");
        // A fixed module of the adaptive one's maximum: five times that.
        let fixed = Config::from_yaml(&yaml("5s"), "test").unwrap();
        let f = expected(&fixed, &[], none);
        assert!((f.per_hour - 37.5e9).abs() < 1e3, "{f:?}");
        let n = note(&adaptive, &[], none);
        assert!(n.contains("7.50 GB per hour"), "{n}");
    }

    /// The adaptive variant of the mesh example: in a mesh an adaptive
    /// module is expected to move its rate over the run its slot holds
    /// (1 s per run), not over its 5 s maximum; the rest would be cut.
    #[test]
    fn an_adaptive_mesh_expects_the_bytes_of_its_expected_runs() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/examples/mesh-adaptive.yml"
        );
        let c = Config::load(std::path::Path::new(path)).unwrap();
        let me = |t: &Target| t.host == "10.0.0.3";
        let e = expected(&c, &[], me);
        // TCP both ways, 1 s each at the 10 Gbit/s guess; UDP 1 s at 200M.
        let per_peer = 2.0 * 10e9 / 8.0 + 200e6 / 8.0;
        assert!((e.probing_per_cycle - 9.0 * per_peer).abs() < 1e3, "{e:?}");
        // Its interval is mesh.yml's 30 min (the plan would allow 6).
        assert_eq!(e.cycle, Duration::from_secs(1800));
        let n = note(&c, &[], me);
        println!("{n}");
        assert!(n.contains(" GB per mesh cycle of 1800 s"), "{n}");
    }
}
