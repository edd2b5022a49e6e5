//! The ring against a plain model: every layout holds exactly what was
//! filed, and the narrow ones widen only when a figure has no code of their
//! width (2 bytes in place, 3 on the heap).

use super::*;

const MIB: u64 = 1 << 20;

/// The ring's buckets in `lo..hi`, as `for_each` reports them.
fn listed(r: &Ring, lo: i64, hi: i64) -> Vec<(i64, u64)> {
    let mut out = Vec::new();
    r.for_each(lo, hi, |b| out.push((b.idx, b.min)));
    out
}

/// Files `(index, minimum)` pairs in a ring of `len` and in a model of the
/// same slots, checking after each that both list and floor the same.
fn check(len: usize, base: u64, feed: &[(i64, Option<u64>)]) -> Ring {
    let mut r = Ring::new(len);
    r.set_base(base);
    let mut model: Vec<Option<(i64, u64)>> = vec![None; len];
    let slot = |i: i64| i.rem_euclid(len as i64) as usize;
    for &(i, v) in feed {
        match v {
            Some(v) => {
                r.set(i, v);
                model[slot(i)] = Some((i, v));
            }
            None => {
                r.clear(i);
                model[slot(i)] = None;
            }
        }
        let (lo, hi) = (i + 1 - len as i64, i + 1);
        let want: Vec<(i64, u64)> = (lo..hi).filter_map(|k| model[slot(k)].map(|(_, v)| (k, v))).collect();
        assert_eq!(listed(&r, lo, hi), want, "after {i}");
        let floor = want.iter().fold(None, |best: Option<(u64, i64)>, &(k, v)| match best {
            Some((m, _)) if m <= v => best,
            _ => Some((v, k)),
        });
        assert_eq!(r.min_in(lo, hi), floor, "floor after {i}");
        assert_eq!(r.min_in(lo + 3, hi - 2), {
            let part: Vec<_> = want.iter().filter(|(k, _)| (lo + 3..hi - 2).contains(k)).collect();
            part.iter().fold(None, |best: Option<(u64, i64)>, &&(k, v)| match best {
                Some((m, _)) if m <= v => best,
                _ => Some((v, k)),
            })
        });
    }
    r
}

