//! The configuration of `pathprobe serve`: what to probe, how, how often,
//! and where more targets come from. Loaded from YAML with every key
//! checked (unknown keys are errors, with file, line and column), then
//! validated as a whole (module references, unique names, label names).
//!
//! - [`Config`]: the whole file; sections in [`sections`], [`module`],
//!   [`target`] and [`discovery`].
//! - [`discovery::parse_file_sd`]: Prometheus file_sd target files. The
//!   reading of those files as they change, and the DNS look-ups, are in
//!   [`crate::discovery`]: this module only parses.
//! - [`DEFAULT_CONFIG`]: the configuration used when none is given, shipped
//!   as `config/pathprobe.yml`.

pub mod check;
pub mod discovery;
mod error;
mod locate;
pub mod metrics;
pub mod module;
mod quantity;
pub mod sections;
pub mod target;
pub mod trace;
pub mod web;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

pub use self::metrics::{Detail, MetricsSection};
pub use discovery::{
    parse_file_sd, read_file_sd, DiscoveryConfig, DnsRecordType, DnsSdConfig, FileSdConfig,
    FileSdGroup,
};
pub use error::ConfigError;
pub use module::{Module, ModuleDirection, ModuleKind};
pub use sections::{
    HostMetricsConfig, HttpSection, IrqPattern, MeshScheduleConfig, ResponderSection,
    SchedulerConfig,
};
pub use target::{check_label_name, TargetConfig, LOOPBACK_TARGET_NAME};
pub use trace::TraceSection;
pub use web::WebSection;

/// The configuration used when `--config.file` is not given: the responder,
/// and loopback TCP and UDP probes every minute.
pub const DEFAULT_CONFIG: &str = include_str!("../../config/pathprobe.yml");

/// The name [`DEFAULT_CONFIG`] goes by in error messages.
pub const DEFAULT_CONFIG_NAME: &str = "<embedded default config>";

/// A whole configuration file. Every section is optional; an empty file
/// runs the responder alone.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub responder: ResponderSection,
    pub scheduler: SchedulerConfig,
    #[serde(deserialize_with = "unique_modules")]
    pub modules: BTreeMap<String, Module>,
    pub targets: Vec<TargetConfig>,
    pub discovery: DiscoveryConfig,
    pub host_metrics: HostMetricsConfig,
    pub http: HttpSection,
    /// `web:` the status page and its history.
    pub web: WebSection,
    /// `metrics:` the detail level of /metrics and when series expire.
    pub metrics: MetricsSection,
    /// `trace:` path tracing from serve (docs/TRACE.md).
    pub trace: TraceSection,
    /// The directory relative file_sd paths are taken from: the config
    /// file's own, or the working directory for text without a file.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

impl Config {
    /// Parses and validates `text`; `source_name` (usually the path) starts
    /// every error message.
    /// Secret files named with relative paths are read from the working
    /// directory.
    pub fn from_yaml(text: &str, source_name: &str) -> Result<Config, ConfigError> {
        Config::parse(text, source_name, Path::new(""))
    }

    fn parse(text: &str, source_name: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        // Through Option so that an empty or comment-only file means "all
        // defaults" rather than a type error.
        let config: Option<Config> = serde_yaml::from_str(text)
            .map_err(|e| ConfigError::from_yaml_in(source_name, &e, text))?;
        let mut config = config.unwrap_or_default();
        for module in config.modules.values_mut() {
            module.resolve_auto();
        }
        config
            .validate(source_name)
            .map_err(|e| e.locate_in(text))?;
        config.base_dir = base_dir.to_path_buf();
        config.load_secrets(source_name)?;
        Ok(config)
    }

