//! `pathprobe serve` and `check-config` as processes: signals, exit codes,
//! the embedded default.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::serve::Serve;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pathprobe"))
}

#[test]
fn embedded_default_shows_loopback_throughput_within_seconds() {
    // The embedded default binds the responder on [::]:5301; use a config
    // equal to it but for the port, so that tests can run side by side.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("default.yml");
    std::fs::write(
        &path,
        pathprobe::config::DEFAULT_CONFIG.replace("\"[::]:5301\"", "\"127.0.0.1:0\""),
    )
    .unwrap();
    let serve = Serve::start(&path);
    let body = serve.wait_for(Duration::from_secs(40), "first loopback probes", |b| {
        b.contains("pathprobe_probe_success{target=\"loopback\",module=\"loopback_tcp\"")
            && b.contains("pathprobe_probe_success{target=\"loopback\",module=\"loopback_udp\"")
    });
    for line in body
        .lines()
        .filter(|l| l.starts_with("pathprobe_probe_success{"))
    {
        assert!(line.ends_with(" 1"), "{line}");
    }
}

#[test]
fn sighup_with_a_broken_file_keeps_running_and_sigterm_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pathprobe.yml");
    std::fs::write(&path, "responder: {listen: \"127.0.0.1:0\"}\nmodules: {lo: {kind: loopback_tcp, duration: 200ms}}\ntargets: [{modules: [lo]}]\n").unwrap();
    let mut serve = Serve::start(&path);
    serve.wait_for(Duration::from_secs(30), "first probe", |b| {
        b.contains("pathprobe_probe_success{target=\"loopback\"")
    });

    std::fs::write(&path, "modules: [not, a, map]\n").unwrap();
    serve.signal(libc::SIGHUP);
    let body = serve.wait_for(Duration::from_secs(10), "failed reload", |b| {
        b.contains("pathprobe_config_last_reload_successful 0")
    });
    assert!(
        body.contains("pathprobe_probe_success{target=\"loopback\""),
        "old config gone"
    );

    serve.signal(libc::SIGTERM);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = serve.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "serve did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(
        std::net::TcpStream::connect_timeout(&serve.http, Duration::from_secs(1)).is_err(),
        "HTTP listener still open"
    );
}