/// A reproducible stream of numbers (xorshift).
fn stream(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

#[test]
fn whole_mib_stays_in_place_within_32_gib_either_way() {
    let base = 80 * 1024 * MIB;
    let mut next = stream(11);
    let mut feed: Vec<_> = (0..200)
        .map(|i| {
            let off = (next() % (64 << 10)) as i64 - (32 << 10) + 1; // MiB, +-32 Gi
            let v = (base as i64 / MIB as i64 + off) as u64 * MIB;
            (i, (i % 5 != 2).then_some(v))
        })
        .collect();
    let r = check(60, base, &feed);
    assert_eq!(r.entry_bytes(), 2);
    assert!(matches!(r, Ring::Inline { .. }));
    // One figure 32 GiB above the first: 3-byte codes on the heap, every
    // stored minimum kept (`check` compares them all).
    feed.push((200, Some(base + (32 << 10) * MIB)));
    feed.extend((201..260).map(|i| (i, Some(base + (i as u64 % 3) * MIB))));
    let r = check(60, base, &feed);
    assert_eq!(r.entry_bytes(), 3);
    // Below the first by as much still fits 2 bytes (the bias is 2^15).
    let low = [(0, Some(base - (32 << 10) * MIB)), (1, Some(base))];
    assert_eq!(check(60, base, &low).entry_bytes(), 2);
}

#[test]
fn odd_bytes_lower_the_unit_in_place_until_a_code_needs_3_bytes() {
    let base = 5 * 1024 * MIB;
    // Offsets of a few KiB in whole KiB: 2-byte codes in units of 1 KiB.
    let feed: Vec<_> = (0..90).map(|i| (i, Some(base + (i as u64 % 7) * 1024))).collect();
    let r = check(60, base, &feed);
    assert_eq!(r.entry_bytes(), 2);
    // An odd byte: the unit drops to 1 byte, which 2-byte codes of +-7 KiB
    // offsets still hold; 40 KiB does not fit and moves to the heap.
    let mut feed = feed;
    feed.push((90, Some(base + 7 * 1024 + 1)));
    assert_eq!(check(60, base, &feed).entry_bytes(), 2);
    feed.push((91, Some(base + 40 * 1024 + 1)));
    assert_eq!(check(60, base, &feed).entry_bytes(), 3);
}

#[test]
fn whole_mib_stays_narrow_across_terabytes_either_way() {
    let base = 80 * 1024 * MIB;
    let mut next = stream(7);
    let feed: Vec<_> = (0..400)
        .map(|i| {
            let off = (next() % (16 << 20)) as i64 - (8 << 20) + 1; // MiB, +-8 Ti
            let v = (base as i64 / MIB as i64 + off).max(0) as u64 * MIB;
            (i, (i % 7 != 3).then_some(v))
        })
        .collect();
    for len in [60, 5, 300] {
        let r = check(len, base, &feed);
        assert_eq!(r.entry_bytes(), 3, "len {len}");
    }
}

#[test]
fn arbitrary_bytes_lower_the_unit_exactly_and_widen_past_8_mib() {
    // Whole MiB first (unit 1 MiB), then odd bytes: the stored MiB codes
    // are rescaled to bytes and still read back exactly.
    let base = 3 * 1024 * MIB + 4096;
    let mut feed: Vec<(i64, Option<u64>)> = (0..30).map(|i| (i, Some(base + (i as u64 % 5) * MIB))).collect();
    feed.extend((30..50).map(|i| (i, Some(base - 12_288 * i as u64))));
    feed.extend((50..70).map(|i| (i, Some(base + 7 * MIB + i as u64))));
    let r = check(60, base, &feed);
    assert_eq!(r.entry_bytes(), 3, "every offset is within 8 MiB");
    // An odd offset beyond 8 MiB has no 3-byte code: 8-byte entries.
    feed.push((70, Some(base + 9 * MIB + 1)));
    feed.extend((71..200).map(|i| (i, Some(base + (i as u64) * 12_345))));
    let r = check(60, base, &feed);
    assert_eq!(r.entry_bytes(), 8);
    // A whole-MiB ring refuses a lower unit that would push a code out of
    // range, and widens with its figures intact.
    let far = [(0, Some(base + 4 * 1024 * 1024 * MIB)), (1, Some(base + 1))];
    assert_eq!(check(60, base, &far).entry_bytes(), 8);
}

#[test]
fn random_figures_read_back_exactly_whatever_the_layout() {
    let mut next = stream(0x9E37_79B9_7F4A_7C15);
    for round in 0..60u64 {
        let base = next() >> (round % 50);
        let len = [1, 3, 60, 61, 128][round as usize % 5];
        let mut i = next() as i64 >> 20;
        let feed: Vec<_> = (0..300)
            .map(|_| {
                i += (next() % 3) as i64;
                let spread = 1u64 << (next() % 30);
                let v = match next() % 4 {
                    0 => base.wrapping_add(next() % spread),
                    1 => base.wrapping_sub(next() % spread),
                    2 => (base / MIB + next() % 9) * MIB,
                    _ => next() >> (next() % 64),
                };
                (i, (next() % 6 != 0).then_some(v))
            })
            .collect();
        check(len, base, &feed);
    }
}

#[test]
fn the_default_window_lives_in_place() {
    assert!(matches!(Ring::new(60), Ring::Inline { .. }));
    assert!(matches!(Ring::new(61), Ring::Heap { .. }));
    // Round 10: 2-byte codes in place (192 bytes with 3-byte ones).
    assert!(std::mem::size_of::<Ring>() <= 136, "{}", std::mem::size_of::<Ring>());
}
