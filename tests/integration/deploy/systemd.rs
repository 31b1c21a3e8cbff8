//! The systemd unit.

use super::*;

/// The unit's sections as (key, value) lists, in order; `\` continues a
/// line, `#` and `;` start comments.
pub(super) fn parse_unit(text: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut section = None;
    let mut pending = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with(';'))
        {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        let line = std::mem::take(&mut pending) + line;
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.to_string());
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {line}"));
        let section = section
            .clone()
            .unwrap_or_else(|| panic!("{line} outside a section"));
        out.entry(section)
            .or_default()
            .push((k.trim().to_string(), v.trim().to_string()));
    }
    out
}

#[test]
fn systemd_unit_is_hardened_and_its_command_line_runs() {
    let unit = parse_unit(&read(&repo().join("deploy/systemd/pathprobe.service")));
    let service = &unit["Service"];
    let last = |k: &str| {
        service
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };

    // Misspelt or unknown directives: systemd-analyze verify
    // (linters::systemd_analyze_verifies_the_unit), not a list kept here.
    for (k, v) in [
        ("DynamicUser", "yes"),
        ("LimitNOFILE", "65536"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictNamespaces", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("SystemCallArchitectures", "native"),
    ] {
        assert_eq!(last(k), Some(v), "{k}");
    }
    assert!(
        last("User").is_none() && last("Group").is_none(),
        "DynamicUser picks the user"
    );
    let families: BTreeSet<&str> = last("RestrictAddressFamilies")
        .unwrap()
        .split_whitespace()
        .collect();
    let allowed: BTreeSet<&str> = ["AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK"].into();
    assert!(families.contains("AF_INET") && families.contains("AF_INET6"));
    assert!(families.is_subset(&allowed), "{families:?}");
    assert!(service
        .iter()
        .any(|(k, v)| k == "SystemCallFilter" && v == "@system-service"));
    // Host figures come from /proc/stat and friends: ProcSubset=pid would
    // hide them.
    assert_ne!(last("ProcSubset"), Some("pid"));

    let exec = last("ExecStart").expect("ExecStart");
    assert!(
        !exec.contains(['"', '\'']),
        "quoting is not checked here: {exec}"
    );
    let words: Vec<String> = exec.split_whitespace().map(String::from).collect();
    assert!(words[0].starts_with('/'), "{}", words[0]);
    assert!(words[0].ends_with("/pathprobe"));
    check_serve_command(&words[1..], "ExecStart");
    assert!(
        last("ExecReload").is_some_and(|r| r.contains("-HUP $MAINPID")),
        "reload is SIGHUP"
    );
    assert_eq!(
        unit["Install"][0],
        ("WantedBy".to_string(), "multi-user.target".to_string())
    );
}

/// The secret drop-in: systemd copies the root-only secret for the dynamic
/// user, and the configuration deploy/README.md gives finds the copy
/// through $CREDENTIALS_DIRECTORY. Without systemd, the copy is made here
/// and the variable set as systemd sets it.
#[test]
fn systemd_secret_reaches_the_dynamic_user_through_load_credential() {
    let dropin = parse_unit(&read(
        &repo().join("deploy/systemd/pathprobe.service.d/secret.conf"),
    ));
    assert_eq!(dropin.keys().collect::<Vec<_>>(), ["Service"]);
    let [(key, value)] = dropin["Service"].as_slice() else {
        panic!("one directive expected: {:?}", dropin["Service"]);
    };
    assert_eq!(key, "LoadCredential");
    let (name, source) = value.split_once(':').expect("LoadCredential=ID:PATH");
    assert_eq!(source, "/etc/pathprobe/secret");
    // The unit it extends runs as a dynamic user: the reason for all this.
    let unit = parse_unit(&read(&repo().join("deploy/systemd/pathprobe.service")));
    assert!(unit["Service"]
        .iter()
        .any(|(k, v)| k == "DynamicUser" && v == "yes"));

    // The configuration the README gives, as the service would load it.
    let readme = read(&repo().join("deploy/README.md"));
    let section = &readme[readme
        .find("### The shared secret under systemd")
        .expect("README section")..];
    let yaml = section
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a yaml block");
    assert!(
        yaml.contains(&format!("${{CREDENTIALS_DIRECTORY}}/{name}")),
        "{yaml}"
    );
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    let secret = credentials.join(name);
    std::fs::write(&secret, "a-long-enough-shared-secret-0123456789\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o400)).unwrap();
    let config = dir.path().join("pathprobe.yml");
    std::fs::write(&config, yaml).unwrap();

    let check = |env: Option<&Path>| {
        let mut cmd = Command::new(BIN);
        cmd.arg("check-config").arg(&config);
        cmd.env_remove("CREDENTIALS_DIRECTORY");
        if let Some(d) = env {
            cmd.env("CREDENTIALS_DIRECTORY", d);
        }
        run_bounded(&mut cmd, Duration::from_secs(20))
    };
    let out = check(Some(&credentials));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(": OK"), "{}", text(&out.stdout));
    // Outside systemd the variable is unset, and the error says what sets it.
    let out = check(None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr)
            .contains("which is not set: it is set by systemd for a unit with LoadCredential="),
        "{}",
        text(&out.stderr)
    );
    // A wrong directory is the file's own error, not a silent empty secret.
    let out = check(Some(dir.path()));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("cannot read secret file"),
        "{}",
        text(&out.stderr)
    );
}
