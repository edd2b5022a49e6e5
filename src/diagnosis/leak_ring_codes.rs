//! The exact codes of the leak ring's narrow layouts (`leak_ring.rs` says
//! what a code is): `W`-byte offsets from the ring's base in its unit,
//! biased so that codes sort like the values they stand for.
//!
//! Owns: encoding, decoding, storing with the unit lowered when a figure
//! needs it, and the two walks over a slice of codes. Must not: know the
//! ring's layouts or slots beyond the slice it is given.

use super::{LONG, Narrow, SHORT};

/// The empty slot of `W`-byte codes: the largest `W`-byte number (all bytes
/// 0xFF), so a slot filled with 0xFF is empty and empty sorts after every
/// code.
pub(super) const fn none<const W: usize>() -> u32 {
    ((1u64 << (8 * W)) - 1) as u32
}

/// The code of offset 0 in `W`-byte codes: a code is the offset in units
/// plus this.
pub(super) const fn bias<const W: usize>() -> i64 {
    1 << (8 * W - 1)
}

impl Narrow<'_> {
    pub(super) fn value<const W: usize>(&self, code: u32) -> u64 {
        // |offset| < 2^23 units of at most 2^20 bytes: no overflow.
        self.base
            .wrapping_add_signed((i64::from(code) - bias::<W>()) << self.shift)
    }
}

pub(super) fn read<const W: usize>(c: &[u8]) -> u32 {
    match (W, c) {
        (SHORT, [a, b, ..]) => u32::from(u16::from_le_bytes([*a, *b])),
        (_, [a, b, c, ..]) => u32::from_le_bytes([*a, *b, *c, 0]),
        _ => none::<W>(),
    }
}

pub(super) fn write<const W: usize>(codes: &mut [u8], s: usize, code: u32) {
    if let Some(c) = codes.get_mut(s * W..(s + 1) * W) {
        c.copy_from_slice(&code.to_le_bytes()[..W]);
    }
}

/// The `W`-byte code of the offset `units` (in the ring's unit), if it has one.
fn code_of<const W: usize>(units: i128) -> Option<u32> {
    let c = units.checked_add(i128::from(bias::<W>()))?;
    u32::try_from(c).ok().filter(|&c| c < none::<W>())
}

/// Stores `v` in slot `s` exactly, lowering the unit (and rescaling the
/// stored codes) if `v`'s offset needs it; `false`, touching nothing,
/// when no `width`-byte code holds it.
pub(super) fn put(base: u64, shift: &mut u8, codes: &mut [u8], s: usize, v: u64, width: usize) -> bool {
    match width {
        SHORT => put_w::<SHORT>(base, shift, codes, s, v),
        _ => put_w::<LONG>(base, shift, codes, s, v),
    }
}

fn put_w<const W: usize>(base: u64, shift: &mut u8, codes: &mut [u8], s: usize, v: u64) -> bool {
    let offset = i128::from(v) - i128::from(base);
    let unit = if offset == 0 {
        *shift
    } else {
        // At most 63 (|offset| < 2^64), and no more than the unit in use.
        offset.trailing_zeros().min(u32::from(*shift)) as u8
    };
    let Some(code) = code_of::<W>(offset >> unit) else {
        return false;
    };
    if unit < *shift {
        let k = *shift - unit;
        let rescaled = |c: u32| code_of::<W>(i128::from(i64::from(c) - bias::<W>()) << k);
        let stored = codes.chunks_exact(W).map(read::<W>).filter(|&c| c != none::<W>());
        if stored.clone().any(|c| rescaled(c).is_none()) {
            return false;
        }
        for chunk in codes.chunks_exact_mut(W) {
            let c = read::<W>(chunk);
            if let Some(r) = rescaled(c).filter(|_| c != none::<W>()) {
                chunk.copy_from_slice(&r.to_le_bytes()[..W]);
            }
        }
        *shift = unit;
    }
    write::<W>(codes, s, code);
    true
}

/// Calls `f(k, minimum)` for each filled slot, `k` counting every slot
/// walked in `spans`.
pub(super) fn each_code<const W: usize>(n: &Narrow, spans: [std::ops::Range<usize>; 2], mut f: impl FnMut(usize, u64)) {
    let mut k = 0;
    for s in spans {
        let codes = n.codes.get(s.start * W..s.end * W).unwrap_or_default();
        for c in codes.chunks_exact(W) {
            let code = read::<W>(c);
            if code != none::<W>() {
                f(k, n.value::<W>(code));
            }
            k += 1;
        }
    }
}

/// The lowest code's minimum in `spans` and its `k` (counted as in
/// [`each_code`]), the first on ties.
pub(super) fn lowest_code<const W: usize>(n: &Narrow, spans: [std::ops::Range<usize>; 2]) -> Option<(u64, usize)> {
    let (mut best, mut at) = (none::<W>(), 0usize);
    let mut k = 0usize;
    for s in spans {
        let codes = n.codes.get(s.start * W..s.end * W).unwrap_or_default();
        for c in codes.chunks_exact(W) {
            let code = read::<W>(c);
            if code < best {
                (best, at) = (code, k);
            }
            k += 1;
        }
    }
    (best != none::<W>()).then(|| (n.value::<W>(best), at))
}
