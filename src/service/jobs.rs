//! Builds the scheduler's jobs from the configuration's static targets and
//! the peers discovery found, one job per (target, module).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{Config, Detail, Module};
use crate::discovery::DiscoveredTarget;
use crate::metrics::{ProbeKey, ProbeOutcome, ResultStore, SeriesPlan};
use crate::probe::Target;
use crate::scheduler::{Job, JobKey, Skip};

/// What a job runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeJob {
    /// `None` for loopback modules.
    pub endpoint: Option<Target>,
    /// How to probe it.
    pub module: Module,
    /// The target's own labels, added to its series.
    pub labels: BTreeMap<String, String>,
    /// At `metrics.detail: fleet` in a grouped mesh plan, a member of
    /// another group: its results go to /metrics under its group
    /// ([`GroupKey`]), so that this host's series grow with the groups,
    /// not with the fleet. Its history stays per host.
    pub metrics_as: Option<GroupKey>,
}

/// The series a between-group result is exported under: `target` is
/// `LABEL=VALUE` of `scheduler.mesh.group_by`, and the only target label
/// is the group's.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupKey {
    /// `LABEL=VALUE`.
    pub target: String,
    /// `{LABEL: VALUE}`.
    pub labels: BTreeMap<String, String>,
}

impl ProbeJob {
    /// The key of this job's series in the result store.
    pub fn store_key(&self, key: &JobKey) -> ProbeKey {
        match &self.metrics_as {
            Some(g) => ProbeKey::new(g.target.clone(), key.module.clone()),
            None => ProbeKey::new(key.target.clone(), key.module.clone()),
        }
    }

    /// `outcome` with the labels of this job's series.
    pub fn for_store(&self, mut outcome: ProbeOutcome) -> ProbeOutcome {
        if let Some(g) = &self.metrics_as {
            outcome.labels.clone_from(&g.labels);
        }
        outcome
    }

    /// The target labels of this job's series.
    pub fn store_labels(&self) -> &BTreeMap<String, String> {
        self.metrics_as.as_ref().map_or(&self.labels, |g| &g.labels)
    }
}

/// At `fleet` with `scheduler.mesh.group_by` in a planned mesh: the group
/// this host's own entry belongs to (the value of the label, empty
/// without it), and the label; `None` otherwise.
fn own_group(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: &impl Fn(&Target) -> bool,
) -> Option<(String, String)> {
    if config.metrics.detail != Detail::Fleet {
        return None;
    }
    host_group(config, discovered, is_local)
}

/// In a planned mesh grouped by `scheduler.mesh.group_by`: the label and
/// this host's own value of it (empty without it), at either detail
/// level; `None` outside such a mesh or when no entry is this host's.
/// The same entry [`build`] compares its peers' groups with, so that
/// `pathprobe_mesh_group_info` names the group the between-group series
/// are exported from.
pub fn host_group(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: &impl Fn(&Target) -> bool,
) -> Option<(String, String)> {
    let label = config.scheduler.mesh.group_by.as_ref()?;
    if !config.discovery.mesh || !config.scheduler.mesh.planned {
        return None;
    }
    let statics = config
        .targets
        .iter()
        .filter_map(|t| Some((t.endpoint()?.ok()?, &t.labels)));
    let found = discovered.iter().map(|d| (d.endpoint.clone(), &d.labels));
    let (_, labels) = statics.chain(found).find(|(e, _)| is_local(e))?;
    Some((
        label.clone(),
        labels.get(label).cloned().unwrap_or_default(),
    ))
}

fn timeout_of(module: &Module) -> Duration {
    // A `both` module runs two probes one after the other.
    module.effective_timeout() * module.specs().len().max(1) as u32
}

/// The jobs for `config` plus `discovered`, leaving out this host's own
/// addresses in mesh mode (`is_local` decides what is local).
pub fn build(
    config: &Config,
    discovered: &[DiscoveredTarget],
    is_local: impl Fn(&Target) -> bool,
) -> Vec<Job<ProbeJob>> {
    let mut jobs = Vec::new();
    let group = own_group(config, discovered, &is_local);
    let mut push = |name: &str,
                    endpoint: Option<Target>,
                    modules: &[String],
                    interval: Duration,
                    labels: &BTreeMap<String, String>| {
        if config.discovery.mesh && endpoint.as_ref().is_some_and(&is_local) {
            return;
        }
        for m in modules {
            let Some(module) = config.module(m) else {
                continue;
            };
            jobs.push(Job {
                key: JobKey {
                    target: name.to_string(),
                    module: m.clone(),
                },
                interval,
                timeout: timeout_of(module),
                payload: ProbeJob {
                    endpoint: endpoint.clone(),
                    module: module.clone(),
                    labels: labels.clone(),
                    metrics_as: group.as_ref().and_then(|(label, mine)| {
                        let theirs = labels.get(label).cloned().unwrap_or_default();
                        (endpoint.is_some() && theirs != *mine).then(|| GroupKey {
                            target: format!("{label}={theirs}"),
                            labels: BTreeMap::from([(label.clone(), theirs)]),
                        })
                    }),
                },
            });
        }
    };
    for t in &config.targets {
        let endpoint = match t.endpoint() {
            Some(Ok(e)) => Some(e),
            Some(Err(_)) => continue,
            None => None,
        };
        push(
            t.name(),
            endpoint,
            &t.modules,
            config.interval_of(t),
            &t.labels,
        );
    }
    for d in discovered {
        let interval = d.interval.unwrap_or(config.scheduler.default_interval);
        push(
            &d.name,
            Some(d.endpoint.clone()),
            &d.modules,
            interval,
            &d.labels,
        );
    }
    // A peer listed twice (statically and by discovery) is probed once.
    jobs.sort_by(|a, b| a.key.cmp(&b.key));
    jobs.dedup_by(|a, b| a.key == b.key);
    jobs
}

