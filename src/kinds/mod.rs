//! The probe kinds, one folder each holding both ends' loops and the kind's
//! summary, and [`side`]: one side of a test, built the same way by both ends,
//! which runs its kind's loops on the engine's stream threads.

pub mod side;
pub mod tcp;
pub mod tcp_crr;
pub mod tcp_rr;
pub mod udp;
pub mod udp_rr;