    /// Reads, parses and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read_text(path)?;
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Config::parse(&text, &path.display().to_string(), &base_dir)
    }

    /// Reads every secret file now, so that a missing or unreadable one
    /// fails the load (and a reload keeps the old configuration), and a
    /// rotated secret takes effect at the next reload.
    fn load_secrets(&mut self, file: &str) -> Result<(), ConfigError> {
        let base = self.base_dir.clone();
        let read = |key: String, path: &Path| {
            let path = sections::expand_secret_path(path, |v| std::env::var(v).ok())
                .map_err(|e| ConfigError::invalid(file, key.clone(), e))?;
            crate::auth::Secret::from_file(&base.join(path))
                .map_err(|e| ConfigError::invalid(file, key, e.to_string()))
        };
        if let Some(path) = &self.responder.secret_file {
            self.responder.secret = Some(read("responder.secret_file".into(), path)?);
        }
        for (name, module) in &mut self.modules {
            if let Some(path) = &module.secret_file {
                module.secret = Some(read(format!("modules.{name}.secret_file"), path)?);
            }
        }
        Ok(())
    }

    /// [`DEFAULT_CONFIG`], parsed.
    pub fn default_embedded() -> Config {
        // The text is part of the binary and its parsing is a unit test, so
        // failure here is a build defect; fall back to the bare defaults
        // rather than panic in a running service.
        Config::from_yaml(DEFAULT_CONFIG, DEFAULT_CONFIG_NAME).unwrap_or_default()
    }

    /// The interval of a static target.
    pub fn interval_of(&self, target: &TargetConfig) -> Duration {
        target.interval_or(self.scheduler.default_interval)
    }

    /// The module called `name`.
    pub fn module(&self, name: &str) -> Option<&Module> {
        self.modules.get(name)
    }

    /// Checks what the schema alone cannot.
    fn validate(&self, file: &str) -> Result<(), ConfigError> {
        self.validate_with(file, crate::probe::spec::available_congestion().as_deref())
    }

    /// [`Config::validate`], with this host's congestion control
    /// algorithms given (`None` when they cannot be read).
    fn validate_with(&self, file: &str, available: Option<&[String]>) -> Result<(), ConfigError> {
        match self
            .validation_errors_with(file, available)
            .into_iter()
            .next()
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Every check [`Config::validate`] makes that fails, one error per
    /// section, module, and the targets and discovery (for `check-config`,
    /// which reports them all).
    pub(crate) fn validation_errors(&self, file: &str) -> Vec<ConfigError> {
        self.validation_errors_with(file, crate::probe::spec::available_congestion().as_deref())
    }

    fn validation_errors_with(&self, file: &str, available: Option<&[String]>) -> Vec<ConfigError> {
        let at = |section: &str, (key, msg): (&str, String)| {
            let path = if key.is_empty() {
                section.to_string()
            } else {
                format!("{section}.{key}")
            };
            ConfigError::invalid(file, path, msg)
        };
        let mut out = Vec::new();
        out.extend(self.responder.check().err().map(|e| at("responder", e)));
        out.extend(self.scheduler.check().err().map(|e| at("scheduler", e)));
        out.extend(self.http.check().err().map(|e| at("http", e)));
        out.extend(self.web.check().err().map(|e| at("web", e)));
        out.extend(self.metrics.check().err().map(|e| at("metrics", e)));
        out.extend(self.trace.check().err().map(|e| at("trace", e)));
        for (name, module) in &self.modules {
            if !valid_module_name(name) {
                out.push(ConfigError::invalid(
                    file,
                    format!("modules.{name}"),
                    "module names may hold only letters, digits, '_', '-' and '.'",
                ));
                continue;
            }
            if let Err(e) = module.check() {
                out.push(at(&format!("modules.{name}"), e));
                continue;
            }
            if let Some(m) = module
                .congestion
                .as_deref()
                .and_then(|c| unknown_congestion(c, available))
            {
                out.push(ConfigError::invalid(
                    file,
                    format!("modules.{name}.congestion"),
                    m,
                ));
            }
        }
        out.extend(self.validate_targets(file));
        out.extend(self.validate_discovery(file));
        out
    }

    /// What is valid but likely wrong on this host: for `check-config`,
    /// which prints them and still succeeds, as the file may be meant for
    /// another host.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings_with(crate::probe::spec::available_congestion().as_deref())
    }

    fn warnings_with(&self, available: Option<&[String]>) -> Vec<String> {
        let Some(available) = available else {
            return Vec::new();
        };
        self.modules
            .iter()
            .filter_map(|(name, m)| {
                let c = m.congestion.as_deref()?;
                crate::probe::spec::congestion_unavailable(c, available).map(|why| {
                    format!("modules.{name}.congestion: {why}; probes with this module fail on this host")
                })
            })
            .collect()
    }

    /// Rejects a module whose run (omit + duration, twice for `both`) is
    /// longer than the interval of a target it runs against: the scheduler
    /// would skip every other run, and the series would show gaps the
    /// operator did not ask for.
    fn check_fits_interval(
        &self,
        file: &str,
        key: &str,
        names: &[String],
        interval: Duration,
        interval_key: &str,
    ) -> Result<(), ConfigError> {
        for (j, name) in names.iter().enumerate() {
            let Some(m) = self.modules.get(name) else {
                continue;
            };
            let run = (m.omit + m.duration) * m.specs().len() as u32;
            if run > interval {
                return Err(ConfigError::invalid(
                    file,
                    format!("{key}.modules[{j}]"),
                    format!(
                        "module {name:?} runs for {} (omit + duration{}), longer than the interval of {} ({interval_key}): every other run would be skipped; lengthen the interval or shorten the module",
                        crate::units::format_duration(run),
                        if m.specs().len() > 1 { ", once per direction" } else { "" },
                        crate::units::format_duration(interval),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The first error of each target: one target's mistake does not hide
    /// the next target's.
    fn validate_targets(&self, file: &str) -> Vec<ConfigError> {
        let mut names: HashMap<&str, usize> = HashMap::new();
        self.targets
            .iter()
            .enumerate()
            .filter_map(|(i, t)| self.validate_target(file, i, t, &mut names).err())
            .collect()
    }

    fn validate_target<'a>(
        &'a self,
        file: &str,
        i: usize,
        t: &'a TargetConfig,
        names: &mut HashMap<&'a str, usize>,
    ) -> Result<(), ConfigError> {
        {
            let key = format!("targets[{i}]");
            let bad = |k: &str, m: String| ConfigError::invalid(file, format!("{key}.{k}"), m);
            let modules = self.check_module_list(file, &key, &t.modules)?;
            match &t.address {
                None => {
                    if let Some(j) = modules.iter().position(|m| !m.is_loopback()) {
                        return Err(bad(
                            "address",
                            format!(
                                "missing, and module {:?} probes a remote peer; only targets whose modules are all loopback kinds may leave it out",
                                t.modules[j]
                            ),
                        ));
                    }
                }
                Some(address) => {
                    if let Some(j) = modules.iter().position(|m| m.is_loopback()) {
                        return Err(bad(
                            &format!("modules[{j}]"),
                            format!(
                                "{:?} is a loopback module, which probes this host itself and ignores the address; list it in a target without an address",
                                t.modules[j]
                            ),
                        ));
                    }
                    if let Some(Err(m)) = t.endpoint() {
                        return Err(bad("address", m));
                    }
                    if let (Some(port), Some(Ok(parsed))) = (t.port, t.endpoint()) {
                        if parsed.port != port {
                            return Err(bad(
                                "port",
                                format!("{port} contradicts the port in address {address:?}; give the port once"),
                            ));
                        }
                    }
                }
            }
            if t.name.as_deref() == Some("") {
                return Err(bad("name", "must not be empty".into()));
            }
            if let Some(first) = names.insert(t.name(), i) {
                return Err(bad(
                    "name",
                    format!(
                        "{:?} is already the name of targets[{first}]; target names must be unique (set `name` to tell them apart)",
                        t.name()
                    ),
                ));
            }
            if t.interval.is_some_and(|d| d.is_zero()) {
                return Err(bad("interval", "must be greater than zero".into()));
            }
            let interval_key = if t.interval.is_some() {
                format!("{key}.interval")
            } else {
                "scheduler.default_interval".to_string()
            };
            self.check_fits_interval(file, &key, &t.modules, self.interval_of(t), &interval_key)?;
            for label in t.labels.keys() {
                check_label_name(label).map_err(|m| bad(&format!("labels.{label}"), m))?;
            }
        }
        Ok(())
    }

    /// The first error of each discovery entry.
    fn validate_discovery(&self, file: &str) -> Vec<ConfigError> {
        let file_sd = (0..self.discovery.file_sd.len()).map(|i| self.validate_file_sd(file, i));
        let dns = (0..self.discovery.dns.len()).map(|i| self.validate_dns(file, i));
        file_sd.chain(dns).filter_map(Result::err).collect()
    }

    fn validate_file_sd(&self, file: &str, i: usize) -> Result<(), ConfigError> {
        {
            let sd = &self.discovery.file_sd[i];
            let key = format!("discovery.file_sd[{i}]");
            let bad = |k: &str, m: &str| ConfigError::invalid(file, format!("{key}.{k}"), m);
            if sd.files.is_empty() {
                return Err(bad("files", "lists no files"));
            }
            if sd.files.iter().any(|f| f.trim().is_empty()) {
                return Err(bad("files", "holds an empty path"));
            }
            self.check_discovered_modules(file, &key, &sd.modules)?;
            check_periods(sd.interval, sd.refresh_interval).map_err(|(k, m)| bad(k, m))?;
            self.check_discovered_interval(file, &key, &sd.modules, sd.interval)?;
        }
        Ok(())
    }

    fn validate_dns(&self, file: &str, i: usize) -> Result<(), ConfigError> {
        {
            let dns = &self.discovery.dns[i];
            let key = format!("discovery.dns[{i}]");
            let bad = |k: &str, m: &str| ConfigError::invalid(file, format!("{key}.{k}"), m);
            if dns.names.is_empty() {
                return Err(bad("names", "lists no names"));
            }
            if dns.names.iter().any(|n| n.trim().is_empty()) {
                return Err(bad("names", "holds an empty name"));
            }
            if dns.record_type == DnsRecordType::Srv && dns.port.is_some() {
                return Err(bad(
                    "port",
                    "SRV records carry their own port; `port` applies to A and AAAA only",
                ));
            }
            self.check_discovered_modules(file, &key, &dns.modules)?;
            check_periods(dns.interval, dns.refresh_interval).map_err(|(k, m)| bad(k, m))?;
            self.check_discovered_interval(file, &key, &dns.modules, dns.interval)?;
        }
        Ok(())
    }

    /// Resolves a module list, rejecting empty lists, unknown names and
    /// repeats.
    fn check_module_list<'a>(
        &'a self,
        file: &str,
        key: &str,
        names: &[String],
    ) -> Result<Vec<&'a Module>, ConfigError> {
        if names.is_empty() {
            return Err(ConfigError::invalid(
                file,
                format!("{key}.modules"),
                "lists no modules",
            ));
        }
        let mut seen = HashSet::new();
        names
            .iter()
            .enumerate()
            .map(|(j, name)| {
                let bad = |m: String| ConfigError::invalid(file, format!("{key}.modules[{j}]"), m);
                if !seen.insert(name) {
                    return Err(bad(format!("{name:?} is listed twice")));
                }
                self.modules.get(name).ok_or_else(|| {
                    bad(format!(
                        "unknown module {name:?}; defined modules: {}",
                        self.module_names()
                    ))
                })
            })
            .collect()
    }

    fn check_discovered_modules(
        &self,
        file: &str,
        key: &str,
        names: &[String],
    ) -> Result<(), ConfigError> {
        let modules = self.check_module_list(file, key, names)?;
        match modules.iter().position(|m| m.is_loopback()) {
            Some(j) => Err(ConfigError::invalid(
                file,
                format!("{key}.modules[{j}]"),
                format!(
                    "{:?} is a loopback module; discovered peers need tcp or udp modules",
                    names[j]
                ),
            )),
            None => Ok(()),
        }
    }

    fn check_discovered_interval(
        &self,
        file: &str,
        key: &str,
        modules: &[String],
        interval: Option<Duration>,
    ) -> Result<(), ConfigError> {
        let (interval, interval_key) = match interval {
            Some(i) => (i, format!("{key}.interval")),
            None => (
                self.scheduler.default_interval,
                "scheduler.default_interval".to_string(),
            ),
        };
        self.check_fits_interval(file, key, modules, interval, &interval_key)
    }

    fn module_names(&self) -> String {
        if self.modules.is_empty() {
            return "(none)".into();
        }
        self.modules.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// What the file configures, for `check-config`.
    pub fn summary(&self) -> Summary {
        Summary {
            modules: self.modules.len(),
            targets: self.targets.len(),
            probes: self
                .targets
                .iter()
                .flat_map(|t| &t.modules)
                .filter_map(|m| self.modules.get(m))
                .map(|m| m.specs().len())
                .sum(),
            file_sd: self.discovery.file_sd.len(),
            dns: self.discovery.dns.len(),
            mesh: self.discovery.mesh,
            responder: self.responder.enabled.then_some(self.responder.listen),
            warnings: self.warnings(),
        }
    }
}

/// Why a congestion control name is refused outright: it is neither a
/// known Linux algorithm nor one this host offers, so it is a typo. A known
/// one missing here is only a warning ([`Config::warnings`]).
fn unknown_congestion(name: &str, available: Option<&[String]>) -> Option<String> {
    use crate::probe::spec::KNOWN_CONGESTION;
    if KNOWN_CONGESTION.contains(&name) || available.is_some_and(|a| a.iter().any(|x| x == name)) {
        return None;
    }
    Some(format!(
        "unknown congestion control {name:?}: not a Linux algorithm ({}){}",
        KNOWN_CONGESTION.join(", "),
        match available {
            Some(a) => format!(" nor one this host offers ({})", a.join(", ")),
            None => String::new(),
        }
    ))
}

fn check_periods(
    interval: Option<Duration>,
    refresh: Duration,
) -> Result<(), (&'static str, &'static str)> {
    if interval.is_some_and(|d| d.is_zero()) {
        return Err(("interval", "must be greater than zero"));
    }
    if refresh.is_zero() {
        return Err(("refresh_interval", "must be greater than zero"));
    }
    Ok(())
}

/// Module names become the `module` label and appear in `/probe` URLs, so
/// they are kept to characters that need no escaping in either.
fn valid_module_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Reads `modules:` as a map, rejecting a repeated name: a plain map would
/// keep the last definition silently, and the first is as likely meant.
fn unique_modules<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Module>, D::Error> {
    struct ModulesVisitor;
    impl<'de> Visitor<'de> for ModulesVisitor {
        type Value = BTreeMap<String, Module>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of module names to modules")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(name) = map.next_key::<String>()? {
                if out.contains_key(&name) {
                    return Err(de::Error::custom(format!(
                        "module {name:?} is defined twice"
                    )));
                }
                let module = map.next_value::<Module>()?;
                out.insert(name, module);
            }
            Ok(out)
        }
    }
    d.deserialize_map(ModulesVisitor)
}

/// What `check-config` reports about a valid file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub modules: usize,
    pub targets: usize,
    /// Runs per interval over static targets (`both` counts twice).
    pub probes: usize,
    pub file_sd: usize,
    pub dns: usize,
    pub mesh: bool,
    /// The listen address, when the responder is on.
    pub responder: Option<std::net::SocketAddr>,
    /// What [`Config::warnings`] found: valid, but likely wrong here.
    pub warnings: Vec<String>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::units::plural;
        write!(
            f,
            "{}, {} ({} per interval), {} file_sd and {} dns discovery {}",
            plural(self.modules, "module"),
            plural(self.targets, "static target"),
            plural(self.probes, "probe run"),
            self.file_sd,
            self.dns,
            if self.file_sd + self.dns == 1 {
                "entry"
            } else {
                "entries"
            }
        )?;
        if self.mesh {
            f.write_str(", mesh mode")?;
        }
        match self.responder {
            Some(addr) => write!(f, "; responder on {addr}"),
            None => f.write_str("; responder off"),
        }
    }
}

