//! The fixed ring of closed bucket minima behind one leak-tracker key.
//!
//! Owns: storage and iteration of at most `len` bucket minima, indexed by
//! bucket number modulo `len`. Must not: judge anything or know about
//! time; `leak.rs` decides what a bucket is and when it is filed or dropped.
//!
//! Entries are 3-byte exact codes: the offset from the series' first sample
//! in units of 2^`shift` bytes, biased so that codes order like the values
//! they stand for, the empty slot ([`NONE`]) last. `shift` starts at 20
//! (NVML reports whole MiB: offsets up to 8 TiB either way fit) and drops to
//! the offsets' lowest set bit when a figure needs it (the simulated fleets'
//! arbitrary bytes: 8 MiB either way), every stored code rescaled exactly.
//! A minimum with no exact code then turns the ring into 8-byte entries and
//! a bitmap, so no verdict ever rests on a rounded figure. The default 60
//! slots (180 bytes) live in the series itself (issue 21, round 8: a
//! separate 240-byte block cost a pointer, a malloc header and a cache miss
//! per process); a longer window keeps them on the heap.

use super::Bucket;

/// Slots kept inline: the default window's buckets.
const INLINE: usize = 60;
/// Bytes per narrow entry.
const CODE: usize = 3;
/// The empty slot: the largest 3-byte number (all bytes 0xFF), so a slot
/// filled with 0xFF is empty and empty sorts after every code.
const NONE: u32 = (1 << 24) - 1;
/// The code of offset 0: a code is the offset in units plus this.
const BIAS: i64 = 1 << 23;
/// The unit a new ring counts in: 2^20 bytes, NVML's MiB.
const START_SHIFT: u8 = 20;

/// Fixed storage for the closed buckets of one key.
#[derive(Debug)]
pub(super) enum Ring {
    /// Up to [`INLINE`] codes in place.
    Inline {
        base: u64,
        shift: u8,
        len: u8,
        codes: [u8; INLINE * CODE],
    },
    /// More codes than fit in place.
    Heap { base: u64, shift: u8, codes: Box<[u8]> },
    /// `len` minima, then a bitmap of the slots that hold one.
    Wide { words: Box<[u64]>, len: usize },
}

/// The narrow layout's fields, borrowed.
struct Narrow<'a> {
    base: u64,
    shift: u8,
    codes: &'a [u8],
}

impl Narrow<'_> {
    fn value(&self, code: u32) -> u64 {
        // |offset| < 2^23 units of at most 2^20 bytes: no overflow.
        self.base.wrapping_add_signed((i64::from(code) - BIAS) << self.shift)
    }
}

fn read(c: &[u8]) -> u32 {
    match c {
        [a, b, c, ..] => u32::from_le_bytes([*a, *b, *c, 0]),
        _ => NONE,
    }
}

fn write(codes: &mut [u8], s: usize, code: u32) {
    if let Some(c) = codes.get_mut(s * CODE..(s + 1) * CODE) {
        c.copy_from_slice(&code.to_le_bytes()[..CODE]);
    }
}

/// The code of the offset `units` (in the ring's unit), if it has one.
fn code_of(units: i128) -> Option<u32> {
    let c = units.checked_add(i128::from(BIAS))?;
    u32::try_from(c).ok().filter(|&c| c < NONE)
}

/// Stores `v` in slot `s` exactly, lowering the unit (and rescaling the
/// stored codes) if `v`'s offset needs it; `false`, touching nothing,
/// when no 3-byte code holds it.
fn put(base: u64, shift: &mut u8, codes: &mut [u8], s: usize, v: u64) -> bool {
    let offset = i128::from(v) - i128::from(base);
    let unit = if offset == 0 {
        *shift
    } else {
        // At most 63 (|offset| < 2^64), and no more than the unit in use.
        offset.trailing_zeros().min(u32::from(*shift)) as u8
    };
    let Some(code) = code_of(offset >> unit) else {
        return false;
    };
    if unit < *shift {
        let k = *shift - unit;
        let rescaled = |c: u32| code_of(i128::from(i64::from(c) - BIAS) << k);
        let stored = codes.chunks_exact(CODE).map(read).filter(|&c| c != NONE);
        if stored.clone().any(|c| rescaled(c).is_none()) {
            return false;
        }
        for chunk in codes.chunks_exact_mut(CODE) {
            let c = read(chunk);
            if let Some(r) = rescaled(c).filter(|_| c != NONE) {
                chunk.copy_from_slice(&r.to_le_bytes()[..CODE]);
            }
        }
        *shift = unit;
    }
    write(codes, s, code);
    true
}

