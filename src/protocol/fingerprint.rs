//! A host's fingerprint: the settings that change what a path delivers
//! (kernel release, TCP buffer sysctls, congestion control, default
//! qdisc, the interface's driver, MTU and offloads, the CPU quota,
//! pathprobe's version), as one map from setting name to value. Both ends
//! send theirs (the prober in its `Hello`, the responder in its
//! `Results`), so that every result knows both and a step in a path's
//! figures can be put down to what changed on either end.
//!
//! A peer's fingerprint is hostile input: [`HostFingerprint::check`]
//! bounds its size and characters before anything keeps or shows it.
//! Reading the real settings is `crate::host`'s; this file does no I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The most settings one fingerprint may hold.
pub const MAX_SETTINGS: usize = 32;
/// The longest setting name.
pub const MAX_NAME: usize = 64;
/// The longest setting value.
pub const MAX_VALUE: usize = super::text::TextKind::SettingValue.max_len();

/// Setting names, so that the reader, the attribution and the docs spell
/// them the same way.
pub mod setting {
    /// `uname -r`.
    pub const KERNEL: &str = "kernel";
    /// pathprobe's own version.
    pub const PATHPROBE: &str = "pathprobe";
    /// The interface carrying the path, its driver, MTU and offloads.
    pub const INTERFACE: &str = "interface";
    pub const DRIVER: &str = "interface.driver";
    pub const MTU: &str = "interface.mtu";
    pub const OFFLOADS: &str = "interface.offloads";
    /// CPUs the process's cgroup quota allows, or `none`.
    pub const CPU_QUOTA: &str = "cpu_quota";
}

/// One host's settings, name to value; serialised as a plain JSON object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HostFingerprint {
    pub settings: BTreeMap<String, String>,
}

/// One setting that differs between two fingerprints; `None` is absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingChange {
    pub setting: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

impl SettingChange {
    /// "net.ipv4.tcp_wmem 4096 16384 4194304 → 4096 16384 196608".
    pub fn describe(&self) -> String {
        let v = |x: &Option<String>| x.clone().unwrap_or_else(|| "(none)".into());
        format!("{} {} → {}", self.setting, v(&self.before), v(&self.after))
    }
}

impl HostFingerprint {
    /// The value of `setting`, if present.
    pub fn get(&self, setting: &str) -> Option<&str> {
        self.settings.get(setting).map(String::as_str)
    }

    /// Whether a peer's fingerprint is one a pathprobe could have sent:
    /// bounded in count and length, names of `[a-z0-9._-]`, values of
    /// printable ASCII. Anything else is refused whole, not trimmed, so
    /// that no half of a forged map is shown as a host's settings.
    pub fn check(&self) -> Result<(), String> {
        if self.settings.len() > MAX_SETTINGS {
            return Err(format!(
                "the fingerprint holds {} settings, more than {MAX_SETTINGS}",
                self.settings.len()
            ));
        }
        for (name, value) in &self.settings {
            let name_ok = !name.is_empty()
                && name.len() <= MAX_NAME
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
            if !name_ok {
                return Err("the fingerprint has a setting name that is not one".into());
            }
            if super::text::check(super::text::TextKind::SettingValue, value).is_err() {
                return Err(format!(
                    "the fingerprint's {name} is not printable text of at most {MAX_VALUE} bytes"
                ));
            }
        }
        Ok(())
    }

    /// A short, stable hash of the whole map (8 hex digits, FNV-1a over
    /// "name=value\n" in name order): one label value per distinct host
    /// setup, so that an `_info` series changes exactly when a setting
    /// does. FNV rather than std's hasher, whose output may change between
    /// Rust releases and would then read as a host change.
    pub fn hash(&self) -> String {
        let mut h: u32 = 0x811c_9dc5;
        for (name, value) in &self.settings {
            for b in name
                .bytes()
                .chain([b'='])
                .chain(value.bytes())
                .chain([b'\n'])
            {
                h ^= u32::from(b);
                h = h.wrapping_mul(0x0100_0193);
            }
        }
        format!("{h:08x}")
    }

    /// What differs from `self` (before) to `newer` (after), in name order.
    pub fn changes(&self, newer: &HostFingerprint) -> Vec<SettingChange> {
        let mut names: Vec<&String> = self.settings.keys().chain(newer.settings.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .filter_map(|n| {
                let (b, a) = (self.settings.get(n), newer.settings.get(n));
                (b != a).then(|| SettingChange {
                    setting: n.clone(),
                    before: b.cloned(),
                    after: a.cloned(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(pairs: &[(&str, &str)]) -> HostFingerprint {
        HostFingerprint {
            settings: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn hash_is_stable_and_moves_with_any_setting() {
        let a = fp(&[
            ("kernel", "6.1.0"),
            ("net.ipv4.tcp_wmem", "4096 16384 4194304"),
        ]);
        // Fixed value: a change of algorithm would read as every host changing.
        assert_eq!(a.hash(), a.clone().hash());
        assert_eq!(a.hash().len(), 8);
        let b = fp(&[
            ("kernel", "6.1.0"),
            ("net.ipv4.tcp_wmem", "4096 16384 196608"),
        ]);
        assert_ne!(a.hash(), b.hash());
        assert_eq!(fp(&[]).hash(), "811c9dc5");
    }

    #[test]
    fn changes_name_both_values_and_absent_ones() {
        let a = fp(&[
            ("kernel", "2.6.78"),
            ("net.ipv4.tcp_wmem", "4096 16384 4194304"),
            ("x", "1"),
        ]);
        let b = fp(&[
            ("kernel", "6.18.44"),
            ("net.ipv4.tcp_wmem", "4096 16384 196608"),
            ("y", "2"),
        ]);
        let c = a.changes(&b);
        let text: Vec<String> = c.iter().map(SettingChange::describe).collect();
        assert_eq!(
            text,
            [
                "kernel 2.6.78 → 6.18.44",
                "net.ipv4.tcp_wmem 4096 16384 4194304 → 4096 16384 196608",
                "x 1 → (none)",
                "y (none) → 2",
            ]
        );
        assert!(a.changes(&a).is_empty());
    }

    #[test]
    fn check_refuses_what_no_pathprobe_sends() {
        assert!(fp(&[("kernel", "6.1.0-13-amd64")]).check().is_ok());
        let many: Vec<(String, String)> = (0..=MAX_SETTINGS)
            .map(|i| (format!("k{i}"), "v".into()))
            .collect();
        let many = HostFingerprint {
            settings: many.into_iter().collect(),
        };
        assert!(many.check().is_err());
        assert!(fp(&[("Kernel", "x")]).check().is_err());
        assert!(fp(&[("kernel", "a\u{1b}[31m")]).check().is_err());
        assert!(fp(&[("kernel", "a\nb")]).check().is_err());
        let long = "x".repeat(MAX_VALUE + 1);
        assert!(fp(&[("kernel", &long)]).check().is_err());
        let name = "k".repeat(MAX_NAME + 1);
        assert!(fp(&[(&name, "1")]).check().is_err());
    }
}
