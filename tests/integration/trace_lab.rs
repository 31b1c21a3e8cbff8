//! The path tracer in namespaces (root): a chain a -- r1 == r2 -- b, where
//! r1 and r2 are joined by two equal-cost links (x and y) that r1 and r2
//! choose between by a layer-4 hash of the 5-tuple
//! (`fib_multipath_hash_policy=3`; `Chain::up` says why not 1 over veth).
//!
//! r2 answers from the address of the link a packet came in on
//! (`icmp_errors_use_inbound_ifaddr`), so hop 2's address names the link
//! the trace took; nft counters on r1's two egress links say which link
//! really carried it.

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::common::lab::{require_root, run_bounded};
use crate::common::turn;

const STEP: Duration = Duration::from_secs(20);

const A: Ipv4Addr = Ipv4Addr::new(10, 61, 1, 1);
const R1_A: Ipv4Addr = Ipv4Addr::new(10, 61, 1, 2);
const R2_X: Ipv4Addr = Ipv4Addr::new(10, 61, 2, 2);
const R2_Y: Ipv4Addr = Ipv4Addr::new(10, 61, 3, 2);
const B: Ipv4Addr = Ipv4Addr::new(10, 61, 4, 2);

/// Four namespaces, torn down on drop (also when the test panics).
struct Chain {
    prefix: String,
    _turn: turn::Turn,
}

impl Chain {
    fn ns(&self, n: &str) -> String {
        format!("{}{n}", self.prefix)
    }

    fn up(name: &str) -> Result<Chain> {
        let turn = turn::shared();
        // The tests run at once: each chain's namespaces need names of
        // their own (the first letter of each test's chain tells them apart).
        let tag = name.chars().next().unwrap_or('x');
        let prefix = format!("pt{}{tag}-", std::process::id());
        let chain = Chain {
            prefix,
            _turn: turn,
        };
        chain.down();
        eprintln!("trace chain {} up for {name}", chain.prefix);
        for n in ["a", "r1", "r2", "b"] {
            run(Command::new("ip").args(["netns", "add", &chain.ns(n)]))?;
            chain.sh(n, "ip link set lo up")?;
        }
        // veth pairs created straight into their namespaces.
        let pairs = [
            ("a", "eth0", "r1", "ea"),
            ("r1", "x", "r2", "x"),
            ("r1", "y", "r2", "y"),
            ("r2", "eb", "b", "eth0"),
        ];
        for (n1, i1, n2, i2) in pairs {
            crate::common::lab::veth_between(&chain.ns(n1), i1, &chain.ns(n2), i2, STEP)?;
        }
        chain.sh(
            "a",
            "ip addr add 10.61.1.1/24 dev eth0 && ip link set eth0 up \
             && ip route add default via 10.61.1.2",
        )?;
        chain.sh(
            "b",
            "sysctl -qw net.ipv4.icmp_ratelimit=0 && ip addr add 10.61.4.2/24 dev eth0 && ip link set eth0 up \
             && ip route add default via 10.61.4.1",
        )?;
        // Policy 1 takes a hash the skb already carries, and over veth
        // that is the sending socket's random txhash, not the 5-tuple:
        // each new socket of one flow could take another link, which no
        // router across a wire does. Policy 3 with the 5-tuple fields
        // (0x37: addresses, protocol, ports) hashes the headers, as a
        // router does under policy 1 in production.
        let router = "sysctl -qw net.ipv4.ip_forward=1 \
             && sysctl -qw net.ipv4.fib_multipath_hash_policy=3 \
             && sysctl -qw net.ipv4.fib_multipath_hash_fields=0x0037 \
             && sysctl -qw net.ipv4.icmp_errors_use_inbound_ifaddr=1 \
             && sysctl -qw net.ipv4.icmp_ratelimit=0";
        chain.sh(
            "r1",
            &format!(
                "{router} && ip addr add 10.61.1.2/24 dev ea && ip addr add 10.61.2.1/24 dev x \
                 && ip addr add 10.61.3.1/24 dev y && ip link set ea up && ip link set x up \
                 && ip link set y up && ip route add 10.61.4.0/24 \
                 nexthop via 10.61.2.2 dev x nexthop via 10.61.3.2 dev y"
            ),
        )?;
        chain.sh(
            "r2",
            &format!(
                "{router} && ip addr add 10.61.4.1/24 dev eb && ip addr add 10.61.2.2/24 dev x \
                 && ip addr add 10.61.3.2/24 dev y && ip link set eb up && ip link set x up \
                 && ip link set y up && ip route add 10.61.1.0/24 \
                 nexthop via 10.61.2.1 dev x nexthop via 10.61.3.1 dev y"
            ),
        )?;
        // Counters of what r1 forwards toward b on each link.
        chain.sh(
            "r1",
            "nft add table inet pt && nft add chain inet pt linkcount \
             '{ type filter hook forward priority 0; }' \
             && nft add rule inet pt linkcount ip daddr 10.61.4.2 oifname x counter \
             && nft add rule inet pt linkcount ip daddr 10.61.4.2 oifname y counter",
        )?;
        Ok(chain)
    }

