//! Attacks by hostile peers (issue 8), each asserting the bound that
//! pathprobe must hold under it. A: a lying responder or a relay in the
//! middle must not crash, hang or fool the prober. B: hostile clients must
//! not lock real probers out of a responder, crash it, or cost it without
//! bound. Every test ends within a bound against a broken build too:
//! victims that may blow up run as child processes under RLIMIT_AS (and,
//! for the descriptor attacks, RLIMIT_NOFILE 1024), every wait has a
//! timeout, and attack loops are capped in count and time.
//!
//! Addresses: only loopback. Real probes come from 127.0.0.1, attackers
//! from 127.0.0.2, clients outside an allow list from 127.0.0.3.
//! The figures each test observed are printed (`--nocapture`).

mod fake;
mod iperf3;
mod many;
mod relay;
mod round3;
mod round4;
mod util;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use pathprobe::auth::{Nonce, Secret};
use pathprobe::control::{read_message, write_message};
use pathprobe::probe::{self, Direction, ProbeSpec, Target};
use pathprobe::protocol::message::{Hello, HelloAuth};
use pathprobe::protocol::{encode_frame, Message, TestRequest};
use pathprobe::responder::access::AccessList;
use pathprobe::responder::ResponderConfig;

use crate::common::serve::{Limits as ServeLimits, Serve};
use crate::common::turn;
use fake::Fake;
use relay::{walk_objects, Dir, Relay, Rule};
use util::*;

// ---------------------------------------------------------------------------
// A1. The prober refuses an Accepted that asks for more than it requested.
// ---------------------------------------------------------------------------

/// Set in the environment of a re-run of this test binary that plays the
/// prober: its value is the fake's address.
const CHILD_ENV: &str = "PATHPROBE_HOSTILE_PROBER_AT";
const CHILD_MARK: &str = "HOSTILE-PROBER-RESULT ";

fn a1_spec() -> ProbeSpec {
    short_probe(0.5, PROBER_IP)
}

/// The prober's half of an A1 case, in the child: one `probe()` against
/// the fake, with its outcome, time and growth of peak RSS on stdout.
fn a1_child(addr: &str, spec: ProbeSpec) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let target = Target::parse(addr, 0).unwrap();
    let hwm_before = status_kib("self", "VmHWM:").unwrap_or(0);
    let t0 = Instant::now();
    let r = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), probe::probe(&target, &spec)).await
    });
    let elapsed = t0.elapsed().as_secs_f64();
    let growth_kib = status_kib("self", "VmHWM:")
        .unwrap_or(0)
        .saturating_sub(hwm_before);
    let doc = match r {
        Ok(Ok(result)) => json!({"outcome": "ok", "elapsed": elapsed, "growth_kib": growth_kib,
            "bits_per_second": result.throughput_bits_per_second, "streams": result.streams.len()}),
        Ok(Err(e)) => json!({"outcome": "err", "reason": e.reason(), "message": e.to_string(),
            "elapsed": elapsed, "growth_kib": growth_kib}),
        Err(_) => json!({"outcome": "hung", "elapsed": elapsed, "growth_kib": growth_kib}),
    };
    // On a line of its own: libtest has printed "test NAME ... " already.
    println!("\n{CHILD_MARK}{doc}");
}

/// One A1 case: `test` is the calling test's name (the child re-runs it),
/// `spec` what the prober asks, `lie` how the fake rewrites the request in
/// its `Accepted`.
fn a1_case(test: &str, what: &str, spec: fn() -> ProbeSpec, lie: fn(&mut Value)) {
    if let Ok(addr) = std::env::var(CHILD_ENV) {
        a1_child(&addr, spec());
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The honest fake first: the case then shows the lie is what fails.
    let honest = rt.block_on(async {
        let f = Fake::honest().await;
        probe::probe(&Target::from_addr(f.addr), &spec()).await
    });
    assert!(honest.is_ok(), "the honest fake failed: {honest:?}");
    let fake = rt.block_on(Fake::accepting(move |r| {
        let mut r = r.clone();
        lie(&mut r);
        r
    }));
    let (out, status) = run_child(test, &fake.addr.to_string(), Duration::from_secs(12));
    drop(fake);
    let line = out
        .lines()
        .find_map(|l| l.split_once(CHILD_MARK).map(|(_, doc)| doc))
        .map(|l| serde_json::from_str::<Value>(l).unwrap());
    let Some(doc) = line else {
        let tail: String = out
            .lines()
            .filter(|l| {
                l.contains("panicked") || l.contains("memory allocation") || l.contains("overflow")
            })
            .collect::<Vec<_>>()
            .join(" | ");
        eprintln!("A1 {what}: the prober never answered: {status} {tail}");
        panic!("A1 {what}: the prober died or hung instead of refusing ({status}): {tail}");
    };
    eprintln!("A1 {what}: {doc}");
    assert_eq!(
        doc["outcome"], "err",
        "A1 {what}: the prober took the lie: {doc}"
    );
    assert_eq!(doc["reason"], "protocol_error", "A1 {what}: {doc}");
    assert!(
        doc["elapsed"].as_f64().unwrap() < 3.0,
        "A1 {what}: took too long: {doc}"
    );
    assert!(
        doc["growth_kib"].as_u64().unwrap() < 64 * 1024,
        "A1 {what}: RSS grew: {doc}"
    );
}

/// Re-runs this test binary as the prober of test `test`, with a 2 GiB
/// address-space cap, killed after `limit`. Returns its stdout and stderr
/// and how it ended.
fn run_child(test: &str, addr: &str, limit: Duration) -> (String, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        &format!("hostile::{test}"),
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, addr)
    .stdin(Stdio::null());
    apply_limits(
        &mut cmd,
        Limits {
            nofile: None,
            address_space: Some(2 * GIB),
        },
    );
    let (out, status) = run_bounded(cmd, limit);
    (out, status)
}

/// Runs `cmd` with stdout and stderr captured (together), killing it after
/// `limit`; returns the output and a description of how it ended.
fn run_bounded(mut cmd: Command, limit: Duration) -> (String, String) {
    let (out, status, _) = run_bounded_split(&mut cmd, limit);
    (out, status)
}

