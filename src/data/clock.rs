//! The daemon's two clocks: Unix time for what is shown and sent (snapshot
//! timestamps, alert times, outbox and audit records) and a monotonic clock
//! for durations (rule `for`, poll deadlines), so a wall-clock jump cannot
//! fire an alert. A leaf: it depends on nothing in the crate and must not
//! grow state beyond the monotonic origin.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Unix time now, as f64 seconds (0 before 1970, which only a broken clock shows).
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Unix time now in whole microseconds, for ordering records written to disk.
pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
}

/// Seconds on a monotonic clock since the first call (the daemon's start).
pub fn monotonic_now() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward() {
        let (a, m) = (unix_now(), monotonic_now());
        assert!(a > 1.6e9, "unix time {a} is before 2020");
        assert!(monotonic_now() >= m);
        assert!(unix_micros() as f64 / 1e6 >= a.floor());
    }
}