    fn down(&self) {
        for n in ["a", "r1", "r2", "b"] {
            let _ = run_bounded(Command::new("ip").args(["netns", "del", &self.ns(n)]), STEP);
        }
    }

    fn sh(&self, n: &str, script: &str) -> Result<String> {
        run(Command::new("ip").args(["netns", "exec", &self.ns(n), "sh", "-c", script]))
    }

    /// `pathprobe probe --mode trace -J` from a to b.
    fn trace(&self, args: &[&str]) -> Result<Value> {
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &self.ns("a"),
            env!("CARGO_BIN_EXE_pathprobe"),
        ])
        .args(["probe", "--mode", "trace", "-J", "--max-hops", "6"])
        .args(args)
        .arg(B.to_string());
        let out = run(&mut cmd)?;
        let v: Value = serde_json::from_str(out.trim()).with_context(|| out.clone())?;
        Ok(v["trace"].clone())
    }

    /// Packets r1 forwarded to b on links x and y so far.
    fn link_counts(&self) -> Result<(u64, u64)> {
        let out = self.sh("r1", "nft list chain inet pt linkcount")?;
        let mut counts = Vec::new();
        for line in out.lines().filter(|l| l.contains("oifname")) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let at = words
                .iter()
                .position(|w| *w == "packets")
                .with_context(|| format!("no counter in {line:?}"))?;
            counts.push(words[at + 1].parse::<u64>()?);
        }
        match counts[..] {
            [x, y] => Ok((x, y)),
            _ => bail!("expected two counters:\n{out}"),
        }
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        self.down();
    }
}

fn run(cmd: &mut Command) -> Result<String> {
    crate::common::lab::run_ok(cmd, STEP)
}

fn addr(hop: &Value) -> Option<String> {
    hop["address"].as_str().map(str::to_string)
}

#[test]
fn trace_finds_r1_and_r2_in_order_with_rtts() -> Result<()> {
    if !require_root() {
        return Ok(());
    }
    let chain = Chain::up("chain")?;
    for proto in ["tcp", "udp"] {
        let t = chain.trace(&["--trace-protocol", proto])?;
        eprintln!("{proto}: {t}");
        assert_eq!(t["stop"], "reached", "{t}");
        let hops = t["hops"].as_array().unwrap();
        assert_eq!(hops.len(), 3, "{t}");
        assert_eq!(addr(&hops[0]).as_deref(), Some(&*R1_A.to_string()));
        let r2 = addr(&hops[1]).unwrap();
        assert!(r2 == R2_X.to_string() || r2 == R2_Y.to_string(), "{t}");
        assert_eq!(addr(&hops[2]).as_deref(), Some(&*B.to_string()));
        for h in hops {
            let rtt = h["rtt_ms"][0].as_f64().with_context(|| format!("{t}"))?;
            assert!(rtt > 0.0 && rtt < 1000.0, "{t}");
        }
        // Two packets per router hop, one from b: 5.
        assert_eq!(t["packets"], 5, "{t}");
        assert_eq!(t["protocol"], proto);
        assert_eq!(
            t["source"].as_str().unwrap().split(':').next(),
            Some(&*A.to_string())
        );
    }
    Ok(())
}

