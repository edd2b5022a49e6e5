//! The leak detector's knobs and their defaults.
//!
//! Owns: `LeakConfig`, its defaults (docs/leak-detection.md explains each)
//! and the clamping that keeps any value from breaking the arithmetic.
//! Must not: judge anything; `leak.rs` and `leak/judge.rs` use the values.

/// Knobs of the leak detector. Out-of-range values are clamped by
/// [`LeakTracker::new`](super::LeakTracker::new) rather than rejected, so a bad value cannot panic.
#[derive(Debug, Clone, PartialEq)]
pub struct LeakConfig {
    /// Length of the judged window in seconds (`[processes] leak_window`).
    /// Default 600.
    pub window: f64,
    /// Growth rate at or above which a rising floor counts as a leak.
    /// Default 1 MiB/s (about 3.5 GiB per hour).
    pub min_growth_bytes_per_second: f64,
    /// Share of the window the process must have been seen for before any
    /// verdict (`assess` returns `None` before). Default 1: a caching
    /// allocator's warm-up shorter than about 60% of the window is then
    /// never flagged (at 0.5, one longer than about 40% is). Lower it for
    /// earlier verdicts at the price of flagging long warm-ups.
    pub min_window_fraction: f64,
    /// Downsampling buckets per window; bounds memory per key. Default 60,
    /// clamped to 3..=4096.
    pub buckets: usize,
    /// Segments the covered window is cut into for the floor. Periodic
    /// allocate/free with a period up to one segment (window / segments at
    /// full coverage) leaves a flat floor, and the kept floor (the lowest
    /// floor from a segment on) stays flat for periods up to a third of the
    /// window. Default 7 (each third of the window is two segments), clamped
    /// to 3..=32.
    pub segments: usize,
    /// To raise the flag, the kept floor must rise in each third of the
    /// window, and over the latest segment, by at least this share of what
    /// the estimated growth predicts there. Default 0.5.
    pub spread_ratio: f64,
    /// Hysteresis: a raised flag stays raised while the growth is at least
    /// this share of `min_growth_bytes_per_second` and the kept floor of
    /// the latest half of the window rose at `spread_ratio` times that
    /// pace. Default 0.5.
    pub off_fraction: f64,
    /// To raise the flag, the floors may sit above the kept floor (memory
    /// given back later) by at most this share of a segment's growth, median
    /// over the floors. Default 0.5.
    pub max_given_back: f64,
    /// The flag is raised only once every verdict over this share of the
    /// window called for it, and lowered once every verdict over twice this
    /// share did not (a verdict per bucket that received
    /// a sample; a start may begin before `min_window_fraction` is reached,
    /// so a clear leak is still flagged one window after it appeared).
    /// Floors that jitter line up by chance for a verdict or two, and noise
    /// hides a leak's latest rise as briefly. Default 0.1 (6 buckets of 60).
    pub persistence: f64,
    /// To raise the flag, the kept floor must rise over the window by at
    /// least this many times the floors' scatter (median distance of a
    /// floor from the line through its neighbours). Default 2.
    pub min_rise_over_scatter: f64,
}

impl Default for LeakConfig {
    fn default() -> Self {
        Self {
            window: 600.0,
            min_growth_bytes_per_second: 1_048_576.0,
            min_window_fraction: 1.0,
            buckets: 60,
            segments: 7,
            spread_ratio: 0.5,
            off_fraction: 0.5,
            max_given_back: 0.5,
            persistence: 0.1,
            min_rise_over_scatter: 2.0,
        }
    }
}

impl LeakConfig {
    /// The defaults with another window length (seconds).
    pub fn with_window(window: f64) -> Self {
        Self {
            window,
            ..Self::default()
        }
    }

    /// Replaces values that would make the arithmetic meaningless (NaN,
    /// zero or negative window, fractions outside 0..=1) by safe ones.
    pub(super) fn sanitized(self) -> Self {
        let d = Self::default();
        let fraction = |v: f64, dflt: f64| if v.is_nan() { dflt } else { v.clamp(0.0, 1.0) };
        let non_negative = |v: f64, dflt: f64| if v.is_finite() { v.max(0.0) } else { dflt };
        let window = if self.window.is_finite() && self.window > 0.0 {
            self.window
        } else {
            d.window
        };
        // At least 3 segments: fewer cannot tell a steady rise from a step.
        // At most 32: Theil–Sen is quadratic in them and 32 is already more
        // than the floors of 60 buckets can fill.
        let buckets = self.buckets.clamp(3, 4096);
        Self {
            window,
            min_growth_bytes_per_second: non_negative(self.min_growth_bytes_per_second, d.min_growth_bytes_per_second),
            min_window_fraction: fraction(self.min_window_fraction, d.min_window_fraction),
            buckets,
            segments: self.segments.clamp(3, buckets.min(32)),
            spread_ratio: fraction(self.spread_ratio, d.spread_ratio),
            off_fraction: fraction(self.off_fraction, d.off_fraction),
            max_given_back: fraction(self.max_given_back, d.max_given_back),
            persistence: fraction(self.persistence, d.persistence),
            min_rise_over_scatter: non_negative(self.min_rise_over_scatter, d.min_rise_over_scatter),
        }
    }
}
