//! Tests of the quiet-run shortcut: a window inside one run of equal,
//! closely spaced minima is judged flat without walking the ring, and that
//! is exactly what walking it gives. No I/O.

use super::*;

/// The verdict of the window closed at `s`'s open bucket, with and without
/// its quiet run; and whether the run alone decided it.
fn both(s: &Series, cfg: &LeakConfig, scratch: &mut Scratch) -> (Option<judge::Judged>, Option<judge::Judged>, bool) {
    let start = s.open_idx.saturating_sub(i64::from(s.seen).min(cfg.buckets as i64));
    let short = evaluate(&s.closed, &s.quiet, start, s.open_idx, s.flagged, cfg, scratch);
    let full = evaluate(&s.closed, &Quiet::default(), start, s.open_idx, s.flagged, cfg, scratch);
    let slots = s.open_idx - start;
    let took = slots == cfg.buckets as i64 && s.quiet.covers(start, s.open_idx, quiet_gap(cfg));
    (short, full, took)
}

#[test]
fn a_quiet_window_judges_as_the_ring_walk() {
    // Per config: (window, buckets, segments, seconds between samples).
    // The demo's (30 s, 60 buckets, a sample every 2 buckets), the default
    // (5 samples a bucket), and a coarse one where a gap of one missed
    // sample already breaks a run.
    let shapes = [(30.0, 60, 7, 1.0), (W, 60, 7, 1.0), (24.0, 12, 4, 1.5)];
    let mut rng = Rng::new(7);
    for (window, buckets, segments, poll) in shapes {
        let cfg = LeakConfig {
            buckets,
            segments,
            ..LeakConfig::with_window(window)
        }
        .sanitized();
        let mut tr = LeakTracker::<u8>::new(cfg.clone());
        let mut s = tr.series();
        let (mut took, mut broke) = (0, 0);
        let mut value = 3 * GIB as u64;
        let mut jitter = false;
        let mut t = 0.0;
        for _ in 0..(40.0 * window / poll) as usize {
            // Mostly steady; about every other window a step, a one-MiB
            // drop, a stretch without samples of up to 1.2 windows (which
            // can leave fewer than three segments with a floor), or jitter
            // above the floor turned on or off.
            match rng.next_u64() % (8.0 * window / poll) as u64 {
                0..=2 => value += 256 * MIB as u64,
                3 => value -= MIB as u64,
                4 => t += rng.range(0.0, 1.2 * window),
                5 => jitter = !jitter,
                _ => {}
            }
            t += poll * rng.range(0.8, 1.2);
            let above = if jitter { rng.next_u64() % 2 * MIB as u64 } else { 0 };
            tr.observe_series(&mut s, t, Some(value + above));
            let (short, full, quiet) = both(&s, &cfg, &mut tr.scratch);
            assert_eq!(
                short.map(|j| (j.trend, j.verdict)),
                full.map(|j| (j.trend, j.verdict)),
                "t {t}"
            );
            if quiet {
                took += 1;
                assert_eq!(full.map(|j| j.trend.growth_bytes_per_second.to_bits()), Some(0));
            } else if s.seen >= cfg.buckets as u32 {
                broke += 1;
            }
        }
        // Both paths ran, so the comparison above said something.
        assert!(
            took > 100 && broke > 20,
            "window {window}: {took} quiet, {broke} walked"
        );
    }
}
