//! `metrics.detail` (issue 22, point 1): a live serve, in process on port
//! 0, probing two targets with four modules of four kinds, counted on
//! /metrics at `full` and at `fleet`. At `fleet` every path (target,
//! module, direction, flow) must cost at most
//! `budget::FLEET_SERIES_PER_PATH` series, and the probe counters must be
//! there summed per module.

use std::collections::BTreeMap;
use std::time::Duration;

use pathprobe::metrics::budget::FLEET_SERIES_PER_PATH;

use crate::common::metrics::{parse_sample, sum};
use crate::common::serve::InProcess;

const TARGETS: [&str; 2] = ["peer_a", "peer_b"];
/// Module name, paths (direction × flow).
const MODULES: [(&str, usize); 4] = [("tcp", 1), ("udp", 2), ("rr", 1), ("urr", 1)];

fn config(detail: &str) -> String {
    format!(
        "metrics: {{detail: {detail}}}\n\
         scheduler: {{default_interval: 30s}}\n\
         modules:\n\
         \x20 tcp: {{kind: tcp, duration: 300ms}}\n\
         \x20 udp: {{kind: udp, duration: 300ms, bitrate: 20M, direction: both}}\n\
         \x20 rr: {{kind: tcp_rr, duration: 300ms}}\n\
         \x20 urr: {{kind: udp_rr, duration: 300ms}}\n\
         targets:\n\
         \x20 - {{name: peer_a, address: \"PEER\", modules: [tcp, udp, rr, urr], labels: {{site: lab}}}}\n\
         \x20 - {{name: peer_b, address: \"PEER\", modules: [tcp, udp, rr, urr], labels: {{site: lab}}}}\n"
    )
}

/// Series per (target, module), and the total, of one scrape.
fn count(body: &str) -> (BTreeMap<(String, String), usize>, usize) {
    let mut per = BTreeMap::new();
    let mut total = 0;
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        total += 1;
        let Some((_, labels, _)) = parse_sample(line) else {
            continue;
        };
        let get = |name: &str| {
            let at = labels.find(&format!("{name}=\""))? + name.len() + 2;
            let end = labels[at..].find('"')? + at;
            Some(labels[at..end].to_string())
        };
        if let (Some(t), Some(m)) = (get("target"), get("module")) {
            *per.entry((t, m)).or_insert(0) += 1;
        }
    }
    (per, total)
}

/// Starts a serve at `detail`, waits until every (target, module) has a
/// successful latest probe in every direction, and returns that scrape.
pub(crate) async fn scrape(detail: &str) -> String {
    let run = InProcess::start(&config(detail)).await;
    let body = run
        .wait_for(Duration::from_secs(90), |b| {
            TARGETS.iter().all(|t| {
                MODULES.iter().all(|(m, _)| {
                    let want = if *m == "udp" { 2 } else { 1 };
                    b.lines()
                        .filter(|l| {
                            l.starts_with(&format!(
                                "pathprobe_probe_success{{target=\"{t}\",module=\"{m}\""
                            )) && l.ends_with(" 1")
                        })
                        .count()
                        == want
                })
            })
        })
        .await;
    run.shutdown().await;
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_detail_holds_the_series_budget() {
    let full = scrape("full").await;
    let fleet = scrape("fleet").await;
    let (full_per, full_total) = count(&full);
    let (fleet_per, fleet_total) = count(&fleet);
    let mut worst_fleet = 0.0f64;
    for t in TARGETS {
        for (m, paths) in MODULES {
            let key = (t.to_string(), m.to_string());
            let f = fleet_per.get(&key).copied().unwrap_or(0);
            let u = full_per.get(&key).copied().unwrap_or(0);
            let per_path = f as f64 / paths as f64;
            eprintln!(
                "{t} {m}: full {u} series ({:.1} per path), fleet {f} ({per_path:.1} per path)",
                u as f64 / paths as f64
            );
            assert!(f > 0, "no series of {t}/{m} at fleet:\n{fleet}");
            assert!(
                per_path <= FLEET_SERIES_PER_PATH as f64,
                "{t}/{m} costs {per_path} series per path at fleet, over the budget of \
                 {FLEET_SERIES_PER_PATH}:\n{}",
                fleet
                    .lines()
                    .filter(|l| l.contains(&format!("target=\"{t}\",module=\"{m}\"")))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            assert!(u > f, "{t}/{m}: full ({u}) must hold more than fleet ({f})");
            worst_fleet = worst_fleet.max(per_path);
        }
    }
    eprintln!(
        "total series: full {full_total}, fleet {fleet_total}; worst path at fleet {worst_fleet:.1}"
    );
    // The alerts' inputs are there at fleet: success per path, and the
    // probe counters summed per module, without a target label.
    for (m, _) in MODULES {
        let probes = sum(
            &fleet,
            "pathprobe_probes_total",
            &[&format!("module=\"{m}\""), "result=\"success\""],
        );
        assert!(probes >= 2.0, "module {m}: {probes} successes summed");
    }
    assert!(!fleet
        .lines()
        .any(|l| l.starts_with("pathprobe_probes_total{target=")));
    assert!(!fleet.contains("pathprobe_rr_latency_seconds_bucket"));
    assert!(fleet_total < full_total);
}
