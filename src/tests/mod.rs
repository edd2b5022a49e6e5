//! What the unit tests share: waiting on a condition with a deadline, never
//! a fixed sleep. Owns that one wait. Must not: be built into the daemon
//! (`lib.rs` declares it under `#[cfg(test)]`). Integration tests have the
//! same helper in `tests/common`.

use std::fmt::Debug;
use std::time::{Duration, Instant};

/// How long a unit test waits for a condition before failing.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// Re-evaluates `check` until it gives `Ok`; once [`WAIT`] has passed,
/// fails the test naming `what` and the last `Err`, which says how far
/// the condition got.
pub(crate) fn wait_for<T, E: Debug>(what: &str, mut check: impl FnMut() -> Result<T, E>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        match check() {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < deadline,
                "timed out after {WAIT:?} waiting for {what}; last: {last:?}"
            ),
        }
        // Another thread makes the condition true: give it the core.
        std::thread::yield_now();
    }
}

/// [`wait_for`] for a plain condition.
pub(crate) fn wait_true(what: &str, mut cond: impl FnMut() -> bool) {
    wait_for(what, || if cond() { Ok(()) } else { Err("still false") });
}
