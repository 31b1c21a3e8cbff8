//! The error type shared by every reader and parser of the host module.
//!
//! Messages follow the `file: line N: what was expected, what was found`
//! shape so that an operator can go straight to the offending line of a
//! /proc file.

#![warn(missing_docs)]

use std::path::PathBuf;

/// Why a host measurement could not be read or understood.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The file could not be read at all (missing in a container, no
    /// permission, ...).
    #[error("{}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        error: std::io::Error,
    },
    /// One line of the file did not have the expected shape.
    #[error("{file}: line {line}: {message}")]
    Line {
        /// The file, e.g. `/proc/stat`.
        file: &'static str,
        /// 1-based.
        line: usize,
        /// What was wrong with it.
        message: String,
    },
    /// The file as a whole lacked something (a header, a counter).
    #[error("{file}: {message}")]
    File {
        /// The file, e.g. `/proc/net/snmp`.
        file: &'static str,
        /// What it lacked.
        message: String,
    },
}

impl HostError {
    pub(crate) fn line(file: &'static str, line: usize, message: impl Into<String>) -> Self {
        HostError::Line {
            file,
            line,
            message: message.into(),
        }
    }

    pub(crate) fn file(file: &'static str, message: impl Into<String>) -> Self {
        HostError::File {
            file,
            message: message.into(),
        }
    }
}

/// Quotes a piece of input for an error message, cut short so that a
/// garbage line of megabytes does not end up in a log.
pub(crate) fn quoted(found: &str) -> String {
    const MAX_CHARS: usize = 40;
    match found.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{:?}...", &found[..cut]),
        None => format!("{found:?}"),
    }
}

/// Reads a whole /proc or /sys file; these are small and generated on
/// read, so one read keeps the numbers of a file consistent with each other.
pub(crate) fn read_to_string(path: &str) -> Result<String, HostError> {
    std::fs::read_to_string(path).map_err(|error| HostError::Read {
        path: PathBuf::from(path),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_file_and_line() {
        let e = HostError::line(
            "/proc/softirqs",
            3,
            "expected a count per CPU, found \"abc\"",
        );
        assert_eq!(
            e.to_string(),
            "/proc/softirqs: line 3: expected a count per CPU, found \"abc\""
        );
        let e = HostError::file("/proc/net/snmp", "no Tcp RetransSegs counter");
        assert_eq!(e.to_string(), "/proc/net/snmp: no Tcp RetransSegs counter");
    }

    #[test]
    fn read_error_names_the_path() {
        let e = read_to_string("/proc/does-not-exist-pathprobe").unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("/proc/does-not-exist-pathprobe: "),
            "{text}"
        );
        assert!(
            matches!(e, HostError::Read { ref error, .. } if error.kind() == std::io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn long_input_is_cut_in_messages() {
        assert_eq!(quoted("abc"), "\"abc\"");
        let long = "x".repeat(100);
        assert_eq!(quoted(&long), format!("{:?}...", "x".repeat(40)));
        // Cutting must respect char boundaries.
        let wide = "é".repeat(50);
        assert_eq!(quoted(&wide), format!("{:?}...", "é".repeat(40)));
    }
}
