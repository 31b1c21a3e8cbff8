//! Records the git commit the binary is built from, for `--version` and the
//! startup log. Outside a git tree (a source tarball, a container build
//! that copies no `.git`) it is "unknown", unless PATHPROBE_COMMIT gives it.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=PATHPROBE_COMMIT");
    let commit = std::env::var("PATHPROBE_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it
    // names (a commit) and packed-refs (a gc). A worktree's HEAD is in its
    // own git dir, its branches in the common one.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!(
            "cargo:rerun-if-changed={}",
            PathBuf::from(&dir).join("HEAD").display()
        );
    }
    if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
        let common = PathBuf::from(common);
        // Only if it exists: cargo counts a missing file as changed, and a
        // clone whose refs were never packed rebuilt on every run. A later
        // gc that packs the branch deletes its loose ref, watched below.
        let packed = common.join("packed-refs");
        if packed.exists() {
            println!("cargo:rerun-if-changed={}", packed.display());
        }
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", common.join(branch).display());
        }
    }
    println!("cargo:rustc-env=PATHPROBE_COMMIT={commit}");
}
