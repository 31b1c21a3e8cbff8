//! A `pathprobe serve` that runs the request/response kinds, for the tests
//! that hold dashboards and rules to what a live serve exports. The default
//! configuration runs none of those kinds, so its scrape has no
//! `pathprobe_rr_*` series: they exist only on a serve with a module of such
//! a kind. Those names are checked against this scrape instead, and every
//! other name against the default serve as before.

use std::sync::OnceLock;
use std::time::Duration;

use super::serve::Serve;

/// The modules of [`scrape`], as (module, kind): one per request/response
/// kind pathprobe has.
pub const MODULES: [(&str, &str); 3] = [("rr", "tcp_rr"), ("irtt", "udp_rr"), ("crr", "tcp_crr")];

/// Whether `name` (a metric, or a series of a histogram) is one only
/// request/response probes export. Those names share a prefix; the test
/// that uses this still requires each to be defined in names.rs and present
/// in [`scrape`].
pub fn rr_only(name: &str) -> bool {
    name.starts_with("pathprobe_rr_")
}

/// /metrics of a serve that probed a second serve's responder on loopback
/// once with each of [`MODULES`] (1 s each), taken after both reported.
/// Run once per test process.
pub fn scrape() -> String {
    static BODY: OnceLock<String> = OnceLock::new();
    BODY.get_or_init(run).clone()
}

fn run() -> String {
    let peer = Serve::yaml("responder: {listen: \"127.0.0.1:0\"}\nmodules: {}\n").start();
    let addr = peer.responder.expect("the peer logs its responder address");
    let modules: String = MODULES
        .iter()
        .map(|(m, k)| format!("  {m}: {{kind: {k}, duration: 1s}}\n"))
        .collect();
    let names: Vec<&str> = MODULES.iter().map(|(m, _)| *m).collect();
    let prober = Serve::yaml(&format!(
        "responder: {{enabled: false}}\nmodules:\n{modules}targets:\n  \
         - {{name: peer, address: \"{addr}\", modules: [{}]}}\n",
        names.join(", ")
    ))
    .start();
    // The percentile gauges come with a successful probe only.
    let want: Vec<String> = names
        .iter()
        .map(|m| format!("pathprobe_rr_latency_percentile_seconds{{target=\"peer\",module=\"{m}\""))
        .collect();
    prober.wait_for(
        Duration::from_secs(60),
        "a successful probe of each request/response module",
        |body| want.iter().all(|w| body.contains(w.as_str())),
    )
}
