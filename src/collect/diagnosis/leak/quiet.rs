//! [`Quiet`]: the run of filed bucket minima that ends at a key's latest
//! filed bucket and never went below one floor, touching it at least every
//! `gap` buckets; a verdict on a window lying wholly inside such a run is
//! known without walking the ring.
//!
//! Owns: that bookkeeping and the proof that such a window's segment floors
//! are all equal and all present. Must not: store the minima (the ring
//! does) or judge anything else.

/// The latest run of filed buckets none below `floor`, with a filing at
/// `floor` at most `gap` buckets after the one before.
#[derive(Debug, Clone, Copy)]
pub(super) struct Quiet {
    /// Index of the run's first filed bucket (one at its floor).
    from: i64,
    /// Index of the latest filed bucket at the floor.
    last_floor: i64,
    /// The floor, as the ring keeps a minimum (plus one, saturating), so
    /// that equal here is equal there.
    floor: u64,
}

impl Default for Quiet {
    fn default() -> Self {
        Quiet {
            from: i64::MAX,
            last_floor: i64::MIN,
            floor: 0,
        }
    }
}

impl Quiet {
    /// Notes that bucket `idx` (later than any filed before) was filed with
    /// minimum `min`.
    pub(super) fn file(&mut self, idx: i64, min: u64, gap: i64) {
        let min = min.saturating_add(1);
        // Lower than the floor, or the floor not touched for too long: a
        // new run starts here, at this floor.
        if min < self.floor || idx.saturating_sub(self.last_floor) > gap {
            (self.from, self.floor) = (idx, min);
        }
        if min == self.floor {
            self.last_floor = idx;
        }
    }

    /// Whether every segment of the window `start..end`, each at least
    /// `gap` buckets wide, has the run's floor as its floor. The run began
    /// at or before `start` with a filing at the floor, later ones at the
    /// floor are at most `gap` apart and the latest is within `gap` of
    /// `end`: any `gap` consecutive buckets of the window hold one, and no
    /// filing of the run is lower. Equal floors judge flat (`judge::flat`).
    pub(super) fn covers(&self, start: i64, end: i64, gap: i64) -> bool {
        self.from <= start && end.saturating_sub(self.last_floor) <= gap
    }
}