/// Loads and validates `path` for `pathprobe check-config`.
/// The largest configuration or target file read: far beyond any real
/// one, and it keeps a file mistaken for a config from filling memory.
pub const MAX_FILE_LEN: u64 = 64 << 20;

/// Reads a configuration or target file as text. Only regular files: a
/// FIFO or a device in its place would block the reload (opening a FIFO
/// waits for a writer) or never end, and the old configuration must keep
/// running with an error instead.
pub(crate) fn read_text(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let fail = |error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    };
    let meta = std::fs::metadata(path).map_err(fail)?;
    if !meta.is_file() {
        return Err(fail(std::io::Error::other(if meta.is_dir() {
            "is a directory, not a file"
        } else {
            "is not a regular file"
        })));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_LEN + 1).read_to_string(&mut text))
        .map_err(fail)?;
    if text.len() as u64 > MAX_FILE_LEN {
        return Err(fail(std::io::Error::other(format!(
            "larger than {} MiB",
            MAX_FILE_LEN >> 20
        ))));
    }
    Ok(text)
}

pub fn check_config_file(path: &Path) -> Result<Summary, ConfigError> {
    Config::load(path).map(|c| c.summary())
}

#[cfg(test)]
mod tests;

/// Checks of a file against the schedule and this host; the whole-file fixtures are in `tests`.
#[cfg(test)]
mod schedule_tests {
    use super::*;

