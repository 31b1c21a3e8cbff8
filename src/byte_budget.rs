//! The host's byte budget (`scheduler.max_bytes_per_hour`): payload bytes
//! this host moved in tests over the last hour, in both roles (its own
//! probes and the tests its responder served, native and iperf3 ports).
//!
//! It sits beside [`crate::slot`], below both the responder and the
//! service, which share one per process: the scheduler asks it before a
//! run whether the run's expected bytes fit (and skips the run when they
//! do not), the responder asks it before serving a test (and refuses with
//! a retry hint when the hour's bytes are spent), and both charge what
//! their tests really moved once they end.
//!
//! The window slides by the second: bytes leave it an hour after the
//! second they were charged in. Memory is bounded by one entry per second
//! of the hour, whatever the number of tests.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How far back the budget looks.
pub const WINDOW: Duration = Duration::from_secs(3600);

/// Which side of a test moved the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetRole {
    /// This host's own probes (scheduled, `/probe`).
    Probing,
    /// Tests this host's responder served.
    Serving,
}

impl BudgetRole {
    /// Both roles, for series that exist from the start.
    pub const ALL: [BudgetRole; 2] = [BudgetRole::Probing, BudgetRole::Serving];

    /// The `role` label.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetRole::Probing => "prober",
            BudgetRole::Serving => "responder",
        }
    }

    fn index(self) -> usize {
        match self {
            BudgetRole::Probing => 0,
            BudgetRole::Serving => 1,
        }
    }
}

/// Why a test may not start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    /// Bytes in the window now.
    pub spent: u64,
    /// The budget per hour.
    pub limit: u64,
    /// When enough of the spend will have aged out for the test to fit;
    /// `None` when it never will (the test alone is over the budget).
    pub retry_after: Option<Duration>,
}

#[derive(Debug)]
struct Window {
    start: Instant,
    /// (second since `start`, bytes charged in it), oldest first; at most
    /// one entry per second of the window.
    seconds: VecDeque<(u64, u64)>,
    total: u64,
}

impl Window {
    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_secs()
    }

    /// Drops the seconds that left the window by `now`.
    fn expire(&mut self, now: Instant) {
        let s = self.second(now);
        while let Some(&(at, bytes)) = self.seconds.front() {
            if at + WINDOW.as_secs() > s {
                break;
            }
            self.total -= bytes;
            self.seconds.pop_front();
        }
    }

    fn add(&mut self, bytes: u64, now: Instant) {
        self.expire(now);
        let s = self.second(now);
        match self.seconds.back_mut() {
            Some((at, b)) if *at == s => *b = b.saturating_add(bytes),
            _ => self.seconds.push_back((s, bytes)),
        }
        self.total = self.total.saturating_add(bytes);
    }

    /// How long from `now` until the window holds at most `room` bytes.
    fn until_at_most(&self, room: u64, now: Instant) -> Duration {
        let mut left = self.total;
        for &(at, bytes) in &self.seconds {
            if left <= room {
                break;
            }
            left -= bytes;
            if left <= room {
                // Second `at` leaves the window when second at + 3600 begins.
                let leaves = self.start + Duration::from_secs(at) + WINDOW;
                return leaves.saturating_duration_since(now);
            }
        }
        Duration::ZERO
    }
}

/// The host's byte budget and its counters; share it in an `Arc`.
#[derive(Debug)]
pub struct HostBudget {
    /// Bytes per hour; 0 for no budget.
    limit: AtomicU64,
    window: Mutex<Window>,
    /// Bytes charged since start, by role.
    charged: [AtomicU64; 2],
    /// Tests refused or skipped over the budget, by role.
    refused: [AtomicU64; 2],
}

impl Default for HostBudget {
    fn default() -> Self {
        HostBudget::new(0)
    }
}

impl HostBudget {
    /// A budget of `limit` bytes per hour (0: none).
    pub fn new(limit: u64) -> HostBudget {
        HostBudget {
            limit: AtomicU64::new(limit),
            window: Mutex::new(Window {
                start: Instant::now(),
                seconds: VecDeque::new(),
                total: 0,
            }),
            charged: Default::default(),
            refused: Default::default(),
        }
    }

    /// Changes the budget (a reload); what the window holds stays.
    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// Bytes per hour; 0 for no budget.
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes in the last hour, both roles.
    pub fn spent(&self) -> u64 {
        let mut w = self.window();
        w.expire(Instant::now());
        w.total
    }

    /// Records `bytes` moved by a test of `role` that ended now.
    pub fn charge(&self, role: BudgetRole, bytes: u64) {
        self.charged[role.index()].fetch_add(bytes, Ordering::Relaxed);
        self.window().add(bytes, Instant::now());
    }

    /// Bytes charged to `role` since start.
    pub fn charged(&self, role: BudgetRole) -> u64 {
        self.charged[role.index()].load(Ordering::Relaxed)
    }

    /// Tests of `role` refused (served) or skipped (own probes) because
    /// of the budget.
    pub fn refused(&self, role: BudgetRole) -> u64 {
        self.refused[role.index()].load(Ordering::Relaxed)
    }

    /// Whether a test of `role` expected to move `expected` bytes may
    /// start now: it must fit what is left of the hour's budget. A test
    /// whose bytes are not known beforehand (`expected` 0: a served
    /// unpaced test) may start while any of the budget is left. A refusal
    /// is counted against `role`.
    pub fn admit(&self, role: BudgetRole, expected: u64) -> Result<(), OverBudget> {
        let limit = self.limit();
        if limit == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut w = self.window();
        w.expire(now);
        let spent = w.total;
        // The bytes the test needs: at least one, so that a spent budget
        // refuses a test of unknown size.
        let need = expected.max(1);
        if spent.saturating_add(need) <= limit {
            return Ok(());
        }
        self.refused[role.index()].fetch_add(1, Ordering::Relaxed);
        let retry_after = (need <= limit).then(|| w.until_at_most(limit - need, now));
        Err(OverBudget {
            spent,
            limit,
            retry_after,
        })
    }
}

