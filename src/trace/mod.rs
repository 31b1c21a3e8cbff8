//! The path tracer: which routers a probe's flow crosses, hop by hop, with
//! the same protocol, addresses and ports as the probe, so that ECMP (which
//! hashes those) keeps the trace on the path the probe measured.
//!
//! Each probe packet leaves with a growing TTL from an ordinary socket on
//! the flow; the router where it expires answers with an ICMP
//! time-exceeded, which Linux hands to that socket's error queue
//! (`IP_RECVERR`, see [`errqueue`]). No raw socket, no privilege.
//!
//! A hop that does not answer is marked as such and is *not* loss: routers
//! rate-limit and deprioritise the ICMP they generate, and some never send
//! it. Nothing here derives a loss figure from missing replies.
//!
//! Every trace is bounded ([`TraceLimits`]): hops, probes per hop, a gap of
//! silent hops that ends it, a per-probe timeout, a time limit for the
//! whole trace, a pace between packets, and, process-wide, a minimum
//! interval between traces to one host and a cap on traces at once.

pub mod errqueue;
mod proto;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use errqueue::Answer;
pub use proto::Proto;

/// What bounds one trace. [`TraceLimits::clamped`] holds every field
/// within [`TraceLimits::MAX`], whatever config or flags asked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceLimits {
    /// Highest TTL tried.
    pub max_hops: u8,
    /// Packets per TTL (each answer gives one RTT).
    pub probes_per_hop: u8,
    /// Consecutive hops without any answer that end the trace (a
    /// destination whose port is open and silent, or a filtered path).
    pub gap: u8,
    /// How long one packet's answer is waited for.
    pub probe_timeout: Duration,
    /// The whole trace's budget.
    pub time_limit: Duration,
    /// Least time between two packets of a trace (the pace).
    pub pace: Duration,
}

impl Default for TraceLimits {
    fn default() -> Self {
        TraceLimits {
            max_hops: 30,
            probes_per_hop: 2,
            gap: 4,
            probe_timeout: Duration::from_millis(500),
            time_limit: Duration::from_secs(10),
            pace: Duration::from_millis(10),
        }
    }
}

impl TraceLimits {
    /// The most any field may be: 64 hops x 5 probes, 5 s per probe, 60 s
    /// a trace. The least pace is 1 ms.
    pub const MAX: TraceLimits = TraceLimits {
        max_hops: 64,
        probes_per_hop: 5,
        gap: 64,
        probe_timeout: Duration::from_secs(5),
        time_limit: Duration::from_secs(60),
        pace: Duration::from_millis(1),
    };

    pub fn clamped(self) -> TraceLimits {
        let m = TraceLimits::MAX;
        TraceLimits {
            max_hops: self.max_hops.clamp(1, m.max_hops),
            probes_per_hop: self.probes_per_hop.clamp(1, m.probes_per_hop),
            gap: self.gap.clamp(1, m.gap),
            probe_timeout: self
                .probe_timeout
                .clamp(Duration::from_millis(10), m.probe_timeout),
            time_limit: self
                .time_limit
                .clamp(Duration::from_millis(10), m.time_limit),
            pace: self.pace.max(m.pace),
        }
    }

    /// The most packets one trace can send.
    pub fn max_packets(&self) -> u32 {
        u32::from(self.max_hops) * u32::from(self.probes_per_hop)
    }
}

/// What to trace: the probe's flow.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSpec {
    pub proto: Proto,
    /// The probe's destination address and port.
    pub destination: SocketAddr,
    /// The probe's source address and port; `None`, or port 0, lets the
    /// kernel choose (one port for the whole trace all the same).
    pub source: Option<SocketAddr>,
    pub limits: TraceLimits,
}

/// One TTL of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    pub ttl: u8,
    /// Who answered; `None` when no packet at this TTL got an answer (a
    /// marker, not loss). When answers came from several addresses, the
    /// first.
    pub address: Option<IpAddr>,
    /// Each packet's round trip in milliseconds, `null` for no answer.
    pub rtt_ms: Vec<Option<f64>>,
}

impl Hop {
    pub fn replies(&self) -> usize {
        self.rtt_ms.iter().flatten().count()
    }
    /// The least answered RTT, in milliseconds.
    pub fn best_rtt_ms(&self) -> Option<f64> {
        self.rtt_ms.iter().flatten().copied().reduce(f64::min)
    }
}

/// Why a trace ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The destination answered.
    Reached,
    /// A router said the destination is unreachable.
    Unreachable,
    /// `gap` hops in a row gave no answer.
    Gap,
    /// `max_hops` tried without reaching the destination.
    MaxHops,
    /// The trace's time limit.
    TimeLimit,
}

/// A finished trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub protocol: Proto,
    pub destination: SocketAddr,
    /// The source the packets left from (the last one's, if it changed).
    pub source: Option<SocketAddr>,
    /// False when the probe's source port was busy and the trace used
    /// another: it may then have taken another ECMP member.
    pub flow_matched: bool,
    pub stop: Stop,
    /// Hops in TTL order; the destination's own, when it answered, last.
    pub hops: Vec<Hop>,
    /// Packets sent: the trace's cost.
    pub packets: u32,
    pub elapsed_ms: f64,
}

