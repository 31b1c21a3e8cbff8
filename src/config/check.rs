//! Every error in a configuration file at once, for `check-config`: serde
//! stops at the first, so after a failed parse each section, each module
//! and each target is read again on its own from the text (positions and
//! key paths kept), and each error found is reported once, in file order.

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor,
};

use super::{
    Config, ConfigError, DiscoveryConfig, HostMetricsConfig, HttpSection, Module, ResponderSection,
    SchedulerConfig, TargetConfig, WebSection,
};

/// The top-level keys of a configuration file.
pub const SECTIONS: [&str; 8] = [
    "responder",
    "scheduler",
    "modules",
    "targets",
    "discovery",
    "host_metrics",
    "http",
    "web",
];

/// Reads, parses and validates `path` as [`Config::load`] does, but on
/// failure returns every error found rather than the first.
pub fn load_all(path: &Path) -> Result<Config, Vec<ConfigError>> {
    let text = super::read_text(path).map_err(|e| vec![e])?;
    let name = path.display().to_string();
    match Config::load(path) {
        Ok(c) => Ok(c),
        Err(first) => {
            let mut all = vec![first];
            all.extend(parse_errors(&text, &name));
            if all.len() == 1 {
                // Parsed: the rest are checks of values together.
                if let Ok(Some(config)) = serde_yaml::from_str::<Option<Config>>(&text) {
                    all.extend(
                        config
                            .validation_errors(&name)
                            .into_iter()
                            .map(|e| e.locate_in(&text)),
                    );
                }
            }
            Err(sorted_unique(all))
        }
    }
}

/// In file order (those without a position last), each message once.
fn sorted_unique(errors: Vec<ConfigError>) -> Vec<ConfigError> {
    let mut keyed: Vec<((usize, usize), String, ConfigError)> = errors
        .into_iter()
        .map(|e| {
            let at = match &e {
                ConfigError::Parse { line, column, .. }
                | ConfigError::InvalidAt { line, column, .. } => (*line, *column),
                _ => (usize::MAX, 0),
            };
            (at, e.to_string(), e)
        })
        .collect();
    keyed.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    keyed.dedup_by(|a, b| a.1 == b.1);
    keyed.into_iter().map(|(_, _, e)| e).collect()
}

/// The parse errors of each part of `text` read on its own: each section,
/// each module and each target, and each unknown top-level key.
fn parse_errors(text: &str, file: &str) -> Vec<ConfigError> {
    let Ok(serde_yaml::Value::Mapping(top)) = serde_yaml::from_str::<serde_yaml::Value>(text)
    else {
        // Not YAML, or not a mapping: the first error is the only one.
        return Vec::new();
    };
    let mut found: Vec<serde_yaml::Error> = Vec::new();
    let mut out = Vec::new();
    let mut push = |r: Result<(), serde_yaml::Error>| found.extend(r.err());
    for (key, value) in &top {
        let Some(key) = key.as_str() else { continue };
        match key {
            "responder" => push(read_at::<ResponderSection>(text, &[Seg::Key(key)])),
            "scheduler" => push(read_at::<SchedulerConfig>(text, &[Seg::Key(key)])),
            "discovery" => push(read_at::<DiscoveryConfig>(text, &[Seg::Key(key)])),
            "host_metrics" => push(read_at::<HostMetricsConfig>(text, &[Seg::Key(key)])),
            "http" => push(read_at::<HttpSection>(text, &[Seg::Key(key)])),
            "web" => push(read_at::<WebSection>(text, &[Seg::Key(key)])),
            "modules" => match value {
                serde_yaml::Value::Mapping(m) => {
                    for name in m.keys().filter_map(|k| k.as_str()) {
                        push(read_at::<Module>(text, &[Seg::Key(key), Seg::Key(name)]));
                    }
                }
                _ => push(read_at::<std::collections::BTreeMap<String, Module>>(
                    text,
                    &[Seg::Key(key)],
                )),
            },
            "targets" => match value {
                serde_yaml::Value::Sequence(s) => {
                    for i in 0..s.len() {
                        push(read_at::<TargetConfig>(
                            text,
                            &[Seg::Key(key), Seg::Index(i)],
                        ));
                    }
                }
                _ => push(read_at::<Vec<TargetConfig>>(text, &[Seg::Key(key)])),
            },
            other => {
                let message = super::error::plain_words(&format!(
                    "unknown field `{other}`, expected one of {}",
                    SECTIONS.map(|s| format!("`{s}`")).join(", ")
                ));
                // A top-level key starts its line.
                let line = text
                    .lines()
                    .position(|l| l.starts_with(&format!("{other}:")))
                    .map_or(1, |i| i + 1);
                out.push(ConfigError::Parse {
                    file: file.to_string(),
                    line,
                    column: 1,
                    message,
                });
            }
        }
    }
    out.extend(
        found
            .iter()
            .map(|e| ConfigError::from_yaml_in(file, e, text)),
    );
    out
}

