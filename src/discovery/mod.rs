//! Runtime discovery for `pathprobe serve`: keeps the list of discovered
//! peers current by re-reading file_sd files (when they change, and every
//! refresh interval, [`file_sd`]) and re-resolving DNS names ([`dns`]).
//! What to discover is configuration, parsed in [`crate::config::discovery`];
//! the reading and the look-ups are here.
//!
//! Each source runs as its own task and publishes its peers; a source that
//! fails keeps what it last found, so a transient DNS or file error does not
//! drop a fleet's series. The merged list is published on a watch channel.

#![warn(missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

pub mod dns;
pub mod file_sd;

pub use dns::{resolve_dns, resolve_dns_with, DnsError, SrvRecord, SrvResolver, SystemSrvResolver};
pub use file_sd::{targets_from_groups, FILE_POLL};

use crate::config::{DnsSdConfig, FileSdConfig};
use crate::probe::Target;

/// A peer found by discovery.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DiscoveredTarget {
    /// The `target` label: the address as written, or `ip:port` for DNS.
    pub name: String,
    /// Where its responder listens.
    pub endpoint: Target,
    /// The modules run against it, from its discovery entry.
    pub modules: Vec<String>,
    /// Its entry's interval; `None` for `scheduler.default_interval`.
    pub interval: Option<Duration>,
    /// Target labels (file_sd `labels`; none for DNS).
    pub labels: BTreeMap<String, String>,
}

/// Running discovery tasks; dropping this stops them.
pub struct Discovery {
    /// Every peer found, merged over the sources, sorted.
    pub targets: watch::Receiver<Vec<DiscoveredTarget>>,
    tasks: JoinSet<()>,
    sources: (Vec<FileSdConfig>, Vec<DnsSdConfig>, PathBuf),
}

impl Discovery {
    /// Starts a task per file_sd and DNS entry. With none, the list is empty
    /// for good.
    pub fn start(file_sd: &[FileSdConfig], dns: &[DnsSdConfig], base_dir: &Path) -> Discovery {
        let (tx, targets) = watch::channel(Vec::new());
        let (updates_tx, mut updates) = mpsc::channel::<(usize, Vec<DiscoveredTarget>)>(16);
        let mut tasks = JoinSet::new();
        for (i, entry) in file_sd.iter().enumerate() {
            tasks.spawn(file_sd::watch_files(
                i,
                entry.clone(),
                base_dir.to_path_buf(),
                updates_tx.clone(),
            ));
        }
        for (j, entry) in dns.iter().enumerate() {
            tasks.spawn(dns::watch_dns(
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
        Discovery {
            targets,
            tasks,
            sources: (file_sd.to_vec(), dns.to_vec(), base_dir.to_path_buf()),
        }
    }

    /// Whether these tasks already watch exactly these sources, so that a
    /// reload that left discovery alone keeps them (and their last results).
    pub fn same_sources(
        &self,
        file_sd: &[FileSdConfig],
        dns: &[DnsSdConfig],
        base_dir: &Path,
    ) -> bool {
        self.sources.0 == file_sd && self.sources.1 == dns && self.sources.2 == base_dir
    }

    /// Stops every task and waits until they have ended.
    pub async fn stop(mut self) {
        self.tasks.shutdown().await;
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
