//! pathprobe's integration tests, one crate with a module per area (as
//! ripgrep's tests/tests.rs), sharing the harness in `common`. Select an
//! area by its module path, e.g. `cargo test --release --test tests rules::`.
//!
//! The modules run in one process, in parallel: tests that measure take
//! the exclusive turn (`common::turn`), so that they still run alone.

mod common;

mod access;
mod cli;
mod dashboards;
mod deploy;
mod e2e;
mod faults;
mod lab;
mod load;
mod loopback;
mod reload;
mod responder;
mod rules;
mod serve;
mod serve_process;

/// Cargo builds only this crate (autotests = false), so a test file that is
/// not a module here would never run.
#[test]
fn every_test_file_is_a_module_of_this_crate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let root = std::fs::read_to_string(dir.join("tests.rs")).unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let is_module = if path.is_dir() {
            path.join("mod.rs").exists()
        } else {
            path.extension().is_some_and(|e| e == "rs") && stem != "tests"
        };
        if is_module && !root.contains(&format!("\nmod {stem};\n")) {
            missing.push(path.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "add `mod NAME;` to tests/tests.rs for: {missing:?}"
    );
}
