//! The leak conditions applied to one key's segment floors.
//!
//! Owns: the growth estimate (Theil–Sen slope of the floors), the *kept
//! floor* (memory not given back from a floor until now), and the two
//! verdicts the tracker's hysteresis chooses between: whether a leak
//! *starts* being suspected, and whether a suspected one *holds*.
//! Must not: keep state between calls (the flag itself lives in `leak.rs`),
//! read clocks, or allocate outside the caller's scratch buffers.

use super::{LeakConfig, Trend};

/// A trend and the verdict the flag asked for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Judged {
    /// `suspected` is left false: the tracker fills it from its flag.
    pub(super) trend: Trend,
    /// Lowered flag: all conditions for raising it hold. Raised flag: the
    /// conditions for keeping it hold.
    pub(super) verdict: bool,
}

/// Scratch buffers, reused so a verdict does not allocate.
#[derive(Debug, Default)]
pub(super) struct Buffers {
    pub(super) slopes: Vec<f64>,
    /// Kept floor at each point: the lowest floor from it to the latest.
    pub(super) kept: Vec<f64>,
    /// The kept floor as (time, bytes) points, for its trend.
    pub(super) kept_points: Vec<(f64, f64)>,
}

/// Judges time-ordered segment floors `points` (seconds since the window
/// start, bytes) covering `covered` of the window, for a flag that is
/// `flagged` now.
pub(super) fn judge(
    points: &[(f64, f64)],
    covered: f64,
    flagged: bool,
    cfg: &LeakConfig,
    buf: &mut Buffers,
) -> Option<Judged> {
    // Three floors are the least that can show a rise spread over time.
    if points.len() < 3 {
        return None;
    }
    let first = points.first()?.1;
    // Floors all at one value (a process that holds its memory, most of a
    // real fleet in whole MiB): every slope, rise and spread below is 0
    // and neither verdict holds, so skip the 21 slopes. `flat_is_exact`
    // in the tests checks this against the full path.
    if points.iter().all(|p| p.1 == first) {
        return Some(flat(covered));
    }
    judge_full(points, covered, flagged, cfg, buf)
}

/// What [`judge`] finds for floors that are all equal.
pub(super) fn flat(covered: f64) -> Judged {
    let trend = Trend {
        window_covered: covered,
        ..Trend::default()
    };
    Judged { trend, verdict: false }
}

/// [`judge`] without its shortcut, for at least three points.
pub(super) fn judge_full(
    points: &[(f64, f64)],
    covered: f64,
    flagged: bool,
    cfg: &LeakConfig,
    buf: &mut Buffers,
) -> Option<Judged> {
    let (first, last) = (points.first()?.1, points.last()?.1);
    let growth = theil_sen(points, &mut buf.slopes)?;
    // The kept floor is monotone: memory handed back later lowers every
    // earlier point, so a sawtooth's ramp, a released allocation or a floor
    // that only jitters upward do not count as kept. Under a caching
    // allocator a leak's kept floor is a staircase (one step per chunk the
    // allocator reserves, or per sawtooth trough), a warm-up's rises and
    // then stays flat, a periodic process's stays flat.
    buf.kept.clear();
    buf.kept.extend(points.iter().rev().scan(f64::INFINITY, |m, p| {
        *m = m.min(p.1);
        Some(*m)
    }));
    buf.kept.reverse();
    let kept = Kept {
        points,
        kept: &buf.kept,
    };
    let n = points.len() - 1;
    // Spread: the kept floor rose in each third of the window. A staircase
    // with 3 or more steps per window has a step in every stretch longer
    // than a third; a warm-up (rise, then flat), one big step or a flat
    // floor do not.
    let thirds = [0, (n + 1) / 3, (2 * n + 1) / 3, n];
    let spread = thirds
        .windows(2)
        .map(|w| {
            if w[1] > w[0] {
                kept.rise_share(w[0], w[1], growth)
            } else {
                0.0
            }
        })
        .fold(f64::INFINITY, f64::min);
    let verdict = if flagged {
        holds(&kept, cfg, &mut buf.kept_points, &mut buf.slopes)
    } else {
        spread >= cfg.spread_ratio && starts(&kept, growth, cfg, &mut buf.slopes)
    };
    let trend = Trend {
        growth_bytes_per_second: growth,
        suspected: false,
        spread,
        floor_rise_bytes: last - first,
        kept_rise_bytes: kept.kept[n] - kept.kept[0],
        window_covered: covered,
    };
    Some(Judged { trend, verdict })
}

/// The floors and their kept floor, point by point.
struct Kept<'a> {
    points: &'a [(f64, f64)],
    kept: &'a [f64],
}

