//! Finds where in a YAML text a key path such as `targets[2].modules[0]`
//! is, so that errors found after parsing (unknown module, zero interval,
//! ...) can lead with `file:line:column` like parse errors do.
//!
//! serde_yaml keeps no positions in what it returns, but every error it
//! raises carries the position of the node being read. So the text is read
//! a second time with a visitor that follows the path and fails on purpose
//! at the wanted node; the position of that failure is the answer.

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// The line and column (1-based) of the node at `path`, or of its nearest
/// ancestor present in the text (a missing key points at its mapping).
pub(crate) fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    let mut path = path;
    loop {
        if let Some(at) = locate_exact(text, path) {
            return Some(at);
        }
        path = parent(path)?;
    }
}

/// The path one level up; none above the top-level keys, as the whole
/// document at 1:1 would point at nothing useful.
fn parent(path: &str) -> Option<&str> {
    path.rfind(['.', '['])
        .filter(|&i| i > 0)
        .map(|i| &path[..i])
}

fn locate_exact(text: &str, target: &str) -> Option<(usize, usize)> {
    let seed = Seek {
        target,
        path: String::new(),
    };
    let err = seed
        .deserialize(serde_yaml::Deserializer::from_str(text))
        .err()?;
    if !err.to_string().contains(FOUND) {
        return None;
    }
    err.location().map(|l| (l.line(), l.column()))
}

const FOUND: &str = "pathprobe: located";

struct Seek<'a> {
    target: &'a str,
    path: String,
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.path == self.target {
            return d.deserialize_any(Found);
        }
        if !self.target.starts_with(&self.path) {
            return d.deserialize_ignored_any(IgnoredAny).map(|_| ());
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            let key = match key {
                serde_yaml::Value::String(s) => s,
                serde_yaml::Value::Number(n) => n.to_string(),
                serde_yaml::Value::Bool(b) => b.to_string(),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            let path = if self.path.is_empty() {
                key
            } else {
                format!("{}.{key}", self.path)
            };
            map.next_value_seed(Seek {
                target: self.target,
                path,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq
            .next_element_seed(Seek {
                target: self.target,
                path: format!("{}[{i}]", self.path),
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    // Scalars on the way to the target end the search there.
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        Ok(())
    }
    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        IgnoredAny.visit_enum(data).map(|_| ())
    }
}

/// Fails on whatever node it is given, so that the error carries its place.
struct Found;

impl<'de> Visitor<'de> for Found {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(FOUND)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "modules:\n  tcp: {kind: tcp, duration: 5s}\ntargets:\n  - name: a\n    modules: [tcp, nosuch]\n    interval: 0s\n";

    #[test]
    fn finds_keys_and_list_items() {
        assert_eq!(locate(TEXT, "modules.tcp.duration"), Some((2, 30)));
        assert_eq!(locate(TEXT, "targets[0].modules[1]"), Some((5, 20)));
        assert_eq!(locate(TEXT, "targets[0].interval"), Some((6, 15)));
    }

    #[test]
    fn a_missing_key_points_at_its_parent() {
        assert_eq!(
            locate(TEXT, "targets[0].address"),
            locate(TEXT, "targets[0]")
        );
        assert!(locate(TEXT, "targets[0]").is_some());
        assert_eq!(locate("", "targets[0]"), None);
        assert_eq!(locate("[unclosed", "a"), None);
    }
}
