//! The ring against a plain model: it lists and floors exactly what was
//! filed.

use super::*;

const MIB: u64 = 1 << 20;

/// The ring's buckets in `lo..hi`, as `for_each` reports them.
fn listed(r: &Ring, lo: i64, hi: i64) -> Vec<(i64, u64)> {
    let mut out = Vec::new();
    r.for_each(lo, hi, |idx, min| out.push((idx, min)));
    out
}

/// Files `(index, minimum)` pairs in a ring of `len` and in a model of the
/// same slots, checking after each that both list and floor the same.
fn check(len: usize, feed: &[(i64, Option<u64>)]) -> Ring {
    let mut r = Ring::new(len);
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
fn random_figures_read_back_exactly() {
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
                (i, (!next().is_multiple_of(6)).then_some(v))
            })
            .collect();
        check(len, &feed);
    }
}
