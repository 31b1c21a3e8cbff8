//! The prober: what to measure and the control conversation that measures it.
//!
//! - [`spec`]: what to measure ([`ProbeSpec`]).
//! - [`client`]: the prober's control conversation with a responder.
//! - [`iperf3`]: the same, with a stock iperf3 server.
//! - [`target`]: where to probe, resolved to addresses.
//! - [`verify`]: what the prober checks of a responder's replies.
//!
//! The data loops live with their kind in [`crate::kinds`], what both ends
//! share in [`crate::engine`], and the combined result in [`crate::analysis`].

pub mod client;
pub mod iperf3;
pub mod spec;
pub mod target;
pub mod verify;

pub use crate::analysis::result::ProbeResult;
pub use crate::engine::error::ProbeError;
pub use client::probe;
pub use spec::{Direction, FlowDirection, Kind, ProbeSpec, Wire};
pub use target::Target;
