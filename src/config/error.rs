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
}

impl ConfigError {
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
                message: tidy_path(strip_position(&text, loc.line(), loc.column())),
            },
            None => ConfigError::ParseNoLocation {
                file: file.to_string(),
                message: tidy_path(text),
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

#[cfg(test)]
mod tests {
    use super::*;

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
