//! The fixed ring of closed bucket minima behind one leak-tracker key.
//!
//! Owns: storage and iteration of at most `len` bucket minima, indexed by
//! bucket number modulo `len`. Must not: judge anything or know about
//! time; `leak.rs` decides what a bucket is and when it is filed or dropped.
//!
//! Entries are exact codes: the offset from the series' first sample in
//! units of 2^`shift` bytes, biased so that codes order like the values
//! they stand for, the empty slot (all bytes 0xFF) last. `shift` starts at
//! 20 (NVML reports whole MiB) and drops to the offsets' lowest set bit when
//! a figure needs it (the simulated fleets' arbitrary bytes), every stored
//! code rescaled exactly.
//!
//! The default 60 slots live in the series itself as 2-byte codes (120
//! bytes): whole MiB within 32 GiB either way of the first sample, which is
//! every process NVML lists short of one that grows by a whole GPU (issue
//! 21, round 10: 3-byte codes in place were 3.8 MB more at 64 GPUs x 1000
//! processes). A figure with no 2-byte code moves the ring to the heap as
//! 3-byte codes (8 TiB of whole MiB either way, or 8 MiB of odd bytes), and
//! one with no 3-byte code to 8-byte entries and a bitmap, so no verdict
//! ever rests on a rounded figure. A longer window starts on the heap.

use super::Bucket;

#[path = "leak_ring_codes.rs"]
mod codes;
use codes::{bias, each_code, lowest_code, none, put, read, write};

/// Slots kept inline: the default window's buckets.
const INLINE: usize = 60;
/// Bytes per entry in place.
const SHORT: usize = 2;
/// Bytes per entry on the heap.
const LONG: usize = 3;
/// The unit a new ring counts in: 2^20 bytes, NVML's MiB.
const START_SHIFT: u8 = 20;

/// Fixed storage for the closed buckets of one key.
#[derive(Debug)]
pub(super) enum Ring {
    /// Up to [`INLINE`] 2-byte codes in place.
    Inline {
        base: u64,
        shift: u8,
        len: u8,
        codes: [u8; INLINE * SHORT],
    },
    /// 3-byte codes: more slots than fit in place, or a figure with no
    /// 2-byte code.
    Heap { base: u64, shift: u8, codes: Box<[u8]> },
    /// `len` minima, then a bitmap of the slots that hold one.
    Wide { words: Box<[u64]>, len: usize },
}

/// The narrow layouts' fields, borrowed.
struct Narrow<'a> {
    base: u64,
    shift: u8,
    codes: &'a [u8],
    /// Bytes per code: [`SHORT`] or [`LONG`].
    width: usize,
}

impl Ring {
    pub(super) fn new(len: usize) -> Self {
        let len = len.max(1);
        match u8::try_from(len).ok().filter(|&l| usize::from(l) <= INLINE) {
            Some(len) => Ring::Inline {
                base: 0,
                shift: START_SHIFT,
                len,
                codes: [0xFF; INLINE * SHORT],
            },
            None => Ring::Heap {
                base: 0,
                shift: START_SHIFT,
                codes: vec![0xFF; len * LONG].into_boxed_slice(),
            },
        }
    }