/// Charges what a running test moved when dropped, however it ended: a
/// test cut short or failed still crossed the link.
pub struct ChargeOnDrop<F: Fn() -> u64> {
    budget: std::sync::Arc<HostBudget>,
    role: BudgetRole,
    moved: F,
}

impl<F: Fn() -> u64> ChargeOnDrop<F> {
    /// Charges `moved()` to `role` of `budget` at drop.
    pub fn new(budget: std::sync::Arc<HostBudget>, role: BudgetRole, moved: F) -> Self {
        ChargeOnDrop {
            budget,
            role,
            moved,
        }
    }
}

impl<F: Fn() -> u64> Drop for ChargeOnDrop<F> {
    fn drop(&mut self) {
        self.budget.charge(self.role, (self.moved)());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1 << 30;

    #[tokio::test(start_paused = true)]
    async fn no_budget_admits_everything() {
        let b = HostBudget::new(0);
        b.charge(BudgetRole::Probing, u64::MAX);
        assert_eq!(b.admit(BudgetRole::Probing, u64::MAX), Ok(()));
        assert_eq!(b.refused(BudgetRole::Probing), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn both_roles_share_one_window_that_slides_by_the_second() {
        let b = HostBudget::new(10 * GB);
        b.charge(BudgetRole::Probing, 4 * GB);
        tokio::time::advance(Duration::from_secs(600)).await;
        b.charge(BudgetRole::Serving, 4 * GB);
        assert_eq!(b.spent(), 8 * GB);
        assert_eq!(b.charged(BudgetRole::Probing), 4 * GB);
        assert_eq!(b.charged(BudgetRole::Serving), 4 * GB);
        // 2 GB fit, 3 GB do not: the probe's 4 GB leave the window at
        // 3600 s after they were charged, 3000 s from now.
        assert_eq!(b.admit(BudgetRole::Probing, 2 * GB), Ok(()));
        let over = b.admit(BudgetRole::Probing, 3 * GB).unwrap_err();
        assert_eq!(over.spent, 8 * GB);
        assert_eq!(over.retry_after, Some(Duration::from_secs(3000)));
        assert_eq!(b.refused(BudgetRole::Probing), 1);
        // A test larger than the whole budget never fits.
        let never = b.admit(BudgetRole::Probing, 11 * GB).unwrap_err();
        assert_eq!(never.retry_after, None);
        // One second before the first charge leaves, it still counts.
        tokio::time::advance(Duration::from_secs(2999)).await;
        assert_eq!(b.spent(), 8 * GB);
        assert!(b.admit(BudgetRole::Probing, 3 * GB).is_err());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.spent(), 4 * GB);
        assert_eq!(b.admit(BudgetRole::Probing, 3 * GB), Ok(()));
        // And the second charge an hour after its own.
        tokio::time::advance(Duration::from_secs(600)).await;
        assert_eq!(b.spent(), 0);
        // The counters since start keep everything.
        assert_eq!(b.charged(BudgetRole::Serving), 4 * GB);
    }

    #[tokio::test(start_paused = true)]
    async fn a_spent_budget_refuses_a_test_of_unknown_size_until_bytes_age_out() {
        let b = HostBudget::new(GB);
        assert_eq!(b.admit(BudgetRole::Serving, 0), Ok(()));
        b.charge(BudgetRole::Serving, GB / 2);
        tokio::time::advance(Duration::from_secs(10)).await;
        b.charge(BudgetRole::Probing, GB / 2);
        let over = b.admit(BudgetRole::Serving, 0).unwrap_err();
        // The first half leaves 3590 s from now, and one byte then fits.
        assert_eq!(over.retry_after, Some(Duration::from_secs(3590)));
        assert_eq!(b.refused(BudgetRole::Serving), 1);
        assert_eq!(b.refused(BudgetRole::Probing), 0);
        // A reload that raises the budget admits at once.
        b.set_limit(2 * GB);
        assert_eq!(b.admit(BudgetRole::Serving, 0), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn memory_is_one_entry_per_second_of_the_hour() {
        let b = HostBudget::new(GB);
        for _ in 0..10_000 {
            b.charge(BudgetRole::Probing, 1);
            tokio::time::advance(Duration::from_millis(500)).await;
        }
        assert_eq!(b.spent(), 7198);
        let w = b.window();
        // 5000 s of charges every half second: the seconds 1401 to 4999
        // are the last hour's at 5000 s, two charges each.
        assert_eq!(w.seconds.len(), 3599);
        assert_eq!(w.total, 7198);
    }

    #[tokio::test(start_paused = true)]
    async fn charge_on_drop_charges_what_moved_however_the_test_ended() {
        let b = std::sync::Arc::new(HostBudget::new(GB));
        let moved = std::sync::Arc::new(AtomicU64::new(0));
        {
            let m = moved.clone();
            let _guard = ChargeOnDrop::new(b.clone(), BudgetRole::Serving, move || {
                m.load(Ordering::Relaxed)
            });
            moved.store(12345, Ordering::Relaxed);
        }
        assert_eq!(b.charged(BudgetRole::Serving), 12345);
        assert_eq!(b.spent(), 12345);
    }
}
