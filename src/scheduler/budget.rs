//! What a probe is expected to cost in bytes, for the host's byte budget
//! (`scheduler.max_bytes_per_hour`, [`crate::byte_budget`]): the scheduler
//! skips a run whose expectation does not fit, and check-config states the
//! schedule's bytes per cycle and per hour from the same figures.
//!
//! The estimate, per run (one per direction of a `both` module), over
//! the omitted warm-up and the measured time together:
//!
//! - a paced probe (a `bitrate`, or UDP's default of 1 Mbit/s): the rate
//!   times the time, both ways for `bidir`, and the replies on top for
//!   `udp_rr`. The pacer keeps to it, so this is close to exact;
//! - an unpaced probe (TCP by default): the rate this job's previous run
//!   of the same direction moved, with a quarter on top (a path freed of
//!   cross traffic runs faster next time), never more than the larger of
//!   that rate and the link-rate guess; before any run, the link-rate
//!   guess (`scheduler.link_rate_guess`), which the flow cannot beat;
//! - an unpaced request/response probe without a previous run: its
//!   messages (request and response, times the burst and streams) every
//!   10 µs, about the fastest round trip a host's stack makes, capped by
//!   the link-rate guess.
//!
//! Loopback modules cost the links nothing and are not counted.
//! Payload bytes only, as the responder's own byte budget: headers add
//! 3 to 5% on the wire at a 1500-byte MTU.
//!
//! Two figures for an adaptive module (`duration: auto`), which stops when
//! its figure has converged:
//!
//! - [`expected_bytes`], the admission before each run, reserves the
//!   worst case: its rate over its whole `max_duration`. A run that does
//!   not converge runs that long (outside a mesh nothing cuts it sooner),
//!   so reserving less could let the hour's budget be passed by more than
//!   the one served test the budget allows; what the run really moved
//!   replaces the reservation when it ends.
//! - [`planned_bytes`], the schedule's stated bytes per cycle and per hour
//!   (check-config, the startup log), counts what a run is expected to
//!   take: [`Module::planned_run`], the same `expected_duration` the mesh
//!   slot holds, never above the maximum. Dividing by the maximum instead
//!   overstated an adaptive schedule's bytes 5-fold at the defaults (1 s
//!   expected, 5 s at most).

use std::time::Duration;

use crate::config::Module;
use crate::kinds::registry;
use crate::probe::spec::{Direction, ProbeSpec};

/// The link rate assumed for an unpaced probe before it has run once,
/// unless `scheduler.link_rate_guess` says otherwise: 10 Gbit/s.
pub const DEFAULT_LINK_RATE_GUESS: u64 = 10_000_000_000;

/// What an unpaced probe may gain on its previous run.
const UNPACED_HEADROOM: f64 = 1.25;

/// About the fastest a host's stack turns a transaction round.
const FASTEST_TRANSACTION: Duration = Duration::from_micros(10);

/// The bytes one run of `spec` is expected to move: see the module doc.
/// `last_bytes_per_second` is what the previous run of the same job and
/// direction moved per second of its run, if one finished.
pub fn spec_expected_bytes(
    spec: &ProbeSpec,
    last_bytes_per_second: Option<f64>,
    link_rate_guess: u64,
) -> u64 {
    let kind = registry::of(spec.kind);
    let seconds = (spec.omit + spec.duration).as_secs_f64();
    let ways = match spec.direction {
        Direction::Bidir => 2.0,
        Direction::Send | Direction::Receive => 1.0,
    };
    let guess = link_rate_guess as f64 / 8.0;
    let bitrate = kind.effective_bitrate(spec.bitrate, spec.length, spec.rr);
    let rr = kind.effective_rr(spec.length, spec.rr);
    let bytes_per_second = if bitrate > 0 {
        // The rate paces the requests of a request/response kind; the
        // replies come back on top of it.
        let replies = rr.map_or(1.0, |rr| {
            (f64::from(rr.request_size) + f64::from(rr.response_size))
                / f64::from(rr.request_size.max(1))
        });
        bitrate as f64 / 8.0 * ways * replies
    } else if let Some(last) = last_bytes_per_second {
        (last * UNPACED_HEADROOM).min(guess.max(last))
    } else if let Some(rr) = rr {
        let message = (f64::from(rr.request_size) + f64::from(rr.response_size))
            * f64::from(rr.burst.max(1))
            * f64::from(spec.streams.max(1));
        (message / FASTEST_TRANSACTION.as_secs_f64()).min(guess * ways)
    } else {
        guess * ways
    };
    (bytes_per_second * seconds).ceil().min(u64::MAX as f64) as u64
}

