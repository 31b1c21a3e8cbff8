//! Rate-limited logging of refusals. A flood of junk connections produces a
//! refusal per connection; one log line each would make the log itself the
//! attack (a full disk). The counters carry every number, so the log says
//! at most one line per kind of event in each interval, and how many it
//! left out since the last one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines per kind of event at most once per this interval.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct LogLimiter {
    kinds: Mutex<HashMap<&'static str, (Instant, u64)>>,
}

impl LogLimiter {
    /// Whether a line about `kind` may be logged now; if so, with how many
    /// lines of that kind were left out since the last one.
    pub fn allow(&self, kind: &'static str) -> Option<u64> {
        self.allow_at(kind, Instant::now())
    }

    fn allow_at(&self, kind: &'static str, now: Instant) -> Option<u64> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        match kinds.get_mut(kind) {
            Some((last, suppressed)) if now.duration_since(*last) < LOG_INTERVAL => {
                *suppressed += 1;
                None
            }
            Some((last, suppressed)) => {
                *last = now;
                Some(std::mem::take(suppressed))
            }
            None => {
                kinds.insert(kind, (now, 0));
                Some(0)
            }
        }
    }
}

/// Logs at info level through `$limiter`, under the event kind `$kind`,
/// adding `suppressed` when earlier lines were left out.
macro_rules! limited_info {
    ($limiter:expr, $kind:literal, $($field:tt)*) => {
        if let Some(suppressed) = $limiter.allow($kind) {
            tracing::info!(suppressed, $($field)*);
        }
    };
}
pub(crate) use limited_info;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_kind_per_interval_with_the_count_left_out() {
        let l = LogLimiter::default();
        let t0 = Instant::now();
        assert_eq!(l.allow_at("busy", t0), Some(0));
        for i in 1..=500 {
            assert_eq!(l.allow_at("busy", t0 + Duration::from_millis(i)), None);
        }
        // Another kind is not held back by the first.
        assert_eq!(l.allow_at("denied", t0), Some(0));
        assert_eq!(l.allow_at("busy", t0 + LOG_INTERVAL), Some(500));
        assert_eq!(l.allow_at("busy", t0 + LOG_INTERVAL * 2), Some(0));
    }
}
