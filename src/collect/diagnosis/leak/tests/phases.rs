//! Tests of the cheaper bucket close: verdicts deferred to a key's
//! phase are the verdicts judged at the close, only later; the judge's flat
//! shortcut gives what the full judge gives. No I/O.

use super::*;

/// A leak under noise, then a plateau (raised, then lowered), sampled every
/// second; the same for every key, so only the phase tells them apart.
fn shape(t: f64, rng: &mut Rng) -> u64 {
    let leak = 3.0 * MIB * t.min(2.0 * W);
    to_bytes(GIB + leak + rng.range(0.0, 200.0 * MIB))
}

#[test]
fn deferred_verdicts_are_the_close_verdicts_at_most_a_bucket_later() {
    let keys = u32::from(PHASES) * 2;
    let mut tr = LeakTracker::new(cfg());
    let width = tr.bucket_width;
    // Per key: (time, trend) at each change of its trend.
    let mut changes: Vec<Vec<(f64, Option<Trend>)>> = vec![vec![(0.0, None)]; keys as usize];
    let mut most_judged = 0;
    let mut rng = Rng::new(11);
    for i in 0..(4.0 * W) as u32 {
        let t = f64::from(i);
        let v = shape(t, &mut rng);
        let pending_before = tr.series.values().filter(|(s, _)| s.pending).count();
        let mut judged = 0;
        for k in 0..keys {
            let before = tr.series.get(&k).is_some_and(|(s, _)| s.pending);
            let trend = tr.observe_and_assess(&k, t, Some(v));
            let after = tr.series[&k].0.pending;
            judged += usize::from(before && !after);
            let seen = &mut changes[k as usize];
            if seen.last().is_none_or(|c| c.1 != trend) {
                seen.push((t, trend));
            }
        }
        if t % width != 0.0 {
            most_judged = most_judged.max(judged);
        }
        assert!(pending_before <= keys as usize);
    }
    // Key 0 judges at the close as a single-phase close would; the others see the same
    // trends in the same order, never earlier and at most a bucket later.
    let base = &changes[0];
    assert!(
        base.iter().any(|c| c.1.is_some_and(|t| t.suspected)),
        "the leak is flagged"
    );
    assert!(base.iter().any(|c| c.1.is_some_and(|t| !t.suspected)), "and lowered");
    for (k, seen) in changes.iter().enumerate() {
        let trends: Vec<_> = seen.iter().map(|c| c.1).collect();
        let base_trends: Vec<_> = base.iter().map(|c| c.1).collect();
        // The last close's verdict may still wait for its phase.
        let shown = &base_trends[..trends.len().min(base_trends.len())];
        assert!(
            trends.len() + 1 >= base_trends.len(),
            "key {k}: {} of {}",
            trends.len(),
            base_trends.len()
        );
        assert!(trends == shown, "key {k}");
        for (c, b) in seen.iter().zip(base) {
            assert!(c.0 >= b.0 && c.0 - b.0 <= width, "key {k}: {} vs {}", c.0, b.0);
        }
    }
    // Five samples a bucket: a poll between closes judges about a fifth of
    // the keys, not all of them.
    assert!(
        most_judged > 0 && most_judged <= keys as usize / 4,
        "{most_judged} of {keys}"
    );
}

#[test]
fn slow_samples_are_judged_at_the_close() {
    // One sample per bucket or fewer: nothing to spread over, and waiting
    // for the next sample would report a bucket late.
    let mut tr = LeakTracker::new(cfg());
    let width = tr.bucket_width;
    for k in 0..8u8 {
        for i in 0..100 {
            tr.observe(
                &k,
                f64::from(i) * width,
                to_bytes(GIB + 5.0 * MIB * f64::from(i) * width),
            );
            assert!(!tr.series[&k].0.pending);
        }
    }
}

#[test]
fn flat_floors_judge_as_the_full_judge() {
    let c = LeakConfig::default().sanitized();
    let mut buf = judge::Buffers::default();
    for n in 3..=7 {
        for v in [0.0, 1.0, GIB, 1e19] {
            let points: Vec<(f64, f64)> = (0..n).map(|i| (10.0 * f64::from(i) + 5.0, v)).collect();
            for flagged in [false, true] {
                let short = judge::judge(&points, 0.7, flagged, &c, &mut buf).expect("3 points");
                let full = judge::judge_full(&points, 0.7, flagged, &c, &mut buf).expect("3 points");
                assert_eq!(short.trend, full.trend);
                assert_eq!(short.verdict, full.verdict);
                // Bit for bit: +0, not -0.
                assert_eq!(
                    short.trend.growth_bytes_per_second.to_bits(),
                    full.trend.growth_bytes_per_second.to_bits()
                );
            }
        }
    }
}
