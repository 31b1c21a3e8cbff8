//! `metrics:` how much of each probe /metrics exports ([`Detail`]) and
//! how long the series of a target that is no longer probed stay.
//!
//! The per-path detail (TCP internals, CPU, interrupts, histograms,
//! verdict candidates) costs about 59 series per path and module; a fleet
//! of thousands of hosts cannot keep that in one Prometheus. `fleet` keeps
//! only what the shipped dashboards' fleet views and the alerts read, and
//! leaves the rest to the status page, the history API and JSON output.

use std::time::Duration;

use serde::Deserialize;

use super::quantity;

/// Which series of a probe /metrics exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Detail {
    /// Every series (the default: what a host with a few targets has
    /// always exported, and what the Path overview dashboard shows).
    #[default]
    Full,
    /// Only the series the alerts and fleet dashboards read, within
    /// [`crate::metrics::budget::FLEET_SERIES_PER_PATH`] per path; the
    /// between-group results of a grouped mesh plan per pair of groups.
    Fleet,
}

impl Detail {
    pub fn as_str(self) -> &'static str {
        match self {
            Detail::Full => "full",
            Detail::Fleet => "fleet",
        }
    }
}

/// `metrics:` the section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// `full` (default) or `fleet`.
    pub detail: Detail,
    /// How long the series of a target that is no longer probed (no
    /// result, no skipped run) stay on /metrics. The service never makes
    /// it shorter than twice the longest interval or mesh cycle, so that a
    /// path that is still planned never blinks out between its runs.
    #[serde(deserialize_with = "quantity::duration")]
    pub expire_after: Duration,
}

/// [`MetricsSection::expire_after`]'s default: an hour, a dashboard's
/// usual window, after which a host that left the fleet is gone from it.
pub const DEFAULT_EXPIRE_AFTER: Duration = Duration::from_secs(3600);

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection {
            detail: Detail::default(),
            expire_after: DEFAULT_EXPIRE_AFTER,
        }
    }
}

impl MetricsSection {
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        if self.expire_after < Duration::from_secs(60) {
            return Err((
                "expire_after",
                "must be at least 1m: a shorter time would drop the series of paths between two scrapes".into(),
            ));
        }
        Ok(())
    }
}
