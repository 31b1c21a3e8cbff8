//! The door of a `tcp_crr` test: how the many short data connections of
//! one test get to its data thread, and what bounds them.
//!
//! A connection reaches the door only after the accept loop's own checks
//! (allow list, connections waiting per client and in all, the first
//! message within `first_message_timeout`) and only with a `DataHello`
//! naming a running `tcp_crr` test's token from that test's client address.
//! The door then admits it within the test's rate (a token bucket at
//! `max_connections_per_second`, a tenth of a second deep), its count (the
//! rate over the planned test and the grace, plus the bucket), and a short
//! queue to the data thread ([`QUEUE`]). Whatever it turns away is reset at
//! once by the caller and counted, so a flood costs the responder an
//! accept, a small read and an RST per connection, and never a thread, a
//! slot or TIME_WAIT.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::connections::Arrival;
use crate::engine::datapath::DRAIN_GRACE;

/// Connections one test may have waiting for its data thread. The thread
/// answers one at a time, and a real prober has one open at a time.
pub const QUEUE: usize = 16;

/// The token bucket's depth, in seconds of the rate: arrivals of a prober
/// pacing itself to the rate bunch up on the way, never by this much.
const BURST_SECONDS: f64 = 0.1;
/// The bucket's least depth, for very low rates.
const MIN_BURST: f64 = 16.0;

/// Rate and count of one test's connections, without I/O: the part of the
/// door that decides.
#[derive(Debug, Clone)]
pub struct Allowance {
    rate: f64,
    depth: f64,
    tokens: f64,
    at: Instant,
    admitted: u64,
    most: u64,
}

impl Allowance {
    /// `per_second` connections a second (at least 1) for a test planned
    /// to take `planned`, from `now`.
    pub fn new(per_second: u32, planned: Duration, now: Instant) -> Allowance {
        let rate = f64::from(per_second.max(1));
        let depth = (rate * BURST_SECONDS).max(MIN_BURST);
        let seconds = (planned + DRAIN_GRACE).as_secs_f64();
        Allowance {
            rate,
            depth,
            tokens: depth,
            at: now,
            admitted: 0,
            most: (rate * seconds + depth).ceil() as u64,
        }
    }

    /// Whether a connection arriving at `now` is within the rate and the
    /// count; if so, it is counted.
    pub fn admit(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.depth);
        if self.tokens < 1.0 || self.admitted >= self.most {
            return false;
        }
        self.tokens -= 1.0;
        self.admitted += 1;
        true
    }

    /// Connections the whole test may open.
    pub fn most(&self) -> u64 {
        self.most
    }
}

/// One `tcp_crr` test's door, kept with its pending registration.
#[derive(Debug)]
pub struct Door {
    tx: SyncSender<Arrival>,
    allowance: Allowance,
    over_limit: Arc<AtomicU64>,
}

impl Door {
    /// A door for a test at `per_second` planned to take `planned`, the
    /// receiving end for its data thread, and the door's count of
    /// connections turned away.
    pub fn new(
        per_second: u32,
        planned: Duration,
        now: Instant,
    ) -> (Door, Receiver<Arrival>, Arc<AtomicU64>) {
        let (tx, rx) = sync_channel(QUEUE);
        let over_limit = Arc::new(AtomicU64::new(0));
        let door = Door {
            tx,
            allowance: Allowance::new(per_second, planned, now),
            over_limit: over_limit.clone(),
        };
        (door, rx, over_limit)
    }

    /// Hands `arrival` to the data thread if the test's rate, count and
    /// queue allow; otherwise gives it back, to be reset, and counts it.
    /// The end connection skips the rate (one per test, and it saves the
    /// responder its grace) but not the count or the queue.
    pub fn offer(&mut self, arrival: Arrival, now: Instant) -> Result<(), Arrival> {
        let admitted = match arrival {
            Arrival::End(_) => self.allowance.admitted < self.allowance.most,
            Arrival::Transaction(_) => self.allowance.admit(now),
        };
        let refused = if admitted {
            match self.tx.try_send(arrival) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(a) | TrySendError::Disconnected(a)) => a,
            }
        } else {
            arrival
        };
        self.over_limit.fetch_add(1, Ordering::Relaxed);
        Err(refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_rate_is_held_after_a_burst_of_a_tenth_of_a_second() {
        let t0 = Instant::now();
        let mut a = Allowance::new(1000, Duration::from_secs(10), t0);
        // A flood at one instant: the bucket's depth (100) gets in.
        let burst = (0..1000).filter(|_| a.admit(t0)).count();
        assert_eq!(burst, 100);
        // Then one per millisecond, however many ask.
        let mut got = 0;
        for ms in 1..=500u32 {
            got += (0..10).filter(|_| a.admit(t0 + ms * MS)).count();
        }
        // (a token's worth of float rounding either way)
        assert!((499..=501).contains(&got), "{got}");
        // A prober pacing itself to the rate is never refused.
        let t1 = t0 + Duration::from_secs(1);
        let mut paced = Allowance::new(1000, Duration::from_secs(10), t1);
        assert!((0..5000u32).all(|i| paced.admit(t1 + i * MS)));
    }

    #[test]
    fn the_count_bounds_the_whole_test_and_time_going_backwards_gives_nothing() {
        let t0 = Instant::now();
        let mut a = Allowance::new(10, Duration::from_secs(1), t0);
        // 10/s over 1 s + 3 s grace, plus the least depth of 16.
        assert_eq!(a.most(), 56);
        let mut admitted = 0;
        for s in 0..100u64 {
            admitted += (0..100)
                .filter(|_| a.admit(t0 + Duration::from_secs(s)))
                .count();
        }
        assert_eq!(admitted as u64, a.most());
        let mut b = Allowance::new(10, Duration::from_secs(1), t0 + Duration::from_secs(5));
        let before = (0..100).filter(|_| b.admit(t0)).count();
        assert_eq!(before, 16, "an earlier instant adds no tokens");
        // A rate of 0 is taken as 1, never as no limit.
        let z = Allowance::new(0, Duration::from_secs(1), t0);
        assert!(z.most() <= 21);
    }

    #[test]
    fn a_full_queue_or_a_gone_thread_turns_connections_away_and_counts_them() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let conn = || std::net::TcpStream::connect(addr).unwrap();
        let t0 = Instant::now();
        let (mut door, rx, over) = Door::new(100_000, Duration::from_secs(1), t0);
        for _ in 0..QUEUE {
            assert!(door.offer(Arrival::Transaction(conn()), t0).is_ok());
        }
        let back = door.offer(Arrival::Transaction(conn()), t0);
        assert!(matches!(back, Err(Arrival::Transaction(_))));
        assert_eq!(over.load(Ordering::Relaxed), 1);
        drop(rx);
        assert!(door.offer(Arrival::End(conn()), t0).is_err());
        assert_eq!(over.load(Ordering::Relaxed), 2);
    }
}
