//! Every error in a configuration file at once, for `check-config`: serde
//! stops at the first, so after a failed parse each section, each module
//! and each target is read again on its own from the text (positions and
//! key paths kept), and each error found is reported once, in file order.
//! Within one section, module or target, serde also stops at the first bad
//! key: so that node is read again with that key left out, until it reads
//! clean, and every bad key in it is reported too.

use std::cell::RefCell;
use std::collections::BTreeSet;
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
pub const SECTIONS: [&str; 9] = [
    "responder",
    "scheduler",
    "modules",
    "targets",
    "discovery",
    "host_metrics",
    "http",
    "web",
    "trace",
];

/// Reads, parses and validates `path` as [`Config::load`] does, but on
/// failure returns every error found rather than the first: each part's
/// parse errors, and the checks of values together over every part that
/// parsed (a bad key left out, a part that cannot be read at all left to
/// its defaults).
pub fn load_all(path: &Path) -> Result<Config, Vec<ConfigError>> {
    let text = super::read_text(path).map_err(|e| vec![e])?;
    let name = path.display().to_string();
    match Config::load(path) {
        Ok(c) => Ok(c),
        Err(first) => {
            let mut all = vec![first];
            let parsed = parse_errors(&text, &name);
            all.extend(parsed.errors);
            if let Ok(Some(mut config)) = serde_yaml::from_value::<Option<Config>>(parsed.salvage) {
                for module in config.modules.values_mut() {
                    module.resolve_auto();
                }
                all.extend(
                    config
                        .validation_errors(&name)
                        .into_iter()
                        .filter(|e| !parsed.unchecked.iter().any(|p| at_or_under(e, p)))
                        .map(|e| e.locate_in(&text)),
                );
            }
            Err(sorted_unique(all))
        }
    }
}