impl Kept<'_> {
    /// Rise of the kept floor from point `a` to point `b`, as a share of
    /// what `per_s` predicts over the same time (0 when it predicts none).
    fn rise_share(&self, a: usize, b: usize, per_s: f64) -> f64 {
        let expected = per_s * (self.points[b].0 - self.points[a].0);
        let rise = self.kept[b] - self.kept[a];
        if expected > 0.0 { rise / expected } else { 0.0 }
    }
}

/// The conditions to raise the flag, besides the spread.
fn starts(k: &Kept, growth: f64, cfg: &LeakConfig, buf: &mut Vec<f64>) -> bool {
    let (points, kept) = (k.points, k.kept);
    let n = points.len() - 1;
    if n < 3 || !(growth > 0.0 && growth >= cfg.min_growth_bytes_per_second) {
        return false;
    }
    // Still growing now: the latest floor is above the one before by a
    // share of a segment's growth (a plateau's floors are not, whatever
    // their noise).
    if k.rise_share(n - 1, n, growth) < cfg.spread_ratio {
        return false;
    }
    // Significance: the kept floor rose by more than the floors scatter
    // around the line through their neighbours. A staircase scatters by
    // half a step and rises by several; floors that only jitter rise by
    // about their own scatter (the end effect of a shrinking minimum).
    if kept[n] - kept[0] < cfg.min_rise_over_scatter * floor_jitter(points, buf) {
        return false;
    }
    // Given back: how far a floor sits above the kept floor, median over
    // the points, against a segment's growth. A leak's floors (under a
    // sawtooth, its troughs) are their own kept floor; floors that only
    // jitter mostly sit above it.
    buf.clear();
    buf.extend(points.iter().zip(kept).map(|(p, k)| p.1 - k));
    let given_back = median(buf).unwrap_or(0.0);
    given_back <= cfg.max_given_back * growth * (points[n].0 - points[0].0) / n as f64
}

/// The conditions to keep a raised flag: the kept floor grows at a fraction
/// of the threshold and its latest half still rose at that pace. An
/// estimate wandering around the threshold does not flip it; a leak that
/// stopped clears once its last rise is older than half a window. The kept
/// floor's own trend, not the floors': under a sawtooth longer than a
/// segment the floors of segments without a trough sit on the ramp and make
/// the floors' trend wander.
fn holds(k: &Kept, cfg: &LeakConfig, kept_points: &mut Vec<(f64, f64)>, buf: &mut Vec<f64>) -> bool {
    let n = k.points.len() - 1;
    let off = cfg.off_fraction * cfg.min_growth_bytes_per_second;
    kept_points.clear();
    kept_points.extend(k.points.iter().zip(k.kept).map(|(p, v)| (p.0, *v)));
    theil_sen(kept_points, buf).is_some_and(|g| g > 0.0 && g >= off) && k.rise_share(n / 2, n, off) >= cfg.spread_ratio
}

/// Median distance (bytes) of each inner floor from the line through its
/// neighbours: about zero for a steady rise, half a step for a staircase
/// with fewer steps than segments, the floor's own noise otherwise.
fn floor_jitter(points: &[(f64, f64)], buf: &mut Vec<f64>) -> f64 {
    buf.clear();
    buf.extend(points.windows(3).map(|w| {
        let (a, b, c) = (w[0], w[1], w[2]);
        let span = c.0 - a.0;
        let line = if span > 0.0 {
            a.1 + (c.1 - a.1) * (b.0 - a.0) / span
        } else {
            a.1
        };
        (b.1 - line).abs()
    }));
    median(buf).unwrap_or(0.0)
}

/// Median of the pairwise slopes (Theil–Sen): a single step or outlier
/// moves it far less than it moves a least-squares fit. `None` with fewer
/// than two distinct times.
fn theil_sen(points: &[(f64, f64)], slopes: &mut Vec<f64>) -> Option<f64> {
    slopes.clear();
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            let dt = b.0 - a.0;
            if dt > 0.0 {
                slopes.push((b.1 - a.1) / dt);
            }
        }
    }
    median(slopes)
}

/// Median (mean of the middle two for an even count); `None` when empty or
/// not finite. Reorders `values` (a selection, not a sort: this runs for
/// every process each time a bucket closes).
fn median(values: &mut [f64]) -> Option<f64> {
    let len = values.len();
    let mid = len / 2;
    if len == 0 {
        return None;
    }
    let (below, m, _) = values.select_nth_unstable_by(mid, f64::total_cmp);
    let m = if len % 2 == 1 {
        *m
    } else {
        // The largest of the lower half is the other middle value.
        (below.iter().copied().fold(f64::NEG_INFINITY, f64::max) + *m) / 2.0
    };
    m.is_finite().then_some(m)
}
