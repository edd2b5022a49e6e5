//! The fixed ring of closed bucket minima behind one leak-tracker key.
//!
//! Owns: storage and iteration of at most `len` bucket minima, indexed by
//! bucket number modulo `len`. Must not: judge anything or know about
//! time; `leak.rs` decides what a bucket is and when it is filed or dropped.
//!
//! Entries are 4-byte exact offsets from the series' first sample
//! (`bytes32::delta`), empty slots `bytes32::NONE`: 240 bytes on the heap
//! for 60 buckets. NVML's whole-MiB figures always fit; a minimum that has
//! no exact 4-byte code (the simulated fleets' arbitrary bytes, offsets
//! beyond 64 MiB) turns the ring into 8-byte entries and a bitmap, the
//! layout before issue 21, so no verdict ever rests on a rounded figure.

use super::Bucket;
use crate::diagnosis::bytes32::{self, NONE};

/// Fixed storage for the closed buckets of one key.
#[derive(Debug)]
pub(super) enum Ring {
    /// Offsets from `base`, one per slot.
    Narrow { base: u64, words: Box<[u32]> },
    /// `len` minima, then a bitmap of the slots that hold one.
    Wide { words: Box<[u64]>, len: usize },
}

impl Ring {
    pub(super) fn new(len: usize) -> Self {
        Ring::Narrow {
            base: 0,
            words: vec![NONE; len.max(1)].into_boxed_slice(),
        }
    }

