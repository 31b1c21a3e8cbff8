//! benches/compare.sh: it finds the binary where cargo says it is, fails
//! with a sentence rather than a Python traceback, and leaves no server
//! running. cargo and iperf3 are stand-ins; pathprobe is real.

use super::*;

struct Stubs {
    dir: tempfile::TempDir,
}

impl Stubs {
    /// A copy of the script in a tree with no `target/`, and stand-ins for
    /// cargo (reporting `executable`) and iperf3 (a server that stays until
    /// killed).
    fn new(executable: &str) -> Stubs {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(dir.path().join("benches")).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(
            repo().join("benches/compare.sh"),
            dir.path().join("benches/compare.sh"),
        )
        .unwrap();
        let pidfile = dir.path().join("iperf3.pid");
        let stub = |name: &str, body: String| {
            let p = bin.join(name);
            std::fs::write(&p, format!("#!/usr/bin/env bash\n{body}\n")).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        stub(
            "cargo",
            format!(
                "echo '{{\"reason\":\"compiler-artifact\",\"target\":{{\"name\":\"pathprobe\"}},\"executable\":\"{executable}\"}}'\necho '{{\"reason\":\"build-finished\",\"success\":true}}'"
            ),
        );
        // Like the real one: -s serves until killed; the client prints
        // its -J report.
        stub(
            "iperf3",
            format!(
                r#"case " $* " in
  *" --version "*) echo "iperf 3.12 (cJSON 1.7.15)";;
  *" -s "*) echo $$ > {p}; exec sleep 60;;
  *" -u "*) echo '{{"end":{{"sum":{{"bytes":125000000,"lost_percent":1,"seconds":1}}}}}}';;
  *) echo '{{"end":{{"sum_sent":{{"bits_per_second":1e9,"bytes":125000000}},"sum_received":{{"bits_per_second":1e9,"bytes":125000000}}}}}}';;
esac"#,
                p = pidfile.display()
            ),
        );
        Stubs { dir }
    }

    fn run(&self) -> Output {
        let path = format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        run_bounded(
            Command::new("bash")
                .arg(self.dir.path().join("benches/compare.sh"))
                .arg("1")
                .env("PATH", path)
                .env("ROUNDS", "1")
                // Loopback only: the stand-ins have no namespaces to run in.
                .env("VETH", "0")
                // Ports of their own, clear of other tests' servers.
                .env("PORT", "26301"),
            Duration::from_secs(120),
        )
    }

    fn iperf3_server_alive(&self) -> Option<bool> {
        let pid: i32 = std::fs::read_to_string(self.dir.path().join("iperf3.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        if alive {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        Some(alive)
    }
}

#[test]
fn compare_script_uses_cargos_binary_and_stops_its_servers() {
    let stubs = Stubs::new(BIN);
    let out = stubs.run();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Every test's pathprobe row has a figure, and a ratio to the stand-in.
    assert_eq!(
        stdout.matches("ratio pathprobe/iperf3 3.12: ").count(),
        // UDP unpaced, at 5 and at 20 Gbit/s; TCP 1 and 4 streams, and -R.
        6,
        "{stdout}"
    );
    // The stock client against the responder and against iperf3 -s.
    assert_eq!(
        stdout
            .matches("ratio pathprobe-responder/iperf3-s TCP ")
            .count(),
        2,
        "{stdout}"
    );
    assert!(!stdout.contains("(failed)"), "{stdout}");
    assert_eq!(
        stubs.iperf3_server_alive(),
        Some(false),
        "iperf3 -s outlived the script"
    );
}

#[test]
fn compare_script_says_where_the_binary_is_missing_without_a_traceback() {
    let stubs = Stubs::new("/nonexistent/release/pathprobe");
    let out = stubs.run();
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(!stderr.contains("Traceback"), "{stderr}");
    assert!(
        stderr.contains(
            "compare.sh: cargo reported /nonexistent/release/pathprobe, which is not an executable"
        ),
        "{stderr}"
    );
}