/// Waits up to 10 s for `serve` to exit after SIGTERM, and for success.
fn stop(mut serve: Serve) {
    serve.signal(libc::SIGTERM);
    let start = Instant::now();
    loop {
        if let Some(s) = serve.child.try_wait().unwrap() {
            assert!(s.success(), "{s:?}");
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "serve did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The timestamps of every sample in `/api/v1/history`.
fn history_times(serve: &Serve) -> Vec<f64> {
    let (status, body) = serve.get("/api/v1/history");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|j| j["samples"].as_array().unwrap().iter())
        .map(|s| s["timestamp_seconds"].as_f64().unwrap())
        .collect()
}

#[test]
fn history_outlives_a_restart_in_the_state_directory_without_any_config() {
    // What systemd's StateDirectory= (the shipped unit) and the image give:
    // $STATE_DIRECTORY, and no web.history_file in the config.
    let state = tempfile::tempdir().unwrap();
    let yaml = "responder: {listen: \"127.0.0.1:0\"}\nmodules: {lo: {kind: loopback_tcp, duration: 200ms}}\ntargets: [{modules: [lo]}]\n";
    let start = || {
        Serve::yaml(yaml)
            .env("STATE_DIRECTORY", state.path())
            .start()
    };
    let serve = start();
    serve.wait_for(Duration::from_secs(30), "first probe", |b| {
        b.contains("pathprobe_probe_success{target=\"loopback\"")
    });
    // No file yet: nothing was read back, and the log does not say it was.
    assert!(
        serve.log().contains("no history file yet"),
        "{}",
        serve.log()
    );
    assert!(
        !serve.log().contains("history read back"),
        "{}",
        serve.log()
    );
    let before = history_times(&serve);
    assert!(!before.is_empty());
    stop(serve);
    let file = state.path().join("history.json");
    assert!(file.exists(), "no {}", file.display());

    let serve = start();
    let after = history_times(&serve);
    for t in &before {
        assert!(
            after.contains(t),
            "sample at {t} lost in the restart: {after:?}"
        );
    }
    assert!(serve.log().contains("history read back"), "{}", serve.log());
    stop(serve);

    // Without a state directory, nothing is written and the log says so.
    let memory = Serve::yaml(yaml).start();
    assert!(
        memory.log().contains("history kept in memory only"),
        "{}",
        memory.log()
    );
    stop(memory);
}

#[test]
fn check_config_reports_the_error_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yml");
    std::fs::write(&good, pathprobe::config::DEFAULT_CONFIG).unwrap();
    let out = bin()
        .args(["check-config", good.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(": OK ("));

    // The shipped examples are valid.
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/config/examples")).unwrap()
    {
        let path = entry.unwrap().path();
        let out = bin().arg("check-config").arg(&path).output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The mesh example states its cost, and can keep its interval.
    let mesh = concat!(env!("CARGO_MANIFEST_DIR"), "/config/examples/mesh.yml");
    let out = bin().args(["check-config", mesh]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("mesh schedule: 10 hosts, 2 modules: a cycle of 36 slots of 17 s (one every 50 s) = 30.0 min; each host in tests 34% of the time"),
        "{said}"
    );
    assert!(!said.contains("warning"), "{said}");

    // Issue 27: its adaptive variant, a file that differs only in its
    // modules, needs a cycle at least 3 times shorter at the same budget,
    // as each check-config states it.
    let needed = |file: &str| -> f64 {
        let path = format!("{}/config/examples/{file}", env!("CARGO_MANIFEST_DIR"));
        let out = bin().args(["check-config", &path]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        let at = "at scheduler.mesh.budget of 50% the plan needs a cycle of only ";
        let line = said
            .lines()
            .find(|l| l.contains(at))
            .unwrap_or_else(|| panic!("{file}: {said}"));
        println!("{file}: {line}");
        let rest = &line[line.find(at).unwrap() + at.len()..];
        rest.split(" min").next().unwrap().parse().unwrap()
    };
    let (fixed, adaptive) = (needed("mesh.yml"), needed("mesh-adaptive.yml"));
    println!(
        "cycle at the same budget: {fixed} min fixed, {adaptive} min adaptive: {:.2}x",
        fixed / adaptive
    );
    assert_eq!((fixed, adaptive), (20.4, 6.0));
    assert!(fixed / adaptive >= 3.0, "{fixed} / {adaptive}");

    let bad = dir.path().join("bad.yml");
    std::fs::write(&bad, "modules:\n  tcp:\n    kind: tcp\n    durations: 5s\n").unwrap();
    let out = bin()
        .args(["check-config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yml:4:5")
            && err.contains("unknown key `durations`: did you mean `duration`?"),
        "{err}"
    );
}

#[test]
fn check_config_states_the_cost_and_coverage_of_a_grouped_mesh() {
    // The shipped rack example: 4 racks of 6, grouped by rack.
    let racks = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/examples/mesh_racks.yml"
    );
    let out = bin().args(["check-config", racks]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(
            "mesh schedule, grouped by rack: 24 hosts in 4 groups (largest 6), 1 module: \
             a cycle of 10 + 6 slots of 11 s (one every 30 s) = 8.0 min; every pair inside a group \
             and every pair of groups once per cycle, each host to each other group once every \
             6 cycles (48.0 min) at most; each host in tests 25% of the time on average, at most \
             37% (a representative of the largest group); a full mesh would need a cycle of 16.9 min"
        ),
        "{said}"
    );
    // No warning, and every host labelled (check-config, on no host of
    // the file, notes that it follows the plain schedule here).
    assert!(
        !said.contains("warning") && !said.contains("without a rack label"),
        "{said}"
    );

    // A small file: two racks of two and a host without the label, with
    // an interval the groups cannot keep.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.yml");
    std::fs::write(
        &path,
        "modules: {tcp: {kind: tcp, duration: 5s}}\n\
         scheduler: {default_interval: 1m, mesh: {group_by: site}}\n\
         discovery: {mesh: true}\n\
         targets:\n\
         \x20 - {address: 192.0.2.1, modules: [tcp], labels: {site: x}}\n\
         \x20 - {address: 192.0.2.2, modules: [tcp], labels: {site: x}}\n\
         \x20 - {address: 192.0.2.3, modules: [tcp], labels: {site: y}}\n\
         \x20 - {address: 192.0.2.4, modules: [tcp], labels: {site: y}}\n\
         \x20 - {address: 192.0.2.5, modules: [tcp]}\n",
    )
    .unwrap();
    let out = bin().arg("check-config").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    // (Whether this machine holds one of the addresses is not the point.)
    let lines: Vec<&str> = said
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("note: none of the members"))
        // The series this host exports are another sentence's subject
        // (series_budget and the cli tests check it).
        .filter(|l| !l.starts_with("metrics.detail:"))
        // So are the bytes it moves (the byte budget's tests check them).
        .filter(|l| !l.starts_with("bytes:"))
        .collect();
    // Slots of 5 + 4 + 1 s; 2 × 1 inside (groups of 2 and 1), 2 × 3
    // between (3 groups): 8 slots at half budget = 160 s.
    assert_eq!(
        lines,
        [
            "mesh schedule, grouped by site: 5 hosts in 3 groups (largest 2), 1 module: \
             a cycle of 2 + 6 slots of 10 s (one every 20 s) = 2.7 min; every pair inside a group \
             and every pair of groups once per cycle, each host to each other group once every \
             2 cycles (5.3 min) at most; each host in tests 25% of the time on average, at most \
             38% (a representative of the largest group); a full mesh would need a cycle of 3.3 min",
            "note: hosts without a site label form one group of their own: 1 of 5",
            "warning: the interval of 60 s is shorter than the mesh cycle of 160 s that 5 hosts \
             need at a budget of 50%; the service probes every pair once per cycle",
        ],
        "{said}"
    );

    // A label name Prometheus would refuse is refused here.
    std::fs::write(
        &path,
        "modules: {tcp: {kind: tcp}}\nscheduler: {mesh: {group_by: rack-id}}\n",
    )
    .unwrap();
    let out = bin().arg("check-config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("scheduler.mesh.group_by") && err.contains("is not a valid label name"),
        "{err}"
    );
}
