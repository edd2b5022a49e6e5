//! Peaks between scrapes: the largest value of each series (a device's used
//! memory, a process's memory) over a sliding window (`[poll] peak_window`,
//! default 60 s), so a two-second spike that caused an out-of-memory error is
//! still in `_max_bytes` when Prometheus scrapes 15-60 s later.
//!
//! Owns: one fixed-size ring of slot maxima per series (`SLOTS` slots of
//! window/`SLOTS` each), so memory per series is constant whatever the
//! poll rate, and the window is covered to within one slot. Must not: read
//! clocks (time comes from the caller), or keep a series not seen in a poll
//! past the sweep that follows it.

use std::collections::HashMap;
use std::hash::Hash;

/// Slots per window: the reported peak covers between 11/12 and the whole window.
pub const SLOTS: usize = 12;

/// One series' window, for callers that keep it in their own record
/// (the pipeline keeps one record per process: one map lookup a poll).
#[derive(Debug, Clone)]
pub struct Series {
    /// Per slot, 1 + the largest value seen in it; 0 = nothing seen.
    slots: [u64; SLOTS],
    /// The absolute slot number of the newest write.
    newest: i64,
}

/// Sliding-window maxima for many series.
#[derive(Debug)]
pub struct PeakTracker<K> {
    slot_seconds: f64,
    /// Each key's window and whether it was observed since the last sweep
    /// (kept here, not in `Series`: the pipeline's records sweep on their own).
    series: HashMap<K, (Series, bool)>,
}

impl<K: Eq + Hash + Clone> PeakTracker<K> {
    /// Peaks over `window_seconds` (at least a millisecond).
    pub fn new(window_seconds: f64) -> Self {
        PeakTracker {
            slot_seconds: (window_seconds / SLOTS as f64).max(1e-3 / SLOTS as f64),
            series: HashMap::new(),
        }
    }

    /// Records `value` at Unix time `now` and returns the series' peak over
    /// the window; `None` when no value was known in the window.
    pub fn observe(&mut self, key: &K, now: f64, value: Option<u64>) -> Option<u64> {
        let slot = self.slot(now);
        let (s, seen) = match self.series.get_mut(key) {
            Some(s) => s,
            None => self.series.entry(key.clone()).or_insert((Series::new(slot), false)),
        };
        *seen = true;
        s.observe(slot, value)
    }

    /// A series first seen at `now`, to keep outside the tracker.
    pub fn series(&self, now: f64) -> Series {
        Series::new(self.slot(now))
    }

    /// [`observe`](Self::observe) on a series kept outside the tracker.
    pub fn observe_series(&self, s: &mut Series, now: f64, value: Option<u64>) -> Option<u64> {
        s.observe(self.slot(now), value)
    }

    fn slot(&self, now: f64) -> i64 {
        (now / self.slot_seconds).floor() as i64
    }

    /// Forgets series not observed since the previous sweep.
    pub fn retain_seen(&mut self) {
        self.series.retain(|_, (_, seen)| std::mem::take(seen));
    }

    pub fn len(&self) -> usize {
        self.series.len()
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

impl Series {
    fn new(slot: i64) -> Self {
        Series {
            slots: [0; SLOTS],
            newest: slot,
        }
    }

    /// Moves the window to `slot`, emptying the slots it moved past (all,
    /// after a gap), records `value` and returns the peak. A clock that
    /// stepped back writes into the newest slot rather than into one the
    /// window has already left.
    fn observe(&mut self, slot: i64, value: Option<u64>) -> Option<u64> {
        if slot > self.newest {
            for k in 0..(slot - self.newest).min(SLOTS as i64) {
                self.slots[index(slot - k)] = 0;
            }
            self.newest = slot;
        }
        let at = index(slot.min(self.newest));
        if let Some(v) = value {
            self.slots[at] = self.slots[at].max(v.saturating_add(1));
        }
        self.slots.iter().max().copied().filter(|&m| m > 0).map(|m| m - 1)
    }
}

fn index(slot: i64) -> usize {
    slot.rem_euclid(SLOTS as i64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spike_stays_for_the_window_then_goes() {
        let mut p = PeakTracker::new(60.0);
        let mut seen = Vec::new();
        for t in 0..80 {
            let v = if (10..12).contains(&t) { 900 } else { 100 };
            seen.push(p.observe(&"gpu", 1000.0 + f64::from(t), Some(v)));
        }
        assert_eq!(seen[9], Some(100));
        assert!(seen[11..65].iter().all(|&v| v == Some(900)), "{seen:?}");
        assert!(seen[75..].iter().all(|&v| v == Some(100)), "{seen:?}");
    }

    #[test]
    fn unknown_values_are_absent_not_zero_and_zero_is_a_value() {
        let mut p = PeakTracker::new(10.0);
        assert_eq!(p.observe(&1, 0.0, None), None);
        assert_eq!(p.observe(&1, 1.0, Some(0)), Some(0));
        assert_eq!(p.observe(&1, 2.0, None), Some(0));
        assert_eq!(p.observe(&1, 30.0, None), None, "the zero left the window");
    }

    #[test]
    fn a_gap_longer_than_the_window_forgets_everything() {
        let mut p = PeakTracker::new(12.0);
        assert_eq!(p.observe(&1, 0.0, Some(50)), Some(50));
        assert_eq!(p.observe(&1, 100.0, Some(5)), Some(5));
    }

    #[test]
    fn a_clock_step_back_keeps_the_peak() {
        let mut p = PeakTracker::new(12.0);
        p.observe(&1, 100.0, Some(50));
        assert_eq!(p.observe(&1, 90.0, Some(7)), Some(50));
        assert_eq!(p.observe(&1, 101.0, Some(3)), Some(50));
    }

    /// A series kept outside the tracker, fed like the tracker's own.
    fn embedded(values: &[(f64, Option<u64>)]) -> Vec<Option<u64>> {
        let p: PeakTracker<u8> = PeakTracker::new(12.0);
        let mut s = p.series(values[0].0);
        values.iter().map(|&(t, v)| p.observe_series(&mut s, t, v)).collect()
    }

    #[test]
    fn an_embedded_series_reports_what_the_tracker_does() {
        const MIB: u64 = 1 << 20;
        for big in [900, 80 << 30, (80 << 30) + 12_345, 143_771 * MIB] {
            let feed: Vec<(f64, Option<u64>)> = (0..40)
                .map(|t| {
                    (
                        f64::from(t),
                        Some(if (5..7).contains(&t) { big } else { big / 3 * 2 + 7 }),
                    )
                })
                .collect();
            let mut p = PeakTracker::new(12.0);
            let exact: Vec<_> = feed.iter().map(|&(t, v)| p.observe(&0, t, v)).collect();
            assert_eq!(embedded(&feed), exact, "{big}");
        }
        // Clock steps and gaps, as in the tests above.
        let feed = [
            (100.0, Some(50)),
            (90.0, Some(7)),
            (101.0, Some(3)),
            (300.0, None),
            (301.0, Some(0)),
        ];
        assert_eq!(embedded(&feed), [Some(50), Some(50), Some(50), None, Some(0)]);
    }

    #[test]
    fn unseen_series_are_swept() {
        let mut p = PeakTracker::new(10.0);
        p.observe(&1, 0.0, Some(1));
        p.observe(&2, 0.0, Some(1));
        p.retain_seen();
        p.observe(&1, 1.0, Some(1));
        p.retain_seen();
        assert_eq!(p.len(), 1);
    }
}