/// One step of a path into the document.
#[derive(Clone, Copy)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// Reads the node at `path` in `text` as a `T`, skipping everything else;
/// the error, if any, carries its position and key path.
fn read_at<T: DeserializeOwned>(text: &str, path: &[Seg]) -> Result<(), serde_yaml::Error> {
    Walk::<T> {
        path,
        _t: PhantomData,
    }
    .deserialize(serde_yaml::Deserializer::from_str(text))
}

struct Walk<'p, T> {
    path: &'p [Seg<'p>],
    _t: PhantomData<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for Walk<'_, T> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.path.first() {
            None => T::deserialize(d).map(|_| ()),
            Some(Seg::Key(_)) => d.deserialize_map(self),
            Some(Seg::Index(_)) => d.deserialize_seq(self),
        }
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for Walk<'_, T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping or a list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some(Seg::Key(want)) = self.path.first() else {
            return Ok(());
        };
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            if key.as_str() == Some(want) {
                map.next_value_seed(Walk::<T> {
                    path: &self.path[1..],
                    _t: PhantomData,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some(Seg::Index(want)) = self.path.first() else {
            return Ok(());
        };
        let mut i = 0;
        loop {
            let more = if i == *want {
                seq.next_element_seed(Walk::<T> {
                    path: &self.path[1..],
                    _t: PhantomData,
                })?
            } else {
                seq.next_element::<IgnoredAny>()?.map(|_| ())
            };
            if more.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    // Anything else where a mapping or list was walked: its own section's
    // read reports it.
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yml");
        std::fs::write(&path, text).unwrap();
        load_all(&path)
            .unwrap_err()
            .iter()
            .map(|e| e.to_string().replace(path.to_str().unwrap(), "c.yml"))
            .collect()
    }

    #[test]
    fn every_error_of_a_file_is_reported_in_order() {
        let e = errors(
            "modules:\n  a:\n    kind: tcp_stream\n  b:\n    kind: tcp\n    duraton: 5s\ntargets:\n  - address: h\n    modules: [b]\n    intervall: 5s\nbogus: 1\n",
        );
        assert_eq!(e.len(), 4, "{e:#?}");
        assert!(
            e[0].starts_with(
                "c.yml:3:11: modules.a.kind: unknown value `tcp_stream`: did you mean `tcp`?"
            ),
            "{e:#?}"
        );
        assert!(
            e[1].starts_with(
                "c.yml:6:5: modules.b: unknown key `duraton`: did you mean `duration`?"
            ),
            "{e:#?}"
        );
        assert!(
            e[2].starts_with(
                "c.yml:10:5: targets[0]: unknown key `intervall`: did you mean `interval`?"
            ),
            "{e:#?}"
        );
        assert!(
            e[3].starts_with("c.yml:11:1: unknown key `bogus`"),
            "{e:#?}"
        );
    }
}
