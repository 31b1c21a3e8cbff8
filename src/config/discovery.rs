//! Discovery: where targets come from besides the file itself. Prometheus
//! file_sd target files (re-read on change and every `refresh_interval`)
//! and DNS names (re-resolved every `refresh_interval`), so that a fleet
//! assembles itself. This file holds the configuration types and the
//! file_sd parser; reading and resolution are in [`crate::discovery`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::error::ConfigError;
use super::quantity;
use super::target::check_label_name;
use crate::probe::Target;
use crate::protocol::DEFAULT_PORT;

/// `discovery:`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    /// Skip every target, static or discovered, whose address is one of
    /// this host's own: one file listing the whole fleet then serves every
    /// host in it, and each probes all the others.
    pub mesh: bool,
    pub file_sd: Vec<FileSdConfig>,
    pub dns: Vec<DnsSdConfig>,
}

/// One `discovery.file_sd` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSdConfig {
    /// Target files, `.json`, `.yml` or `.yaml`. The last path component
    /// may hold `*` and `?` wildcards, as in Prometheus. Relative paths are
    /// relative to the configuration file's directory.
    pub files: Vec<String>,
    /// Modules run against every target of these files.
    pub modules: Vec<String>,
    /// Defaults to `scheduler.default_interval`.
    #[serde(default, deserialize_with = "quantity::opt_duration")]
    pub interval: Option<Duration>,
    /// Periodic re-read, in case a change notification was missed.
    #[serde(
        default = "default_file_refresh",
        deserialize_with = "quantity::duration"
    )]
    pub refresh_interval: Duration,
    /// Responder port of targets written without one.
    #[serde(default)]
    pub port: Option<u16>,
}

/// Prometheus's file_sd default.
fn default_file_refresh() -> Duration {
    Duration::from_secs(300)
}

/// The DNS record type a [`DnsSdConfig`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
pub enum DnsRecordType {
    A,
    #[serde(rename = "AAAA")]
    Aaaa,
    /// Host and port from the record (RFC 2782); Prometheus's default.
    #[default]
    #[serde(rename = "SRV")]
    Srv,
}

impl DnsRecordType {
    pub fn as_str(self) -> &'static str {
        match self {
            DnsRecordType::A => "A",
            DnsRecordType::Aaaa => "AAAA",
            DnsRecordType::Srv => "SRV",
        }
    }
}

/// One `discovery.dns` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsSdConfig {
    pub names: Vec<String>,
    #[serde(rename = "type", default)]
    pub record_type: DnsRecordType,
    pub modules: Vec<String>,
    #[serde(default, deserialize_with = "quantity::opt_duration")]
    pub interval: Option<Duration>,
    #[serde(
        default = "default_dns_refresh",
        deserialize_with = "quantity::duration"
    )]
    pub refresh_interval: Duration,
    /// Responder port for A and AAAA answers; SRV records carry their own.
    #[serde(default)]
    pub port: Option<u16>,
}

/// Prometheus's dns_sd default.
fn default_dns_refresh() -> Duration {
    Duration::from_secs(30)
}

impl DnsSdConfig {
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }
}

impl FileSdConfig {
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }

    /// The files to read now: plain paths as written (a missing one is
    /// reported when read), wildcard patterns as the matching files,
    /// sorted. A directory that cannot be listed matches nothing.
    pub fn expand_files(&self, base_dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for pattern in &self.files {
            let path = base_dir.join(pattern);
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                out.push(path);
                continue;
            };
            if !name.contains(['*', '?']) {
                out.push(path);
                continue;
            }
            let dir = path.parent().unwrap_or(Path::new("."));
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut matched: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_str().is_some_and(|n| wildcard(name, n)))
                .map(|e| e.path())
                .collect();
            matched.sort();
            out.extend(matched);
        }
        out
    }
}

