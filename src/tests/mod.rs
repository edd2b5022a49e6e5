//! What the unit tests share: waiting on a condition with a deadline, never
//! a fixed sleep. Owns that one wait. Must not: be built into the daemon
//! (`lib.rs` declares it under `#[cfg(test)]`). Integration tests have the
//! same helper in `tests/common`.

use std::time::{Duration, Instant};

/// How long a unit test waits for a condition before failing.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// Re-evaluates `check` until it gives a value; fails the test naming
/// `what` once [`WAIT`] has passed.
pub(crate) fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {WAIT:?} waiting for {what}");
        // Another thread makes the condition true: give it the core.
        std::thread::yield_now();
    }
}

/// [`wait_for`] for a plain condition.
pub(crate) fn wait_true(what: &str, mut cond: impl FnMut() -> bool) {
    wait_for(what, || cond().then_some(()));
}