    fn err(text: &str, available: Option<&[String]>) -> String {
        let c: Config = serde_yaml::from_str(text).unwrap();
        c.validate_with("c.yml", available)
            .map_err(|e| e.locate_in(text).to_string())
            .unwrap_err()
    }

    fn ok(text: &str) -> Config {
        let c: Config = serde_yaml::from_str(text).unwrap();
        c.validate_with("c.yml", Some(&["reno".into(), "cubic".into()]))
            .unwrap();
        c
    }

    #[test]
    fn a_module_longer_than_its_interval_is_refused() {
        let text = "modules:\n  long: {kind: tcp, duration: 30s}\ntargets:\n  - address: h\n    modules: [long]\n    interval: 10s\n";
        assert_eq!(
            err(text, None),
            "c.yml:5:15: targets[0].modules[0]: module \"long\" runs for 30s (omit + duration), longer than the interval of 10s (targets[0].interval): every other run would be skipped; lengthen the interval or shorten the module"
        );
        // `both` runs twice, and omit counts.
        let text = "scheduler: {default_interval: 10s}\nmodules:\n  b: {kind: udp, duration: 5s, omit: 1s, direction: both}\ntargets:\n  - {address: h, modules: [b]}\n";
        let m = err(text, None);
        assert!(
            m.contains("runs for 12s (omit + duration, once per direction)")
                && m.contains("(scheduler.default_interval)"),
            "{m}"
        );
        let text = "modules:\n  t: {kind: tcp, duration: 30s}\ndiscovery:\n  dns:\n    - {names: [h], modules: [t], interval: 20s}\n";
        assert!(err(text, None).contains("discovery.dns[0].modules[0]"));
        // As long as the interval: back to back, which some tests use.
        ok("modules:\n  t: {kind: tcp, duration: 10s}\ntargets:\n  - {address: h, modules: [t], interval: 10s}\n");
    }

