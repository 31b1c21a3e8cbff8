//! `web:` the status page at `/` and the history it draws from: how long
//! results are kept, at what resolution, and where they are saved so that
//! a restart does not blank the page.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::quantity;

/// `web:` history retention and the page's knobs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebSection {
    /// How far back each job's history reaches.
    #[serde(deserialize_with = "quantity::duration")]
    pub history_retention: Duration,
    /// The most recent stretch kept at full resolution, one entry per
    /// probe; older results are averaged into buckets.
    #[serde(deserialize_with = "quantity::duration")]
    pub history_full_resolution: Duration,
    /// Width of a bucket past the full-resolution stretch.
    #[serde(deserialize_with = "quantity::duration")]
    pub history_bucket: Duration,
    /// Where the history is saved (atomically) and read back at start;
    /// relative paths are taken from the config file's directory. Unset:
    /// `history.json` in the state directory the service manager gives
    /// (`$STATE_DIRECTORY`, set by systemd's `StateDirectory=` and by the
    /// shipped image), else in memory only. An empty string keeps it in
    /// memory whatever the environment says.
    pub history_file: Option<PathBuf>,
    /// How often the history file is written (and at shutdown).
    #[serde(deserialize_with = "quantity::duration")]
    pub history_save_interval: Duration,
    /// How often the page reloads itself in the browser; 0 for never.
    #[serde(deserialize_with = "quantity::duration")]
    pub refresh: Duration,
    /// Cards per page on the overview.
    pub page_size: usize,
}

impl Default for WebSection {
    fn default() -> Self {
        WebSection {
            history_retention: Duration::from_secs(24 * 3600),
            history_full_resolution: Duration::from_secs(2 * 3600),
            history_bucket: Duration::from_secs(15 * 60),
            history_file: None,
            history_save_interval: Duration::from_secs(300),
            refresh: Duration::from_secs(60),
            page_size: 50,
        }
    }
}

impl WebSection {
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        let week = Duration::from_secs(7 * 24 * 3600);
        if self.history_retention.is_zero() || self.history_retention > week {
            return Err((
                "history_retention",
                "must be more than 0 and at most 7d (the history is held in memory)".into(),
            ));
        }
        if self.history_full_resolution > self.history_retention {
            return Err((
                "history_full_resolution",
                "must not be longer than history_retention".into(),
            ));
        }
        if self.history_bucket < Duration::from_secs(10)
            || self.history_bucket > self.history_retention
        {
            return Err((
                "history_bucket",
                "must be at least 10s and at most history_retention".into(),
            ));
        }
        // The number of buckets is what the memory budget rests on.
        let buckets = self.history_retention.as_secs() / self.history_bucket.as_secs().max(1);
        if buckets > 2048 {
            return Err((
                "history_bucket",
                format!("gives {buckets} buckets over history_retention; at most 2048"),
            ));
        }
        if self.history_save_interval < Duration::from_secs(1) {
            return Err(("history_save_interval", "must be at least 1s".into()));
        }
        if self.page_size == 0 || self.page_size > 1000 {
            return Err(("page_size", "must be 1 to 1000".into()));
        }
        Ok(())
    }

    /// The history file: `history_file` taken from `base_dir` when
    /// relative; when it is unset, `history.json` in `state_dir` (the value
    /// of `$STATE_DIRECTORY`, of which systemd may give several, separated
    /// by colons: the first is ours). A reboot is what a kernel upgrade
    /// is, so the history that shows the upgrade's effect must outlive it
    /// without anyone having to ask for that.
    pub fn history_path(
        &self,
        base_dir: &std::path::Path,
        state_dir: Option<&std::ffi::OsStr>,
    ) -> Option<PathBuf> {
        match &self.history_file {
            Some(p) if p.as_os_str().is_empty() => None,
            Some(p) => Some(base_dir.join(p)),
            None => {
                let dirs = state_dir?.to_str()?;
                let first = dirs.split(':').next().filter(|d| !d.is_empty())?;
                Some(std::path::Path::new(first).join(DEFAULT_HISTORY_FILE))
            }
        }
    }
}

/// The history file's name in the state directory.
pub const DEFAULT_HISTORY_FILE: &str = "history.json";

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::path::Path;

    #[test]
    fn the_history_goes_to_the_state_directory_unless_told_otherwise() {
        let base = Path::new("/etc/pathprobe");
        let state = Some(OsStr::new("/var/lib/pathprobe:/var/lib/other"));
        let mut web = WebSection::default();
        assert_eq!(
            web.history_path(base, state),
            Some(PathBuf::from("/var/lib/pathprobe/history.json"))
        );
        // No state directory: in memory, as before.
        assert_eq!(web.history_path(base, None), None);
        assert_eq!(web.history_path(base, Some(OsStr::new(""))), None);
        // A file named in the config wins, relative to the config's directory.
        web.history_file = Some(PathBuf::from("h.json"));
        assert_eq!(
            web.history_path(base, state),
            Some(PathBuf::from("/etc/pathprobe/h.json"))
        );
        // An empty name turns saving off.
        web.history_file = Some(PathBuf::new());
        assert_eq!(web.history_path(base, state), None);
    }
}
