//! Static targets: the peers named in the configuration file, and the label
//! rules shared with discovered targets.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::quantity;
use crate::probe::Target;
use crate::protocol::DEFAULT_PORT;

/// Label names pathprobe sets itself; a user label of the same name would
/// clash with them (or with Prometheus's own `instance` and `job`).
pub const RESERVED_LABELS: [&str; 10] = [
    "target",
    "module",
    "kind",
    "direction",
    "side",
    "mode",
    "result",
    "reason",
    "instance",
    "job",
];

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
    if RESERVED_LABELS.contains(&name) {
        return Err(format!(
            "{name:?} is set by pathprobe itself; pick another name (reserved: {})",
            RESERVED_LABELS.join(", ")
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
            .contains("set by pathprobe"));
        assert!(check_label_name("job").is_err());
    }
}
