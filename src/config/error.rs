//! The errors of loading configuration and of discovery.
//!
//! Every message starts with where the problem is, as compilers and
//! promtool do, so an operator can jump to it: `file:line:column: key.path:
//! what was expected` for parse errors, `file: key.path: what is wrong` for
//! the checks that run after parsing, when the line is no longer known.

use std::path::PathBuf;

/// Why a configuration or target file was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read at all.
    #[error("{}: cannot read: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The text is not valid YAML or JSON, or does not fit the schema
    /// (unknown key, wrong type, bad duration...).
    #[error("{file}:{line}:{column}: {message}")]
    Parse {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// As [`ConfigError::Parse`], for the rare parser errors that carry no
    /// position (an empty document, an I/O error inside the parser).
    #[error("{file}: {message}")]
    ParseNoLocation { file: String, message: String },
    /// The file parsed but its values do not make sense together (a target
    /// naming an unknown module, a duplicate name, ...). `key` is the path
    /// of the offending value, such as `targets[2].modules[0]`.
    #[error("{file}: {key}: {message}")]
    Invalid {
        file: String,
        key: String,
        message: String,
    },
    /// As [`ConfigError::Invalid`], with the position of `key` (or of its
    /// nearest ancestor, when the key is missing) in the file.
    #[error("{file}:{line}:{column}: {key}: {message}")]
    InvalidAt {
        file: String,
        line: usize,
        column: usize,
        key: String,
        message: String,
    },
    /// Every error of a file (as `check-config` lists them), for `serve`:
    /// one a line, in file order.
    #[error("{}", several(.0))]
    Several(Vec<ConfigError>),
}

fn several(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigError {
    /// One error as it is, several as [`ConfigError::Several`].
    pub fn from_all(mut errors: Vec<ConfigError>) -> ConfigError {
        if errors.len() == 1 {
            errors.remove(0)
        } else {
            ConfigError::Several(errors)
        }
    }

    pub(crate) fn invalid(file: &str, key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            file: file.to_string(),
            key: key.into(),
            message: message.into(),
        }
    }

    /// Adds the position of an [`ConfigError::Invalid`] key in `text`.
    pub(crate) fn locate_in(self, text: &str) -> Self {
        match self {
            ConfigError::Invalid { file, key, message } => {
                match super::locate::locate(text, &key) {
                    Some((line, column)) => ConfigError::InvalidAt {
                        file,
                        line,
                        column,
                        key,
                        message,
                    },
                    None => ConfigError::Invalid { file, key, message },
                }
            }
            other => other,
        }
    }

    /// Converts a serde_yaml error into `file:line:column: message`.
    pub(crate) fn from_yaml(file: &str, error: &serde_yaml::Error) -> Self {
        let text = error.to_string();
        match error.location() {
            Some(loc) => ConfigError::Parse {
                file: file.to_string(),
                line: loc.line(),
                column: loc.column(),
                message: plain_words(&tidy_path(strip_position(&text, loc.line(), loc.column()))),
            },
            None => ConfigError::ParseNoLocation {
                file: file.to_string(),
                message: plain_words(&tidy_path(text)),
            },
        }
    }

    /// As [`ConfigError::from_yaml`], knowing the text: a tab in the
    /// indentation before the error is named as the cause, at its own
    /// place, since libyaml only says "found character that cannot start
    /// any token".
    pub(crate) fn from_yaml_in(file: &str, error: &serde_yaml::Error, text: &str) -> Self {
        let upto = error.location().map_or(usize::MAX, |l| l.line());
        match first_indent_tab(text).filter(|&(line, _)| line <= upto) {
            Some((line, column)) => ConfigError::Parse {
                file: file.to_string(),
                line,
                column,
                message: "tabs are not allowed in YAML indentation; indent with spaces".into(),
            },
            None => ConfigError::from_yaml(file, error),
        }
    }

    /// Converts a serde_json error into `file:line:column: message`.
    pub(crate) fn from_json(file: &str, error: &serde_json::Error) -> Self {
        // serde_json reports line 0 for errors that have no position.
        if error.line() == 0 {
            return ConfigError::ParseNoLocation {
                file: file.to_string(),
                message: error.to_string(),
            };
        }
        ConfigError::Parse {
            file: file.to_string(),
            line: error.line(),
            column: error.column(),
            message: strip_position(&error.to_string(), error.line(), error.column()),
        }
    }
}

