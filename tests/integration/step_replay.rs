//! Issue 24's last "done means": no false step on a healthy path over at
//! least 24 hours of real noisy probes. This module *records* that day in
//! the lab (`record_healthy_day`, ignored: it takes about 20 minutes and
//! needs root); the replays that run in CI read the committed fixture,
//! tests/fixtures/step/healthy_day.csv: through serve's own step path in
//! `pathprobe::metrics` (src/metrics/tests.rs,
//! `a_recorded_healthy_day_finds_no_step`) and through the shipped alert
//! rules with promtool (rules.rs, `a_recorded_healthy_day_fires_no_alert`).
//!
//! The path is the a–r–b lab with tbf on r, b's responder sending to a
//! (`probe -R`), and cross traffic that comes and goes at random: UDP at a
//! random rate towards a (sharing the probe's bottleneck) or towards b
//! (queueing its ACKs), drawn afresh for every probe, so that consecutive
//! probes see different loads, as a busy host's minutes do (see
//! `Cross::draw`; a load that holds for 5 probes is a level, which the
//! detector is there to find).
//! Probes run back to back (0.5 s each); the fixture gives them 1-minute
//! times, the shipped `scheduler.default_interval`, so 1,440 of them are
//! a day. The lab is taken down and up again every [`CHUNK`] probes, so
//! that the lab lock other processes wait for (at most 10 minutes) is
//! never held for the whole recording.
//!
//! Regenerate with
//! `cargo test --release --test integration step_replay::record_healthy_day -- --ignored --nocapture`
//! (PATHPROBE_RECORD_PROBES and PATHPROBE_RECORD_OUT shorten the run and
//! write elsewhere, for a try).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::lab::{require_root, run_bounded, wait_bounded, Lab, UdpFiller};

const PORT: u16 = 5310;
/// r's tbf, Mbit/s.
const RATE_MBIT: u32 = 200;
/// A day of 1-minute probes.
const PROBES: usize = 1440;
/// Probes per lab session.
const CHUNK: usize = 240;
/// Each probe's measured time.
const PROBE_SECONDS: &str = "0.5";

/// A small deterministic generator (xorshift); its seed is in the header.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The cross traffic during one probe: none, or UDP at `mbit` × 1.5
/// (`UdpFiller`'s factor) towards a (`to_a`) or towards b.
#[derive(Clone, Copy, PartialEq)]
struct Cross {
    mbit: u64,
    to_a: bool,
}

impl Cross {
    /// Off two times in five; else UDP at 10–100 Mbit/s on the wire
    /// (half of the draws) or 100–180 (one in ten: a heavy minute), towards
    /// a (the probe's bottleneck) seven times in ten, else towards b.
    fn draw(rng: &mut Rng) -> Cross {
        let u = rng.next();
        let wire = if u < 0.4 {
            return Cross {
                mbit: 0,
                to_a: false,
            };
        } else if u < 0.9 {
            10.0 + rng.next() * 90.0
        } else {
            100.0 + rng.next() * 80.0
        };
        Cross {
            // UdpFiller sends 1.5 times the rate it is given.
            mbit: (wire / 1.5).round().max(1.0) as u64,
            to_a: rng.next() < 0.7,
        }
    }
    fn column(&self) -> String {
        match (self.mbit, self.to_a) {
            (0, _) => "0".into(),
            (m, true) => format!("{}>a", m * 3 / 2),
            (m, false) => format!("{}>b", m * 3 / 2),
        }
    }
}

/// `pathprobe respond` in b; killed when dropped.
struct Responder(Child);

impl Responder {
    fn start(lab: &Lab) -> Responder {
        let child = lab
            .exec("b", env!("CARGO_BIN_EXE_pathprobe"))
            // Probes back to back are about 80 a minute: lift the
            // per-client allowances a real minute's one probe never meets.
            .args([
                "respond",
                "--port",
                &PORT.to_string(),
                "--max-tests-per-client-per-minute",
                "0",
                "--max-test-seconds-per-client-per-hour",
                "0",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning the responder");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !lab.listening("b", PORT).unwrap() {
            assert!(Instant::now() < deadline, "responder not listening");
            thread::sleep(Duration::from_millis(20));
        }
        Responder(child)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = wait_bounded(&mut self.0, Duration::from_secs(5));
    }
}

/// A fingerprint as one header line: `key=value` joined by `|`.
fn fingerprint_line(v: &serde_json::Value) -> String {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join("|")
        })
        .unwrap_or_default()
}

/// One probe's row, or why it failed.
fn probe(lab: &Lab) -> Result<(String, String, String), String> {
    let target = format!("{}:{PORT}", lab.addr_b());
    let out = run_bounded(
        lab.exec("a", env!("CARGO_BIN_EXE_pathprobe")).args([
            "probe",
            "-R",
            "-t",
            PROBE_SECONDS,
            "-J",
            &target,
        ]),
        Duration::from_secs(20),
    )
    .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{}{}", out.stdout, out.stderr));
    }
    let j: serde_json::Value = serde_json::from_str(&out.stdout).map_err(|e| e.to_string())?;
    let d = &j["directions"][0];
    let tcp = &d["tcp"];
    let row = format!(
        "{},{},{},{},{}",
        j["kind"].as_str().unwrap_or("?"),
        j["direction"].as_str().unwrap_or("?"),
        j["throughput_bits_per_second"]
            .as_f64()
            .unwrap_or(f64::NAN)
            .round(),
        tcp["retransmits"].as_u64().unwrap_or(0),
        tcp["rtt_seconds"].as_f64().unwrap_or(f64::NAN),
    );
    let verdict = d["diagnosis"]["limit"].as_str().unwrap_or("").to_string();
    Ok((
        format!("{row},{verdict}"),
        fingerprint_line(&j["local"]["fingerprint"]),
        fingerprint_line(&j["remote"]["fingerprint"]),
    ))
}

