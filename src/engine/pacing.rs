//! Smooth pacing for UDP senders.
//!
//! Datagram `n` is due at `n × interval` after the start. The sender asks how
//! many are due now, sends that many (in one batch), and sleeps until the
//! next one is due. A sender never bursts more than it is behind by, unlike a
//! sender that tops up a whole timer interval at once (iperf3's
//! `--pacing-timer`), whose bursts overflow queues and show as loss.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Pacer {
    /// Nanoseconds between datagrams; 0 means unpaced.
    interval_ns: f64,
    sent: u64,
}

impl Pacer {
    /// A pacer for `bits_per_second` of `datagram_bytes`-byte datagrams.
    pub fn new(bits_per_second: u64, datagram_bytes: u32) -> Pacer {
        let interval_ns = if bits_per_second == 0 {
            0.0
        } else {
            datagram_bytes as f64 * 8.0 * 1e9 / bits_per_second as f64
        };
        Pacer {
            interval_ns,
            sent: 0,
        }
    }

    pub fn is_paced(&self) -> bool {
        self.interval_ns > 0.0
    }

    /// How many datagrams are due `elapsed` after the start, up to `max`.
    pub fn due(&self, elapsed: Duration, max: u64) -> u64 {
        if !self.is_paced() {
            return max;
        }
        let should_have_sent = (elapsed.as_nanos() as f64 / self.interval_ns).floor() as u64 + 1;
        should_have_sent.saturating_sub(self.sent).min(max)
    }

    /// Records that `n` more datagrams went out.
    pub fn sent(&mut self, n: u64) {
        self.sent += n;
    }

    /// When, after the start, the next datagram is due.
    pub fn next_due(&self) -> Duration {
        Duration::from_nanos((self.sent as f64 * self.interval_ns) as u64)
    }

    /// When, after the start, `count` datagrams (at least 1) are due: the
    /// first instant at which [`Pacer::due`] returns `count` or more.
    pub fn due_after(&self, count: u64) -> Duration {
        let last = self.sent + count.max(1) - 1;
        Duration::from_nanos((last as f64 * self.interval_ns).ceil() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_datagrams_evenly() {
        // 1000-byte datagrams at 8 Mbit/s: one every millisecond.
        let mut p = Pacer::new(8_000_000, 1000);
        assert_eq!(p.due(Duration::ZERO, 64), 1);
        p.sent(1);
        assert_eq!(p.due(Duration::from_micros(999), 64), 0);
        assert_eq!(p.next_due(), Duration::from_millis(1));
        assert_eq!(p.due(Duration::from_micros(1000), 64), 1);
        // Behind by 10 ms: catch up, but never more than the batch limit.
        assert_eq!(p.due(Duration::from_millis(11), 64), 11);
        assert_eq!(p.due(Duration::from_millis(11), 4), 4);
    }

    #[test]
    fn rate_over_a_second_is_exact() {
        let mut p = Pacer::new(1_000_000_000, 1448);
        let mut t = Duration::ZERO;
        while t <= Duration::from_secs(1) {
            let n = p.due(t, 8);
            p.sent(n);
            t += Duration::from_micros(50);
        }
        // 1 Gbit/s of 1448-byte datagrams is 86326.0 per second.
        let expected = 1e9 / (1448.0 * 8.0);
        assert!((p.sent as f64 - expected).abs() <= 1.0, "sent {}", p.sent);
    }

    #[test]
    fn a_full_batch_is_due_when_its_last_datagram_is() {
        // 1000-byte datagrams at 8 Mbit/s: one every millisecond.
        let mut p = Pacer::new(8_000_000, 1000);
        assert_eq!(p.due_after(1), Duration::ZERO);
        p.sent(1);
        assert_eq!(p.due_after(1), p.next_due());
        assert_eq!(p.due_after(4), Duration::from_millis(4));
        assert_eq!(p.due(Duration::from_millis(4), 64), 4);
        assert_eq!(p.due(Duration::from_micros(3999), 64), 3);
        // 1400 B at 5 Gbit/s: 2.24 us apart, so 44 are due 43 gaps after
        // the next one, and not a moment before.
        let mut p = Pacer::new(5_000_000_000, 1400);
        p.sent(1000);
        let at = p.due_after(44);
        assert_eq!(p.due(at, 64), 44);
        assert_eq!(p.due(at - Duration::from_nanos(10), 64), 43);
    }

    #[test]
    fn unpaced_is_always_due() {
        let p = Pacer::new(0, 1448);
        assert!(!p.is_paced());
        assert_eq!(p.due(Duration::ZERO, 32), 32);
    }
}
