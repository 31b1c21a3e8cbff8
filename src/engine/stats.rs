//! What one side measured: per-stream figures from the data threads and the
//! host figures over the same interval. Both sides produce a [`SideStats`];
//! the responder sends its own to the prober at the end of a test.

pub use crate::protocol::model::{
    CpuLoad, IntervalStats, Role, SideStats, StreamStats, TcpLimits, TcpStats, ThreadSched,
    UdpReceiveStats, UdpSendStats,
};
