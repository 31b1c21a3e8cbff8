//! A one-minute load test against a responder on loopback: junk connections
//! from several threads the whole time, and a prober running short probes
//! back to back. The responder stays up, every test it admits succeeds,
//! and its memory stays bounded. The figures are printed for the record.

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::metrics::sample;
use crate::common::serve::Serve;
use crate::common::turn;

const LOAD_TIME: Duration = Duration::from_secs(60);

#[test]
fn responder_under_a_minute_of_load() {
    // Alone: the figures are for the record, and the bound on memory.
    let _turn = turn::exclusive();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("responder.yml");
    std::fs::write(
        &config,
        // One prober runs back to back here, far beyond the default
        // allowance of tests per client per minute, which is not under test.
        "responder: {listen: \"127.0.0.1:0\", idle_timeout: 2s, max_tests_per_client_per_minute: 0}\nmodules: {}\n",
    )
    .unwrap();
    let serve = Serve::start(&config);
    let responder = serve.responder.expect("serve logged its responder");
    let baseline = serve.rss_kib();

    let stop = Arc::new(AtomicBool::new(false));
    let junk_made = Arc::new(AtomicU64::new(0));
    let junk: Vec<_> = (0..4)
        .map(|i| {
            let (stop, made) = (stop.clone(), junk_made.clone());
            std::thread::spawn(move || {
                let mut open = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    // The junk comes from other clients than the probes
                    // (127.0.0.2 to .5): a client's own flood only locks
                    // out that client, by the per-client caps.
                    let from = std::net::Ipv4Addr::new(127, 0, 0, 2 + i as u8);
                    if let Ok(mut s) = connect_from(from, responder) {
                        // Silent, half a header, garbage, an oversized header.
                        let _ = match i {
                            0 => Ok(()),
                            1 => s.write_all(&[0, 0]),
                            2 => s.write_all(b"\x00\x00\x00\x05hello"),
                            _ => s.write_all(&[0xff, 0xff, 0xff, 0xff]),
                        };
                        open.push(s);
                        made.fetch_add(1, Ordering::Relaxed);
                    }
                    if open.len() >= 64 {
                        open.clear();
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        })
        .collect();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut ok, mut failed, mut peak) = (0u64, Vec::new(), baseline);
    let start = Instant::now();
    while start.elapsed() < LOAD_TIME {
        let spec = pathprobe::probe::ProbeSpec {
            duration: Duration::from_millis(500),
            ..Default::default()
        };
        match rt.block_on(pathprobe::probe::probe(
            &pathprobe::probe::Target::from_addr(responder),
            &spec,
        )) {
            Ok(r) => {
                assert!(r.bytes > 0);
                ok += 1;
            }
            Err(e) => failed.push(e.reason()),
        }
        peak = peak.max(serve.rss_kib());
    }
    stop.store(true, Ordering::Relaxed);
    for j in junk {
        j.join().unwrap();
    }
    let m = serve.metrics();
    let served = sample(
        &m,
        "pathprobe_responder_tests_total",
        &["result=\"success\""],
    )
    .unwrap_or(0.0);
    let admitted_failed = sample(
        &m,
        "pathprobe_responder_tests_total",
        &["result=\"failure\""],
    )
    .unwrap_or(0.0);
    let mut reasons = std::collections::BTreeMap::new();
    for r in &failed {
        *reasons.entry(*r).or_insert(0u32) += 1;
    }
    println!(
        "load: {:.0} s, {} junk connections, {ok} probes succeeded, {} not admitted {reasons:?}; responder served {served}, failed {admitted_failed}; RSS {baseline} KiB at rest, {peak} KiB peak",
        start.elapsed().as_secs_f64(),
        junk_made.load(Ordering::Relaxed),
        failed.len(),
    );
    // Back-to-back probes may find the previous test still draining; that
    // is a busy reply, never anything else.
    assert!(failed.iter().all(|r| *r == "busy"), "{reasons:?}");
    assert!(ok >= 20, "only {ok} probes got through in a minute");
    // Every test the responder admitted was served.
    assert_eq!(admitted_failed, 0.0, "{m}");
    assert_eq!(served, ok as f64);
    assert!(
        peak < baseline + 32 * 1024,
        "RSS grew from {baseline} KiB to {peak} KiB"
    );
    drop(serve);
}

/// A TCP connection to `to` from address `from`.
fn connect_from(from: std::net::Ipv4Addr, to: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    pathprobe::engine::tcp_socket::bind_source(&socket2::SockRef::from(&sock), from.into())?;
    sock.connect_timeout(&to.into(), Duration::from_secs(1))?;
    Ok(sock.into())
}
