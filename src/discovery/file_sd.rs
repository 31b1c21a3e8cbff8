//! file_sd discovery: Prometheus target files turned into peers, re-read
//! when they change and every `refresh_interval`. The file format's parser
//! is [`crate::config::parse_file_sd`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;

use super::DiscoveredTarget;
use crate::config::{read_file_sd, FileSdConfig, FileSdGroup};
use crate::probe::Target;

/// How often target files are checked for changes between full re-reads.
pub const FILE_POLL: Duration = Duration::from_secs(5);

/// Turns file_sd groups into targets of this entry.
pub fn targets_from_groups(entry: &FileSdConfig, groups: &[FileSdGroup]) -> Vec<DiscoveredTarget> {
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

pub(super) async fn watch_files(
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
