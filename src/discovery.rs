//! Runtime discovery for `pathprobe serve`: keeps the list of discovered
//! peers current by re-reading file_sd files (when they change, and every
//! refresh interval) and re-resolving DNS names.
//!
//! Each source runs as its own task and publishes its peers; a source that
//! fails keeps what it last found, so a transient DNS or file error does not
//! drop a fleet's series. The merged list is published on a watch channel.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::config::{read_file_sd, resolve_dns, DnsSdConfig, FileSdConfig};
use crate::probe::Target;

/// How often target files are checked for changes between full re-reads.
pub const FILE_POLL: Duration = Duration::from_secs(5);

/// A peer found by discovery.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DiscoveredTarget {
    /// The `target` label: the address as written, or `ip:port` for DNS.
    pub name: String,
    pub endpoint: Target,
    pub modules: Vec<String>,
    pub interval: Option<Duration>,
    pub labels: BTreeMap<String, String>,
}

/// Running discovery tasks; dropping this stops them.
pub struct Discovery {
    pub targets: watch::Receiver<Vec<DiscoveredTarget>>,
    tasks: JoinSet<()>,
}

impl Discovery {
    /// Starts a task per file_sd and DNS entry. With none, the list is empty
    /// for good.
    pub fn start(file_sd: &[FileSdConfig], dns: &[DnsSdConfig], base_dir: &Path) -> Discovery {
        let (tx, targets) = watch::channel(Vec::new());
        let (updates_tx, mut updates) = mpsc::channel::<(usize, Vec<DiscoveredTarget>)>(16);
        let mut tasks = JoinSet::new();
        for (i, entry) in file_sd.iter().enumerate() {
            tasks.spawn(watch_files(
                i,
                entry.clone(),
                base_dir.to_path_buf(),
                updates_tx.clone(),
            ));
        }
        for (j, entry) in dns.iter().enumerate() {
            tasks.spawn(watch_dns(
                file_sd.len() + j,
                entry.clone(),
                updates_tx.clone(),
            ));
        }
        drop(updates_tx);
        tasks.spawn(async move {
            let mut by_source: HashMap<usize, Vec<DiscoveredTarget>> = HashMap::new();
            while let Some((source, found)) = updates.recv().await {
                by_source.insert(source, found);
                let mut all: Vec<DiscoveredTarget> =
                    by_source.values().flatten().cloned().collect();
                all.sort();
                all.dedup_by(|a, b| a.name == b.name && a.modules == b.modules);
                tx.send_if_modified(|current| {
                    if *current != all {
                        *current = all;
                        true
                    } else {
                        false
                    }
                });
            }
        });
        Discovery { targets, tasks }
    }

    pub async fn stop(mut self) {
        self.tasks.shutdown().await;
    }
}

/// Turns file_sd groups into targets of this entry.
pub fn targets_from_groups(
    entry: &FileSdConfig,
    groups: &[crate::config::FileSdGroup],
) -> Vec<DiscoveredTarget> {
    let mut out = Vec::new();
    for g in groups {
        for t in &g.targets {
            let Ok(endpoint) = Target::parse(t, entry.port()) else {
                continue;
            };
            out.push(DiscoveredTarget {
                name: t.clone(),
                endpoint,
                modules: entry.modules.clone(),
                interval: entry.interval,
                labels: g.labels.clone(),
            });
        }
    }
    out
}