/// As [`run_bounded`], with stdout first and stderr after it, and the exit
/// code (None when killed or signalled).
fn run_bounded_split(cmd: &mut Command, limit: Duration) -> (String, String, Option<i32>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let a = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let b = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break Some(st);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = format!("{}\n{}", a.join().unwrap(), b.join().unwrap());
    let desc = match status {
        None => format!("killed after {limit:?}"),
        Some(st) => {
            use std::os::unix::process::ExitStatusExt;
            match st.signal() {
                Some(sig) => format!("killed by signal {sig} after {:?}", start.elapsed()),
                None => format!("exited {st} after {:?}", start.elapsed()),
            }
        }
    };
    (text, desc, status.and_then(|s| s.code()))
}

fn set(r: &mut Value, field: &str, v: Value) {
    r[field] = v;
}

#[test]
fn a1_accepted_with_u32_max_bidir_streams_is_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a1_case(
        "a1_accepted_with_u32_max_bidir_streams_is_refused",
        "streams 4294967295 bidir",
        a1_spec,
        |r| {
            set(r, "streams", json!(u32::MAX));
            set(r, "direction", json!("bidir"));
        },
    );
}

#[test]
fn a1_accepted_with_1_gib_length_is_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a1_case(
        "a1_accepted_with_1_gib_length_is_refused",
        "length 1 GiB, 4 streams",
        || ProbeSpec {
            streams: 4,
            ..a1_spec()
        },
        |r| set(r, "length", json!(1u64 << 30)),
    );
}

#[test]
fn a1_accepted_with_max_omit_is_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a1_case(
        "a1_accepted_with_max_omit_is_refused",
        "omit_ms u64::MAX",
        a1_spec,
        |r| set(r, "omit_ms", json!(u64::MAX)),
    );
}

#[test]
fn a1_accepted_with_longer_duration_is_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a1_case(
        "a1_accepted_with_longer_duration_is_refused",
        "duration 0.5 s -> 5 s",
        a1_spec,
        |r| set(r, "duration_ms", json!(5000)),
    );
}

#[test]
fn a1_accepted_with_higher_bitrate_is_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a1_case(
        "a1_accepted_with_higher_bitrate_is_refused",
        "bitrate 10 Mbit/s -> 10 Gbit/s",
        || ProbeSpec {
            bitrate: Some(10_000_000),
            ..a1_spec()
        },
        |r| set(r, "bitrate", json!(10_000_000_000u64)),
    );
}

#[test]
fn a1_accepted_unpaced_when_a_rate_was_asked_is_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a1_case(
        "a1_accepted_unpaced_when_a_rate_was_asked_is_refused",
        "bitrate 10 Mbit/s -> 0 (unpaced)",
        || ProbeSpec {
            bitrate: Some(10_000_000),
            ..a1_spec()
        },
        |r| set(r, "bitrate", json!(0)),
    );
}

#[test]
fn a1_accepted_with_larger_window_is_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a1_case(
        "a1_accepted_with_larger_window_is_refused",
        "window 128 KiB -> 256 MiB",
        || ProbeSpec {
            window: Some(128 << 10),
            ..a1_spec()
        },
        |r| set(r, "window", json!(256u64 << 20)),
    );
}

#[test]
fn a1_accepted_with_another_kind_is_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a1_case(
        "a1_accepted_with_another_kind_is_refused",
        "kind tcp -> udp",
        a1_spec,
        |r| set(r, "kind", json!("udp")),
    );
}

#[test]
fn a1_accepted_with_another_direction_is_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a1_case(
        "a1_accepted_with_another_direction_is_refused",
        "direction send -> receive",
        a1_spec,
        |r| set(r, "direction", json!("receive")),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a1_accepted_asking_for_less_with_a_clamped_note_is_still_run() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    let (addr, _c, _stop) = responder(ResponderConfig {
        max_streams: 1,
        ..ResponderConfig::default()
    })
    .await;
    let spec = ProbeSpec {
        streams: 2,
        ..short_probe(0.3, PROBER_IP)
    };
    let r = probe::probe(&Target::from_addr(addr), &spec)
        .await
        .expect("a clamped test runs");
    eprintln!(
        "A1 less: {} stream(s), clamped {:?}",
        r.streams.len(),
        r.clamped
    );
    assert!(!r.clamped.is_empty());
    assert_eq!(r.streams.len(), 1);
    assert!(r.bytes > 0);
}

// ---------------------------------------------------------------------------
// A2. The prober refuses absurd Results.
// ---------------------------------------------------------------------------

fn streams_of(v: &mut Value) -> &mut Vec<Value> {
    v["streams"].as_array_mut().expect("results carry streams")
}

