//! Which tests may run at the same time. The integration tests are one
//! process (tests/integration/main.rs), so tests that used to run alone in their own
//! binary now share the machine's two cores with every other test. Tests
//! that measure (the lab's throughput and loss figures, the one-minute load
//! test, the end-to-end run against Prometheus) take [`exclusive`]; what the
//! harness starts that competes for CPU (`pathprobe serve`, an in-process
//! responder, the CLI's probes) holds [`shared`] while it runs. So a
//! measurement never runs beside another test's traffic, and the other
//! tests still run in parallel with each other.
//!
//! Turns are per test thread (libtest names each test's thread after the
//! test). A helper thread a test spawns takes no turn of its own: its test
//! already holds one, and waiting for it there could deadlock.

use std::cell::Cell;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static TURNS: RwLock<()> = RwLock::new(());

thread_local! {
    /// Turns this thread holds, and whether the outermost is exclusive.
    static HELD: Cell<(u32, bool)> = const { Cell::new((0, false)) };
}

/// Held while a test (or something it started) runs; released on drop.
/// Both guards are `None` inside a turn this thread already holds, and on
/// a helper thread.
pub struct Turn {
    _shared: Option<RwLockReadGuard<'static, ()>>,
    _exclusive: Option<RwLockWriteGuard<'static, ()>>,
    counted: bool,
}

const INNER: Turn = Turn {
    _shared: None,
    _exclusive: None,
    counted: false,
};

fn on_test_thread() -> bool {
    std::thread::current().name().is_some()
}

/// A turn beside other shared turns, never beside an exclusive one.
pub fn shared() -> Turn {
    if !on_test_thread() {
        return INNER;
    }
    let (depth, exclusive) = HELD.get();
    // A test that panicked released its turn while unwinding: the poison
    // says nothing about the lock's (empty) data.
    let guard = (depth == 0).then(|| TURNS.read().unwrap_or_else(|p| p.into_inner()));
    HELD.set((depth + 1, exclusive));
    Turn {
        _shared: guard,
        _exclusive: None,
        counted: true,
    }
}

/// The only turn held while this one is.
pub fn exclusive() -> Turn {
    if !on_test_thread() {
        return INNER;
    }
    let (depth, exclusive) = HELD.get();
    assert!(
        depth == 0 || exclusive,
        "exclusive() inside a shared turn would wait for itself: take it first in the test"
    );
    let guard = (depth == 0).then(|| TURNS.write().unwrap_or_else(|p| p.into_inner()));
    HELD.set((depth + 1, true));
    Turn {
        _shared: None,
        _exclusive: guard,
        counted: true,
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.counted {
            let (depth, exclusive) = HELD.get();
            let depth = depth.saturating_sub(1);
            HELD.set((depth, exclusive && depth > 0));
        }
    }
}