/// The bytes one run of `module` is expected to move, over its runs (two
/// for `both`); `last` gives the previous run's bytes per second of each
/// direction. 0 for a loopback module.
pub fn expected_bytes(
    module: &Module,
    last: &dyn Fn(Direction) -> Option<f64>,
    link_rate_guess: u64,
) -> u64 {
    if module.is_loopback() {
        return 0;
    }
    module
        .specs()
        .iter()
        .map(|(direction, spec)| spec_expected_bytes(spec, last(*direction), link_rate_guess))
        .fold(0, u64::saturating_add)
}

/// The bytes one run of `module` is expected to move as it is planned: as
/// [`expected_bytes`], but an adaptive module over its
/// [`Module::planned_run`] (its `expected_duration`, bounded by its
/// maximum) per direction rather than its maximum. A fixed module's is the
/// same as [`expected_bytes`]. For the schedule's stated figures, not for
/// admitting a run (module doc).
pub fn planned_bytes(
    module: &Module,
    last: &dyn Fn(Direction) -> Option<f64>,
    link_rate_guess: u64,
) -> u64 {
    if module.is_loopback() {
        return 0;
    }
    let planned = module.planned_run();
    module
        .specs()
        .into_iter()
        .map(|(direction, mut spec)| {
            if spec.adaptive.is_some() {
                // The planned run covers the start-up, which an adaptive
                // probe measures as part of its run (no omit).
                spec.omit = Duration::ZERO;
                spec.duration = planned;
            }
            spec_expected_bytes(&spec, last(direction), link_rate_guess)
        })
        .fold(0, u64::saturating_add)
}