/// Runs the honest fake, then the lying one; the lie must be refused as a
/// protocol error.
async fn a2_case(what: &str, lie: fn(Value) -> Value) {
    let spec = short_probe(0.5, PROBER_IP);
    let honest = Fake::honest().await;
    let ok = probe::probe(&Target::from_addr(honest.addr), &spec).await;
    assert!(ok.is_ok(), "the honest fake failed: {ok:?}");
    let ok = ok.unwrap();
    let fake = Fake::reporting(lie).await;
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        probe::probe(&Target::from_addr(fake.addr), &spec),
    )
    .await
    .expect("the prober ended within 10 s");
    match &r {
        Ok(res) => eprintln!(
            "A2 {what}: ACCEPTED: {:.0} bit/s over {} stream(s), {:.3} s (honest run: {:.0} bit/s)",
            res.throughput_bits_per_second,
            res.streams.len(),
            res.duration_seconds,
            ok.throughput_bits_per_second
        ),
        Err(e) => eprintln!("A2 {what}: refused ({}): {e}", e.reason()),
    }
    match r {
        Err(e) => assert_eq!(e.reason(), "protocol_error", "A2 {what}: {e}"),
        Ok(res) => panic!(
            "A2 {what}: the prober reported the forged figures: {:.0} bit/s, {} streams",
            res.throughput_bits_per_second,
            res.streams.len()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2_results_beyond_10_tbit_per_second_are_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a2_case("bytes implying > 10 Tbit/s", |mut v| {
        for s in streams_of(&mut v) {
            // 2 TB in about half a second: 32 Tbit/s.
            s["bytes"] = json!(2_000_000_000_000u64);
        }
        v
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2_results_with_another_stream_count_are_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a2_case("3 streams reported for a 1-stream test", |mut v| {
        let streams = streams_of(&mut v);
        let first = streams[0].clone();
        for id in 1..3 {
            let mut extra = first.clone();
            extra["id"] = json!(id);
            streams.push(extra);
        }
        v
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2_results_with_negative_duration_are_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a2_case("seconds -0.5", |mut v| {
        for s in streams_of(&mut v) {
            s["seconds"] = json!(-0.5);
        }
        v
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2_results_with_negative_cpu_are_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    a2_case("cpu_user -3 s, cpu_system -1 s", |mut v| {
        for s in streams_of(&mut v) {
            s["cpu_user_seconds"] = json!(-3.0);
            s["cpu_system_seconds"] = json!(-1.0);
        }
        v
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2_results_with_non_finite_figures_are_refused() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    // JSON has no NaN or infinity: serde_json writes them as null, and the
    // nearest a peer can send to infinity is 1e308.
    a2_case("seconds null (NaN as JSON writes it)", |mut v| {
        for s in streams_of(&mut v) {
            s["seconds"] = Value::Null;
        }
        v
    })
    .await;
    a2_case("seconds and cpu 1e308", |mut v| {
        for s in streams_of(&mut v) {
            s["seconds"] = json!(1e308);
            s["cpu_system_seconds"] = json!(1e308);
        }
        v
    })
    .await;
}

// ---------------------------------------------------------------------------
// A3. The same lies against `pathprobe serve`'s /probe.
// ---------------------------------------------------------------------------

#[test]
fn a3_lying_target_of_serve_probe_fails_the_probe_not_the_service() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut serve = Serve::yaml(
        "responder: {enabled: false}\nmodules:\n  tcp: {kind: tcp, duration: 500ms, timeout: 6s, connect_timeout: 2s}\n",
    )
    .limits(ServeLimits {
        nofile: None,
        address_space: Some(2 * GIB),
    })
    .start();
    let http = serve.http;
    let results_liar = rt.block_on(Fake::reporting(|mut v| {
        for s in streams_of(&mut v) {
            s["bytes"] = json!(2_000_000_000_000u64);
        }
        v
    }));
    let streams_liar = rt.block_on(Fake::accepting(|r| {
        let mut r = r.clone();
        set(&mut r, "streams", json!(u32::MAX));
        set(&mut r, "direction", json!("bidir"));
        r
    }));
    let mut failures = Vec::new();
    for (what, fake) in [
        ("results of 32 Tbit/s", &results_liar),
        ("Accepted with 4294967295 bidir streams", &streams_liar),
    ] {
        let t0 = Instant::now();
        let reply = http_get(
            http,
            &format!("/probe?target={}&module=tcp", fake.addr),
            Duration::from_secs(15),
        );
        let success = reply
            .as_ref()
            .ok()
            .and_then(|(_, b)| sample(b, "pathprobe_probe_success"));
        // A dying process may still be on its way out.
        std::thread::sleep(Duration::from_millis(500));
        let alive = serve.alive();
        let m0 = Instant::now();
        let metrics = if alive {
            http_get(http, "/metrics", Duration::from_secs(2)).map(|(s, _)| s)
        } else {
            Err("serve is gone".into())
        };
        let status = serve.exit_status();
        eprintln!(
            "A3 {what}: /probe -> {:?} in {:.1} s (pathprobe_probe_success {success:?}); serve alive: {alive} {status:?}; /metrics -> {metrics:?} in {:.2} s",
            reply.as_ref().map(|(s, _)| *s),
            t0.elapsed().as_secs_f64(),
            m0.elapsed().as_secs_f64(),
        );
        if success != Some(0.0) {
            failures.push(format!(
                "{what}: /probe gave success {success:?} ({:?})",
                reply.err()
            ));
        }
        if !alive {
            failures.push(format!(
                "{what}: serve died ({status:?}, 2 GiB address-space cap): {}",
                serve
                    .log()
                    .lines()
                    .filter(|l| l.contains("memory") || l.contains("panicked"))
                    .collect::<Vec<_>>()
                    .join(" | ")
            ));
            break;
        }
        if metrics != Ok(200) {
            failures.push(format!("{what}: /metrics then gave {metrics:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// ---------------------------------------------------------------------------
// A4. With a secret, a relay can neither rewrite nor forge control frames.
// ---------------------------------------------------------------------------

fn secret() -> Secret {
    Secret::new(b"the hostile relay test's shared secret").unwrap()
}

/// Probes a secret-holding responder through a relay applying `rule`:
/// the outcome and how many frames the relay replaced.
async fn through_relay(
    rule: Rule,
    streams: u32,
) -> (Result<probe::ProbeResult, probe::ProbeError>, u64, f64) {
    let (addr, _c, _stop) = responder(ResponderConfig {
        secret: Some(secret()),
        ..ResponderConfig::default()
    })
    .await;
    let spec = ProbeSpec {
        streams,
        secret: Some(secret()),
        ..short_probe(0.5, PROBER_IP)
    };
    // The same test straight to the responder, for the record.
    let direct = probe::probe(&Target::from_addr(addr), &spec)
        .await
        .expect("a direct authenticated probe works")
        .throughput_bits_per_second;
    let relay = Relay::start(addr, rule).await;
    let r = tokio::time::timeout(
        Duration::from_secs(15),
        probe::probe(&Target::from_addr(relay.addr), &spec),
    )
    .await
    .expect("the prober ended within 15 s");
    (r, relay.rewrites.load(Ordering::Relaxed), direct)
}

fn report_a4(
    what: &str,
    r: &Result<probe::ProbeResult, probe::ProbeError>,
    rewrites: u64,
    direct: f64,
) {
    match r {
        Ok(res) => eprintln!(
            "A4 {what}: ACCEPTED {:.0} bit/s over {} stream(s) (direct run {direct:.0} bit/s); {rewrites} frame(s) rewritten",
            res.throughput_bits_per_second,
            res.streams.len()
        ),
        Err(e) => eprintln!(
            "A4 {what}: refused ({}): {e}; {rewrites} frame(s) rewritten",
            e.reason()
        ),
    }
}

fn assert_auth_failed(what: &str, r: Result<probe::ProbeResult, probe::ProbeError>, rewrites: u64) {
    assert!(
        rewrites >= 1,
        "A4 {what}: the relay found nothing to rewrite"
    );
    match r {
        Err(e) => assert_eq!(e.reason(), "auth_failed", "A4 {what}: {e}"),
        Ok(res) => panic!(
            "A4 {what}: the prober accepted a tampered test: {:.0} bit/s",
            res.throughput_bits_per_second
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a4_relay_passing_frames_through_leaves_probes_working() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    let (r, rewrites, direct) = through_relay(Arc::new(|_, _| None), 1).await;
    report_a4("pass-through", &r, rewrites, direct);
    let res = r.expect("a faithful relay changes nothing");
    assert!(res.bytes > 0);
    assert_eq!(rewrites, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a4_relay_rewriting_accepted_streams_is_caught() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    // Fewer streams than asked: a change a prober would take from an
    // honest responder with a clamped note, so only the MAC can catch it.
    let rule: Rule = Arc::new(|dir, v| {
        if dir != Dir::ToProber || v["type"] != "accepted" {
            return None;
        }
        let mut v = v.clone();
        walk_objects(&mut v, &mut |m| {
            if m.contains_key("kind") && m.contains_key("streams") {
                m.insert("streams".into(), json!(1));
            }
        });
        Some(vec![v])
    });
    let (r, rewrites, direct) = through_relay(rule, 2).await;
    report_a4("Accepted streams 2 -> 1", &r, rewrites, direct);
    assert_auth_failed("Accepted streams 2 -> 1", r, rewrites);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a4_relay_inflating_results_is_caught() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    let rule: Rule = Arc::new(|dir, v| {
        if dir != Dir::ToProber || v["type"] != "results" {
            return None;
        }
        let mut v = v.clone();
        walk_objects(&mut v, &mut |m| {
            if let Some(Value::Array(streams)) = m.get_mut("streams") {
                for s in streams {
                    if let Some(b) = s.get("bytes").and_then(Value::as_u64) {
                        s["bytes"] = json!(b.saturating_mul(250));
                    }
                }
            }
        });
        Some(vec![v])
    });
    let (r, rewrites, direct) = through_relay(rule, 1).await;
    report_a4("Results bytes x250", &r, rewrites, direct);
    assert_auth_failed("Results bytes x250", r, rewrites);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a4_relay_forging_ready_is_caught() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    // A forged Ready goes out right after Accepted and the real one is
    // dropped. The forgery carries whatever extra fields (a MAC) the real
    // Accepted had: a MAC cut from one frame must not vouch for another.
    let rule: Rule = Arc::new(|dir, v| {
        if dir != Dir::ToProber {
            return None;
        }
        match v["type"].as_str() {
            Some("accepted") => {
                let mut forged = serde_json::Map::new();
                forged.insert("type".into(), json!("ready"));
                for (k, val) in v.as_object().unwrap() {
                    if !["type", "token", "request", "clamped"].contains(&k.as_str()) {
                        forged.insert(k.clone(), val.clone());
                    }
                }
                Some(vec![v.clone(), Value::Object(forged)])
            }
            Some("ready") => Some(vec![]),
            _ => None,
        }
    });
    let (r, rewrites, direct) = through_relay(rule, 1).await;
    report_a4("forged Ready, real one dropped", &r, rewrites, direct);
    assert_auth_failed("forged Ready", r, rewrites);
}

// ---------------------------------------------------------------------------
// B1, B2. Idle and refused connections must not lock real probers out.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn b1_silent_connections_do_not_lock_out_probes() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    raise_nofile();
    let (addr, counters, _stop) = responder(ResponderConfig::default()).await;
    let spec = short_probe(0.4, PROBER_IP);
    probe::probe(&Target::from_addr(addr), &spec)
        .await
        .expect("a probe before the attack");
    let attack = holders(ATTACKER_IP, addr, 256, Vec::new());
    let t0 = Instant::now();
    while attack.open.load(Ordering::Relaxed) < 256 && t0.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let open = attack.open.load(Ordering::Relaxed);
    let served = real_probes(addr, &spec, Duration::from_secs(15), 40, 3).await;
    let made = attack.end().await;
    eprintln!(
        "B1 256 silent connections ({open} open at start, {made} made): {}; responder overload closes {}",
        served.summary(),
        counters.overload.load(Ordering::Relaxed)
    );
    assert!(served.attempts >= 5, "{}", served.summary());
    assert!(served.share_ok(90), "{}", served.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn b2_connections_from_outside_the_allow_list_do_not_lock_out_probes() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    raise_nofile();
    let (addr, counters, _stop) = responder(ResponderConfig {
        access: AccessList {
            allow: vec!["127.0.0.1/32".parse().unwrap()],
            deny: vec![],
        },
        ..ResponderConfig::default()
    })
    .await;
    let spec = short_probe(0.4, PROBER_IP);
    probe::probe(&Target::from_addr(addr), &spec)
        .await
        .expect("a probe before the attack");
    let attack = flood(OUTSIDER_IP, addr, 380, Duration::from_secs(2), 4000);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = Instant::now();
    let served = real_probes(addr, &spec, Duration::from_secs(15), 40, 3).await;
    let secs = t0.elapsed().as_secs_f64();
    let made = attack.end().await;
    eprintln!(
        "B2 {made} connections from 127.0.0.3 ({:.0}/s): {}; denied {}, overload closes {}",
        made as f64 / (secs + 0.5),
        served.summary(),
        counters.rejected_denied.load(Ordering::Relaxed),
        counters.overload.load(Ordering::Relaxed)
    );
    assert!(served.attempts >= 5, "{}", served.summary());
    assert!(served.share_ok(90), "{}", served.summary());
}

// ---------------------------------------------------------------------------
// B3. Sessions that say Hello and sit must not use up the descriptors.
// ---------------------------------------------------------------------------

fn hello_frame() -> Vec<u8> {
    encode_frame(&Message::Hello(Hello::new())).unwrap()
}

const FD_LIMIT: Limits = Limits {
    nofile: Some(1024),
    address_space: Some(2 * GIB),
};

#[test]
fn b3_hello_flood_on_respond_with_1024_descriptors() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    raise_nofile();
    let (proc, addr) = spawn_respond(&[], FD_LIMIT);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(3)
        .enable_all()
        .build()
        .unwrap();
    let spec = short_probe(1.0, PROBER_IP);
    rt.block_on(probe::probe(&Target::from_addr(addr), &spec))
        .expect("a probe before the attack");
    let (served, made, open) = rt.block_on(async {
        let attack = holders(ATTACKER_IP, addr, 1100, hello_frame());
        let t0 = Instant::now();
        while attack.made.load(Ordering::Relaxed) < 1100 && t0.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let open = attack.open.load(Ordering::Relaxed);
        let served = real_probes(addr, &spec, Duration::from_secs(14), 10, 3).await;
        (served, attack.end().await, open)
    });
    let emfile = proc.stderr().matches("Too many open files").count();
    eprintln!(
        "B3 1,100 Hello-and-sit connections ({open} open, {made} made) vs respond at 1,024 fds: {}; {emfile} 'Too many open files' log lines",
        served.summary()
    );
    assert!(served.attempts >= 5, "{}", served.summary());
    assert!(served.share_ok(90), "{}", served.summary());
    assert!(
        served.max_wall() < Duration::from_secs(2),
        "a 1 s probe took {:?}",
        served.max_wall()
    );
}

#[test]
fn b3_hello_flood_on_serve_keeps_metrics_and_probes_answering() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    raise_nofile();
    let serve = Serve::yaml("responder: {listen: \"127.0.0.1:0\"}\nmodules: {}\n")
        .limits(ServeLimits {
            nofile: FD_LIMIT.nofile,
            address_space: FD_LIMIT.address_space,
        })
        .start();
    let addr = serve.responder.expect("serve runs its responder");
    let http = serve.http;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(3)
        .enable_all()
        .build()
        .unwrap();
    let attack = rt.block_on(async { holders(ATTACKER_IP, addr, 1100, hello_frame()) });
    let t0 = Instant::now();
    while attack.made.load(Ordering::Relaxed) < 1100 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let spec = short_probe(1.0, PROBER_IP);
    let mut scrapes = Vec::new();
    let mut served = Served::default();
    for _ in 0..6 {
        let t = Instant::now();
        let r = http_get(http, "/metrics", Duration::from_secs(5));
        scrapes.push((r.map(|(s, _)| s), t.elapsed()));
        let one = rt.block_on(real_probes(addr, &spec, Duration::from_secs(1), 1, 2));
        served.attempts += one.attempts;
        served.served += one.served;
        served.walls.extend(one.walls);
        for (k, v) in one.reasons {
            *served.reasons.entry(k).or_default() += v;
        }
    }
    let made = rt.block_on(attack.end());
    let slow: Vec<_> = scrapes
        .iter()
        .filter(|(r, t)| *r != Ok(200) || *t >= Duration::from_secs(2))
        .collect();
    eprintln!(
        "B3 serve under 1,100 Hello-and-sit connections ({made} made): /metrics within 2 s in {} of 6 tries ({:?}); probes {}",
        6 - slow.len(),
        scrapes
            .iter()
            .map(|(r, t)| format!("{:?} {:.2}s", r.as_ref().map_err(|_| "err"), t.as_secs_f64()))
            .collect::<Vec<_>>(),
        served.summary()
    );
    assert!(slow.is_empty(), "/metrics slow or failing: {slow:?}");
    assert!(served.share_ok(90), "{}", served.summary());
    assert!(served.max_wall() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_unauthenticated_sessions_are_closed_within_3_s() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, "the hostile test's responder secret\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let (_proc, addr) = spawn_respond(&["--auth.secret-file", path.to_str().unwrap()], FD_LIMIT);
    let mut failures = Vec::new();
    for with_auth in [false, true] {
        let mut s = connect_from(ATTACKER_IP, addr).await.unwrap();
        let hello = Hello {
            auth: with_auth.then(|| HelloAuth {
                method: pathprobe::auth::METHOD.into(),
                client_nonce: Nonce::random().unwrap().to_hex(),
            }),
            ..Hello::new()
        };
        let t0 = Instant::now();
        write_message(&mut s, &Message::Hello(hello), Duration::from_secs(2))
            .await
            .unwrap();
        let closed = wait_closed(&mut s, Duration::from_secs(12)).await;
        let took = t0.elapsed();
        let what = if with_auth {
            "Hello with auth, then no Auth"
        } else {
            "Hello without auth"
        };
        eprintln!(
            "B3 {what}: {} after {:.1} s",
            if closed { "closed" } else { "still open" },
            took.as_secs_f64()
        );
        if !closed || took >= Duration::from_secs(3) {
            failures.push(format!("{what}: held {:.1} s", took.as_secs_f64()));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

// ---------------------------------------------------------------------------
// B4. One client cannot keep the test slot.
// ---------------------------------------------------------------------------

fn long_send_request(duration_ms: u64) -> TestRequest {
    TestRequest {
        kind: pathprobe::probe::Kind::Tcp,
        direction: Direction::Send,
        duration_ms,
        omit_ms: 0,
        streams: 1,
        bitrate: 0,
        length: 128 * 1024,
        window: None,
        congestion: None,
        tos: None,
        affinity: None,
        interval_ms: None,
        no_offload: false,
        rr: None,
        adaptive: None,
    }
}

/// Hello and Request by hand from 127.0.0.2; the control connection and
/// the reply.
async fn hand_request(
    addr: std::net::SocketAddr,
    req: TestRequest,
) -> Result<(tokio::net::TcpStream, Message), String> {
    let t = Duration::from_secs(3);
    let mut c = connect_from(ATTACKER_IP, addr)
        .await
        .map_err(|e| e.to_string())?;
    write_message(&mut c, &Message::Hello(Hello::new()), t)
        .await
        .map_err(|e| e.to_string())?;
    match read_message(&mut c, t).await {
        Ok(Message::Welcome(_)) => {}
        other => return Err(format!("expected welcome, got {other:?}")),
    }
    write_message(&mut c, &Message::Request(req), t)
        .await
        .map_err(|e| e.to_string())?;
    let reply = read_message(&mut c, t).await.map_err(|e| e.to_string())?;
    Ok((c, reply))
}

#[derive(Debug, Default)]
struct Hog {
    started: u32,
    /// Seconds from Start to the responder ending the test, for each test
    /// it ended within the wait.
    ended_after: Vec<f64>,
    /// Tests still running when the wait (6 s) ran out.
    not_ended: u32,
    refused: u32,
}

/// Back-to-back 60 s `send` tests from 127.0.0.2 that never send a data
/// byte, until `until`. A test the responder does not end within 6 s is
/// held on (as a real hog would) until `until`.
async fn hog(addr: std::net::SocketAddr, until: Instant) -> Hog {
    use tokio::io::AsyncWriteExt;
    let mut h = Hog::default();
    while Instant::now() < until {
        let (mut c, reply) = match hand_request(addr, long_send_request(60_000)).await {
            Ok(x) => x,
            Err(_) => {
                h.refused += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let Message::Accepted { token, .. } = reply else {
            h.refused += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let Ok(mut data) = connect_from(ATTACKER_IP, addr).await else {
            continue;
        };
        let hello = encode_frame(&Message::DataHello { token, stream: 0 }).unwrap();
        if data.write_all(&hello).await.is_err() {
            continue;
        }
        match read_message(&mut c, Duration::from_secs(5)).await {
            Ok(Message::Ready) => {}
            _ => continue,
        }
        if write_message(&mut c, &Message::Start, Duration::from_secs(2))
            .await
            .is_err()
        {
            continue;
        }
        h.started += 1;
        let t0 = Instant::now();
        let wait = Duration::from_secs(6).min(until.saturating_duration_since(t0));
        if wait_closed_or_message(&mut c, wait).await {
            h.ended_after.push(t0.elapsed().as_secs_f64());
        } else if wait < Duration::from_secs(6) {
            // The attack's time ran out before this test had its 6 s: it
            // says nothing either way.
        } else {
            h.not_ended += 1;
            let left = until.saturating_duration_since(Instant::now());
            wait_closed_or_message(&mut c, left).await;
        }
        drop(data);
    }
    h
}

/// Whether the responder sent anything or closed within `limit`.
async fn wait_closed_or_message(c: &mut tokio::net::TcpStream, limit: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut b = [0u8; 1];
    tokio::time::timeout(limit, c.read(&mut b)).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn b4_silent_back_to_back_tests_cannot_keep_the_slot() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    let (addr, _c, _stop) = responder(ResponderConfig::default()).await;
    // The hog keeps on 3 s past the real probes, so that none of them is
    // served only because the hog stopped.
    let probes_end = Instant::now() + Duration::from_secs(20);
    let hogger = tokio::spawn(hog(addr, probes_end + Duration::from_secs(3)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let spec = short_probe(0.4, PROBER_IP);
    let served = real_probes(
        addr,
        &spec,
        probes_end.saturating_duration_since(Instant::now()),
        40,
        3,
    )
    .await;
    let h = hogger.await.unwrap();
    eprintln!(
        "B4 hog: {} silent 60 s tests started, ended by the responder after {:?} s, {} not ended within 6 s, {} refused; real probes {}",
        h.started, h.ended_after, h.not_ended, h.refused, served.summary()
    );
    assert!(h.started >= 1, "the hog never got a test: {h:?}");
    assert_eq!(h.not_ended, 0, "{h:?}");
    assert!(h.ended_after.iter().all(|s| *s <= 5.0), "{h:?}");
    assert!(served.attempts >= 5, "{}", served.summary());
    assert!(served.share_ok(90), "{}", served.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b4_request_then_disconnect_frees_the_slot_within_1_s() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    let (addr, _c, _stop) = responder(ResponderConfig::default()).await;
    let (c, reply) = hand_request(addr, long_send_request(60_000)).await.unwrap();
    assert!(matches!(reply, Message::Accepted { .. }), "{reply:?}");
    drop(c);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let spec = short_probe(0.3, PROBER_IP);
    let first = probe::probe(&Target::from_addr(addr), &spec).await;
    // For the record: when the slot did come free.
    let t0 = Instant::now();
    let mut freed_after = None;
    if first.is_err() {
        while t0.elapsed() < Duration::from_secs(12) {
            if probe::probe(&Target::from_addr(addr), &spec).await.is_ok() {
                freed_after = Some(1.0 + t0.elapsed().as_secs_f64());
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    match &first {
        Ok(_) => eprintln!("B4 request+disconnect: a probe 1 s later was served"),
        Err(e) => eprintln!(
            "B4 request+disconnect: a probe 1 s later failed: {e}; a probe first succeeded {freed_after:?} s after the disconnect"
        ),
    }
    assert!(first.is_ok(), "{:?}", first.err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b4_busy_retry_hint_follows_the_running_tests_real_remaining_time() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    let (addr, counters, _stop) = responder(ResponderConfig::default()).await;
    let spec = short_probe(3.0, OUTSIDER_IP);
    let running = tokio::spawn(async move { probe::probe(&Target::from_addr(addr), &spec).await });
    let t0 = Instant::now();
    while counters.active_tests.load(Ordering::Relaxed) == 0
        && t0.elapsed() < Duration::from_secs(3)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_c, reply) = hand_request(addr, long_send_request(1000)).await.unwrap();
    let asked_at = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(15), running)
        .await
        .expect("the running test ended")
        .unwrap();
    let remaining = asked_at.elapsed();
    assert!(result.is_ok(), "{:?}", result.err());
    let Message::Busy { retry_after_ms, .. } = reply else {
        panic!("expected busy, got {reply:?}");
    };
    eprintln!(
        "B4 busy hint: retry_after {retry_after_ms} ms while the running test had {} ms left",
        remaining.as_millis()
    );
    assert!(
        u128::from(retry_after_ms) <= remaining.as_millis() + 1500,
        "retry_after {retry_after_ms} ms, real remaining {} ms",
        remaining.as_millis()
    );
}

// ---------------------------------------------------------------------------
// B5. A tiny paced length: no panic, and never a success showing 0 bit/s.
// ---------------------------------------------------------------------------

fn b5_case(what: &str, extra: &[&str]) {
    let (resp, addr) = spawn_respond(&[], Limits::default());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pathprobe"));
    cmd.args(["probe", "-J", "-l", "100", "-b", "1m", "-t", "2"])
        .args(extra)
        .arg(addr.to_string())
        .stdin(Stdio::null());
    let (out, status, code) = run_bounded_split(&mut cmd, Duration::from_secs(20));
    // Let the responder's stderr reach the reader thread.
    std::thread::sleep(Duration::from_millis(300));
    let json_start = out.find('{');
    let doc: Value = json_start
        .and_then(|i| {
            serde_json::Deserializer::from_str(&out[i..])
                .into_iter()
                .next()
        })
        .and_then(|r| r.ok())
        .unwrap_or(Value::Null);
    let bps = doc["throughput_bits_per_second"].as_f64();
    let bytes = doc["bytes"].as_u64();
    let reason = doc["error"]["reason"].as_str().map(str::to_string);
    let responder_panics = resp.panics.load(Ordering::Relaxed);
    let prober_panicked = out.contains("panicked");
    eprintln!(
        "B5 {what}: probe {status}: {bps:?} bit/s, {bytes:?} bytes, error {reason:?}; responder panics {responder_panics}, prober panicked {prober_panicked}"
    );
    assert_eq!(responder_panics, 0, "responder stderr:\n{}", resp.stderr());
    assert!(!prober_panicked, "prober output:\n{out}");
    match code {
        Some(0) => {
            let (bps, bytes) = (bps.unwrap_or(0.0), bytes.unwrap_or(0));
            assert!(bytes > 0, "exit 0 with 0 bytes: {out}");
            assert!(
                (bps - 1e6).abs() <= 0.15e6,
                "exit 0 with {bps:.0} bit/s for a 1 Mbit/s test"
            );
        }
        Some(1) => assert!(
            matches!(reason.as_deref(), Some("rejected") | Some("bad_argument")),
            "a failure that is not a clear refusal: {out}"
        ),
        _ => panic!("the prober ended badly ({status}): {out}"),
    }
}

#[test]
fn b5_reverse_tcp_with_100_byte_paced_writes_never_fakes_success() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    b5_case("reverse -l 100 -b 1m", &["-R"]);
}

#[test]
fn b5_forward_tcp_with_100_byte_paced_writes_never_fakes_success() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    b5_case("forward -l 100 -b 1m", &[]);
}

// ---------------------------------------------------------------------------
// B6. One request cannot cost the responder half a gigabyte.
// ---------------------------------------------------------------------------

#[test]
fn b6_bidir_16_streams_of_16_mib_writes_cost_under_128_mib() {
    // Attacks measure shares of probes served and peak RSS: alone.
    let _turn = turn::exclusive();
    let (resp, addr) = spawn_respond(
        &[],
        Limits {
            nofile: None,
            address_space: Some(3 * GIB),
        },
    );
    let probe_cli = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pathprobe"));
        cmd.arg("probe")
            .args(args)
            .arg(addr.to_string())
            .stdin(Stdio::null());
        run_bounded_split(&mut cmd, Duration::from_secs(30))
    };
    // A small probe first, so that the baseline has the data threads' and
    // runtime's own cost in it.
    let (_, warm, code) = probe_cli(&["-t", "0.3"]);
    assert_eq!(code, Some(0), "warm-up probe {warm}");
    let base = resp.hwm_kib();
    let (out, status, _) = probe_cli(&["-J", "--bidir", "-P", "16", "-l", "16M", "-t", "2"]);
    let peak = resp.hwm_kib();
    let growth_mib = peak.saturating_sub(base) as f64 / 1024.0;
    let summary: String = out
        .lines()
        .filter(|l| {
            l.contains("\"reason\"")
                || l.contains("\"clamped\"")
                || l.starts_with("  \"throughput_bits_per_second\"")
        })
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!(
        "B6 --bidir -P 16 -l 16M: responder VmHWM {} MiB -> {} MiB (+{growth_mib:.0} MiB); probe {status} {summary}",
        base / 1024,
        peak / 1024
    );
    assert!(base > 0 && peak > 0, "could not read the responder's VmHWM");
    assert!(
        growth_mib < 128.0,
        "responder peak RSS grew {growth_mib:.0} MiB"
    );
    // The test runs, cut down to max_length: a bound that only held
    // because the test failed would prove nothing.
    assert!(
        status.contains("exit status: 0"),
        "probe {status}: {summary}"
    );
}

// ---------------------------------------------------------------------------
// A run that fails at its end still crossed the link: the byte budget is
// charged what this host's sockets moved, and refuses the runs over it.
// ---------------------------------------------------------------------------

#[test]
fn a_responder_whose_results_are_refused_is_charged_what_moved_and_the_budget_refuses() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // What the fake's data connections really received, over every test:
    // counted before it sends results the prober must refuse.
    let crossed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let fake = {
        let crossed = crossed.clone();
        rt.block_on(Fake::reporting(move |mut v| {
            let got: u64 = streams_of(&mut v)
                .iter()
                .map(|s| s["bytes"].as_u64().unwrap_or(0))
                .sum();
            crossed.fetch_add(got, Ordering::Relaxed);
            json!({"type": "results"})
        }))
    };
    // 80 Mbit/s for 1 s: about 10 MB a run, 3 runs in a 30 MB budget.
    const BUDGET: u64 = 30_000_000;
    let serve = Serve::yaml(&format!(
        "responder: {{enabled: false}}\n\
         scheduler: {{max_bytes_per_hour: {BUDGET}}}\n\
         modules:\n  tcp: {{kind: tcp, duration: 1s, bitrate: 80M, timeout: 6s, connect_timeout: 2s}}\n\
         targets:\n  - {{address: \"{}\", modules: [tcp], interval: 2s}}\n",
        fake.addr
    ))
    .start();
    let metric = |body: &str, name: &str, labels: &[&str]| {
        crate::common::metrics::sample(body, name, labels).unwrap_or(0.0)
    };
    let body = serve.wait_for(Duration::from_secs(40), "runs refused by the budget", |b| {
        metric(b, "pathprobe_budget_refusals_total", &["role=\"prober\""]) >= 2.0
    });
    let failed = metric(
        &body,
        "pathprobe_probes_total",
        &["result=\"protocol_error\""],
    );
    let charged = metric(&body, "pathprobe_budget_bytes_total", &["role=\"prober\""]);
    let crossed = crossed.load(Ordering::Relaxed) as f64;
    eprintln!(
        "refused results: {failed} runs failed, {:.1} MB crossed, {:.1} MB charged ({:.1}%), budget {} MB",
        crossed / 1e6,
        charged / 1e6,
        100.0 * charged / crossed,
        BUDGET / 1_000_000
    );
    assert!(failed >= 2.0, "{body}");
    assert_eq!(
        metric(&body, "pathprobe_probes_total", &["result=\"success\""]),
        0.0
    );
    // Every failed run moved its data: charged at least 90% of what the
    // far end received, and not many times more (the sender's count
    // includes what was still in flight at the end).
    assert!(crossed > 15e6, "only {crossed} bytes crossed");
    assert!(charged >= 0.9 * crossed, "{charged} charged for {crossed}");
    assert!(charged <= 1.5 * crossed, "{charged} charged for {crossed}");
    // And the budget held: runs stopped once it was spent.
    assert!(
        charged <= BUDGET as f64 * 1.5,
        "{charged} over a {BUDGET} budget"
    );
}

// ---------------------------------------------------------------------------
// An adaptive probe's length is judged by the prober's own clock.
// ---------------------------------------------------------------------------

/// A real responder behind a relay that multiplies the time of its
/// progress reports by `speed` (a clock running that much fast); the
/// relay's TCP port is the responder's UDP port, so datagrams go straight
/// to it.
async fn fast_clock_responder(speed: u64) -> (Relay, Stopper) {
    let tcp = pathprobe::responder::bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let upstream = tcp.local_addr().unwrap();
    let rule: Rule = Arc::new(move |dir, v| {
        if dir != Dir::ToProber || v["type"] != "progress" {
            return None;
        }
        let mut v = v.clone();
        v["at_us"] = json!(v["at_us"].as_u64().unwrap_or(0) * speed);
        Some(vec![v])
    });
    let relay = Relay::start(upstream, rule).await;
    let at = std::net::SocketAddr::new([127, 0, 0, 1].into(), relay.addr.port());
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    sock.set_reuse_address(true).unwrap();
    sock.set_reuse_port(true).unwrap();
    sock.set_nonblocking(true).unwrap();
    sock.bind(&at.into()).unwrap();
    let udp = tokio::net::UdpSocket::from_std(sock.into()).unwrap();
    let r = pathprobe::responder::Responder::new(tcp, udp, ResponderConfig::default()).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(r.serve(async {
        let _ = rx.await;
    }));
    (relay, Stopper(Some(tx)))
}

struct Stopper(Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for Stopper {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responders_fast_clock_cannot_end_an_adaptive_probe_before_its_minimum() {
    // Timed against the wall: alone.
    let _turn = turn::exclusive();
    let (relay, _stop) = fast_clock_responder(10).await;
    let spec = ProbeSpec {
        kind: pathprobe::probe::Kind::Udp,
        direction: Direction::Send,
        // Adaptive: 1 s at least, 5 s at most, to 5%.
        duration: Duration::from_secs(5),
        bitrate: Some(20_000_000),
        adaptive: Some(pathprobe::protocol::adaptive::AdaptiveRequest {
            min_duration_ms: 1000,
            precision_ppm: 50_000,
            receiver_progress: false,
        }),
        connect_timeout: Duration::from_secs(3),
        ..ProbeSpec::default()
    };
    let t0 = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        probe::probe(&Target::from_addr(relay.addr), &spec),
    )
    .await
    .expect("the probe ended within 20 s")
    .expect("the probe succeeded");
    let wall = t0.elapsed().as_secs_f64();
    let a = r.adaptive.expect("an adaptive outcome");
    eprintln!(
        "fast clock (10x): probe took {wall:.2} s of wall time; elapsed_seconds {:.2}, stop {:?}, {} reports refused, {} rewritten by the relay",
        a.elapsed_seconds,
        a.stop_reason,
        a.progress_reports_refused,
        relay.rewrites.load(Ordering::Relaxed)
    );
    assert!(
        relay.rewrites.load(Ordering::Relaxed) > 0,
        "no progress report went through the relay"
    );
    assert!(a.progress_reports_refused > 0, "{a:?}");
    // Not ended before its minimum by the wall clock, and its elapsed time
    // is the wall's (the probe's wall time adds the handshake and the
    // results, a few tens of ms on loopback).
    assert!(wall >= 1.0, "ended after {wall:.2} s of wall time");
    assert!(a.elapsed_seconds >= 1.0, "{a:?}");
    assert!(
        a.elapsed_seconds <= wall,
        "{} s elapsed in {wall:.2} s",
        a.elapsed_seconds
    );
    assert!(
        a.elapsed_seconds >= 0.9 * wall,
        "{} s elapsed in {wall:.2} s",
        a.elapsed_seconds
    );
}
