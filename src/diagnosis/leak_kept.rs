//! The latest verdict as a leak-tracker key keeps it between polls.
//!
//! Owns: [`Kept`], a [`Trend`] in 40 bytes rather than 48, and the way back.
//! Must not: judge anything (`leak_judge.rs` does) or hold more than the
//! verdict; at 64 GPUs x 1000 processes every byte here is 64 KB.
//!
//! The window's coverage is kept as the count of buckets it was computed
//! from (at most `buckets`, 4096) and computed again, as `evaluate` does,
//! when read: the same `f64`, to the bit.

use super::Trend;

#[derive(Debug, Clone, Copy)]
pub(super) struct Kept {
    growth: f64,
    spread: f64,
    floor_rise: f64,
    kept_rise: f64,
    /// Buckets judged: the window's or the history's, if shorter.
    slots: u16,
    suspected: bool,
}

impl Kept {
    /// `t` (computed over `slots` of `buckets` buckets) with the flag
    /// `suspected`.
    pub(super) fn new(t: Trend, suspected: bool, slots: u16, buckets: usize) -> Self {
        debug_assert_eq!(covered(slots, buckets).to_bits(), t.window_covered.to_bits());
        Kept {
            growth: t.growth_bytes_per_second,
            spread: t.spread,
            floor_rise: t.floor_rise_bytes,
            kept_rise: t.kept_rise_bytes,
            slots,
            suspected,
        }
    }

    /// The verdict, for the same `buckets` it was kept with.
    pub(super) fn trend(self, buckets: usize) -> Trend {
        Trend {
            growth_bytes_per_second: self.growth,
            suspected: self.suspected,
            spread: self.spread,
            floor_rise_bytes: self.floor_rise,
            kept_rise_bytes: self.kept_rise,
            window_covered: covered(self.slots, buckets),
        }
    }
}

/// The share of the window `slots` buckets cover, as `evaluate` computes it.
fn covered(slots: u16, buckets: usize) -> f64 {
    (f64::from(slots) / buckets as f64).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_verdict_reads_back_to_the_bit_in_less_room() {
        for (slots, buckets) in [(1, 60), (37, 60), (60, 60), (7, 3), (4096, 4096), (100, 4096)] {
            let t = Trend {
                growth_bytes_per_second: -1.0 / 3.0,
                suspected: slots % 2 == 0,
                spread: 0.1,
                floor_rise_bytes: 1e18 + 1.0,
                kept_rise_bytes: f64::MIN_POSITIVE,
                window_covered: (slots as f64 / buckets as f64).min(1.0),
            };
            let back = Kept::new(t, t.suspected, slots, buckets).trend(buckets);
            assert_eq!(format!("{back:?}"), format!("{t:?}"));
            assert_eq!(back.window_covered.to_bits(), t.window_covered.to_bits());
        }
        assert!(std::mem::size_of::<Option<Kept>>() <= 40);
    }
}