impl Ring {
    pub(super) fn new(len: usize) -> Self {
        let len = len.max(1);
        match u8::try_from(len).ok().filter(|&l| usize::from(l) <= INLINE) {
            Some(len) => Ring::Inline {
                base: 0,
                shift: START_SHIFT,
                len,
                codes: [0xFF; INLINE * CODE],
            },
            None => Ring::Heap {
                base: 0,
                shift: START_SHIFT,
                codes: vec![0xFF; len * CODE].into_boxed_slice(),
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
                codes: codes.get(..usize::from(*len) * CODE).unwrap_or_default(),
            }),
            Ring::Heap { base, shift, codes } => Some(Narrow {
                base: *base,
                shift: *shift,
                codes,
            }),
            Ring::Wide { .. } => None,
        }
    }

    fn narrow_mut(&mut self) -> Option<(&mut u64, &mut u8, &mut [u8])> {
        match self {
            Ring::Inline {
                base,
                shift,
                len,
                codes,
            } => Some((
                base,
                shift,
                codes.get_mut(..usize::from(*len) * CODE).unwrap_or_default(),
            )),
            Ring::Heap { base, shift, codes } => Some((base, shift, codes)),
            Ring::Wide { .. } => None,
        }
    }

    /// Offsets are taken from `base` (the series' first sample: later
    /// figures are near it). Only while nothing is stored.
    pub(super) fn set_base(&mut self, to: u64) {
        if let Some((base, _, codes)) = self.narrow_mut() {
            if codes.iter().all(|&b| b == 0xFF) {
                *base = to;
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Ring::Inline { len, .. } => usize::from(*len),
            Ring::Heap { codes, .. } => codes.len() / CODE,
            Ring::Wide { len, .. } => *len,
        }
    }

    fn slot(&self, idx: i64) -> usize {
        // rem_euclid of a positive modulus is in 0..len.
        usize::try_from(idx.rem_euclid(self.len() as i64)).unwrap_or(0)
    }

    fn get_slot(&self, s: usize) -> Option<u64> {
        match (self.narrow(), self) {
            (Some(n), _) => {
                let code = read(n.codes.get(s * CODE..).unwrap_or_default());
                (code != NONE).then(|| n.value(code))
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
        if let Some((base, shift, codes)) = self.narrow_mut() {
            if put(*base, shift, codes, s, min) {
                return;
            }
            self.widen();
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
        match self.narrow_mut() {
            Some((_, _, codes)) => write(codes, s, NONE),
            None => {
                if let Ring::Wide { words, len } = self {
                    words[*len + s / 64] &= !(1 << (s % 64));
                }
            }
        }
    }

    pub(super) fn clear_all(&mut self) {
        match self.narrow_mut() {
            Some((_, _, codes)) => codes.fill(0xFF),
            None => {
                if let Ring::Wide { words, len } = self {
                    words[*len..].fill(0);
                }
            }
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
        if let Some(narrow) = self.narrow() {
            let mut k = 0;
            for s in [tail, head] {
                let codes = narrow.codes.get(s.start * CODE..s.end * CODE).unwrap_or_default();
                for c in codes.chunks_exact(CODE) {
                    let code = read(c);
                    if code != NONE {
                        f(Bucket {
                            idx: at(k),
                            min: narrow.value(code),
                        });
                    }
                    k += 1;
                }
            }
        } else if let Ring::Wide { words, len } = self {
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

    /// The lowest closed bucket with an index in `lo..hi` (at most `len`
    /// apart) as (minimum, index), the earliest on ties; `None` when none
    /// is filled. A segment's floor: this runs for every segment of every
    /// key each time a bucket closes, so the narrow layout compares codes
    /// (ordered like their values, empty last) and decodes only the winner.
    pub(super) fn min_in(&self, lo: i64, hi: i64) -> Option<(u64, i64)> {
        let Some(narrow) = self.narrow() else {
            let mut best: Option<(u64, i64)> = None;
            self.for_each(lo, hi, |b| {
                if best.is_none_or(|(m, _)| b.min < m) {
                    best = Some((b.min, b.idx));
                }
            });
            return best;
        };
        let len = self.len();
        let n = usize::try_from(hi.saturating_sub(lo)).unwrap_or(0).min(len);
        let first = self.slot(lo);
        let (tail, head) = (first..len.min(first + n), 0..n.saturating_sub(len - first));
        // (code, offset from `lo`) of the lowest so far.
        let (mut best, mut at) = (NONE, 0usize);
        let mut k = 0usize;
        for s in [tail, head] {
            let codes = narrow.codes.get(s.start * CODE..s.end * CODE).unwrap_or_default();
            for c in codes.chunks_exact(CODE) {
                let code = read(c);
                if code < best {
                    (best, at) = (code, k);
                }
                k += 1;
            }
        }
        (best != NONE).then(|| (narrow.value(best), lo.saturating_add(at as i64)))
    }

    /// How many slots hold a bucket.
    #[cfg(test)]
    pub(super) fn filled(&self) -> usize {
        (0..self.len()).filter(|&s| self.get_slot(s).is_some()).count()
    }

    /// Bytes per slot: 3 while narrow.
    #[cfg(test)]
    pub(super) fn entry_bytes(&self) -> usize {
        match self {
            Ring::Inline { .. } | Ring::Heap { .. } => CODE,
            Ring::Wide { .. } => 8,
        }
    }
}

#[cfg(test)]
#[path = "leak_ring_tests.rs"]
mod tests;
