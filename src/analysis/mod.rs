//! What a finished probe means: the combined result of both sides
//! ([`result`]), the verdict on what limited it ([`diagnosis`]) and the
//! traffic on the interface beyond the test's own ([`cross`]).

pub mod cross;
pub mod diagnosis;
pub mod result;
pub mod step;

pub use result::ProbeResult;