#[test]
fn a_router_whose_icmp_is_dropped_is_a_silent_hop_not_loss() -> Result<()> {
    if !require_root() {
        return Ok(());
    }
    let chain = Chain::up("silent router")?;
    chain.sh(
        "r1",
        "nft add chain inet pt icmpout '{ type filter hook output priority 0; }' \
         && nft add rule inet pt icmpout icmp type time-exceeded counter drop",
    )?;
    let t = chain.trace(&[])?;
    eprintln!("{t}");
    let hops = t["hops"].as_array().unwrap();
    assert_eq!(t["stop"], "reached", "{t}");
    assert_eq!(hops.len(), 3, "{t}");
    // r1: no address, every RTT a null marker.
    assert_eq!(hops[0]["address"], Value::Null, "{t}");
    assert_eq!(hops[0]["rtt_ms"], serde_json::json!([null, null]), "{t}");
    // The trace went on past it and reached b in 3 hops.
    assert!(addr(&hops[1]).is_some(), "{t}");
    assert_eq!(addr(&hops[2]).as_deref(), Some(&*B.to_string()));
    // Nothing in the trace reads the silence as loss.
    let text = t.to_string();
    assert!(!text.contains("loss") && !text.contains("lost"), "{t}");
    // And r1 really did drop its answers.
    let out = chain.sh("r1", "nft list chain inet pt icmpout")?;
    assert!(out.contains("packets 2 "), "{out}");
    Ok(())
}

#[test]
fn traces_with_different_source_ports_follow_their_own_ecmp_link() -> Result<()> {
    if !require_root() {
        return Ok(());
    }
    let chain = Chain::up("ecmp")?;
    let mut by_link = [0u32; 2];
    for proto in ["udp", "tcp"] {
        for port in 41000u16..41012 {
            let (x0, y0) = chain.link_counts()?;
            let args = ["--trace-protocol", proto, "--cport", &port.to_string()];
            let t = chain.trace(&args)?;
            let (x1, y1) = chain.link_counts()?;
            let (dx, dy) = (x1 - x0, y1 - y0);
            assert_eq!(t["flow_matched"], true, "{t}");
            assert_eq!(t["source"], format!("{A}:{port}"), "{t}");
            // Packets of TTL 2 and up cross r1 (all but r1's two), and all
            // of them on one link. b's ICMP may be rate-limited, and a
            // silent b costs one more packet: count what was sent.
            assert!((dx == 0) != (dy == 0), "{proto} {port}: x {dx} y {dy}: {t}");
            let sent = t["packets"].as_u64().unwrap();
            assert_eq!(dx + dy, sent - 2, "{proto} {port}: {t}");
            let hop2 = addr(&t["hops"][1]).with_context(|| format!("{t}"))?;
            let expect = if dx > 0 { R2_X } else { R2_Y };
            assert_eq!(
                hop2,
                expect.to_string(),
                "{proto} {port}: x {dx} y {dy}: {t}"
            );
            by_link[usize::from(dy > 0)] += 1;
            // The same flow again takes the same link.
            let again = chain.trace(&args)?;
            assert_eq!(addr(&again["hops"][1]), Some(hop2), "{again}");
        }
    }
    eprintln!("traces by link: x {} y {}", by_link[0], by_link[1]);
    // 24 flows all hashed onto one link would be a 2^-23 chance: the hash
    // does spread them, so the above showed both links.
    assert!(by_link[0] > 0 && by_link[1] > 0, "{by_link:?}");
    Ok(())
}