/// Both parsers append ` at line L column C` to their messages (libyaml
/// sometimes in the middle, before a context clause). The position already
/// leads our message, so it is removed once to avoid saying it twice.
fn strip_position(text: &str, line: usize, column: usize) -> String {
    text.replacen(&format!(" at line {line} column {column}"), "", 1)
}

/// The line and column (1-based) of the first tab in a line's leading
/// whitespace.
fn first_indent_tab(text: &str) -> Option<(usize, usize)> {
    text.lines().enumerate().find_map(|(i, line)| {
        let indent = &line[..line.len() - line.trim_start_matches([' ', '\t']).len()];
        indent.find('\t').map(|col| (i + 1, col + 1))
    })
}

/// serde_yaml writes the path into a top-level list as `.[0]`; the other
/// messages, and Prometheus users, write `[0]`.
fn tidy_path(message: String) -> String {
    match message.strip_prefix(".[") {
        Some(rest) => format!("[{rest}"),
        None => message,
    }
}

/// serde's messages in an operator's words: "key" for a field, "value"
/// for an enum variant, YAML's names for the types instead of Rust's
/// (`expected struct Module`, `expected u32`), and "did you mean" for a
/// near miss among the names that were expected.
pub(crate) fn plain_words(message: &str) -> String {
    // `prefix: ` (the key path) is kept as it is.
    let (path, body) = match message.find(": ") {
        Some(i) if !message[..i].contains(' ') => (&message[..i + 2], &message[i + 2..]),
        _ => ("", message),
    };
    let body = if let Some(rest) = body.strip_prefix("unknown field ") {
        unknown_name("key", rest)
    } else if let Some(rest) = body.strip_prefix("unknown variant ") {
        unknown_name("value", rest)
    } else if let Some(rest) = body.strip_prefix("missing field ") {
        format!("missing key {rest}")
    } else {
        rust_types(body)
    };
    format!("{path}{body}")
}

/// `` `x`, expected one of `a`, `b` `` (or `` expected `a` or `b` ``, or
/// `there are no fields`) as "unknown key `x`: did you mean `a`?" or with
/// the list.
fn unknown_name(what: &str, rest: &str) -> String {
    let (name, expected) = match rest.split_once(", ") {
        Some((n, e)) => (n, e),
        None => (rest, ""),
    };
    let bare = name.trim_matches('`');
    let options: Vec<&str> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|o| !o.is_empty())
        .collect();
    if options.is_empty() {
        return format!("unknown {what} {name}: none is expected here");
    }
    match did_you_mean(bare, &options) {
        Some(near) => format!("unknown {what} {name}: did you mean `{near}`?"),
        None => format!(
            "unknown {what} {name}: expected one of {}",
            options.join(", ")
        ),
    }
}

/// The option `name` most likely misspells: close by edit distance, or
/// one a prefix of the other (`tcp_stream` for `tcp`).
pub(crate) fn did_you_mean<'a>(name: &str, options: &[&'a str]) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    // A name that extends an option (`tcp_stream`) means it, before any
    // option merely alike in letters (`tcp_rr`).
    let extended = options
        .iter()
        .filter(|o| o.len() >= 3 && lower.starts_with(&o.to_ascii_lowercase()))
        .max_by_key(|o| o.len());
    if let Some(o) = extended {
        return Some(o);
    }
    options
        .iter()
        .map(|o| (*o, strsim::jaro_winkler(&lower, &o.to_ascii_lowercase())))
        .filter(|(o, score)| {
            *score >= 0.85
                || (o.len() >= 3 && lower.starts_with(&o.to_ascii_lowercase()))
                || (lower.len() >= 3 && o.to_ascii_lowercase().starts_with(&lower))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(o, _)| o)
}