/// Shell-style match of `*` (any run) and `?` (one character).
fn wildcard(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and how much of the name it has taken, so a
    // failed match can backtrack by letting that star take one more char.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// One group of a file_sd target file, with its `__`-prefixed
/// (meta) labels dropped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileSdGroup {
    pub targets: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    targets: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// Parses a Prometheus file_sd target file: a list of `{targets: [...],
/// labels: {...}}`, JSON or YAML by the extension of `path`. Targets must
/// read as `host`, `host:port` or `[v6]:port`; labels must be valid and not
/// pathprobe's own. An empty file is an empty list, as in Prometheus.
pub fn parse_file_sd(text: &str, path: &Path) -> Result<Vec<FileSdGroup>, ConfigError> {
    let file = path.display().to_string();
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let raw: Vec<RawGroup> = match extension {
        "json" => serde_json::from_str(text).map_err(|e| ConfigError::from_json(&file, &e))?,
        "yml" | "yaml" => {
            serde_yaml::from_str(text).map_err(|e| ConfigError::from_yaml(&file, &e))?
        }
        _ => {
            return Err(ConfigError::invalid(
                &file,
                "(file name)",
                "target files must end in .json, .yml or .yaml",
            ))
        }
    };
    raw.into_iter()
        .enumerate()
        .map(|(i, group)| {
            for (j, t) in group.targets.iter().enumerate() {
                Target::parse(t, DEFAULT_PORT).map_err(|_| {
                    ConfigError::invalid(
                        &file,
                        format!("[{i}].targets[{j}]"),
                        format!("{t:?} is not an address: expected host, host:port or [ipv6]:port"),
                    )
                })?;
            }
            let mut labels = BTreeMap::new();
            for (name, value) in group.labels {
                if name.starts_with("__") {
                    continue;
                }
                check_label_name(&name)
                    .map_err(|m| ConfigError::invalid(&file, format!("[{i}].labels.{name}"), m))?;
                labels.insert(name, value);
            }
            Ok(FileSdGroup {
                targets: group.targets,
                labels,
            })
        })
        .collect::<Result<_, _>>()
        // JSON is YAML too, so one locator serves both.
        .map_err(|e: ConfigError| e.locate_in(text))
}

/// Reads and parses one target file.
pub fn read_file_sd(path: &Path) -> Result<Vec<FileSdGroup>, ConfigError> {
    let text = super::read_text(path)?;
    parse_file_sd(&text, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/config")
            .join(name)
    }

    fn parse_fixture(name: &str) -> Result<Vec<FileSdGroup>, String> {
        let path = fixture(name);
        let text = std::fs::read_to_string(&path).unwrap();
        parse_file_sd(&text, Path::new(name)).map_err(|e| e.to_string())
    }

    fn expected_groups() -> Vec<FileSdGroup> {
        vec![
            FileSdGroup {
                targets: vec!["10.0.0.1".into(), "db2.example.net:6000".into()],
                labels: BTreeMap::from([
                    ("rack".to_string(), "r12".to_string()),
                    ("zone".to_string(), "a".to_string()),
                ]),
            },
            FileSdGroup {
                targets: vec!["[2001:db8::7]:5301".into()],
                labels: BTreeMap::new(),
            },
        ]
    }

    #[test]
    fn json_and_yaml_give_the_same_groups() {
        assert_eq!(
            parse_fixture("file_sd_good.json").unwrap(),
            expected_groups()
        );
        assert_eq!(
            parse_fixture("file_sd_good.yml").unwrap(),
            expected_groups()
        );
    }

    #[test]
    fn bad_target_files_are_located() {
        assert_eq!(
            parse_fixture("file_sd_bad_syntax.json").unwrap_err(),
            "file_sd_bad_syntax.json:5:3: expected `,` or `]`"
        );
        assert_eq!(
            parse_fixture("file_sd_unknown_key.yml").unwrap_err(),
            "file_sd_unknown_key.yml:3:3: [0]: unknown key `label`: did you mean `labels`?"
        );
        assert_eq!(
            parse_fixture("file_sd_bad_label.yml").unwrap_err(),
            "file_sd_bad_label.yml:4:21: [1].labels.rack-id: \"rack-id\" is not a valid label name: expected [a-zA-Z_][a-zA-Z0-9_]*"
        );
        assert_eq!(
            parse_fixture("file_sd_bad_target.json").unwrap_err(),
            "file_sd_bad_target.json:1:27: [0].targets[1]: \"db1:http\" is not an address: expected host, host:port or [ipv6]:port"
        );
        assert_eq!(
            parse_file_sd("[]", Path::new("t.txt"))
                .unwrap_err()
                .to_string(),
            "t.txt: (file name): target files must end in .json, .yml or .yaml"
        );
    }

    #[test]
    fn empty_files_are_empty_lists() {
        assert_eq!(parse_file_sd("", Path::new("a.json")).unwrap(), vec![]);
        assert_eq!(parse_file_sd("\n", Path::new("a.yml")).unwrap(), vec![]);
        assert_eq!(parse_file_sd("[]", Path::new("a.yaml")).unwrap(), vec![]);
    }

    #[test]
    fn wildcards() {
        assert!(wildcard("*.json", "a.json"));
        assert!(wildcard("*.json", ".json"));
        assert!(!wildcard("*.json", "a.yml"));
        assert!(wildcard("t?-*.y*ml", "t1-east.yaml"));
        assert!(wildcard("a*b*c", "aXbYbZc"));
        assert!(!wildcard("a*b*c", "aXbYbZ"));
        assert!(wildcard("*", ""));
        assert!(!wildcard("?", ""));
    }

    #[test]
    fn expand_files_lists_matches_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["b.json", "a.json", "c.yml"] {
            std::fs::write(dir.path().join(f), "[]").unwrap();
        }
        let sd = FileSdConfig {
            files: vec![
                "*.json".into(),
                "missing.yml".into(),
                "/nonexistent/*.yml".into(),
            ],
            modules: vec!["tcp".into()],
            interval: None,
            refresh_interval: default_file_refresh(),
            port: None,
        };
        assert_eq!(
            sd.expand_files(dir.path()),
            vec![
                dir.path().join("a.json"),
                dir.path().join("b.json"),
                dir.path().join("missing.yml"),
            ]
        );
        let groups = read_file_sd(&dir.path().join("a.json")).unwrap();
        assert!(groups.is_empty());
        assert!(matches!(
            read_file_sd(&dir.path().join("missing.yml")),
            Err(ConfigError::Read { .. })
        ));
    }
}
