//! Byte counts in 4 bytes, for the per-process rings (a leak history's
//! bucket minima, a peak window's slot maxima) that the pipeline keeps 72
//! of per process: at 64 GPUs x 1000 processes every byte of an entry is
//! 4.6 MB of resident memory.
//!
//! Owns: two encodings and their inverses. [`pack`] is monotone and rounds
//! down (for maxima, compared as codes); [`delta`] is exact or nothing (for
//! leak minima, relative to a per-series base). Must not know what the
//! numbers mean.
//!
//! Both are floats with exact small integers: below 2^`bits` a value is its
//! own code, above it keeps its top `bits` bits and the shift. So whole-MiB
//! values are exact up to 2^(`bits` + 20) bytes (64 TiB and more). NVML
//! reports process memory in whole MiB on the drivers we read (every row
//! of the H200 traces in tests/traces and ../shared/traces is a multiple
//! of 1 MiB), so for real figures nothing is lost. The simulated fleets
//! report arbitrary bytes: for them a leak series whose values do not fit
//! exactly keeps 8-byte entries (`leak_ring.rs`), and a peak keeps its
//! exact top (`peaks.rs`), so every figure reported is the same to the bit
//! as with 8-byte entries. Plain KiB in a `u32` would not be exact for
//! those, and saturates at 4 TiB, below the leak tests' extreme values.

/// Significant bits of [`pack`]: the most whose largest code fits a `u32`.
const PACK_BITS: u32 = 27;
/// Significant bits of [`delta`]'s magnitude: the most whose largest code
/// fits 31 bits (the 32nd is the sign).
const DELTA_BITS: u32 = 26;

/// A code neither encoding produces (the largest `pack` code is
/// 39 * 2^26 - 1, the largest `delta` code 2^31 + 40 * 2^25 - 1): callers
/// use it as "empty".
pub(crate) const NONE: u32 = u32::MAX;

/// `v` as (shift * 2^(bits-1) + mantissa), rounding down; small values are
/// their own code.
fn encode(v: u64, bits: u32) -> u64 {
    if v < 1 << bits {
        return v;
    }
    // v >= 2^bits, so the shift is at least 1 and the mantissa is in
    // [2^(bits-1), 2^bits): codes are contiguous and monotone.
    let shift = 64 - v.leading_zeros() - bits;
    u64::from(shift) * (1 << (bits - 1)) + (v >> shift)
}

fn decode(c: u64, bits: u32) -> u64 {
    if c < 1 << bits {
        return c;
    }
    let half = 1u64 << (bits - 1);
    let shift = c / half - 1;
    (c - shift * half) << shift.min(63)
}

/// The code of `v`: monotone (`a <= b` implies `pack(a) <= pack(b)`) and
/// `unpack(pack(v)) <= v`, within 1.5e-8 of it.
pub(crate) fn pack(v: u64) -> u32 {
    // At most (64 - 27 + 2) * 2^26 - 1 < 2^32 - 1.
    u32::try_from(encode(v, PACK_BITS)).unwrap_or(NONE - 1)
}

/// The value of a code made by [`pack`].
pub(crate) fn unpack(code: u32) -> u64 {
    decode(u64::from(code), PACK_BITS)
}

/// `v` as an exact signed offset from `base`, or `None` when it has no
/// exact 4-byte code (an offset beyond 64 MiB that is not a multiple of
/// its own precision).
pub(crate) fn delta(base: u64, v: u64) -> Option<u32> {
    let magnitude = v.abs_diff(base);
    let c = encode(magnitude, DELTA_BITS);
    if decode(c, DELTA_BITS) != magnitude {
        return None;
    }
    let sign = if v < base { 1 << 31 } else { 0 };
    u32::try_from(c).ok().map(|c| c | sign)
}

/// The value of a code made by [`delta`] with the same `base`.
pub(crate) fn undelta(base: u64, code: u32) -> u64 {
    let magnitude = decode(u64::from(code & !(1 << 31)), DELTA_BITS);
    if code >> 31 == 1 {
        base.wrapping_sub(magnitude)
    } else {
        base.wrapping_add(magnitude)
    }
}

#[cfg(test)]
#[path = "bytes32_tests.rs"]
mod tests;