    #[test]
    fn congestion_typos_are_refused_and_missing_algorithms_warned() {
        let here: Vec<String> = vec!["reno".into(), "cubic".into()];
        let text = "modules:\n  t: {kind: tcp, congestion: bogus}\n";
        let m = err(text, Some(&here));
        assert!(
            m.starts_with("c.yml:2:30: modules.t.congestion: unknown congestion control \"bogus\": not a Linux algorithm (")
                && m.ends_with(" nor one this host offers (reno, cubic)"),
            "{m}"
        );
        // Unreadable list: still a typo.
        assert!(err(text, None).contains("unknown congestion control"));
        // A real algorithm this host lacks is valid, with a warning.
        let c = ok("modules:\n  t: {kind: tcp, congestion: bbr}\n");
        let w = c.warnings_with(Some(&here));
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("modules.t.congestion: congestion control \"bbr\" is not available on this host (available: reno, cubic)"),
            "{w:?}"
        );
        assert!(c.warnings_with(None).is_empty());
        // A custom algorithm loaded on this host is fine.
        let c: Config =
            serde_yaml::from_str("modules:\n  t: {kind: tcp, congestion: mine}\n").unwrap();
        let mine: Vec<String> = vec!["mine".into()];
        c.validate_with("c.yml", Some(&mine)).unwrap();
        assert!(c.warnings_with(Some(&mine)).is_empty());
    }

    #[test]
    fn a_tab_in_a_file_is_named_with_its_place() {
        let e = Config::from_yaml("modules:\n\ttcp: {kind: tcp}\n", "c.yml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.yml:2:1: tabs are not allowed in YAML indentation; indent with spaces"
        );
    }
}
