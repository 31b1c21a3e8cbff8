//! iperf3 interop against the kernel's truth, in the a -- r -- b lab (see
//! tests/integration/lab.rs): pathprobe probing a stock `iperf3 -s` in b,
//! and a stock `iperf3 -c` in a probing pathprobe's responder (its iperf3
//! port) in b. TCP through tbf must be R * 1448/1514 within 2%; UDP loss
//! through a 1% nftables drop within 0.2 points of 1% and what the kernel
//! dropped. They need root; without it they pass with a note.

use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::lab::{
    backlog_drops, require_root, run_bounded, wait_bounded, Lab, FRAME_OVERHEAD, MSS,
};

const PORT: u16 = 5201;
/// Short runs, with the first second (slow start) omitted.
const TCP_SECONDS: &str = "3";
const OMIT: &str = "1";
const UDP_SECONDS: &str = "4";
const UDP_RATE: &str = "100M";
const RATES_MBIT: [u32; 2] = [50, 200];

/// A server in namespace b; killed when dropped.
struct Server(Child);

impl Server {
    fn start(lab: &Lab, program: &str, args: &[&str]) -> Server {
        let child = lab
            .exec_b(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning the server");
        let mut s = Server(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !lab.listening("b", PORT).unwrap() {
            if let Some(status) = s.0.try_wait().unwrap() {
                panic!("{program} {args:?} exited ({status}) before listening");
            }
            assert!(Instant::now() < deadline, "{program} not listening");
            thread::sleep(Duration::from_millis(20));
        }
        s
    }
    fn stock(lab: &Lab) -> Server {
        Server::start(lab, "iperf3", &["-s", "-p", &PORT.to_string()])
    }
    fn pathprobe(lab: &Lab) -> Server {
        // Its own port beside; stock clients come to the iperf3 port.
        Server::start(
            lab,
            env!("CARGO_BIN_EXE_pathprobe"),
            &[
                "respond",
                "--port",
                "5301",
                "--iperf3-port",
                &PORT.to_string(),
            ],
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = wait_bounded(&mut self.0, Duration::from_secs(5));
    }
}

fn run_json(lab: &Lab, program: &str, args: &[&str]) -> Value {
    let out = run_bounded(lab.exec_a(program).args(args), Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{program} output is not JSON ({e}):\n{}", out.stdout))
}

fn num(v: &Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(v, |v, k| &v[k])
        .as_f64()
        .unwrap_or_else(|| panic!("no number at {}: {v:#}", path.join(".")))
}

/// A probe's goodput, bit/s, at each of RATES_MBIT: `measure` runs one.
fn tcp_at_rates(what: &str, start: fn(&Lab) -> Server, measure: impl Fn(&Lab) -> f64) {
    let lab = Lab::up(what).unwrap();
    let _server = start(&lab);
    let mut failed = Vec::new();
    for rate in RATES_MBIT {
        lab.shape(rate).unwrap();
        let got = measure(&lab);
        let truth = f64::from(rate) * 1e6 * MSS / (MSS + FRAME_OVERHEAD);
        let err = (got - truth) / truth;
        eprintln!(
            "{what}: tbf {rate} Mbit/s: {:.2} Mbit/s, truth {:.2} ({:+.2}%)",
            got / 1e6,
            truth / 1e6,
            err * 100.0
        );
        if err.abs() > 0.02 {
            failed.push(format!("{rate} Mbit/s: {:+.2}%", err * 100.0));
        }
    }
    assert!(failed.is_empty(), "{what}: off the tbf truth: {failed:?}");
}

#[test]
fn pathprobe_probing_a_stock_iperf3_server_is_the_tbf_truth() {
    if !require_root() {
        return;
    }
    tcp_at_rates("iperf3srv", Server::stock, |lab| {
        let b = lab.addr_b().to_string();
        let v = run_json(
            lab,
            env!("CARGO_BIN_EXE_pathprobe"),
            &["probe", "-J", "-t", TCP_SECONDS, "-O", OMIT, "--iperf3", &b],
        );
        assert_eq!(v["kind"], "tcp", "{v:#}");
        num(&v, &["throughput_bits_per_second"])
    });
}

#[test]
fn a_stock_iperf3_client_probing_pathprobe_is_the_tbf_truth() {
    if !require_root() {
        return;
    }
    tcp_at_rates("iperf3cli", Server::pathprobe, |lab| {
        let b = lab.addr_b().to_string();
        let v = run_json(
            lab,
            "iperf3",
            &["-J", "-c", &b, "-p", "5201", "-t", TCP_SECONDS, "-O", OMIT],
        );
        // What the client prints as the result: the receiver's (our
        // responder's) bytes over the time, from the results exchange.
        num(&v, &["end", "sum_received", "bits_per_second"])
    });
}

/// One UDP probe from a into b through a 1% drop on r; `measure` runs it
/// and gives (sent, lost) datagrams as the client reports them.
fn udp_loss(what: &str, start: fn(&Lab) -> Server, measure: impl Fn(&Lab) -> (u64, u64)) {
    let lab = Lab::up(what).unwrap();
    lab.drop_percent(1.0).unwrap();
    let _server = start(&lab);
    let dropped_before = lab.dropped_packets().unwrap();
    let buf_before = lab.snmp("b", "Udp", "RcvbufErrors").unwrap();
    let backlog_before = backlog_drops().unwrap();
    let (sent, lost) = measure(&lab);
    let dropped = lab.dropped_packets().unwrap() - dropped_before;
    let rcvbuf = lab.snmp("b", "Udp", "RcvbufErrors").unwrap() - buf_before;
    let backlog = backlog_drops().unwrap() - backlog_before;
    let ratio = lost as f64 / sent as f64;
    let report = format!(
        "{what}: sent {sent} lost {lost} ({:.3}%); kernel: nftables dropped {dropped}, \
         RcvbufErrors {rcvbuf}, backlog drops {backlog}",
        ratio * 100.0
    );
    eprintln!("{report}");
    assert!(sent > 10_000, "{report}");
    assert!((ratio - 0.01).abs() <= 0.002, "not 1% +-0.2 pp: {report}");
    // What was lost is what the kernel dropped: the rule (which also sees
    // the control connection's few packets) or the receiving socket.
    let kernel = dropped + rcvbuf;
    assert!(
        lost + 10 >= kernel && lost <= kernel + backlog,
        "loss is not what the kernel dropped: {report}"
    );
}

#[test]
fn pathprobe_probing_a_stock_iperf3_server_sees_the_nft_loss() {
    if !require_root() {
        return;
    }
    udp_loss("iperf3srvudp", Server::stock, |lab| {
        let b = lab.addr_b().to_string();
        // A 4 MiB buffer: iperf3's default one overflows at this rate here.
        let v = run_json(
            lab,
            env!("CARGO_BIN_EXE_pathprobe"),
            &[
                "probe",
                "-J",
                "-u",
                "-b",
                UDP_RATE,
                "-t",
                UDP_SECONDS,
                "-w",
                "4M",
                "--iperf3",
                &b,
            ],
        );
        let sent = num(&v, &["udp", "packets_sent"]) as u64;
        let lost = num(&v, &["udp", "packets_lost"]) as u64;
        let ratio = num(&v, &["udp", "loss_ratio"]);
        assert!((ratio - lost as f64 / sent as f64).abs() < 1e-9, "{v:#}");
        (sent, lost)
    });
}

#[test]
fn a_stock_iperf3_client_probing_pathprobe_sees_the_nft_loss() {
    if !require_root() {
        return;
    }
    udp_loss("iperf3cliudp", Server::pathprobe, |lab| {
        let b = lab.addr_b().to_string();
        let v = run_json(
            lab,
            "iperf3",
            &[
                "-J",
                "-c",
                &b,
                "-p",
                "5201",
                "-u",
                "-b",
                UDP_RATE,
                "-t",
                UDP_SECONDS,
                "-w",
                "4M",
            ],
        );
        let sum = &v["end"]["sum"];
        (
            num(sum, &["packets"]) as u64,
            num(sum, &["lost_packets"]) as u64,
        )
    });
}