fn modified(paths: &[PathBuf]) -> Vec<Option<SystemTime>> {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

async fn watch_files(
    source: usize,
    entry: FileSdConfig,
    base_dir: PathBuf,
    out: mpsc::Sender<(usize, Vec<DiscoveredTarget>)>,
) {
    let mut last_read: Option<(Vec<PathBuf>, Vec<Option<SystemTime>>)> = None;
    let mut last_good: HashMap<PathBuf, Vec<DiscoveredTarget>> = HashMap::new();
    let mut since_full = Duration::ZERO;
    let poll = FILE_POLL.min(entry.refresh_interval);
    loop {
        let paths = entry.expand_files(&base_dir);
        let stamps = modified(&paths);
        let changed = last_read.as_ref() != Some(&(paths.clone(), stamps.clone()));
        if changed || since_full >= entry.refresh_interval {
            since_full = Duration::ZERO;
            // A file that vanished takes its targets with it; one that fails
            // to parse keeps its previous targets.
            last_good.retain(|p, _| paths.contains(p));
            for path in &paths {
                match read_file_sd(path) {
                    Ok(groups) => {
                        last_good.insert(path.clone(), targets_from_groups(&entry, &groups));
                    }
                    Err(e) => {
                        tracing::warn!(file = %path.display(), error = %e, "file_sd: keeping the previous targets")
                    }
                }
            }
            let mut all: Vec<_> = last_good.values().flatten().cloned().collect();
            all.sort();
            if out.send((source, all)).await.is_err() {
                return;
            }
            last_read = Some((paths, stamps));
        }
        tokio::time::sleep(poll).await;
        since_full += poll;
    }
}

async fn watch_dns(
    source: usize,
    entry: DnsSdConfig,
    out: mpsc::Sender<(usize, Vec<DiscoveredTarget>)>,
) {
    loop {
        match resolve_dns(&entry).await {
            Ok(peers) => {
                if peers.is_empty() {
                    tracing::warn!(names = ?entry.names, "DNS discovery found no peers");
                }
                let found = peers
                    .into_iter()
                    .map(|(_, addr)| DiscoveredTarget {
                        name: addr.to_string(),
                        endpoint: Target::from_addr(addr),
                        modules: entry.modules.clone(),
                        interval: entry.interval,
                        labels: BTreeMap::new(),
                    })
                    .collect();
                if out.send((source, found)).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(names = ?entry.names, error = %e, "DNS discovery failed; keeping the previous peers")
            }
        }
        tokio::time::sleep(entry.refresh_interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn config(yaml: &str) -> Config {
        Config::from_yaml(yaml, "test.yml").unwrap()
    }

    #[tokio::test]
    async fn file_sd_targets_follow_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("peers.json");
        std::fs::write(
            &file,
            r#"[{"targets": ["10.0.0.1", "10.0.0.2:6000"], "labels": {"rack": "r1"}}]"#,
        )
        .unwrap();
        let cfg = config(&format!(
            "modules: {{tcp: {{kind: tcp}}}}\ndiscovery:\n  file_sd:\n    - files: [{}]\n      modules: [tcp]\n      refresh_interval: 1s\n",
            file.display()
        ));
        let mut d = Discovery::start(&cfg.discovery.file_sd, &cfg.discovery.dns, dir.path());
        let first = tokio::time::timeout(
            Duration::from_secs(5),
            d.targets.wait_for(|t| !t.is_empty()),
        )
        .await
        .unwrap()
        .unwrap()
        .clone();
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].name, "10.0.0.1");
        assert_eq!(first[0].endpoint.port, 5301);
        assert_eq!(first[1].endpoint.port, 6000);
        assert_eq!(first[0].labels.get("rack").map(String::as_str), Some("r1"));
        // A broken file keeps the old targets; a good one replaces them.
        std::fs::write(&file, "[{").unwrap();
        std::fs::write(&file, r#"[{"targets": ["10.0.0.3"]}]"#).unwrap();
        let next = tokio::time::timeout(
            Duration::from_secs(10),
            d.targets.wait_for(|t| t.len() == 1),
        )
        .await
        .unwrap()
        .unwrap()
        .clone();
        assert_eq!(next[0].name, "10.0.0.3");
        d.stop().await;
    }

    #[tokio::test]
    async fn dns_names_become_targets() {
        let cfg = config("modules: {tcp: {kind: tcp}}\ndiscovery:\n  dns:\n    - names: [localhost]\n      type: A\n      port: 7000\n      modules: [tcp]\n");
        let mut d = Discovery::start(&cfg.discovery.file_sd, &cfg.discovery.dns, Path::new("."));
        let found = tokio::time::timeout(
            Duration::from_secs(5),
            d.targets.wait_for(|t| !t.is_empty()),
        )
        .await
        .unwrap()
        .unwrap()
        .clone();
        assert_eq!(found[0].name, "127.0.0.1:7000");
        assert_eq!(
            found[0].endpoint,
            Target {
                host: "127.0.0.1".into(),
                port: 7000
            }
        );
        d.stop().await;
    }
}
