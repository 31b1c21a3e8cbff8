//! Prometheus metrics of `pathprobe serve`.
//!
//! - [`names`]: every metric's name, help, type and labels, in one table
//!   from which docs/METRICS.md's reference is generated.

pub mod names;

/// Why metrics could not be set up or rendered.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("invalid IRQ pattern {pattern:?}: {source}")]
    InvalidIrqPattern {
        pattern: String,
        source: regex::Error,
    },
    #[error("invalid target label name {name:?}: {why}")]
    InvalidLabelName { name: String, why: &'static str },
    #[error("encoding metrics: {0}")]
    Encode(prometheus::Error),
}
