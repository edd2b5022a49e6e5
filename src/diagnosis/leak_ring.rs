//! The fixed ring of closed bucket minima behind one leak-tracker key.
//!
//! Owns: storage and iteration of at most `len` bucket minima, indexed by
//! bucket number modulo `len`, with a bitmap of the slots that hold one.
//! Must not: judge anything or know about time; `leak.rs` decides what a
//! bucket is and when it is filed or dropped.

use super::Bucket;

/// Fixed storage for the closed buckets of one key: `len` minima, then a
/// bitmap of the slots that hold one.
#[derive(Debug)]
pub(super) struct Ring {
    pub(super) words: Box<[u64]>,
    len: usize,
}

impl Ring {
    pub(super) fn new(len: usize) -> Self {
        Self {
            words: vec![0; len + len.div_ceil(64)].into_boxed_slice(),
            len,
        }
    }

    fn slot(&self, idx: i64) -> usize {
        // rem_euclid of a positive modulus is in 0..len.
        usize::try_from(idx.rem_euclid(self.len as i64)).unwrap_or(0)
    }

    fn get_slot(&self, s: usize) -> Option<u64> {
        let filled = ((self.words[self.len + s / 64] >> (s % 64)) & 1) == 1;
        filled.then(|| self.words[s])
    }

    pub(super) fn set(&mut self, idx: i64, min: u64) {
        let s = self.slot(idx);
        self.words[s] = min;
        self.words[self.len + s / 64] |= 1 << (s % 64);
    }

    pub(super) fn clear(&mut self, idx: i64) {
        let s = self.slot(idx);
        self.words[self.len + s / 64] &= !(1 << (s % 64));
    }

    pub(super) fn clear_all(&mut self) {
        self.words[self.len..].fill(0);
    }

    /// The closed buckets with an index in `lo..hi` (at most `len` apart),
    /// oldest first. The slot advances with the index (one modulo in all:
    /// this runs for every key each time a bucket closes).
    pub(super) fn iter(&self, lo: i64, hi: i64) -> impl Iterator<Item = Bucket> + '_ {
        let mut slot = self.slot(lo);
        (lo..hi).filter_map(move |idx| {
            let s = slot;
            slot = if slot + 1 == self.len { 0 } else { slot + 1 };
            self.get_slot(s).map(|min| Bucket { idx, min })
        })
    }

    /// How many slots hold a bucket.
    #[cfg(test)]
    pub(super) fn filled(&self) -> usize {
        self.words[self.len..].iter().map(|w| w.count_ones() as usize).sum()
    }
}