#[test]
#[ignore = "records tests/fixtures/step/healthy_day.csv: ~20 minutes in the lab"]
fn record_healthy_day() {
    if !require_root() {
        return;
    }
    let probes: usize = std::env::var("PATHPROBE_RECORD_PROBES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(PROBES);
    let out_path = std::env::var("PATHPROBE_RECORD_OUT").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/step/healthy_day.csv"
        )
        .to_string()
    });
    let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let seed = started.as_nanos() as u64 | 1;
    let mut rng = Rng(seed);
    let mut rows = Vec::with_capacity(probes);
    // Fingerprints seen, in order of first sight: rows name them by index.
    let mut fingerprints: Vec<String> = Vec::new();
    let index = |f: String, fps: &mut Vec<String>| match fps.iter().position(|x| *x == f) {
        Some(i) => i,
        None => {
            fps.push(f);
            fps.len() - 1
        }
    };
    let mut failures = 0usize;
    let t0 = Instant::now();
    while rows.len() < probes {
        let lab = Lab::up("pp10rec").unwrap();
        lab.shape(RATE_MBIT).unwrap();
        let _responder = Responder::start(&lab);
        let mut cross = Cross::draw(&mut rng);
        let mut filler: Option<UdpFiller> = None;
        let chunk_end = (rows.len() + CHUNK).min(probes);
        while rows.len() < chunk_end {
            // Each probe its own load, drawn afresh: minute-to-minute
            // noise, not a level that holds for the detector's 5 probes.
            let next = Cross::draw(&mut rng);
            if next != cross || filler.is_none() {
                cross = next;
                filler = None;
            }
            if filler.is_none() && cross.mbit > 0 {
                filler = Some(UdpFiller::start(
                    &lab,
                    !cross.to_a,
                    cross.mbit,
                    Duration::from_secs(120),
                ));
            }
            match probe(&lab) {
                Ok((row, local, remote)) => {
                    let l = index(local, &mut fingerprints);
                    let r = index(remote, &mut fingerprints);
                    rows.push(format!("{},{row},{l},{r},{}", rows.len(), cross.column()));
                    if rows.len() % 60 == 0 {
                        eprintln!("{} probes in {:?}", rows.len(), t0.elapsed());
                    }
                }
                Err(e) => {
                    // A failed probe is the failure alerts' business and
                    // the detector skips it: count it, do not record it.
                    failures += 1;
                    eprintln!("probe failed: {e}");
                    assert!(failures <= probes / 20, "too many failed probes");
                }
            }
        }
        drop(filler);
        drop(lab);
        // Let another process's waiting lab test have the lock.
        thread::sleep(Duration::from_secs(3));
    }
    let uname = run_bounded(
        std::process::Command::new("uname").arg("-r"),
        Duration::from_secs(5),
    )
    .map(|o| o.stdout.trim().to_string())
    .unwrap_or_default();
    let mut text = String::new();
    let when = started.as_secs();
    let _ = writeln!(
        text,
        "# A healthy but noisy day of real probes (issue 24), recorded by\n\
         # tests/integration/step_replay.rs record_healthy_day at unix time {when}\n\
         # in {:.0} s on kernel {uname}: the a-r-b lab, tbf {RATE_MBIT} Mbit/s on r,\n\
         # `pathprobe probe -R -t {PROBE_SECONDS}` from a (b's responder sends), back to back;\n\
         # cross traffic drawn afresh for every probe (xorshift seed {seed}): off 2 in 5,\n\
         # else UDP at 10-100 Mbit/s (1 in 2) or 100-180 (1 in 10) towards a (7 in 10) or b.\n\
         # {failures} probes failed and are not recorded. minute is the probe's index:\n\
         # replays give it the shipped 1-minute interval. fp_local and fp_remote name\n\
         # the `# fingerprint N` lines below (each end's fingerprint, as exchanged).\n\
         # cross is the cross traffic during the probe, Mbit/s on the wire and its way.",
        t0.elapsed().as_secs_f64()
    );
    for (i, f) in fingerprints.iter().enumerate() {
        let _ = writeln!(text, "# fingerprint {i} {f}");
    }
    text.push_str(
        "minute,kind,direction,throughput_bits_per_second,retransmits,rtt_seconds,verdict,fp_local,fp_remote,cross\n",
    );
    for r in &rows {
        text.push_str(r);
        text.push('\n');
    }
    if let Some(dir) = std::path::Path::new(&out_path).parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(&out_path, text).unwrap();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for r in &rows {
        *kinds
            .entry(r.split(',').nth(6).unwrap_or("").to_string())
            .or_default() += 1;
    }
    eprintln!(
        "wrote {} probes ({failures} failed) to {out_path} in {:?}; verdicts {kinds:?}",
        rows.len(),
        t0.elapsed()
    );
}
