//! The fixed ring of closed bucket minima behind one leak-tracker key.
//!
//! Owns: storage and iteration of at most `len` bucket minima, indexed by
//! bucket number modulo `len`. Must not: judge anything or know about
//! time; `leak.rs` decides what a bucket is and when it is filed or dropped.

use std::num::NonZeroU64;

/// Fixed storage for the closed buckets of one key: each slot holds its
/// bucket's exact minimum plus one, or nothing. The offset lets `Option`
/// use the zero niche: 8 bytes a slot, not 16 (a process keeps 60).
#[derive(Debug)]
pub(super) struct Ring {
    slots: Box<[Option<NonZeroU64>]>,
}

impl Ring {
    pub(super) fn new(len: usize) -> Self {
        Ring {
            slots: vec![None; len.max(1)].into_boxed_slice(),
        }
    }

    fn slot(&self, idx: i64) -> usize {
        // rem_euclid of a positive modulus is in 0..len.
        usize::try_from(idx.rem_euclid(self.slots.len() as i64)).unwrap_or(0)
    }

    pub(super) fn set(&mut self, idx: i64, min: u64) {
        // u64::MAX bytes is no GPU's figure; it saturates to the slot's top.
        self.slots[self.slot(idx)] = NonZeroU64::new(min.saturating_add(1));
    }

    pub(super) fn clear(&mut self, idx: i64) {
        self.slots[self.slot(idx)] = None;
    }

    pub(super) fn clear_all(&mut self) {
        self.slots.fill(None);
    }

    /// The slots of the indices `lo..hi` (at most `len` apart), oldest
    /// first: slot `first + k` (wrapped) holds index `lo + k`, so the range
    /// is at most two runs, `first..` then `..first`.
    fn window(&self, lo: i64, hi: i64) -> impl Iterator<Item = &Option<NonZeroU64>> {
        let n = usize::try_from(hi.saturating_sub(lo))
            .unwrap_or(0)
            .min(self.slots.len());
        let (wrapped, tail) = self.slots.split_at(self.slot(lo));
        let head = &tail[..n.min(tail.len())];
        head.iter().chain(&wrapped[..n - head.len()])
    }

    /// Calls `f` with (index, minimum) of the closed buckets with an index
    /// in `lo..hi` (at most `len` apart), oldest first.
    #[cfg(test)]
    pub(super) fn for_each(&self, lo: i64, hi: i64, mut f: impl FnMut(i64, u64)) {
        for (k, min) in self.window(lo, hi).enumerate() {
            if let Some(stored) = *min {
                f(lo.saturating_add(k as i64), stored.get() - 1);
            }
        }
    }

    /// The lowest closed bucket with an index in `lo..hi` (at most `len`
    /// apart) as (minimum, index), the earliest on ties; `None` when none
    /// is filled. A segment's floor.
    pub(super) fn min_in(&self, lo: i64, hi: i64) -> Option<(u64, i64)> {
        // One loop, no per-bucket callback: a leak verdict takes the floor
        // of every segment of each key it judges.
        let mut best: Option<(u64, usize)> = None;
        for (k, slot) in self.window(lo, hi).enumerate() {
            if let Some(stored) = *slot
                && best.is_none_or(|(m, _)| stored.get() < m)
            {
                best = Some((stored.get(), k));
            }
        }
        best.map(|(stored, k)| (stored - 1, lo.saturating_add(k as i64)))
    }

    /// How many slots hold a bucket.
    #[cfg(test)]
    pub(super) fn filled(&self) -> usize {
        self.slots.iter().flatten().count()
    }
}

#[cfg(test)]
mod tests;