impl Trace {
    pub fn reached(&self) -> bool {
        self.stop == Stop::Reached
    }
    /// Hops to the destination (its TTL), when it answered.
    pub fn hop_count(&self) -> Option<u8> {
        self.reached()
            .then(|| self.hops.last().map(|h| h.ttl))
            .flatten()
    }
    /// The addresses of the routers on the way, in order (`None` for a
    /// silent hop), without the destination: what a path change compares.
    pub fn routers(&self) -> Vec<Option<IpAddr>> {
        let n = if self.reached() {
            self.hops.len().saturating_sub(1)
        } else {
            self.hops.len()
        };
        self.hops[..n].iter().map(|h| h.address).collect()
    }

    /// Whether `later` shows another path than `self`. A hop silent in
    /// either trace matches anything: a router that did not answer this
    /// time has not been replaced. A different hop count, or a different
    /// answering address at any TTL, is a change.
    pub fn path_differs(&self, later: &Trace) -> bool {
        if self.hop_count() != later.hop_count() {
            return true;
        }
        let (a, b) = (self.routers(), later.routers());
        a.len() != b.len()
            || a.iter().zip(&b).any(|(x, y)| match (x, y) {
                (Some(x), Some(y)) => x != y,
                _ => false,
            })
    }

    /// How the trace ended, in words (`reached in 3 hops`, ...).
    pub fn end_words(&self) -> String {
        match (self.stop, self.hop_count()) {
            (Stop::Reached, Some(n)) => format!("reached in {n} hops"),
            (Stop::Unreachable, _) => "unreachable".to_string(),
            (Stop::Gap, _) => "not reached: silent hops in a row".to_string(),
            (Stop::MaxHops, _) => "not reached within max hops".to_string(),
            _ => "not reached within the time limit".to_string(),
        }
    }

    /// The `-v` text: one line per hop (TTL, address or `*`, each RTT or
    /// `*`), then how it ended and what it cost.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let src = self
            .source
            .map_or_else(|| "?".to_string(), |s| s.to_string());
        let _ = writeln!(
            out,
            "trace {} {} -> {}{}",
            self.protocol.as_str(),
            src,
            self.destination,
            if self.flow_matched {
                ""
            } else {
                " (source port busy: not the probe's flow)"
            }
        );
        for h in &self.hops {
            let addr = h.address.map_or_else(|| "*".to_string(), |a| a.to_string());
            let rtts: Vec<String> = h
                .rtt_ms
                .iter()
                .map(|r| r.map_or_else(|| "*".to_string(), |ms| format!("{ms:.3} ms")))
                .collect();
            let _ = writeln!(out, "{:>3}  {:<39} {}", h.ttl, addr, rtts.join("  "));
        }
        let end = self.end_words();
        let _ = writeln!(
            out,
            "{end}; {} packets in {:.0} ms (a * is no answer, not loss)",
            self.packets, self.elapsed_ms
        );
        out
    }
}

/// Why no trace ran.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("trace socket: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "{host} was traced {ago_ms} ms ago; at most one trace per {min_interval_ms} ms per host"
    )]
    RateLimited {
        host: IpAddr,
        ago_ms: u64,
        min_interval_ms: u64,
    },
    #[error("{0} traces already running (the most at once)")]
    Busy(usize),
    #[error("source {from} and destination {to} are of different families")]
    Family { from: SocketAddr, to: SocketAddr },
    #[error("the trace task failed: {0}")]
    Task(String),
}

/// Process-wide bounds across traces: a minimum interval per destination
/// host and a cap on traces running at once, so that no schedule, flag or
/// peer can turn the tracer into a packet source.
pub struct Admission {
    min_interval: Duration,
    max_running: usize,
    running: AtomicUsize,
    last: Mutex<HashMap<IpAddr, Instant>>,
}

/// Hosts remembered for the per-host interval; older entries are dropped
/// first when more are traced.
const MAX_REMEMBERED_HOSTS: usize = 4096;

impl Admission {
    pub fn new(min_interval: Duration, max_running: usize) -> Admission {
        Admission {
            min_interval,
            max_running,
            running: AtomicUsize::new(0),
            last: Mutex::new(HashMap::new()),
        }
    }

