//! Byte counts in 4 bytes, for the peak window's slot maxima that the
//! pipeline keeps 12 of per process: at 64 GPUs x 1000 processes every byte
//! of an entry is 0.8 MB of resident memory.
//!
//! Owns: one encoding and its inverse. [`pack`] is monotone and rounds
//! down (for maxima, compared as codes). Must not know what the numbers
//! mean. (The leak ring's exact 3-byte codes are its own: `leak_ring.rs`.)
//!
//! A float with exact small integers: below 2^`bits` a value is its own
//! code, above it keeps its top `bits` bits and the shift. So whole-MiB
//! values are exact up to 2^(`bits` + 20) bytes (128 TiB). NVML reports
//! process memory in whole MiB on the drivers we read (every row of the
//! H200 traces in tests/traces and ../shared/traces is a multiple of 1
//! MiB), so for real figures nothing is lost. The simulated fleets report
//! arbitrary bytes: for them a peak keeps its exact top (`peaks.rs`), so
//! every figure reported is the same to the bit as with 8-byte entries.
//! Plain KiB in a `u32` would not be exact for those, and saturates at 4
//! TiB, below the leak tests' extreme values.

/// Significant bits of [`pack`]: the most whose largest code fits a `u32`.
const PACK_BITS: u32 = 27;

/// A code [`pack`] never produces (its largest is 39 * 2^26 - 1).
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

#[cfg(test)]
#[path = "bytes32_tests.rs"]
mod tests;