/// The series `jobs` export at `config`'s `metrics.detail`, for
/// check-config and the startup log: a path per distinct series key,
/// direction and flow (between-group jobs share their group's).
pub fn host_series(config: &Config, jobs: &[Job<ProbeJob>]) -> crate::metrics::budget::HostSeries {
    let mut keys = std::collections::BTreeMap::new();
    for job in jobs {
        let flows: usize = job
            .payload
            .module
            .specs()
            .iter()
            .map(|(d, _)| d.flows().len())
            .sum();
        keys.insert(job.payload.store_key(&job.key), flows);
    }
    let modules: std::collections::BTreeSet<&str> =
        jobs.iter().map(|j| j.key.module.as_str()).collect();
    crate::metrics::budget::HostSeries {
        detail: config.metrics.detail,
        paths: keys.values().sum(),
        modules: modules.len(),
        skip_reasons: Skip::ALL.len(),
    }
}

/// How long a key that is no longer probed keeps its series: the
/// configured `metrics.expire_after`, but never less than twice the
/// longest interval of `jobs` or `cycle` (the mesh's), so that a path that
/// is still planned does not blink out between its runs.
pub fn expire_after(config: &Config, jobs: &[Job<ProbeJob>], cycle: Option<Duration>) -> Duration {
    let longest = jobs
        .iter()
        .map(|j| j.interval)
        .chain(cycle)
        .max()
        .unwrap_or_default();
    config.metrics.expire_after.max(longest.saturating_mul(2))
}

/// Creates every job's counters in `store` at 0 (the skip counters, and
/// per direction the probe, byte and retransmit counters), so that they
/// exist from the moment the job does rather than from its first event.
pub fn register(store: &ResultStore, jobs: &[Job<ProbeJob>]) {
    let skip_reasons = Skip::ALL.map(Skip::as_str);
    for job in jobs {
        let module = &job.payload.module;
        store.register(
            job.payload.store_key(&job.key),
            SeriesPlan {
                kind: module.kind.as_str(),
                // A stock iperf3 server's retransmits are its own to
                // report, not series this host has from the start.
                tcp: !module.kind.is_iperf3()
                    && crate::kinds::of(module.kind.kind)
                        .series()
                        .contains(&crate::kinds::kind::Series::Retransmits),
                directions: module.specs().into_iter().map(|(d, _)| d).collect(),
                labels: job.payload.store_labels(),
                skip_reasons: &skip_reasons,
                adaptive: module.adaptive.is_some(),
            },
        );
    }
}

/// Whether a target names this host, for mesh mode: a literal address of
/// one of its interfaces.
pub fn is_local_target(t: &Target) -> bool {
    t.host.parse().is_ok_and(crate::host::is_local_address)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(yaml: &str) -> Config {
        Config::from_yaml(yaml, "t.yml").unwrap()
    }

    #[test]
    fn one_job_per_target_and_module() {
        let c = cfg("modules:\n  tcp: {kind: tcp}\n  udp: {kind: udp, direction: both}\n  lo: {kind: loopback_tcp}\ntargets:\n  - {name: a, address: 10.0.0.1, modules: [tcp, udp], interval: 30s, labels: {site: x}}\n  - {modules: [lo]}\n");
        let jobs = build(&c, &[], |_| false);
        let keys: Vec<String> = jobs.iter().map(|j| j.key.to_string()).collect();
        assert_eq!(keys, vec!["a/tcp", "a/udp", "loopback/lo"]);
        assert_eq!(jobs[0].interval, Duration::from_secs(30));
        assert_eq!(jobs[2].interval, Duration::from_secs(60));
        assert_eq!(
            jobs[0].payload.endpoint,
            Some(Target {
                host: "10.0.0.1".into(),
                port: 5301
            })
        );
        assert_eq!(
            jobs[0].payload.labels.get("site").map(String::as_str),
            Some("x")
        );
        assert!(jobs[2].payload.endpoint.is_none());
        // `both` runs two probes, so its deadline covers two.
        assert_eq!(jobs[1].timeout, jobs[0].timeout * 2);
    }

    #[test]
    fn mesh_mode_leaves_out_this_host() {
        let yaml = "modules: {tcp: {kind: tcp}}\ndiscovery: {mesh: MESH}\n";
        let peers = vec![
            DiscoveredTarget {
                name: "10.0.0.1:5301".into(),
                endpoint: Target {
                    host: "10.0.0.1".into(),
                    port: 5301,
                },
                modules: vec!["tcp".into()],
                interval: None,
                labels: BTreeMap::new(),
            },
            DiscoveredTarget {
                name: "10.0.0.2:5301".into(),
                endpoint: Target {
                    host: "10.0.0.2".into(),
                    port: 5301,
                },
                modules: vec!["tcp".into()],
                interval: None,
                labels: BTreeMap::new(),
            },
        ];
        let me = |t: &Target| t.host == "10.0.0.2";
        assert_eq!(
            build(&cfg(&yaml.replace("MESH", "true")), &peers, me).len(),
            1
        );
        assert_eq!(
            build(&cfg(&yaml.replace("MESH", "false")), &peers, me).len(),
            2
        );
        assert!(is_local_target(&Target {
            host: "127.0.0.1".into(),
            port: 1
        }));
        assert!(!is_local_target(&Target {
            host: "192.0.2.77".into(),
            port: 1
        }));
    }
}