/// Whether `e` is about the key path `prefix` or something under it.
fn at_or_under(e: &ConfigError, prefix: &str) -> bool {
    let key = match e {
        ConfigError::Invalid { key, .. } | ConfigError::InvalidAt { key, .. } => key,
        _ => return false,
    };
    key.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
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

/// What reading each part of a file on its own found.
struct Parsed {
    errors: Vec<ConfigError>,
    /// The document without what failed to parse: bad keys removed, a
    /// part that still fails removed (a section, a module) or replaced by
    /// a stand-in (a target, so that the others keep their index).
    salvage: serde_yaml::Value,
    /// Key paths whose checks would be about the stand-ins, not the file.
    unchecked: Vec<String>,
}

/// The parse errors of each part of `text` read on its own: each section,
/// each module and each target, and each unknown top-level key.
fn parse_errors(text: &str, file: &str) -> Parsed {
    use serde_yaml::Value;
    let Ok(Value::Mapping(top)) = serde_yaml::from_str::<Value>(text) else {
        // Not YAML, or not a mapping: the first error is the only one.
        return Parsed {
            errors: Vec::new(),
            salvage: Value::Null,
            unchecked: Vec::new(),
        };
    };
    let mut salvage = top.clone();
    let mut unchecked = Vec::new();
    let mut lost_modules = BTreeSet::new();
    let mut found: Vec<serde_yaml::Error> = Vec::new();
    let mut out = Vec::new();
    for (key, value) in &top {
        let Some(key) = key.as_str() else { continue };
        let section = |found: &mut Vec<serde_yaml::Error>, salvage: &mut serde_yaml::Mapping| {
            let (errors, keys) = match key {
                "responder" => read_at::<ResponderSection>(text, &[Seg::Key(key)]),
                "scheduler" => read_at::<SchedulerConfig>(text, &[Seg::Key(key)]),
                "discovery" => read_at::<DiscoveryConfig>(text, &[Seg::Key(key)]),
                "host_metrics" => read_at::<HostMetricsConfig>(text, &[Seg::Key(key)]),
                "http" => read_at::<HttpSection>(text, &[Seg::Key(key)]),
                "web" => read_at::<WebSection>(text, &[Seg::Key(key)]),
                "trace" => read_at::<super::TraceSection>(text, &[Seg::Key(key)]),
                _ => unreachable!(),
            };
            if !errors.is_empty() {
                found.extend(errors);
                if !salvaged(salvage.get_mut(key), &keys, |v| match key {
                    "responder" => reads_as::<ResponderSection>(v),
                    "scheduler" => reads_as::<SchedulerConfig>(v),
                    "discovery" => reads_as::<DiscoveryConfig>(v),
                    "host_metrics" => reads_as::<HostMetricsConfig>(v),
                    "http" => reads_as::<HttpSection>(v),
                    "web" => reads_as::<WebSection>(v),
                    _ => reads_as::<super::TraceSection>(v),
                }) {
                    salvage.remove(key);
                }
            }
        };
        match key {
            "responder" | "scheduler" | "discovery" | "host_metrics" | "http" | "web" | "trace" => {
                section(&mut found, &mut salvage)
            }
            "modules" => match value {
                Value::Mapping(m) => {
                    for name in m.keys().filter_map(|k| k.as_str()) {
                        let (errors, keys) =
                            read_at::<Module>(text, &[Seg::Key(key), Seg::Key(name)]);
                        if errors.is_empty() {
                            continue;
                        }
                        found.extend(errors);
                        let modules = salvage.get_mut(key).and_then(Value::as_mapping_mut);
                        if let Some(modules) = modules {
                            if !salvaged(modules.get_mut(name), &keys, reads_as::<Module>) {
                                modules.remove(name);
                                lost_modules.insert(name.to_string());
                            }
                        }
                    }
                }
                _ => {
                    found.extend(
                        read_at::<std::collections::BTreeMap<String, Module>>(
                            text,
                            &[Seg::Key(key)],
                        )
                        .0,
                    );
                    salvage.remove(key);
                    unchecked.push("targets".to_string());
                }
            },
            "targets" => match value {
                Value::Sequence(s) => {
                    for i in 0..s.len() {
                        let (errors, keys) =
                            read_at::<TargetConfig>(text, &[Seg::Key(key), Seg::Index(i)]);
                        if errors.is_empty() {
                            continue;
                        }
                        found.extend(errors);
                        let target = salvage
                            .get_mut(key)
                            .and_then(Value::as_sequence_mut)
                            .and_then(|s| s.get_mut(i));
                        if let Some(target) = target {
                            if !salvaged(Some(&mut *target), &keys, reads_as::<TargetConfig>) {
                                // A stand-in that fails only its own checks.
                                *target = serde_yaml::from_str(&format!(
                                    "{{name: \"\\0unreadable target {i}\", modules: []}}"
                                ))
                                .unwrap_or(Value::Null);
                                unchecked.push(format!("targets[{i}]"));
                            }
                        }
                    }
                }
                _ => {
                    found.extend(read_at::<Vec<TargetConfig>>(text, &[Seg::Key(key)]).0);
                    salvage.remove(key);
                }
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
                salvage.remove(other);
            }
        }
    }
    // A target naming a module that could not be read: its list is
    // checked without it, and an emptied list is not the file's mistake.
    if let Some(targets) = salvage.get_mut("targets").and_then(Value::as_sequence_mut) {
        for (i, t) in targets.iter_mut().enumerate() {
            let Some(list) = t.get_mut("modules").and_then(Value::as_sequence_mut) else {
                continue;
            };
            let before = list.len();
            list.retain(|m| !m.as_str().is_some_and(|m| lost_modules.contains(m)));
            if list.len() != before {
                unchecked.push(format!("targets[{i}].modules"));
                if list.is_empty() {
                    unchecked.push(format!("targets[{i}]"));
                }
            }
        }
    }
    out.extend(
        found
            .iter()
            .map(|e| ConfigError::from_yaml_in(file, e, text)),
    );
    Parsed {
        errors: out,
        salvage: Value::Mapping(salvage),
        unchecked,
    }
}

fn reads_as<T: DeserializeOwned>(v: &serde_yaml::Value) -> bool {
    serde_yaml::from_value::<T>(v.clone()).is_ok()
}

/// Removes the bad `keys` from `node`; whether it then reads.
fn salvaged(
    node: Option<&mut serde_yaml::Value>,
    keys: &BTreeSet<String>,
    reads: impl Fn(&serde_yaml::Value) -> bool,
) -> bool {
    let Some(node) = node else { return false };
    if let Some(m) = node.as_mapping_mut() {
        for k in keys {
            m.remove(k.as_str());
        }
    }
    reads(node)
}

/// One step of a path into the document.
#[derive(Clone, Copy)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// How many keys of one node are left out in turn before giving up: each
/// try parses the whole text again, so a hostile file with thousands of
/// bad keys in one node must not cost thousands of parses.
const MAX_ERRORS_PER_NODE: usize = 32;

/// Reads the node at `path` in `text` as a `T`, skipping everything else;
/// each error carries its position and key path. After an error at a key
/// of the node itself (an unknown key, or a bad value, nested or not), the
/// node is read again without that key, so that the next bad key is found
/// too; a required key left out that way is then missing, which is no new
/// error and ends the search.
fn read_at<T: DeserializeOwned>(
    text: &str,
    path: &[Seg],
) -> (Vec<serde_yaml::Error>, BTreeSet<String>) {
    let skipped = RefCell::new(Skipped::default());
    let mut errors = Vec::new();
    while errors.len() < MAX_ERRORS_PER_NODE {
        skipped.borrow_mut().last = None;
        let result = Walk::<T> {
            path,
            skipped: &skipped,
            _t: PhantomData,
        }
        .deserialize(serde_yaml::Deserializer::from_str(text));
        let Err(e) = result else { break };
        let mut s = skipped.borrow_mut();
        match s.last.take() {
            // Failed while at one of its keys: that key is at fault.
            Some(key) if !s.keys.contains(&key) => {
                errors.push(e);
                s.keys.insert(key);
            }
            // Failed after the last key: a required key is missing. If
            // one was left out above, that is its earlier error again.
            _ => {
                let message = e.to_string();
                let left_out = s
                    .keys
                    .iter()
                    .any(|k| message.contains(&format!("missing field `{k}`")));
                if !left_out {
                    errors.push(e);
                }
                break;
            }
        }
    }
    let keys = std::mem::take(&mut skipped.borrow_mut().keys);
    (errors, keys)
}

/// The keys of the node being read that are left out, and the key the
/// read was at when it failed.
#[derive(Default)]
struct Skipped {
    keys: BTreeSet<String>,
    last: Option<String>,
}

struct Walk<'p, T> {
    path: &'p [Seg<'p>],
    skipped: &'p RefCell<Skipped>,
    _t: PhantomData<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for Walk<'_, T> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.path.first() {
            None => T::deserialize(Filtered {
                inner: d,
                skipped: self.skipped,
            })
            .map(|_| ()),
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
                    skipped: self.skipped,
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
                    skipped: self.skipped,
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

