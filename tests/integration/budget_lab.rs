//! Issue 27 point 3's lab: the host byte budget (`scheduler.max_bytes_per_hour`)
//! holds in a mesh, counted from outside pathprobe.
//!
//! Three hosts in namespaces around one router, tbf at 20 Mbit/s on every
//! host's downlink, each running `pathprobe serve` in mesh mode with TCP
//! probes of 2 s: one cycle has every host in four tests (two probes, two
//! served), about 19 MB, and the budget of 25 MB per hour allows a cycle
//! and a bit. Over three cycles:
//!
//! - the bytes every host's tests put through the router, counted by nft
//!   rules on the router (`ip saddr H` and `ip daddr H`: both roles, data,
//!   ACKs and control), stay within the budget plus one test's worth of
//!   slack, plus headers. The slack: a responder cannot know an unpaced
//!   test's bytes before it runs, so it admits one while any of the
//!   budget is left, and that test may take the host past it by its own
//!   size (one test at a time: the host slot). Headers: the budget counts
//!   payload, the wire 52 bytes per 1448 (TCP and IP with timestamps), the
//!   ACKs and the retransmissions after tbf's drops; 10% covers them;
//! - the same bytes by tbf (r's downlinks, everything every host received)
//!   agree with the nft total, so that the nft rules saw all the traffic;
//! - every host skipped runs for the budget (`byte_budget`) and was spent,
//!   and the hosts' own counters agree with the wire within the headers.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use crate::common::lab::{require_root, Star};
use crate::common::metrics::sum;
use crate::common::serve::Serve;

const HOSTS: usize = 3;
const RATE_MBIT: u32 = 20;
const BUDGET: u64 = 25_000_000;
/// One test's bytes at most: the tbf rate for the 2 s a probe runs and
/// half a second more, for what its sender's socket buffer and tbf's
/// queue still hold at its end, which crosses after it (about 0.6 MB a
/// test here).
const ONE_TEST: f64 = RATE_MBIT as f64 * 1e6 / 8.0 * 2.5;
/// Bytes on the wire over payload: TCP and IP headers (52 per 1448),
/// ACKs (about 2%), and retransmissions after tbf's drops.
const HEADERS: f64 = 1.10;

fn yaml(names: &[String]) -> String {
    // Slots of 2 s + 1.5 s set-up + 0.5 s guard, back to back: 6 slots of
    // 4 s, a cycle of 24 s.
    let mut y = format!(
        "responder: {{listen: \"0.0.0.0:5301\"}}\n\
         modules:\n  tcp: {{kind: tcp, duration: 2s, congestion: cubic}}\n\
         scheduler: {{default_interval: 24s, max_bytes_per_hour: {BUDGET}, \
         link_rate_guess: {RATE_MBIT}M, mesh: {{budget: 1.0, setup: 1500ms, guard: 500ms}}}}\n\
         discovery: {{mesh: true}}\n\
         targets:\n"
    );
    for n in names {
        y.push_str(&format!("  - {{address: {n}, modules: [tcp]}}\n"));
    }
    y
}

/// Counts, by host address, the bytes r forwarded from it and to it.
fn count_on_router(star: &Star) {
    let mut rules = String::from(
        "table ip budgetlab {\n chain acct {\n  type filter hook forward priority -10; policy accept;\n",
    );
    for i in 1..=star.count() {
        let a = star.addr(i);
        rules.push_str(&format!("  ip saddr {a} counter\n  ip daddr {a} counter\n"));
    }
    rules.push_str(" }\n}\n");
    let mut child = star
        .exec_r("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("nft");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(rules.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "nft rules on r");
}

/// (from, to, packets to) of every host address, as nft counted them.
fn router_counts(star: &Star) -> BTreeMap<Ipv4Addr, (f64, f64, f64)> {
    let out = star
        .exec_r("nft")
        .args(["list", "table", "ip", "budgetlab"])
        .output()
        .expect("nft list");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        // ip saddr 10.1.2.3 counter packets 12 bytes 3456
        let w: Vec<&str> = line.split_whitespace().collect();
        let (Some(&"ip"), Some(dir), Some(addr)) = (w.first(), w.get(1), w.get(2)) else {
            continue;
        };
        let Ok(addr) = addr.parse::<Ipv4Addr>() else {
            continue;
        };
        let after = |key: &str| {
            w.iter()
                .position(|x| *x == key)
                .and_then(|i| w.get(i + 1))
                .and_then(|b| b.parse::<f64>().ok())
        };
        let (Some(bytes), Some(packets)) = (after("bytes"), after("packets")) else {
            continue;
        };
        let e = counts.entry(addr).or_insert((0.0, 0.0, 0.0));
        match *dir {
            "saddr" => e.0 += bytes,
            "daddr" => {
                e.1 += bytes;
                e.2 += packets;
            }
            _ => {}
        }
    }
    counts
}

