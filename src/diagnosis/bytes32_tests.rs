//! Tests of the 4-byte encoding: exactness where promised, monotonicity,
//! bounded rounding, and that no code collides with `NONE`.

use super::*;

const MIB: u64 = 1 << 20;

#[test]
fn whole_mib_below_128_tib_and_small_values_pack_exactly() {
    for v in [
        0,
        1,
        900,
        (1 << 27) - 1,
        1 << 27,
        80 * 1024 * MIB + 7 * MIB,
        143_771 * MIB,
    ] {
        assert_eq!(unpack(pack(v)), v, "{v}");
    }
    for mib in (0..(128u64 << 20)).step_by(9_973) {
        assert_eq!(unpack(pack(mib * MIB)), mib * MIB, "{mib} MiB");
    }
}

#[test]
fn packed_codes_are_monotone_and_round_down_within_their_precision() {
    let mut prev = 0u32;
    let mut v = 1u64;
    while v < u64::MAX / 3 {
        for x in [v - 1, v, v + 1, v.saturating_mul(3) / 2] {
            let (c, back) = (pack(x), unpack(pack(x)));
            assert!(back <= x && (x - back) as f64 <= x as f64 * 1.5e-8, "{x} -> {back}");
            assert_eq!(pack(back), c, "{x}: the code is stable");
        }
        let c = pack(v);
        assert!(c >= prev, "{v}");
        prev = c;
        v = v * 2 + 1;
    }
    assert!(pack(u64::MAX) < NONE && pack(u64::MAX) >= prev);
    assert!(unpack(pack(u64::MAX)) > u64::MAX - (1 << 38));
}
