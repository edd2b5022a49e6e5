//! The segment floors of one leak-tracker key's closed buckets, handed to
//! the judge (`leak/judge.rs`).
//!
//! Owns: the walk of a key's ring into per-segment floors and their points,
//! and the reusable buffers for it. Must not: keep state between verdicts
//! (beyond the cached segment table), read clocks, or decide the flag
//! (`leak.rs` keeps it).

use super::LeakConfig;
use super::judge::{self, Buffers, judge};
use super::quiet::Quiet;
use super::ring::Ring;

#[derive(Debug, Default)]
pub(super) struct Scratch {
    /// Non-empty segment floors as (seconds since window start, bytes).
    points: Vec<(f64, f64)>,
    /// Where each segment starts (offset from the window start) and, last,
    /// the window's length, for the (slots, segments) in `cut_for`: every
    /// full window has the same, so a close looks it up instead of dividing.
    cuts: Vec<u64>,
    cut_for: (u64, usize),
    judge: Buffers,
}

/// Builds the segment floors of the closed buckets in the bucket slots
/// `start..end` and judges them.
pub(super) fn evaluate(
    closed: &Ring,
    quiet: &Quiet,
    start: i64,
    end: i64,
    flagged: bool,
    cfg: &LeakConfig,
    scratch: &mut Scratch,
) -> Option<judge::Judged> {
    // Coverage is how long the process has been seen, not how many buckets
    // hold samples: a poll slower than a bucket must not hide the verdict.
    let slots = end
        .checked_sub(start)
        .and_then(|s| u64::try_from(s).ok())
        .filter(|&s| s > 0)?;
    let covered = (slots as f64 / cfg.buckets as f64).min(1.0);
    let early = persistence_buckets(cfg, false) as f64 / cfg.buckets as f64;
    if covered + 1e-9 < cfg.min_window_fraction - early {
        return None;
    }
    let segments = cfg.segments.min(usize::try_from(slots).unwrap_or(usize::MAX));
    // A window inside one quiet run (most processes hold their memory) has
    // equal floors in every segment: flat, without walking the ring. Each
    // verdict of a steady fleet's keys is then a few compares.
    let gap = quiet_gap(cfg);
    if segments >= 3 && slots / segments as u64 >= gap.unsigned_abs() && quiet.covers(start, end, gap) {
        return Some(judge::flat(covered));
    }
    segment_cuts(scratch, slots, segments);
    let width = cfg.window / cfg.buckets as f64;
    let at = |offset: u64| start.saturating_add_unsigned(offset);
    scratch.points.clear();
    // A segment's floor is its lowest bucket (ties keep the earliest: where
    // a flat floor began), placed where it was seen, relative to the window
    // start (keeps f64 precision): under a sawtooth that is a trough, which
    // lies on the leak's line wherever it falls in the segment.
    let floors = scratch
        .cuts
        .windows(2)
        .filter_map(|c| closed.min_in(at(c[0]), at(c[1])));
    scratch
        .points
        .extend(floors.map(|(min, idx)| ((idx.abs_diff(start) as f64 + 0.5) * width, min as f64)));
    judge(&scratch.points, covered, flagged, cfg, &mut scratch.judge)
}

/// The widest gap between filings a quiet run tolerates: the narrowest
/// segment of a full window, so that every segment still holds a filing.
pub(super) fn quiet_gap(cfg: &LeakConfig) -> i64 {
    // Sanitized segments are 3..=buckets: the width is 1..=4096.
    i64::try_from(cfg.buckets / cfg.segments).unwrap_or(1)
}

/// Fills `scratch.cuts` for a window of `slots` buckets cut into
/// `segments`, unless it already is: segment `s` starts at offset
/// ceil(s * slots / segments), so the bucket at offset `o` is in segment
/// floor(o * segments / slots).
fn segment_cuts(scratch: &mut Scratch, slots: u64, segments: usize) {
    if scratch.cut_for == (slots, segments) {
        return;
    }
    let first_of = |s: usize| (s as u64).saturating_mul(slots).div_ceil(segments as u64);
    scratch.cuts.clear();
    scratch.cuts.extend((0..=segments).map(first_of));
    scratch.cut_for = (slots, segments);
}

/// Buckets over which the verdicts must have disagreed with the flag before
/// it flips (0: at the first verdict that disagrees). Lowering takes twice
/// as long as raising: noise hides a slow leak's latest rise for longer
/// than it fakes a start, and a leak that stopped still clears within a
/// window (its kept floor is flat over the latest half after 0.6 window).
pub(super) fn persistence_buckets(cfg: &LeakConfig, lowering: bool) -> i64 {
    let share = if lowering {
        2.0 * cfg.persistence
    } else {
        cfg.persistence
    };
    // At most 2 * `buckets` (8192): the cast cannot overflow.
    ((share * cfg.buckets as f64).ceil() as i64 - 1).max(0)
}