/// Rust's type names in serde's "invalid type" messages, in YAML's words.
fn rust_types(body: &str) -> String {
    let mut out = body.to_string();
    if let Some(i) = out.find("expected struct ") {
        let end = out[i..].find([',', ';']).map_or(out.len(), |e| i + e);
        out.replace_range(i..end, "expected a mapping of keys (key: value)");
    }
    if let Some(i) = out.find("expected enum ") {
        let end = out[i..].find([',', ';']).map_or(out.len(), |e| i + e);
        out.replace_range(i..end, "expected one of its names");
    }
    for (rust, yaml) in [
        ("expected u8", "expected a whole number from 0 to 255"),
        ("expected u16", "expected a whole number from 0 to 65535"),
        ("expected u32", "expected a whole number"),
        ("expected u64", "expected a whole number"),
        ("expected usize", "expected a whole number"),
        ("expected i64", "expected a whole number"),
        ("expected i32", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected a borrowed string", "expected a string"),
        ("expected a sequence", "expected a list"),
        ("expected a map", "expected a mapping (key: value)"),
        ("expected unit", "expected nothing"),
        ("invalid type: sequence", "invalid type: a list"),
        ("invalid type: map", "invalid type: a mapping"),
        ("invalid type: unit value", "invalid type: an empty value"),
    ] {
        // Whole words only: `expected u32` but not `expected u32x`.
        if let Some(i) = out.find(rust) {
            let after = out[i + rust.len()..].chars().next();
            if !after.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                out.replace_range(i..i + rust.len(), yaml);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_jargon_reads_as_yaml() {
        assert_eq!(
            plain_words("modules.m1.kind: unknown variant `tcp_stream`, expected one of `tcp`, `udp`, `tcp_rr`"),
            "modules.m1.kind: unknown value `tcp_stream`: did you mean `tcp`?"
        );
        assert_eq!(
            plain_words("modules.m1: unknown field `duraton`, expected one of `kind`, `duration`"),
            "modules.m1: unknown key `duraton`: did you mean `duration`?"
        );
        assert_eq!(
            plain_words("modules.m1: unknown field `zzz`, expected `kind` or `duration`"),
            "modules.m1: unknown key `zzz`: expected one of kind, duration"
        );
        assert_eq!(
            plain_words("modules.m1: invalid type: integer `3`, expected struct Module"),
            "modules.m1: invalid type: integer `3`, expected a mapping of keys (key: value)"
        );
        assert_eq!(
            plain_words("modules.t.streams: invalid type: string \"many\", expected u32"),
            "modules.t.streams: invalid type: string \"many\", expected a whole number"
        );
        assert_eq!(plain_words("missing field `kind`"), "missing key `kind`");
    }

    #[test]
    fn position_is_removed_once_wherever_it_is() {
        assert_eq!(
            strip_position("did not find expected key at line 5 column 3, while parsing a block mapping at line 2 column 1", 5, 3),
            "did not find expected key, while parsing a block mapping at line 2 column 1"
        );
        assert_eq!(strip_position("no mark here", 1, 1), "no mark here");
    }

    #[test]
    fn a_tab_in_the_indentation_is_named() {
        let text = "modules:\n  tcp:\n  \tkind: tcp\n";
        let err = serde_yaml::from_str::<serde_yaml::Value>(text).unwrap_err();
        assert_eq!(
            ConfigError::from_yaml_in("a.yml", &err, text).to_string(),
            "a.yml:3:3: tabs are not allowed in YAML indentation; indent with spaces"
        );
        // A tab inside a value is not the cause, and is left to the parser.
        let text = "a: \"x\ty\"\nb: [\n";
        let err = serde_yaml::from_str::<serde_yaml::Value>(text).unwrap_err();
        assert!(!ConfigError::from_yaml_in("a.yml", &err, text)
            .to_string()
            .contains("tabs"));
        assert_eq!(first_indent_tab("a:\n\tb: 1"), Some((2, 1)));
        assert_eq!(first_indent_tab("a: 1\t# tab after content"), None);
    }

    #[test]
    fn messages_lead_with_the_location() {
        let e = ConfigError::Parse {
            file: "a.yml".into(),
            line: 7,
            column: 5,
            message: "modules.tcp: unknown field `x`".into(),
        };
        assert_eq!(e.to_string(), "a.yml:7:5: modules.tcp: unknown field `x`");
        let e = ConfigError::invalid("a.yml", "targets[0].name", "is empty");
        assert_eq!(e.to_string(), "a.yml: targets[0].name: is empty");
    }
}