    /// A ticket to trace `host` now, or why not.
    pub fn admit(&self, host: IpAddr, now: Instant) -> Result<Ticket<'_>, TraceError> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&t) = last.get(&host) {
            let ago = now.saturating_duration_since(t);
            if ago < self.min_interval {
                return Err(TraceError::RateLimited {
                    host,
                    ago_ms: ago.as_millis() as u64,
                    min_interval_ms: self.min_interval.as_millis() as u64,
                });
            }
        }
        let running = self.running.fetch_add(1, Ordering::AcqRel);
        if running >= self.max_running {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return Err(TraceError::Busy(running));
        }
        if last.len() >= MAX_REMEMBERED_HOSTS && !last.contains_key(&host) {
            // Entries older than the interval no longer limit anything.
            let min = self.min_interval;
            last.retain(|_, t| now.saturating_duration_since(*t) < min);
            if last.len() >= MAX_REMEMBERED_HOSTS {
                if let Some(oldest) = last.iter().min_by_key(|(_, t)| **t).map(|(h, _)| *h) {
                    last.remove(&oldest);
                }
            }
        }
        last.insert(host, now);
        Ok(Ticket(self))
    }
}

/// Held while a trace runs.
pub struct Ticket<'a>(&'a Admission);

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs the trace on a blocking thread (each packet waits on its socket).
pub async fn trace(spec: TraceSpec) -> Result<Trace, TraceError> {
    tokio::task::spawn_blocking(move || trace_blocking(&spec))
        .await
        .map_err(|e| TraceError::Task(e.to_string()))?
}

/// One trace, hop by hop, within `spec.limits` (clamped).
pub fn trace_blocking(spec: &TraceSpec) -> Result<Trace, TraceError> {
    let limits = spec.limits.clamped();
    let dst = spec.destination;
    if let Some(src) = spec.source {
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(TraceError::Family { from: src, to: dst });
        }
    }
    let start = Instant::now();
    let deadline = start + limits.time_limit;
    let mut hops: Vec<Hop> = Vec::new();
    let mut packets = 0u32;
    let mut silent_run = 0u8;
    let mut flow_matched = true;
    let mut stop = Stop::MaxHops;
    let mut last_send: Option<Instant> = None;
    // UDP: one socket for the whole trace. TCP: a socket per packet, all
    // on the port of the first (the kernel picks it if the spec did not).
    let mut udp = None;
    let mut source = spec.source;
    if spec.proto == Proto::Udp {
        let (sock, matched) = errqueue::udp_flow(spec.source, dst)?;
        flow_matched &= matched;
        source = errqueue::local_of(&sock);
        udp = Some(sock);
    }
    let mut seq = 0u32;
    'ttl: for ttl in 1..=limits.max_hops {
        let mut hop = Hop {
            ttl,
            address: None,
            rtt_ms: Vec::with_capacity(usize::from(limits.probes_per_hop)),
        };
        let mut end = None;
        for _ in 0..limits.probes_per_hop {
            let now = Instant::now();
            if now >= deadline {
                stop = Stop::TimeLimit;
                if !hop.rtt_ms.is_empty() {
                    hops.push(hop);
                }
                break 'ttl;
            }
            if let Some(t) = last_send {
                let next = t + limits.pace;
                if next > now {
                    std::thread::sleep(next - now);
                }
            }
            let timeout = limits
                .probe_timeout
                .min(deadline.saturating_duration_since(Instant::now()));
            last_send = Some(Instant::now());
            packets += 1;
            seq = seq.wrapping_add(1);
            let answer = match &udp {
                Some(sock) => errqueue::udp_probe(sock, dst, ttl, seq, timeout)?,
                None => {
                    let (a, matched, local) = errqueue::tcp_probe(source, dst, ttl, timeout)?;
                    flow_matched &= matched;
                    // An unspecified address or port is filled in by the kernel at
                    // connect: report the source the packets really left from.
                    if source.is_none_or(|s| s.port() == 0 || s.ip().is_unspecified() || !matched) {
                        source = local;
                    }
                    a
                }
            };
            let (from, rtt) = match answer {
                Answer::Silent => {
                    hop.rtt_ms.push(None);
                    continue;
                }
                Answer::Hop { from, rtt } => (from, rtt),
                Answer::Reached { from, rtt } => {
                    end = Some(Stop::Reached);
                    (from, rtt)
                }
                Answer::Unreachable { from, rtt } => {
                    end = Some(Stop::Unreachable);
                    (from, rtt)
                }
            };
            hop.address.get_or_insert(from);
            hop.rtt_ms.push(Some(rtt.as_secs_f64() * 1e3));
            if end.is_some() {
                // One answer from the end is enough: each further TCP
                // packet would open (and reset) another connection there.
                break;
            }
        }
        if hop.replies() == 0 {
            silent_run += 1;
        } else {
            silent_run = 0;
        }
        hops.push(hop);
        if let Some(e) = end {
            stop = e;
            break;
        }
        if silent_run >= limits.gap {
            stop = Stop::Gap;
            break;
        }
    }
    if stop != Stop::Reached {
        // Trailing silent hops say nothing about where the path goes.
        while hops.last().is_some_and(|h| h.replies() == 0) {
            hops.pop();
        }
    }
    Ok(Trace {
        protocol: spec.proto,
        destination: dst,
        source,
        flow_matched,
        stop,
        hops,
        packets,
        elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
    })
}

#[cfg(test)]
mod tests;
