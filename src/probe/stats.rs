//! What one side measured: per-stream figures from the data threads and the
//! host figures over the same interval. Both sides produce a [`SideStats`];
//! the responder sends its own to the prober at the end of a test.

use serde::{Deserialize, Serialize};

use super::spec::FlowDirection;
use crate::host::HostDelta;

/// What this side did on a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Sender,
    Receiver,
}

/// One stream's figures on one side, over the measured window (after omit).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamStats {
    pub id: u32,
    pub direction: Option<FlowDirection>,
    pub role: Option<Role>,
    /// Payload bytes written (sender) or read (receiver) in the window.
    pub bytes: u64,
    /// Length of the window: for a sender, until its last write; for a
    /// receiver, until the last byte arrived.
    pub seconds: f64,
    /// Read/write system calls in the window.
    pub syscalls: u64,
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    pub context_switches: u64,
    /// SO_SNDBUF / SO_RCVBUF as the kernel set them.
    pub send_buffer_bytes: u64,
    pub receive_buffer_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_sent: Option<UdpSendStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_received: Option<UdpReceiveStats>,
}

/// From TCP_INFO of a sending socket, after the receiver has read everything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpStats {
    /// Segments retransmitted during the window.
    pub retransmits: u64,
    pub rtt_seconds: f64,
    pub rttvar_seconds: f64,
    pub min_rtt_seconds: f64,
    pub mss_bytes: u32,
    /// Congestion window in bytes (segments × MSS).
    pub cwnd_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpSendStats {
    /// Datagrams sent in the window.
    pub packets: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpReceiveStats {
    /// Distinct datagrams received in the window.
    pub packets: u64,
    /// Datagrams the sender reported sending (from its FIN), when it arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_packets: Option<u64>,
    /// Lost as seen by the receiver: gaps in the sequence, or the sender's
    /// count minus what arrived when the FIN was seen.
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// RFC 3550 interarrival jitter.
    pub jitter_seconds: f64,
}

/// Everything one side measured during a test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SideStats {
    pub streams: Vec<StreamStats>,
    pub host: HostDelta,
    pub kernel_release: String,
    /// Interface that carried the test on this side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
}