/// The bytes a finished probe moved, for the budget: the larger of the
/// sender's and the receiver's count (datagrams lost on the way crossed
/// part of it), and the omitted warm-up's share at the measured rate,
/// which no count covers.
pub fn moved_bytes(result: &crate::analysis::result::ProbeResult) -> u64 {
    let measured = result.bytes.max(result.sender_bytes) as f64;
    let warm_up = if result.requested_seconds > 0.0 {
        measured * result.omit_seconds / result.requested_seconds
    } else {
        0.0
    };
    (measured + warm_up).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::module::ModuleKind;

    fn module(name: &str) -> Module {
        Module::new(ModuleKind::from_name(name).unwrap())
    }

    #[test]
    fn a_paced_probe_costs_its_rate_times_its_time() {
        let mut udp = module("udp");
        udp.omit = Duration::from_secs(1);
        udp.duration = Duration::from_secs(5);
        udp.bitrate = Some(80_000_000);
        // 10 MB/s for 6 s, whatever the previous run or the guess says.
        assert_eq!(expected_bytes(&udp, &|_| Some(1.0), 1), 60_000_000);
        // UDP's default rate is 1 Mbit/s.
        udp.bitrate = None;
        assert_eq!(expected_bytes(&udp, &|_| None, 1), 750_000);
        udp.direction = crate::config::module::ModuleDirection::Bidir;
        assert_eq!(expected_bytes(&udp, &|_| None, 1), 1_500_000);
        udp.direction = crate::config::module::ModuleDirection::Both;
        assert_eq!(expected_bytes(&udp, &|_| None, 1), 1_500_000);
    }

    #[test]
    fn an_unpaced_probe_costs_its_last_rate_with_headroom_or_the_link_guess() {
        let mut tcp = module("tcp");
        tcp.omit = Duration::from_secs(1);
        tcp.duration = Duration::from_secs(5);
        // Never run: 1 Gbit/s guessed, 125 MB/s for 6 s.
        assert_eq!(expected_bytes(&tcp, &|_| None, 1_000_000_000), 750_000_000);
        // Ran at 10 MB/s: a quarter on top.
        assert_eq!(
            expected_bytes(&tcp, &|_| Some(10e6), 1_000_000_000),
            75_000_000
        );
        // The headroom stops at the guess...
        assert_eq!(
            expected_bytes(&tcp, &|_| Some(120e6), 1_000_000_000),
            750_000_000
        );
        // ...unless the path ran faster than the guess: the run is the truth.
        assert_eq!(
            expected_bytes(&tcp, &|_| Some(200e6), 1_000_000_000),
            1_200_000_000
        );
        // Paced TCP keeps to its rate.
        tcp.bitrate = Some(8_000_000);
        assert_eq!(expected_bytes(&tcp, &|_| Some(200e6), 1), 6_000_000);
    }

    /// An adaptive module's stated bytes are its rate
    /// over what a run is expected to take (`expected_duration`, 1 s at
    /// the defaults), while its admission still reserves its maximum.
    #[test]
    fn an_adaptive_module_plans_its_expected_run_and_reserves_its_maximum() {
        let c = crate::config::Config::from_yaml(
            "modules:\n\
             \x20 tcp: {kind: tcp, duration: auto, direction: both}\n\
             \x20 slow: {kind: tcp, duration: auto, max_duration: 10s, expected_duration: 3s}\n\
             \x20 udp: {kind: udp, duration: auto, bitrate: 200M}\n\
             \x20 fixed: {kind: tcp, duration: 5s, omit: 1s}\n",
            "test",
        )
        .unwrap();
        let m = |name: &str| c.module(name).unwrap();
        assert_eq!(m("tcp").planned_run(), Duration::from_secs(1));
        // At a 1 Gbit/s guess, 125 MB/s each way: 1 s planned, 5 s at most.
        let guess = 1_000_000_000;
        assert_eq!(planned_bytes(m("tcp"), &|_| None, guess), 250_000_000);
        assert_eq!(expected_bytes(m("tcp"), &|_| None, guess), 1_250_000_000);
        // After a run at 10 MB/s: a quarter on top, over 1 s or 5 s.
        assert_eq!(planned_bytes(m("tcp"), &|_| Some(10e6), guess), 25_000_000);
        assert_eq!(
            expected_bytes(m("tcp"), &|_| Some(10e6), guess),
            125_000_000
        );
        // An expected_duration of its own, 3 s of at most 10 s.
        assert_eq!(planned_bytes(m("slow"), &|_| None, guess), 375_000_000);
        assert_eq!(expected_bytes(m("slow"), &|_| None, guess), 1_250_000_000);
        // Paced UDP at 200 Mbit/s: 25 MB/s over 1 s, against 5 s.
        assert_eq!(planned_bytes(m("udp"), &|_| None, 1), 25_000_000);
        assert_eq!(expected_bytes(m("udp"), &|_| None, 1), 125_000_000);
        // A fixed module plans what it reserves: omit + duration.
        assert_eq!(planned_bytes(m("fixed"), &|_| None, guess), 750_000_000);
        assert_eq!(expected_bytes(m("fixed"), &|_| None, guess), 750_000_000);
    }

    #[test]
    fn request_response_probes_and_loopback() {
        let mut rr = module("tcp_rr");
        rr.omit = Duration::ZERO;
        rr.duration = Duration::from_secs(5);
        // 1-byte requests and responses every 10 us: 200 kB/s for 5 s.
        assert_eq!(expected_bytes(&rr, &|_| None, 10_000_000_000), 1_000_000);
        let mut udp_rr = module("udp_rr");
        udp_rr.duration = Duration::from_secs(5);
        udp_rr.omit = Duration::ZERO;
        let spec = &udp_rr.specs()[0].1;
        let kind = registry::of(spec.kind);
        let r = kind.effective_rr(spec.length, spec.rr).unwrap();
        let paced = kind.effective_bitrate(spec.bitrate, spec.length, spec.rr) as f64 / 8.0;
        let want =
            paced * 5.0 * f64::from(r.request_size + r.response_size) / f64::from(r.request_size);
        assert_eq!(expected_bytes(&udp_rr, &|_| None, 1), want.ceil() as u64);
        assert!(want > 0.0);
        assert_eq!(
            expected_bytes(&module("loopback_tcp"), &|_| None, 1 << 40),
            0
        );
    }
}
