//! `pathprobe check-config FILE`: what the file holds and costs, every
//! error in it, and warnings about what is valid but will not work here
//! (a discovery pattern that matches nothing, a history file that cannot
//! be written). A Prometheus file given by mistake is named as such.

use std::path::{Path, PathBuf};

use crate::config::{check, Config, ConfigError};
use crate::discovery::DiscoveredTarget;
use crate::probe::Target;
use crate::units::plural;

/// What `check-config` prints and how it exits.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// For stdout: the summary and the schedule's cost.
    pub stdout: Vec<String>,
    /// For stderr: errors and warnings.
    pub stderr: Vec<String>,
    /// 0 valid, 1 invalid, 2 unreadable (README, exit codes).
    pub code: u8,
}

/// Member counts whose mesh cost a discovery-only mesh is shown for.
const MEMBER_COUNTS: [usize; 4] = [2, 10, 50, 200];

/// Checks the file at `path`.
pub fn check_config(path: &Path) -> CheckReport {
    let name = path.display().to_string();
    let mut report = CheckReport::default();
    let config = match check::load_all(path) {
        Ok(c) => c,
        Err(errors) => {
            report.code = if errors.iter().any(|e| matches!(e, ConfigError::Read { .. })) {
                2
            } else {
                1
            };
            // read_text, not fs::read_to_string: a FIFO in the file's place
            // must be an error at once, not a check that waits forever.
            if let Some(what) = crate::config::read_text(path)
                .ok()
                .and_then(|t| prometheus_file(&t))
            {
                report.stderr.push(format!("{name}: {what}"));
                return report;
            }
            report.stderr.extend(errors.iter().map(ToString::to_string));
            if errors.len() > 1 {
                report
                    .stderr
                    .push(format!("{name}: {}", plural(errors.len(), "error")));
            }
            return report;
        }
    };
    let summary = config.summary();
    let mut warnings = summary.warnings.clone();
    warnings.extend(empty_patterns(&config));
    warnings.extend(history_unwritable(&config));
    report
        .stderr
        .extend(warnings.iter().map(|w| format!("{name}: WARNING: {w}")));
    report.stdout.push(format!("{name}: OK ({summary})"));
    report.stdout.extend(schedule_notes(&config));
    report.stdout.push(series_note(&config, &[]));
    if config.trace.enabled {
        report.stdout.push(trace_note(&config, &[]));
    }
    report
}

/// Checks the web configuration file at `path` (`serve
/// --web.config.file`) into `report`: what it sets, or why it would be
/// refused.
pub fn check_web_config(path: &Path, report: &mut CheckReport) {
    match crate::web_config::WebConfig::load(path) {
        Ok(w) => report.stdout.push(format!(
            "{}: OK (web config: {})",
            path.display(),
            w.summary()
        )),
        Err(e) => {
            report.code = report.code.max(1);
            report.stderr.push(e.to_string());
        }
    }
}

/// What tracing costs over the paths of the static targets and
/// `discovered` (the startup log says the same over the schedule).
fn trace_note(config: &Config, discovered: &[DiscoveredTarget]) -> String {
    let jobs = super::jobs::build(config, discovered, super::jobs::is_local_target);
    let traced = jobs
        .iter()
        .filter(|j| j.payload.endpoint.is_some() && j.payload.metrics_as.is_none())
        .count();
    config.trace.cost_sentence(traced)
}

/// What /metrics will hold, from the static targets and `discovered`.
fn series_note(config: &Config, discovered: &[DiscoveredTarget]) -> String {
    let jobs = super::jobs::build(config, discovered, super::jobs::is_local_target);
    super::jobs::host_series(config, &jobs).sentence()
}

/// The schedule's cost over the static targets; for a mesh whose members
/// all come from discovery, the cost at a few member counts, as they are
/// known only at run time.
fn schedule_notes(config: &Config) -> Vec<String> {
    let local = super::jobs::is_local_target;
    let discovery_only = config.discovery.mesh
        && config.scheduler.mesh.planned
        && super::mesh::plan(config, &[], local).0.members().len() < 2
        && !(config.discovery.file_sd.is_empty() && config.discovery.dns.is_empty());
    if !discovery_only {
        let mut notes = super::mesh::notes(config, &[], local);
        // The bytes beside the time shares.
        notes.push(super::budget::note(config, &[], local));
        return notes;
    }
    let modules: Vec<String> = config
        .discovery
        .file_sd
        .iter()
        .map(|e| (&e.modules, e.interval))
        .chain(
            config
                .discovery
                .dns
                .iter()
                .map(|e| (&e.modules, e.interval)),
        )
        .next()
        .map(|(m, _)| m.clone())
        .unwrap_or_default();
    let interval = config
        .discovery
        .file_sd
        .first()
        .and_then(|e| e.interval)
        .or_else(|| config.discovery.dns.first().and_then(|e| e.interval));
    let mut out = vec![
        "mesh members come from discovery at run time (the startup log states the schedule); \
         its cost by member count:"
            .to_string(),
    ];
    for n in MEMBER_COUNTS {
        let members: Vec<DiscoveredTarget> = (0..n)
            .map(|i| DiscoveredTarget {
                name: format!("member{i}"),
                endpoint: Target {
                    host: format!("member{i}.invalid"),
                    port: crate::protocol::DEFAULT_PORT,
                },
                modules: modules.clone(),
                interval,
                labels: Default::default(),
            })
            .collect();
        let (plan, _, _) = super::mesh::plan(config, &members, |_| false);
        out.push(format!("  {}", plan.describe()));
        out.push(format!("  {}", series_note(config, &members)));
    }
    out
}

