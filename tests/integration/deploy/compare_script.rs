//! benches/compare.sh: it finds the binary where cargo says it is, fails
//! with a sentence rather than a Python traceback, and leaves no server
//! running. cargo, iperf3 and nuttcp are stand-ins; pathprobe is real.

use super::*;

struct Stubs {
    dir: tempfile::TempDir,
}

impl Stubs {
    /// A copy of the script in a tree with no `target/`, and stand-ins for
    /// cargo (reporting `executable`), iperf3 and a forking nuttcp.
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
        let pidfile = dir.path().join("nuttcp.pid");
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
        stub(
            "iperf3",
            r#"case " $* " in
  *" -s "*) exec python3 -c "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', 15201)); s.listen(); time.sleep(60)";;
  *" -u "*) echo '{"end":{"sum":{"packets":1000,"lost_percent":1,"seconds":1},"cpu_utilization_percent":{"host_total":50}}}';;
  *) echo '{"end":{"sum_received":{"bits_per_second":1e9}}}';;
esac"#
                .to_string(),
        );
        // Like the real one: -S forks a daemon and returns, unless --nofork.
        stub(
            "nuttcp",
            format!(
                r#"case " $* " in
  *" --nofork "*) echo $$ > {p}; exec sleep 60;;
  *" -S "*) sleep 60 & echo $! > {p}; exit 0;;
  *) echo "rate_Mbps=1000.0";;
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
                .env("ROUNDS", "1"),
            Duration::from_secs(120),
        )
    }

    fn nuttcp_alive(&self) -> Option<bool> {
        let pid: i32 = std::fs::read_to_string(self.dir.path().join("nuttcp.pid"))
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
    assert!(stdout.contains("ratio pathprobe/iperf3"), "{stdout}");
    assert!(stdout.contains("ratio pathprobe/nuttcp"), "{stdout}");
    assert_eq!(
        stubs.nuttcp_alive(),
        Some(false),
        "nuttcp -S outlived the script"
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