#[cfg(test)]
mod fleet_tests {
    use super::*;
    use crate::scheduler::Job;

    fn racks(detail: &str) -> Config {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/examples/mesh_racks.yml"
        );
        let text = std::fs::read_to_string(path).unwrap();
        Config::from_yaml(
            &format!("{text}\nmetrics: {{detail: {detail}}}\n"),
            "racks.yml",
        )
        .unwrap()
    }

    fn me(t: &Target) -> bool {
        t.host == "10.0.0.1"
    }

    fn store_keys(jobs: &[Job<ProbeJob>]) -> std::collections::BTreeSet<String> {
        jobs.iter()
            .map(|j| j.payload.store_key(&j.key).target)
            .collect()
    }

    /// At `fleet`, a host of rack r1 exports its own rack's
    /// members one by one and every other rack as one target, so its
    /// series are bounded by its group and the number of groups, not by
    /// the fleet; at `full` every member is a target of its own.
    #[test]
    fn between_group_results_are_exported_per_group_at_fleet() {
        let fleet = build(&racks("fleet"), &[], me);
        let keys = store_keys(&fleet);
        assert_eq!(
            keys.iter().filter(|k| k.starts_with("rack=")).count(),
            3,
            "{keys:?}"
        );
        assert!(keys.contains("rack=r2") && keys.contains("rack=r4"));
        // Five other hosts of r1, three other racks.
        assert_eq!(keys.len(), 5 + 3, "{keys:?}");
        let j = fleet.iter().find(|j| j.key.target == "10.0.1.1").unwrap();
        assert_eq!(
            j.payload.store_labels(),
            &BTreeMap::from([("rack".to_string(), "r2".to_string())])
        );
        let full = build(&racks("full"), &[], me);
        assert_eq!(store_keys(&full).len(), 23);
        let (f, u) = (
            host_series(&racks("fleet"), &fleet),
            host_series(&racks("full"), &full),
        );
        assert_eq!((f.paths, u.paths), (8, 23));
        assert!(f.total() < u.total() / 5, "{f:?} {u:?}");
        assert!(
            f.sentence().starts_with(&format!(
                "metrics.detail: fleet: this host exports at most {} series on /metrics: 8 paths x at most 10 series",
                f.total()
            )),
            "{}",
            f.sentence()
        );
    }

    /// `pathprobe_mesh_group_info` says which group a host probes from,
    /// at either detail level (config/federation.yml needs it at both), and
    /// nothing outside a grouped planned mesh.
    #[test]
    fn a_host_knows_its_own_group_at_either_detail() {
        let rack = Some(("rack".to_string(), "r1".to_string()));
        assert_eq!(host_group(&racks("fleet"), &[], &me), rack);
        assert_eq!(host_group(&racks("full"), &[], &me), rack);
        let in_r3 = |t: &Target| t.host == "10.0.2.4";
        assert_eq!(
            host_group(&racks("full"), &[], &in_r3),
            Some(("rack".to_string(), "r3".to_string()))
        );
        // Not a member: no group.
        assert_eq!(host_group(&racks("fleet"), &[], &|_: &Target| false), None);
        let mut plain = racks("fleet");
        plain.scheduler.mesh.group_by = None;
        assert_eq!(host_group(&plain, &[], &me), None);
        let mut unplanned = racks("fleet");
        unplanned.scheduler.mesh.planned = false;
        assert_eq!(host_group(&unplanned, &[], &me), None);
    }

    #[test]
    fn expiry_is_never_shorter_than_two_intervals_or_cycles() {
        let c = racks("fleet");
        let jobs = build(&c, &[], me);
        // 8 min interval: twice is 16 min, under the 1 h default.
        assert_eq!(expire_after(&c, &jobs, None), Duration::from_secs(3600));
        assert_eq!(
            expire_after(&c, &jobs, Some(Duration::from_secs(3 * 3600))),
            Duration::from_secs(6 * 3600)
        );
    }
}
