//! The probe kinds: one folder each (`kinds/<kind>/`) holding both ends'
//! loops, the kind's summary and its entry in the registry
//! (`kinds/<kind>/kind.rs`), plus what ties them together:
//!
//! - [`kind`]: the [`ProbeKind`](kind::ProbeKind) trait, what a kind declares;
//! - [`registry`]: the table of kinds, the one place that maps a
//!   [`Kind`](crate::protocol::Kind) to its declaration ([`of`]);
//! - [`figures`]: a result's kind-specific figures, one kind's at a time;
//! - [`side`]: one side of a test, built the same way by both ends, which
//!   runs its kind's loops on the engine's stream threads.

pub mod figures;
pub mod kind;
pub mod registry;
pub mod side;
pub mod tcp;
pub mod tcp_crr;
pub mod tcp_rr;
pub mod udp;
pub mod udp_rr;

pub use registry::of;
