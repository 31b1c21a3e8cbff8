//! What this binary is: its version and the git commit it was built from
//! (recorded by `build.rs`; "unknown" outside a git tree), for `--version`,
//! the startup log and bug reports.

/// The crate version, as in Cargo.toml.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The short commit hash the binary was built from, or "unknown".
pub const COMMIT: &str = env!("PATHPROBE_COMMIT");

/// `--version`'s text after the program name: `0.1.0 (commit abc123def456)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("PATHPROBE_COMMIT"),
    ")"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_the_commit() {
        assert!(LONG_VERSION.starts_with(VERSION));
        assert!(LONG_VERSION.ends_with(&format!("(commit {COMMIT})")));
        assert!(!COMMIT.is_empty());
    }
}