    /// Offsets are taken from `base` (the series' first sample: later
    /// figures are near it). Only while nothing is stored.
    pub(super) fn set_base(&mut self, to: u64) {
        if let Ring::Narrow { base, words } = self {
            if words.iter().all(|&w| w == NONE) {
                *base = to;
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Ring::Narrow { words, .. } => words.len(),
            Ring::Wide { len, .. } => *len,
        }
    }

    fn slot(&self, idx: i64) -> usize {
        // rem_euclid of a positive modulus is in 0..len.
        usize::try_from(idx.rem_euclid(self.len() as i64)).unwrap_or(0)
    }

    fn get_slot(&self, s: usize) -> Option<u64> {
        match self {
            Ring::Narrow { base, words } => (words[s] != NONE).then(|| bytes32::undelta(*base, words[s])),
            Ring::Wide { words, len } => {
                let filled = ((words[len + s / 64] >> (s % 64)) & 1) == 1;
                filled.then(|| words[s])
            }
        }
    }

    pub(super) fn set(&mut self, idx: i64, min: u64) {
        let s = self.slot(idx);
        if let Ring::Narrow { base, words } = self {
            match bytes32::delta(*base, min) {
                Some(code) => {
                    words[s] = code;
                    return;
                }
                None => self.widen(),
            }
        }
        if let Ring::Wide { words, len } = self {
            words[s] = min;
            words[*len + s / 64] |= 1 << (s % 64);
        }
    }

    /// Moves to 8-byte entries, keeping every stored minimum.
    fn widen(&mut self) {
        let len = self.len();
        let mut words = vec![0u64; len + len.div_ceil(64)].into_boxed_slice();
        for s in 0..len {
            if let Some(v) = self.get_slot(s) {
                words[s] = v;
                words[len + s / 64] |= 1 << (s % 64);
            }
        }
        *self = Ring::Wide { words, len };
    }

    pub(super) fn clear(&mut self, idx: i64) {
        let s = self.slot(idx);
        match self {
            Ring::Narrow { words, .. } => words[s] = NONE,
            Ring::Wide { words, len } => words[*len + s / 64] &= !(1 << (s % 64)),
        }
    }

    pub(super) fn clear_all(&mut self) {
        match self {
            Ring::Narrow { words, .. } => words.fill(NONE),
            Ring::Wide { words, len } => words[*len..].fill(0),
        }
    }

    /// Calls `f` with the closed buckets with an index in `lo..hi` (at most
    /// `len` apart), oldest first. The layout is matched once and the slots
    /// are walked as two plain slices (from `lo`'s slot to the end, then
    /// from the start): this runs for every key each time a bucket closes,
    /// and a per-slot enum match, modulo and bounds check were most of it.
    pub(super) fn for_each(&self, lo: i64, hi: i64, mut f: impl FnMut(Bucket)) {
        let len = self.len();
        let n = usize::try_from(hi.saturating_sub(lo)).unwrap_or(0).min(len);
        let first = self.slot(lo);
        // Slot `first + k` (wrapped) holds index `lo + k`.
        let (tail, head) = (first..len.min(first + n), 0..n.saturating_sub(len - first));
        let at = |k: usize| lo.saturating_add(k as i64);
        match self {
            Ring::Narrow { base, words } => {
                let mut k = 0;
                for s in [tail, head] {
                    for &w in words.get(s).unwrap_or_default() {
                        if w != NONE {
                            f(Bucket {
                                idx: at(k),
                                min: bytes32::undelta(*base, w),
                            });
                        }
                        k += 1;
                    }
                }
            }
            Ring::Wide { words, len } => {
                let (mins, bits) = words.split_at(*len);
                let mut k = 0;
                for s in [tail, head] {
                    for i in s {
                        let filled = bits.get(i / 64).is_some_and(|b| (b >> (i % 64)) & 1 == 1);
                        if let (true, Some(&min)) = (filled, mins.get(i)) {
                            f(Bucket { idx: at(k), min });
                        }
                        k += 1;
                    }
                }
            }
        }
    }

    /// The lowest closed bucket with an index in `lo..hi` (at most `len`
    /// apart) as (minimum, index), the earliest on ties; `None` when none
    /// is filled. A segment's floor: this runs for every segment of every
    /// key each time a bucket closes, so the narrow layout compares codes
    /// as ordered keys ([`order`]) and decodes only the winner.
    pub(super) fn min_in(&self, lo: i64, hi: i64) -> Option<(u64, i64)> {
        let Ring::Narrow { base, words } = self else {
            let mut best: Option<(u64, i64)> = None;
            self.for_each(lo, hi, |b| {
                if best.is_none_or(|(m, _)| b.min < m) {
                    best = Some((b.min, b.idx));
                }
            });
            return best;
        };
        let len = words.len();
        let n = usize::try_from(hi.saturating_sub(lo)).unwrap_or(0).min(len);
        let first = self.slot(lo);
        let (tail, head) = (first..len.min(first + n), 0..n.saturating_sub(len - first));
        // (key, offset from `lo`, code) of the lowest so far.
        let (mut best, mut at, mut code) = (u32::MAX, 0, NONE);
        let mut k = 0usize;
        for s in [tail, head] {
            for &w in words.get(s).unwrap_or_default() {
                let key = order(w);
                if key < best {
                    (best, at, code) = (key, k, w);
                }
                k += 1;
            }
        }
        (code != NONE).then(|| (bytes32::undelta(*base, code), lo.saturating_add(at as i64)))
    }

    /// How many slots hold a bucket.
    #[cfg(test)]
    pub(super) fn filled(&self) -> usize {
        (0..self.len()).filter(|&s| self.get_slot(s).is_some()).count()
    }

    /// Bytes per slot: 4 while narrow.
    #[cfg(test)]
    pub(super) fn entry_bytes(&self) -> usize {
        match self {
            Ring::Narrow { .. } => 4,
            Ring::Wide { .. } => 8,
        }
    }
}

/// A narrow code as a key ordered like the value it stands for, `NONE`
/// last. Codes are sign and magnitude (`bytes32::delta`, magnitude codes
/// monotone): a negative one flips all its bits, a positive one its sign,
/// so both sit in value order; `NONE` becomes 0, which no code does (the
/// largest magnitude code is below 2^31 - 1), and the wrapping decrement
/// moves it last.
fn order(code: u32) -> u32 {
    let negative = 0u32.wrapping_sub(code >> 31);
    (code ^ (negative | 1 << 31)).wrapping_sub(1)
}
