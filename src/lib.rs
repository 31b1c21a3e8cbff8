//! pathprobe: continuous TCP/UDP path throughput probing.
//!
//! The crate is a library with a thin binary on top (`src/main.rs`). The parts:
//!
//! - [`protocol`]: the control protocol's framing and messages, and the UDP
//!   datagram header. Pure encode/decode, no I/O.
//! - [`engine`]: what both ends of every kind share (stream threads,
//!   pacing, accounting, TCP_INFO, histograms), naming no kind.
//! - [`kinds`]: one folder per probe kind, both ends' loops and summary.
//! - [`probe`]: the prober: what to measure and its control conversation.
//! - [`analysis`]: a finished probe's combined result and diagnosis.
//! - [`responder`]: the server side of every probe (`pathprobe respond`).
//! - [`host`]: readers for /proc and per-thread resource usage, so that every
//!   probe reports CPU, interrupts and softirqs on both ends.
//! - [`build_info`]: the version and git commit of the build.
//! - [`byte_budget`]: the host's bytes over the last hour, both roles,
//!   against `scheduler.max_bytes_per_hour`.
//! - [`auth`]: the shared secret and the HMAC challenge and response that
//!   prove both ends hold it.
//! - [`config`]: the YAML configuration of `pathprobe serve`, parsed and
//!   checked (what to discover included; no I/O beyond reading files).
//! - [`mesh`]: the mesh schedule as a pure function of the members and
//!   the wall clock.
//! - [`metrics`]: the Prometheus metrics of `pathprobe serve`.
//! - [`control`]: reading and writing control messages with timeouts.
//! - [`discovery`]: keeps file_sd and DNS discovered peers current (the
//!   file reads and DNS look-ups).
//! - [`future`]: the boxed future of the service's object-safe traits.
//! - [`http`]: the HTTP endpoints of `pathprobe serve`.
//! - [`loopback`]: probes of this host's own stack against an in-process
//!   responder.
//! - [`report`]: the nuttcp-style text line and the JSON document.
//! - [`scheduler`]: runs every (target, module) job once per interval.
//! - [`service`]: `pathprobe serve`, wiring responder, scheduler, discovery and HTTP.
//! - [`slot`]: the host's one test slot, shared by the responder and the
//!   host's own probes, so that a host is never in two tests at once.
//! - [`trace`]: the path tracer bound to a probe's flow (TTL-limited
//!   packets on the probe's 5-tuple, ICMP from the socket's error queue).
//! - [`units`]: parsing of rates, sizes and durations as users write them.

pub mod analysis;
pub mod auth;
pub mod build_info;
pub mod byte_budget;
pub mod config;
pub mod control;
pub mod discovery;
pub mod engine;
pub mod future;
pub mod host;
pub mod http;
pub mod kinds;
pub mod limits;
pub mod logging;
pub mod loopback;
pub mod mesh;
pub mod metrics;
pub mod probe;
pub mod protocol;
pub mod report;
pub mod responder;
pub mod scheduler;
pub mod service;
pub mod slot;
pub mod trace;
pub mod units;
pub mod web_config;
