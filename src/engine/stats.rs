//! What one side measured: per-stream figures from the data threads and the
//! host figures over the same interval. Both sides produce a [`SideStats`];
//! the responder sends its own to the prober at the end of a test.

pub use crate::protocol::model::{
    CpuLoad, IntervalStats, Role, SideStats, StreamStats, TcpIoMode, TcpLimits, TcpStats,
    ThreadSched, UdpReceiveStats, UdpSendStats,
};

/// `num / den`, or 0 when that is not a finite number.
pub fn ratio(num: f64, den: f64) -> f64 {
    let r = num / den;
    if r.is_finite() {
        r
    } else {
        0.0
    }
}
