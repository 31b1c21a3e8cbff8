//! Static targets: the peers named in the configuration file, and the label
//! rules shared with discovered targets.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::quantity;
use crate::metrics::names;
use crate::probe::Target;
use crate::protocol::DEFAULT_PORT;

/// Name of a target that has no address (loopback modules only) and no name.
pub const LOOPBACK_TARGET_NAME: &str = "loopback";

/// One entry of `targets:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    /// The `target` label; defaults to the address.
    #[serde(default)]
    pub name: Option<String>,
    /// `host`, `host:port`, `a.b.c.d:port` or `[v6]:port`. Absent only for
    /// targets whose modules are all loopback kinds.
    #[serde(default)]
    pub address: Option<String>,
    pub modules: Vec<String>,
    /// Defaults to `scheduler.default_interval`.
    #[serde(default, deserialize_with = "quantity::opt_duration")]
    pub interval: Option<Duration>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The peer's responder port, when the address carries none.
    #[serde(default)]
    pub port: Option<u16>,
}

impl TargetConfig {
    /// The `target` label value.
    pub fn name(&self) -> &str {
        self.name
            .as_deref()
            .or(self.address.as_deref())
            .unwrap_or(LOOPBACK_TARGET_NAME)
    }

    /// Where to probe; `None` for loopback-only targets. The port comes
    /// from the address, else `port`, else 5301.
    pub fn endpoint(&self) -> Option<Result<Target, String>> {
        let address = self.address.as_deref()?;
        Some(
            Target::parse(address, self.port.unwrap_or(DEFAULT_PORT)).map_err(|e| match e {
                crate::probe::ProbeError::BadArgument(m) => m,
                other => other.to_string(),
            }),
        )
    }

    pub fn interval_or(&self, default: Duration) -> Duration {
        self.interval.unwrap_or(default)
    }
}

/// Checks a user label name: Prometheus's syntax, not reserved by
/// Prometheus (`__` prefix) and not one of pathprobe's own labels.
pub fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "{name:?} is not a valid label name: expected [a-zA-Z_][a-zA-Z0-9_]*"
        ));
    }
    if name.starts_with("__") {
        return Err(format!(
            "{name:?}: names starting with __ are reserved for Prometheus"
        ));
    }
    // One list, derived from the metric definitions (and Prometheus' own
    // `instance` and `job`), so that every label serve would have to drop
    // is refused here, at its file:line:column.
    if let Some(owner) = names::label_owner(name) {
        return Err(format!(
            "{name:?} cannot be a target label: {owner}; pick another name \
             (pathprobe's: {}; Prometheus': {}; the exposition format's: {})",
            names::reserved_label_names().collect::<Vec<_>>().join(", "),
            names::PROMETHEUS_LABELS.join(", "),
            names::EXPOSITION_LABELS.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(address: Option<&str>, port: Option<u16>) -> TargetConfig {
        TargetConfig {
            name: None,
            address: address.map(String::from),
            modules: vec!["tcp".into()],
            interval: None,
            labels: BTreeMap::new(),
            port,
        }
    }

    #[test]
    fn name_defaults_to_address_then_loopback() {
        assert_eq!(target(Some("db1:6000"), None).name(), "db1:6000");
        assert_eq!(target(None, None).name(), "loopback");
        let named = TargetConfig {
            name: Some("db".into()),
            ..target(Some("db1"), None)
        };
        assert_eq!(named.name(), "db");
    }

    #[test]
    fn endpoint_port_precedence() {
        let t = |a, p| target(Some(a), p).endpoint().unwrap().unwrap();
        assert_eq!(t("db1", None).port, 5301);
        assert_eq!(t("db1", Some(6000)).port, 6000);
        assert_eq!(t("db1:7000", Some(6000)).port, 7000);
        assert_eq!(t("[2001:db8::1]", Some(6000)).host, "2001:db8::1");
        assert!(target(Some("a:b:c:x"), None).endpoint().unwrap().is_err());
        assert!(target(None, None).endpoint().is_none());
    }

    #[test]
    fn label_names() {
        assert_eq!(check_label_name("rack"), Ok(()));
        assert_eq!(check_label_name("_zone2"), Ok(()));
        assert_eq!(
            check_label_name("2rack").unwrap_err(),
            "\"2rack\" is not a valid label name: expected [a-zA-Z_][a-zA-Z0-9_]*"
        );
        assert!(check_label_name("").is_err());
        assert!(check_label_name("rack-id").is_err());
        assert!(check_label_name("__meta_x")
            .unwrap_err()
            .contains("reserved for Prometheus"));
        assert!(check_label_name("target")
            .unwrap_err()
            .contains("pathprobe sets it itself"));
        // Labels of single metrics, which serve used to drop on every probe.
        for l in ["flow", "type", "release", "side", "reason"] {
            assert!(
                check_label_name(l)
                    .unwrap_err()
                    .contains("pathprobe sets it itself"),
                "{l}"
            );
        }
        assert!(check_label_name("job")
            .unwrap_err()
            .starts_with("\"job\" cannot be a target label: Prometheus sets it when it scrapes;"));
        assert!(check_label_name("instance").is_err());
        // The exposition format's own: `le` on a bucket line broke the
        // whole scrape of the host.
        assert!(check_label_name("le")
            .unwrap_err()
            .starts_with("\"le\" cannot be a target label: the exposition format uses it for a histogram bucket's upper bound"));
        assert!(check_label_name("quantile")
            .unwrap_err()
            .contains("summary's quantile"));
    }

    /// The labels comment of config/pathprobe.yml is generated from the
    /// metric definitions; `PATHPROBE_BLESS_DOCS=1 cargo test --lib`
    /// rewrites it.
    #[test]
    fn default_config_states_the_label_rule() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/pathprobe.yml");
        crate::metrics::names::tests::check_generated(
            path,
            "#   labels:   extra labels on all the target's series, e.g. {rack: r12}.\n",
            "#   port:",
            &label_rule_comment(),
        );
    }

    /// [`names::label_rule_text`] wrapped as the comment under `labels:`.
    fn label_rule_comment() -> String {
        let indent = "#             ";
        let mut out = String::new();
        let mut line = String::from(indent);
        for word in names::label_rule_text().replace('`', "").split(' ') {
            if line.len() > indent.len() && line.len() + 1 + word.len() > 78 {
                out.push_str(&line);
                out.push('\n');
                line = String::from(indent);
            }
            if line.len() > indent.len() {
                line.push(' ');
            }
            line.push_str(word);
        }
        out.push_str(&line);
        out.push('\n');
        out
    }
}
