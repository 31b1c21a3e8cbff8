//! pathprobe's integration tests, one crate with a module per area (as
//! ripgrep's tests/tests.rs), sharing the harness in `common`: one binary
//! to link, and no `#[path]` includes. Select an area by its module path,
//! e.g. `cargo test --release --test integration rules::`.
//!
//! The modules run in one process, in parallel: tests that measure take
//! the exclusive turn (`common::turn`), so that they still run alone.

mod common;

mod access;
mod adaptive_lab;
mod budget_lab;
mod cli;
mod cross_traffic;
mod crr;
mod dashboards;
mod deploy;
mod diagnosis;
mod docs;
mod e2e;
mod faults;
mod federation;
mod hostile;
mod intervals;
mod iperf3;
mod lab;
mod lab_iperf3;
mod lab_rr;
mod load;
mod localization_lab;
mod loopback;
mod mesh_lab;
mod reload;
mod responder;
mod rr;
mod rules;
mod seed_lab;
mod series_budget;
mod serve;
mod serve_process;
mod serve_trace;
mod step_replay;
mod trace_lab;
mod udp_rr;
mod web;
mod web_config;
mod wire_compat;
