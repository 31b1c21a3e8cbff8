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

/// A small tmpfs mounted for a test, unmounted when dropped: a disk that
/// fills up for real.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount");
        assert!(out.status.success(), "mount: {out:?}");
        Tmpfs(dir)
    }

    fn path(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

/// Fills the file system holding `dir` to the last byte with `dir/filler`.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write as _;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0xa5u8; 4096];
    while f.write_all(&block).is_ok() {}
    // The last few bytes a whole block did not fit in.
    while f.write_all(&block[..1]).is_ok() {}
    path
}

/// A history of `jobs` paths ((loopback, lo) the first) of `entries`
/// probes each over the last `span` seconds, as serve would have written
/// it.
fn write_history(path: &std::path::Path, jobs: usize, entries: usize, span: f64) {
    use pathprobe::service::history::{History, Point, Retention};
    let h = History::new(Retention::default());
    let now = std::time::SystemTime::now();
    let t0 = now
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - span;
    for j in 0..jobs {
        let key = if j == 0 {
            pathprobe::metrics::ProbeKey::new("loopback", "lo")
        } else {
            pathprobe::metrics::ProbeKey::new(format!("peer-{j}.example.net"), "tcp")
        };
        for i in 0..entries {
            let t = t0 + i as f64 * span / entries as f64;
            let mut p = Point::new(t, pathprobe::probe::Direction::Send);
            p.throughput = 9.41e8 + i as f64;
            p.send = p.throughput;
            p.retransmits = 3.0;
            p.rtt = 0.000_412;
            p.local_cpu = 0.31;
            p.remote_cpu = 0.27;
            p.local_kernel = Some("6.1.0-13-amd64".into());
            p.remote_kernel = Some("6.12.0-1-amd64".into());
            h.record_point(&key, "loopback_tcp", p, now);
        }
    }
    h.save(path, now).unwrap();
}

/// `pathprobe_history_saves_total{result}`; 0 when absent.
fn saves(body: &str, result: &str) -> u64 {
    let label = format!("result=\"{result}\"");
    crate::common::metrics::sample(body, "pathprobe_history_saves_total", &[&label]).unwrap_or(0.0)
        as u64
}

#[test]
fn history_save_on_a_full_disk_keeps_the_old_file_warns_counts_and_resumes() {
    if !crate::common::lab::require_root() {
        return;
    }
    let disk = Tmpfs::mount("1m");
    let file = disk.path().join("history.json");
    // A history big enough that a save needs more than the space left.
    write_history(&file, 1, 200, 7000.0);
    let yaml = format!(
        "responder: {{listen: \"127.0.0.1:0\"}}\nweb: {{history_file: {:?}, history_save_interval: 1s}}\nmodules: {{lo: {{kind: loopback_tcp, duration: 200ms}}}}\ntargets: [{{modules: [lo]}}]\n",
        file.display().to_string()
    );
    let serve = Serve::yaml(&yaml).start();
    let body = serve.wait_for(Duration::from_secs(30), "a saved history", |b| {
        saves(b, "success") >= 1
    });
    // Both series exist from the start.
    assert!(
        body.contains("pathprobe_history_saves_total{result=\"failure\"} 0"),
        "{body}"
    );
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size > 16 << 10, "history only {size} bytes");

    // The disk fills up, leaving 8 KiB: a save starts and cannot finish.
    let filler = fill(disk.path());
    let full = std::fs::metadata(&filler).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(full - (8 << 10))
        .unwrap();
    let body = serve.wait_for(Duration::from_secs(20), "failed saves", |b| {
        saves(b, "failure") >= 2
    });
    let kept = std::fs::read(&file).unwrap();
    let failed = saves(&body, "failure");
    serve.wait_for(Duration::from_secs(20), "another failed save", |b| {
        saves(b, "failure") > failed
    });
    // Not one byte of the old file changed, and it is a whole history.
    assert_eq!(std::fs::read(&file).unwrap(), kept, "the old file changed");
    let v: serde_json::Value = serde_json::from_slice(&kept).expect("the kept file is valid JSON");
    assert_eq!(v["format"], "pathprobe-history");
    assert!(v["jobs"][0]["samples"].as_array().unwrap().len() >= 200);
    // No half-written temporary file is left taking the space.
    let names: Vec<String> = std::fs::read_dir(disk.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| n == "history.json" || n == "filler"),
        "{names:?}"
    );
    let log = serve.log();
    assert!(
        log.lines()
            .any(|l| l.contains("level=warn") && l.contains("saving the history failed")),
        "no warning:\n{log}"
    );

    // Space comes back: saving resumes by itself, and says so.
    std::fs::remove_file(&filler).unwrap();
    let ok = saves(&serve.metrics(), "success");
    serve.wait_for(
        Duration::from_secs(20),
        "a save after space came back",
        |b| saves(b, "success") > ok,
    );
    let back: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(back["saved_at_seconds"].as_f64() > v["saved_at_seconds"].as_f64());
    assert!(
        serve.log().contains("history saved again"),
        "{}",
        serve.log()
    );
    stop(serve);
    // What was saved last reads back whole.
    let again = Serve::yaml(&yaml).start();
    assert!(again.log().contains("history read back"), "{}", again.log());
    stop(again);
}

/// Peak resident memory of a process, KiB.
fn peak_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_large_history_reads_back_within_twice_its_size_and_an_oversized_one_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("history.json");
    // Hundreds of paths with a full day each: tens of MB, as a big mesh
    // host writes.
    write_history(&file, 400, 1440, 86_000.0);
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size > 20 << 20, "only {size} bytes");
    let yaml = format!(
        "responder: {{listen: \"127.0.0.1:0\"}}\nweb: {{history_file: {:?}}}\nmodules: {{lo: {{kind: loopback_tcp, duration: 200ms}}}}\ntargets: [{{modules: [lo]}}]\n",
        file.display().to_string()
    );
    // The same service with no history file: what serve needs anyway.
    let empty = Serve::yaml(&yaml.replace(&file.display().to_string(), "")).start();
    let base = peak_kib(empty.child.id());
    stop(empty);
    let serve = Serve::yaml(&yaml).start();
    assert!(serve.log().contains("history read back"), "{}", serve.log());
    let peak = peak_kib(serve.child.id());
    let over = (peak.saturating_sub(base)) << 10;
    println!("history file {size} bytes; serve's peak RSS {peak} KiB, {base} KiB without it: {over} bytes for the history");
    assert!(over < 2 * size, "{over} bytes for a {size}-byte file");
    stop(serve);

    // A file over the limit is refused from its size, before it is read:
    // sparse, so reading it would take seconds and the memory would show.
    let huge = dir.path().join("huge.json");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(600 << 20)
        .unwrap();
    let serve =
        Serve::yaml(&yaml.replace(&file.display().to_string(), &huge.display().to_string()))
            .start();
    let log = serve.log();
    assert!(log.contains("629145600 bytes, over the"), "{log}");
    let peak = peak_kib(serve.child.id());
    assert!(peak < base + (64 << 10), "{peak} KiB peak reading nothing");
    stop(serve);
}
