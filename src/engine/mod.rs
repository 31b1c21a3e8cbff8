//! What both ends of every probe kind share, naming no kind: stream threads
//! and their sockets ([`datapath`]), UDP pacing ([`pacing`]), UDP loss and
//! jitter accounting ([`accounting`]), TCP_INFO ([`tcpinfo`]), batched UDP
//! I/O ([`udp_io`]), latency histograms ([`histogram`]), the figures each
//! side measures ([`stats`]), copy-free TCP I/O ([`zerocopy`]), the
//! `MSG_ZEROCOPY` sender that only benches/zerocopy_send.rs uses
//! ([`msg_zerocopy`]), the socket error queue's messages
//! ([`error_queue`]), why a probe failed ([`error`]), and adaptive
//! duration's stopping rule and shared state ([`adaptive`]).
//!
//! A kind's loops (in [`crate::kinds`]) are built from these parts; nothing
//! here imports a kind, so that adding one never edits the engine.

pub mod accounting;
pub mod adaptive;
pub mod connections;
pub mod datapath;
pub mod error;
pub mod error_queue;
pub mod histogram;
pub mod msg_zerocopy;
pub mod pacing;
pub mod stats;
pub mod tcp_socket;
pub mod tcpinfo;
pub mod udp_io;
pub mod zerocopy;