/// The node's own deserializer, passing its keys on except those left out,
/// and noting which key it is at. Keys are read by the YAML deserializer
/// itself, so an unknown key's error keeps the key's position.
struct Filtered<'s, D> {
    inner: D,
    skipped: &'s RefCell<Skipped>,
}

impl<'de, D: de::Deserializer<'de>> de::Deserializer<'de> for Filtered<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(FilterVisitor {
            visitor,
            skipped: self.skipped,
        })
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(FilterVisitor {
            visitor,
            skipped: self.skipped,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct enum identifier ignored_any
    }
}

struct FilterVisitor<'s, V> {
    visitor: V,
    skipped: &'s RefCell<Skipped>,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for FilterVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(FilterMap {
            inner: map,
            skipped: self.skipped,
        })
    }
}

struct FilterMap<'s, A> {
    inner: A,
    skipped: &'s RefCell<Skipped>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FilterMap<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let mut seed = Some(seed);
        loop {
            let key = self.inner.next_key_seed(KeySeed {
                seed: &mut seed,
                skipped: self.skipped,
            })?;
            match key {
                None => {
                    // Past the last key: an error now is the node's own.
                    self.skipped.borrow_mut().last = None;
                    return Ok(None);
                }
                Some(Some(k)) => return Ok(Some(k)),
                Some(None) => {
                    self.inner.next_value::<IgnoredAny>()?;
                }
            }
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.inner.next_value_seed(seed)
    }
}

/// Reads one key: `None` for a key left out (the caller's seed is kept for
/// the next key), else the caller's seed's value.
struct KeySeed<'a, 's, K> {
    seed: &'a mut Option<K>,
    skipped: &'s RefCell<Skipped>,
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<'_, '_, K> {
    type Value = Option<K::Value>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, K: DeserializeSeed<'de>> Visitor<'de> for KeySeed<'_, '_, K> {
    type Value = Option<K::Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        {
            let mut s = self.skipped.borrow_mut();
            if s.keys.contains(key) {
                return Ok(None);
            }
            s.last = Some(key.to_string());
        }
        let Some(seed) = self.seed.take() else {
            return Err(E::custom("a key was read twice"));
        };
        seed.deserialize(de::value::StrDeserializer::<E>::new(key))
            .map(Some)
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

    /// Serde stops at a node's first bad key, so only the
    /// first error inside one module or one target was reported.
    #[test]
    fn every_error_within_one_module_and_one_target_is_reported() {
        let e = errors(
            "modules:\n  a:\n    kind: tcp_stream\n    duraton: 5s\n    streams: many\n  b: {kind: tcp, bitrate: fast, omitt: 1s}\ntargets:\n  - address: h\n    modules: [a]\n    intervall: 5s\n    port: http\n    labelz: {x: y}\n",
        );
        assert_eq!(
            e.iter()
                .map(|e| e.split(": ").take(2).collect::<Vec<_>>().join(": "))
                .collect::<Vec<_>>(),
            [
                "c.yml:3:11: modules.a.kind",
                "c.yml:4:5: modules.a",
                "c.yml:5:14: modules.a.streams",
                "c.yml:6:27: modules.b.bitrate",
                "c.yml:6:33: modules.b",
                "c.yml:10:5: targets[0]",
                "c.yml:11:11: targets[0].port",
                "c.yml:12:5: targets[0]",
            ],
            "{e:#?}"
        );
        assert!(
            e[1].contains("unknown key `duraton`: did you mean `duration`?"),
            "{e:#?}"
        );
        assert!(
            e[4].contains("unknown key `omitt`: did you mean `omit`?"),
            "{e:#?}"
        );
        assert!(e[5].contains("unknown key `intervall`"), "{e:#?}");
        assert!(e[7].contains("unknown key `labelz`"), "{e:#?}");
        // Leaving a bad required key out is no new error: `kind` is named
        // once, as the unknown value it is, never as missing.
        assert!(!e.iter().any(|e| e.contains("missing")), "{e:#?}");
    }
}