/// Bytes r's tbf passed on all the hosts' downlinks since they were added.
fn tbf_total(star: &Star) -> f64 {
    let out = star
        .exec_r("tc")
        .args(["-s", "qdisc", "show"])
        .output()
        .expect("tc");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut total = 0.0;
    let mut tbf = false;
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.first() == Some(&"qdisc") {
            tbf = w.get(1) == Some(&"tbf");
        } else if tbf && w.first() == Some(&"Sent") {
            total += w.get(1).and_then(|b| b.parse::<f64>().ok()).unwrap_or(0.0);
        }
    }
    total
}

#[test]
fn the_byte_budget_holds_in_a_mesh_by_the_routers_counters() {
    if !require_root() {
        return;
    }
    let star = Star::up("budget", HOSTS).expect("star lab");
    let limit = u64::from(RATE_MBIT) * 1_000_000 / 8 / 10;
    star.shape(RATE_MBIT, Some(limit)).expect("shaping");
    count_on_router(&star);
    let names: Vec<String> = (1..=HOSTS).map(|i| star.addr(i).to_string()).collect();
    let y = yaml(&names);
    let hosts: Vec<Serve> = (1..=HOSTS)
        .map(|i| {
            Serve::yaml(&y)
                .in_namespace(&star.netns(i), star.addr(i).into(), None)
                .start()
        })
        .collect();
    // Three cycles and the wait for the first; then the last test's end
    // (a slot is 4 s).
    std::thread::sleep(Duration::from_secs(24 * 4 + 4));
    let bodies: Vec<String> = hosts.iter().map(|h| h.metrics()).collect();
    let counts = router_counts(&star);
    let tbf = tbf_total(&star);
    drop(hosts);

    let budget = BUDGET as f64;
    let bound = (budget + ONE_TEST) * HEADERS;
    let mut wire_total_in = 0.0;
    let mut packets_in = 0.0;
    let mut lines = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let addr = star.addr(i + 1);
        let (from, to, packets) = counts.get(&addr).copied().unwrap_or_default();
        wire_total_in += to;
        packets_in += packets;
        let wire = from + to;
        let probing = sum(body, "pathprobe_budget_bytes_total", &["role=\"prober\""]);
        let serving = sum(
            body,
            "pathprobe_budget_bytes_total",
            &["role=\"responder\""],
        );
        let skipped = sum(
            body,
            "pathprobe_scheduler_runs_skipped_total",
            &["reason=\"byte_budget\""],
        );
        let refused = sum(
            body,
            "pathprobe_budget_refusals_total",
            &["role=\"responder\""],
        );
        let successes = sum(body, "pathprobe_probes_total", &["result=\"success\""]);
        let gauge = sum(body, "pathprobe_budget_max_bytes_per_hour", &[]);
        lines.push(format!(
            "host {addr}: wire {:.1} MB (out {:.1}, in {:.1}) against a bound of {:.1} MB; \
             counted {:.1} MB probing + {:.1} MB serving; {successes} probes succeeded, \
             {skipped} runs skipped for the budget, {refused} probers refused",
            wire / 1e6,
            from / 1e6,
            to / 1e6,
            bound / 1e6,
            probing / 1e6,
            serving / 1e6
        ));
        assert_eq!(gauge, budget, "{}", lines.join("\n"));
        // Within the budget and one test, on the wire.
        assert!(wire <= bound, "{}", lines.join("\n"));
        // The budget was reached (what it allowed did run)...
        assert!(
            probing + serving >= budget - ONE_TEST,
            "{}",
            lines.join("\n")
        );
        // ...and it cut the schedule: runs were skipped for it.
        assert!(skipped >= 1.0, "{}", lines.join("\n"));
        // The host's own count is the wire's payload: within the headers.
        let counted = probing + serving;
        assert!(
            counted <= wire && wire <= counted * HEADERS + 200_000.0,
            "{}",
            lines.join("\n")
        );
    }
    eprintln!("{}", lines.join("\n"));
    // tbf's downlinks passed what the hosts received, nft's daddr rules
    // counted the same packets: tbf adds the 14-byte Ethernet header to
    // each, nft also counted what tbf then dropped from its queue, and tbf
    // saw the lab's set-up pings before the rules were in.
    let nft_frames = wire_total_in + 14.0 * packets_in;
    eprintln!(
        "tbf total {:.2} MB, nft total in {:.2} MB ({:.2} MB with Ethernet headers, {packets_in} packets)",
        tbf / 1e6,
        wire_total_in / 1e6,
        nft_frames / 1e6
    );
    // nft sees the forwarded packets as GRO merged them (9,588 packets for
    // 35.5 MB in one run), tbf the segments it splits them into, each with
    // its headers: 3.7% more in that run.
    assert!(
        (tbf - nft_frames).abs() <= nft_frames * 0.06 + 100_000.0,
        "tbf {tbf} vs nft {nft_frames}"
    );
    // Each test counts at both of its ends: the whole mesh is within half
    // the sum of the hosts' bounds.
    assert!(
        tbf < HOSTS as f64 / 2.0 * bound,
        "tbf {tbf}: the whole mesh within half the hosts' bounds (each test counts at both ends)"
    );
}