/// Warnings for file_sd patterns that match no file now.
fn empty_patterns(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for (i, entry) in config.discovery.file_sd.iter().enumerate() {
        for (j, pattern) in entry.files.iter().enumerate() {
            let one = crate::config::FileSdConfig {
                files: vec![pattern.clone()],
                ..entry.clone()
            };
            let found = one
                .expand_files(&config.base_dir)
                .iter()
                .filter(|p| p.is_file())
                .count();
            if found == 0 {
                out.push(format!(
                    "discovery.file_sd[{i}].files[{j}]: {pattern:?} matches no file in {} now; \
                     its targets come only once files appear there",
                    dir_of(&config.base_dir.join(pattern)).display()
                ));
            }
        }
    }
    out
}

fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A warning when the status page's history file cannot be written where
/// the configuration puts it: every save would fail.
fn history_unwritable(config: &Config) -> Option<String> {
    let state_dir = std::env::var_os("STATE_DIRECTORY");
    let path = config
        .web
        .history_path(&config.base_dir, state_dir.as_deref())?;
    let dir = dir_of(&path);
    // Creating a file is the only test that holds for read-only mounts,
    // ACLs and root alike.
    let probe = dir.join(format!(".pathprobe-check-{}", std::process::id()));
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe);
    match result {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            None
        }
        Err(e) => Some(format!(
            "web.history_file: cannot write in {} ({e}); the status page's history would not \
             be saved (under systemd's ProtectSystem=strict, put it in StateDirectory=)",
            dir.display()
        )),
    }
}

/// What a Prometheus file given to check-config is, by its top-level keys.
fn prometheus_file(text: &str) -> Option<String> {
    let serde_yaml::Value::Mapping(top) = serde_yaml::from_str(text).ok()? else {
        return None;
    };
    let has = |k: &str| top.contains_key(k);
    if has("groups") && !check::SECTIONS.iter().any(|s| has(s)) {
        return Some(
            "this is a Prometheus rules file (groups:), not a pathprobe configuration; \
             check it with `promtool check rules`"
                .into(),
        );
    }
    if ["global", "scrape_configs", "rule_files", "alerting"]
        .iter()
        .any(|k| has(k))
        && !check::SECTIONS.iter().any(|s| has(s))
    {
        return Some(
            "this is a Prometheus server configuration (scrape_configs:), not a pathprobe \
             configuration; check it with `promtool check config`"
                .into(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_files_are_named() {
        assert!(prometheus_file("groups:\n- name: x\n  rules: []\n")
            .unwrap()
            .contains("rules file"));
        assert!(prometheus_file("global: {}\nscrape_configs: []\n")
            .unwrap()
            .contains("server configuration"));
        assert_eq!(prometheus_file("modules: {}\n"), None);
    }

    /// check-config states what tracing costs when it is on, and says
    /// nothing of it when it is off; a bad trace key is named.
    /// One of each reads in the singular in the OK line.
    #[test]
    fn check_config_counts_one_static_target_in_the_singular() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("one.yml");
        std::fs::write(
            &path,
            "modules:\n  tcp: {kind: tcp, duration: 1s}\ntargets:\n  \
             - {address: '192.0.2.1', modules: [tcp]}\n\
             discovery:\n  dns:\n    - {names: [h.example], modules: [tcp]}\n",
        )
        .unwrap();
        let report = check_config(&path);
        assert_eq!(report.code, 0, "{:?}", report.stderr);
        let ok = &report.stdout[0];
        assert!(
            ok.ends_with(
                ": OK (1 module, 1 static target (1 probe run per interval), \
                 0 file_sd and 1 dns discovery entry; responder on [::]:5301)"
            ),
            "{ok}"
        );
    }

    #[test]
    fn check_config_states_the_trace_cost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.yml");
        let base = "modules:\n  tcp: {kind: tcp, duration: 1s}\ntargets:\n  \
                    - {name: a, address: '192.0.2.1', modules: [tcp]}\n  \
                    - {name: b, address: '192.0.2.2', modules: [tcp]}\n";
        std::fs::write(
            &path,
            format!("{base}trace: {{enabled: true, max_hops: 10}}\n"),
        )
        .unwrap();
        let report = check_config(&path);
        assert!(report.stderr.is_empty(), "{:?}", report.stderr);
        let note = report
            .stdout
            .iter()
            .find(|l| l.starts_with("trace: "))
            .unwrap_or_else(|| panic!("{:?}", report.stdout));
        assert!(
            note.contains("at most 20 packets per trace (10 hops x 2 probes)"),
            "{note}"
        );
        assert!(note.contains("each of 2 paths"), "{note}");
        std::fs::write(&path, base).unwrap();
        let report = check_config(&path);
        assert!(
            !report.stdout.iter().any(|l| l.starts_with("trace: ")),
            "{:?}",
            report.stdout
        );
        std::fs::write(
            &path,
            format!("{base}trace: {{enabled: true, max_hops: 100}}\n"),
        )
        .unwrap();
        let report = check_config(&path);
        assert!(
            report.stderr.iter().any(|l| l.contains("trace.max_hops")),
            "{:?}",
            report.stderr
        );
    }
}
