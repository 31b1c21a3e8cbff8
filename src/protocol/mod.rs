//! pathprobe's own wire protocol, as pure encode/decode with no I/O.
//!
//! - [`frame`]: length-prefixed frames on TCP connections, with a hard
//!   maximum size so that a peer cannot make us allocate without bound.
//! - [`message`]: the control conversation (version handshake, test request,
//!   data-connection hello, start, results) carried inside frames.
//! - [`model`]: the vocabulary and figures carried inside messages (test
//!   kind, direction, each side's measurements).
//! - [`latency`]: a latency distribution, shared by every latency kind.
//! - [`adaptive`]: adaptive duration's request and end of test.
//! - [`rr`]: request/response tests' parameters and figures.
//! - [`crr`]: connect/request/response tests' bounds and figures.
//! - [`udp`]: the fixed header of every UDP datagram.
//! - [`udp_rr`]: isochronous UDP round trips' replies and limits.
//! - [`iperf3`]: iperf3's wire protocol, spoken to stock iperf3 peers.
//! - [`text`]: the one rule every string from a peer is held to.
//!
//! This is the bottom layer: it imports nothing else of the crate.
//!
//! The protocol is kept apart from the measurement (streams, pacing,
//! accounting in [`crate::probe`]) so that another wire protocol, such as
//! iperf3's, can drive the same data path.

pub mod adaptive;
pub mod crr;
pub mod fingerprint;
pub mod frame;
pub mod iperf3;
#[cfg(test)]
mod iperf3_proptests;
pub mod latency;
pub mod message;
pub mod model;
#[cfg(test)]
mod proptests;
pub mod rr;
pub mod text;
pub mod udp;
pub mod udp_rr;

pub use frame::{decode_frame, encode_frame, FrameError, MAX_FRAME_LEN};
pub use message::{
    Message, RejectReason, TestRequest, OLDEST_PROTOCOL_VERSION, PROTOCOL_NAME, PROTOCOL_VERSION,
};
pub use model::{
    Direction, FlowDirection, HostDelta, Kind, Role, SideStats, StreamStats, TcpStats,
    UdpReceiveStats, UdpSendStats,
};

/// The responder's default port, for TCP (control and data) and UDP alike.
///
/// 5201 is iperf3's and 5001 iperf2's, so pathprobe stays clear of both.
pub const DEFAULT_PORT: u16 = 5301;