    fn narrow(&self) -> Option<Narrow<'_>> {
        match self {
            Ring::Inline {
                base,
                shift,
                len,
                codes,
            } => Some(Narrow {
                base: *base,
                shift: *shift,
                codes: codes.get(..usize::from(*len) * SHORT).unwrap_or_default(),
                width: SHORT,
            }),
            Ring::Heap { base, shift, codes } => Some(Narrow {
                base: *base,
                shift: *shift,
                codes,
                width: LONG,
            }),
            Ring::Wide { .. } => None,
        }
    }

    /// (base, unit, codes, bytes per code) of a narrow layout.
    fn narrow_mut(&mut self) -> Option<(&mut u64, &mut u8, &mut [u8], usize)> {
        match self {
            Ring::Inline {
                base,
                shift,
                len,
                codes,
            } => Some((
                base,
                shift,
                codes.get_mut(..usize::from(*len) * SHORT).unwrap_or_default(),
                SHORT,
            )),
            Ring::Heap { base, shift, codes } => Some((base, shift, codes, LONG)),
            Ring::Wide { .. } => None,
        }
    }

    /// Offsets are taken from `base` (the series' first sample: later
    /// figures are near it). Only while nothing is stored.
    pub(super) fn set_base(&mut self, to: u64) {
        if let Some((base, _, codes, _)) = self.narrow_mut() {
            if codes.iter().all(|&b| b == 0xFF) {
                *base = to;
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Ring::Inline { len, .. } => usize::from(*len),
            Ring::Heap { codes, .. } => codes.len() / LONG,
            Ring::Wide { len, .. } => *len,
        }
    }

    fn slot(&self, idx: i64) -> usize {
        // rem_euclid of a positive modulus is in 0..len.
        usize::try_from(idx.rem_euclid(self.len() as i64)).unwrap_or(0)
    }

    fn get_slot(&self, s: usize) -> Option<u64> {
        match (self.narrow(), self) {
            (Some(n), _) if n.width == SHORT => {
                let code = read::<SHORT>(n.codes.get(s * SHORT..).unwrap_or_default());
                (code != none::<SHORT>()).then(|| n.value::<SHORT>(code))
            }
            (Some(n), _) => {
                let code = read::<LONG>(n.codes.get(s * LONG..).unwrap_or_default());
                (code != none::<LONG>()).then(|| n.value::<LONG>(code))
            }
            (None, Ring::Wide { words, len }) => {
                let filled = ((words[len + s / 64] >> (s % 64)) & 1) == 1;
                filled.then(|| words[s])
            }
            (None, _) => None,
        }
    }

    pub(super) fn set(&mut self, idx: i64, min: u64) {
        let s = self.slot(idx);
        while let Some((base, shift, codes, width)) = self.narrow_mut() {
            if put(*base, shift, codes, s, min, width) {
                return;
            }
            if width == SHORT {
                self.lengthen();
            } else {
                self.widen();
            }
        }
        if let Ring::Wide { words, len } = self {
            words[s] = min;
            words[*len + s / 64] |= 1 << (s % 64);
        }
    }

    /// Moves the codes in place to 3-byte codes on the heap, same base and
    /// unit, keeping every stored minimum.
    fn lengthen(&mut self) {
        if let Ring::Inline {
            base,
            shift,
            len,
            codes,
        } = self
        {
            let len = usize::from(*len);
            let mut long = vec![0xFF; len * LONG].into_boxed_slice();
            for (s, c) in codes.chunks_exact(SHORT).take(len).enumerate() {
                let c = read::<SHORT>(c);
                if c != none::<SHORT>() {
                    // A 2-byte offset always has a 3-byte code.
                    let units = i64::from(c) - bias::<SHORT>() + bias::<LONG>();
                    write::<LONG>(&mut long, s, units as u32);
                }
            }
            *self = Ring::Heap {
                base: *base,
                shift: *shift,
                codes: long,
            };
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
        match self.narrow_mut() {
            // Empty is all bytes 0xFF whatever the width.
            Some((_, _, codes, width)) => {
                if let Some(c) = codes.get_mut(s * width..(s + 1) * width) {
                    c.fill(0xFF);
                }
            }
            None => {
                if let Ring::Wide { words, len } = self {
                    words[*len + s / 64] &= !(1 << (s % 64));
                }
            }
        }
    }

    pub(super) fn clear_all(&mut self) {
        match self.narrow_mut() {
            Some((_, _, codes, _)) => codes.fill(0xFF),
            None => {
                if let Ring::Wide { words, len } = self {
                    words[*len..].fill(0);
                }
            }
        }
    }

    /// The slot ranges holding indices `lo..hi` (at most `len` apart),
    /// oldest first: from `lo`'s slot to the end, then from the start.
    fn spans(&self, lo: i64, hi: i64) -> [std::ops::Range<usize>; 2] {
        let len = self.len();
        let n = usize::try_from(hi.saturating_sub(lo)).unwrap_or(0).min(len);
        let first = self.slot(lo);
        // Slot `first + k` (wrapped) holds index `lo + k`.
        [first..len.min(first + n), 0..n.saturating_sub(len - first)]
    }

    /// Calls `f` with the closed buckets with an index in `lo..hi` (at most
    /// `len` apart), oldest first. The layout is matched once and the slots
    /// are walked as two plain slices: this runs for every key each time a
    /// bucket closes, and a per-slot enum match, modulo and bounds check
    /// were most of it.
    pub(super) fn for_each(&self, lo: i64, hi: i64, mut f: impl FnMut(Bucket)) {
        let spans = self.spans(lo, hi);
        let at = |k: usize| lo.saturating_add(k as i64);
        match self.narrow() {
            Some(n) if n.width == SHORT => each_code::<SHORT>(&n, spans, |k, min| f(Bucket { idx: at(k), min })),
            Some(n) => each_code::<LONG>(&n, spans, |k, min| f(Bucket { idx: at(k), min })),
            None => {
                if let Ring::Wide { words, len } = self {
                    let (mins, bits) = words.split_at(*len);
                    let mut k = 0;
                    for s in spans {
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
    }

    /// The lowest closed bucket with an index in `lo..hi` (at most `len`
    /// apart) as (minimum, index), the earliest on ties; `None` when none
    /// is filled. A segment's floor: this runs for every segment of every
    /// key each time a bucket closes, so the narrow layouts compare codes
    /// (ordered like their values, empty last) and decode only the winner.
    pub(super) fn min_in(&self, lo: i64, hi: i64) -> Option<(u64, i64)> {
        let best = match self.narrow() {
            Some(n) if n.width == SHORT => lowest_code::<SHORT>(&n, self.spans(lo, hi)),
            Some(n) => lowest_code::<LONG>(&n, self.spans(lo, hi)),
            None => {
                let mut best: Option<(u64, i64)> = None;
                self.for_each(lo, hi, |b| {
                    if best.is_none_or(|(m, _)| b.min < m) {
                        best = Some((b.min, b.idx));
                    }
                });
                return best;
            }
        };
        best.map(|(min, k)| (min, lo.saturating_add(k as i64)))
    }

    /// How many slots hold a bucket.
    #[cfg(test)]
    pub(super) fn filled(&self) -> usize {
        (0..self.len()).filter(|&s| self.get_slot(s).is_some()).count()
    }

    /// Bytes per slot: 2 in place, 3 on the heap, 8 once wide.
    #[cfg(test)]
    pub(super) fn entry_bytes(&self) -> usize {
        match self {
            Ring::Inline { .. } => SHORT,
            Ring::Heap { .. } => LONG,
            Ring::Wide { .. } => 8,
        }
    }
}

#[cfg(test)]
#[path = "leak_ring_tests.rs"]
mod tests;
