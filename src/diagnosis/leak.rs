//! Leak trend detection for per-(GPU, process) memory series.
//!
//! Owns: a bounded, downsampled history of "used bytes" per key (a key is
//! whatever identifies one process on one GPU for the caller), the growth-rate
//! estimate behind `gpumem_process_memory_growth_bytes_per_second` and the
//! verdict behind `gpumem_process_leak_suspected`.
//!
//! Must not: do I/O, read clocks, log, or know about NVML, metrics or rules.
//! Time comes from the caller as `f64` seconds on the snapshot clock, so the
//! module is deterministic and replayable from recorded traces.
//!
//! Method (docs/leak-detection.md explains it for operators): samples are
//! folded into `buckets` fixed time buckets per window, keeping only their
//! minimum; the judged window is cut into `segments` equal parts whose floor
//! (lowest bucket minimum) is the memory the process did not give back during
//! that part. The growth is the Theil–Sen slope of the floors. A leak is
//! *kept* memory (the lowest floor from a point until now) that rose in every
//! third of the window and in the latest segment, at or above the threshold
//! (`leak_judge.rs`), at every verdict over 10% of a window. Once raised,
//! the flag holds until, over 20% of a window, the kept floor's growth stays
//! below a fraction of the threshold or its latest half kept nothing more:
//! hysteresis, so an estimate at the threshold cannot flap.
//! Warm-ups (rise, then flat), periodic allocate/free (flat kept floor),
//! single steps and floors that only jitter fail the spread.
//!
//! Cost: memory per key is one 4-byte minimum per bucket in a fixed ring
//! (60 buckets by default: 240 bytes; `leak_ring.rs` says why 4 bytes lose
//! nothing NVML reports) plus a 128-byte `Series`, whatever the poll rate.
//! A sample that stays in the open bucket is O(1); the verdict is
//! recomputed only when a bucket closes, in O(buckets + segments²);
//! `assess` is a lookup.

use std::collections::HashMap;
use std::hash::Hash;

#[path = "leak_config.rs"]
mod config;

pub use config::LeakConfig;

/// The verdict on one key's recent history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// Theil–Sen slope of the segment floors over the window (bytes/s; may
    /// be negative). Exported as `gpumem_process_memory_growth_bytes_per_second`.
    pub growth_bytes_per_second: f64,
    /// A leak is suspected: the flag, with its hysteresis. Exported as
    /// `gpumem_process_leak_suspected`.
    pub suspected: bool,
    /// Least rise of the kept floor over a third of the window, as a share
    /// of what the growth predicts there (0 when it did not rise).
    pub spread: f64,
    /// Latest floor minus first floor in the window (bytes; may be negative).
    pub floor_rise_bytes: f64,
    /// Rise of the kept floor over the window (bytes; never negative).
    pub kept_rise_bytes: f64,
    /// Share of the window the process has been seen for (0..=1).
    pub window_covered: f64,
}

/// Per-key bounded history and cached verdicts.
#[derive(Debug)]
pub struct LeakTracker<K> {
    cfg: LeakConfig,
    /// Seconds per bucket: `window / buckets`.
    bucket_width: f64,
    /// Each key's history and the generation it was last seen in (kept
    /// here, not in `Series`: the pipeline's records sweep on their own).
    series: HashMap<K, (Series, u64)>,
    /// Reused buffers so recomputing a verdict does not allocate.
    scratch: Scratch,
    /// Sweep counter for [`LeakTracker::retain_seen`].
    generation: u64,
}

#[path = "leak_judge.rs"]
mod judge;
#[path = "leak_ring.rs"]
mod ring;

use judge::{Buffers, judge};
use ring::Ring;

/// One downsampling bucket: the lowest value seen in it. The minimum is all
/// the method needs (a leak is memory that is never given back).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// `floor(t / bucket_width)`, saturating for absurd `t`.
    idx: i64,
    min: u64,
}

/// One key's history, for callers that keep it in their own record (the
/// pipeline keeps one record per process: one map lookup a poll).
#[derive(Debug)]
pub struct Series {
    /// The bucket still receiving samples (once `started`); judged only
    /// once closed so a verdict never rests on a half-filled bucket.
    open_idx: i64,
    /// Its minimum.
    open_min: u64,
    /// A sample was recorded (an `Option` of the open bucket would cost 8
    /// bytes more per key).
    started: bool,
    /// The closed buckets of the `buckets` slots before the open one, as a
    /// ring: bucket `idx` lives in slot `idx mod buckets`, which holds its
    /// minimum unless empty. The index is implied by the slot, so a bucket
    /// costs 4 bytes rather than a 16-byte (index, minimum) pair in a
    /// deque: a quarter of the memory per key at the same verdicts (64
    /// GPUs x 1000 processes track 64k keys).
    closed: Ring,
    /// Bucket of the first sample (once `started`): how long the process
    /// has been seen.
    first_idx: i64,
    last_t: f64,
    trend: Option<Trend>,
    /// The flag behind `trend.suspected`, kept across verdicts for its
    /// hysteresis.
    flagged: bool,
    /// Bucket at whose opening the verdicts began to disagree with the
    /// flag (and have at every verdict since); `i64::MAX` while they agree.
    since: i64,
}

#[derive(Debug, Default)]
struct Scratch {
    /// Per segment: lowest bucket minimum and the bucket it is in.
    floors: Vec<Option<(u64, i64)>>,
    /// Non-empty segment floors as (seconds since window start, bytes).
    points: Vec<(f64, f64)>,
    /// The segment of each bucket offset from the window start, for the
    /// (slots, segments) in `seg_for`: every full window has the same, so
    /// a close looks it up instead of dividing.
    seg_of: Vec<u32>,
    seg_for: (u64, usize),
    judge: Buffers,
}

impl<K: Hash + Eq + Clone> LeakTracker<K> {
    /// A tracker with no history. `cfg` is clamped to sane values.
    pub fn new(cfg: LeakConfig) -> Self {
        let cfg = cfg.sanitized();
        Self {
            bucket_width: cfg.window / cfg.buckets as f64,
            cfg,
            series: HashMap::new(),
            scratch: Scratch::default(),
            generation: 0,
        }
    }

    /// The configuration in use (after clamping).
    pub fn config(&self) -> &LeakConfig {
        &self.cfg
    }

    /// Records one sample. Samples with a non-finite `t` or a `t` earlier
    /// than the key's latest are ignored. Amortised O(1); the verdict is
    /// recomputed when the sample opens a new bucket.
    pub fn observe(&mut self, key: &K, t: f64, used_bytes: u64) {
        self.observe_and_assess(key, t, Some(used_bytes));
    }

    /// [`observe`](Self::observe) when `used_bytes` is known, then
    /// [`assess`](Self::assess), in one map lookup; also marks `key` as seen
    /// for [`retain_seen`](Self::retain_seen). The pipeline calls this once
    /// per process per poll: with tens of thousands of keys every lookup is
    /// a cache miss, so one instead of three (and no liveness set) matters.
    pub fn observe_and_assess(&mut self, key: &K, t: f64, used_bytes: Option<u64>) -> Option<Trend> {
        // `as` saturates, so absurd times still give ordered indices.
        let idx = (t / self.bucket_width).floor() as i64;
        let sample = used_bytes.filter(|_| t.is_finite());
        let cfg = &self.cfg;
        let scratch = &mut self.scratch;
        match self.series.get_mut(key) {
            Some((s, seen)) => {
                *seen = self.generation;
                if let Some(b) = sample {
                    s.push(idx, t, b, cfg, scratch);
                }
                s.trend
            }
            None => {
                let b = sample?;
                let mut s = Series::new(cfg.buckets);
                s.push(idx, t, b, cfg, scratch);
                let trend = s.trend;
                self.series.insert(key.clone(), (s, self.generation));
                trend
            }
        }
    }

    /// A history with no samples, to keep outside the tracker.
    pub fn series(&self) -> Series {
        Series::new(self.cfg.buckets)
    }

    /// [`observe_and_assess`](Self::observe_and_assess) on a history kept
    /// outside the tracker.
    pub fn observe_series(&mut self, s: &mut Series, t: f64, used_bytes: Option<u64>) -> Option<Trend> {
        let idx = (t / self.bucket_width).floor() as i64;
        if let Some(b) = used_bytes.filter(|_| t.is_finite()) {
            s.push(idx, t, b, &self.cfg, &mut self.scratch);
        }
        s.trend
    }

    /// Drops the keys not observed or assessed through
    /// [`observe_and_assess`](Self::observe_and_assess) (or `observe`)
    /// since the previous call: the processes no longer seen.
    pub fn retain_seen(&mut self) {
        let g = self.generation;
        self.series.retain(|_, (_, seen)| *seen == g);
        self.generation = g.wrapping_add(1);
    }

    /// The latest verdict for `key`: `None` while less than
    /// `min_window_fraction` of the window is covered or the key is unknown.
    pub fn assess(&self, key: &K) -> Option<Trend> {
        self.series.get(key).and_then(|(s, _)| s.trend)
    }

    /// Keeps only the keys for which `keep` is true (processes still seen).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.series.retain(|k, _| keep(k));
    }

    /// Number of keys tracked.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// No key is tracked.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

impl Series {
    /// Whether any sample was recorded.
    pub fn has_samples(&self) -> bool {
        self.started
    }

    fn new(buckets: usize) -> Self {
        Self {
            open_idx: 0,
            open_min: 0,
            started: false,
            closed: Ring::new(buckets),
            first_idx: 0,
            last_t: f64::NEG_INFINITY,
            trend: None,
            flagged: false,
            since: i64::MAX,
        }
    }

    fn push(&mut self, idx: i64, t: f64, used: u64, cfg: &LeakConfig, scratch: &mut Scratch) {
        // Out-of-order samples would break the "oldest first" ring; a clock
        // that went backwards is the caller's bug, not a reason to panic.
        if t < self.last_t {
            return;
        }
        self.last_t = t;
        let started = self.started;
        if !started {
            self.first_idx = idx;
            self.started = true;
            self.closed.set_base(used);
        }
        let first_idx = self.first_idx;
        if started && self.open_idx == idx {
            self.open_min = self.open_min.min(used);
            return;
        }
        // Keep only the `buckets` bucket slots before the new open one. The
        // slots leaving the window are those the indices from the old open
        // bucket up to the new one map to: empty them, then file the old
        // open bucket if it is still inside.
        let oldest = idx.saturating_sub(cfg.buckets as i64);
        let (done_idx, done_min) = (self.open_idx, self.open_min);
        (self.open_idx, self.open_min) = (idx, used);
        if started {
            let span = idx.saturating_sub(done_idx);
            if span >= cfg.buckets as i64 {
                self.closed.clear_all();
            } else {
                (done_idx..idx).for_each(|i| self.closed.clear(i));
            }
            if done_idx >= oldest {
                self.closed.set(done_idx, done_min);
            }
        }
        // The judged span: the last window, or the whole history if shorter.
        let start = oldest.max(first_idx);
        // No verdict (too short a history, a gap) lowers the flag: the next
        // one starts afresh.
        let flagged = self.flagged;
        let judged = evaluate(&self.closed, start, idx, flagged, cfg, scratch);
        // The flag flips only once the verdicts have disagreed with it for
        // `persistence` of the window: floors that jitter line up by
        // chance for a verdict or two, and noise can hide a leak's rise as
        // briefly.
        self.since = match judged {
            Some(j) if j.verdict != flagged => self.since.min(idx),
            _ => i64::MAX,
        };
        // Verdicts before `min_window_fraction` only count towards a start.
        let judged = judged.filter(|j| j.trend.window_covered + 1e-9 >= cfg.min_window_fraction);
        if judged.is_none() {
            self.flagged = false;
        } else if idx.saturating_sub(self.since) >= persistence_buckets(cfg, flagged) {
            self.flagged = !flagged;
            self.since = i64::MAX;
        }
        self.trend = judged.map(|j| Trend {
            suspected: self.flagged,
            ..j.trend
        });
    }
}

/// Buckets over which the verdicts must have disagreed with the flag before
/// it flips (0: at the first verdict that disagrees). Lowering takes twice
/// as long as raising: noise hides a slow leak's latest rise for longer
/// than it fakes a start, and a leak that stopped still clears within a
/// window (its kept floor is flat over the latest half after 0.6 window).
fn persistence_buckets(cfg: &LeakConfig, lowering: bool) -> i64 {
    let share = if lowering {
        2.0 * cfg.persistence
    } else {
        cfg.persistence
    };
    // At most 2 * `buckets` (8192): the cast cannot overflow.
    ((share * cfg.buckets as f64).ceil() as i64 - 1).max(0)
}

/// Builds the segment floors of the closed buckets in the bucket slots
/// `start..end` and judges them.
fn evaluate(
    closed: &Ring,
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
    scratch.floors.clear();
    scratch.floors.resize(segments, None);
    segment_table(scratch, slots, segments);
    let (floors, seg_of) = (&mut scratch.floors, &scratch.seg_of);
    closed.for_each(start, end, |b| {
        let offset = b.idx.abs_diff(start);
        let seg = usize::try_from(offset).ok().and_then(|o| seg_of.get(o));
        if let Some(slot) = seg.and_then(|&s| floors.get_mut(s as usize)) {
            // Ties keep the earliest bucket: where a flat floor began.
            if slot.is_none_or(|(m, _)| b.min < m) {
                *slot = Some((b.min, b.idx));
            }
        }
    });
    let width = cfg.window / cfg.buckets as f64;
    scratch.points.clear();
    scratch
        .points
        .extend(scratch.floors.iter().flatten().map(|&(min, idx)| {
            // Placed where the floor was seen, relative to the window start
            // (keeps f64 precision): under a sawtooth that is a trough, which
            // lies on the leak's line wherever it falls in the segment.
            ((idx.abs_diff(start) as f64 + 0.5) * width, min as f64)
        }));
    judge(&scratch.points, covered, flagged, cfg, &mut scratch.judge)
}

/// Fills `scratch.seg_of` for a window of `slots` buckets cut into
/// `segments`, unless it already is. The bucket at offset `o` from the
/// window start is in segment floor(o * segments / slots); segment `s`
/// starts at offset ceil(s * slots / segments).
fn segment_table(scratch: &mut Scratch, slots: u64, segments: usize) {
    if scratch.seg_for == (slots, segments) {
        return;
    }
    let first_of = |s: usize| (s as u64).saturating_mul(slots).div_ceil(segments as u64);
    let (mut seg, mut next) = (0, first_of(1));
    scratch.seg_of.clear();
    for offset in 0..slots {
        while offset >= next {
            seg += 1;
            next = first_of(seg + 1);
        }
        scratch.seg_of.push(u32::try_from(seg).unwrap_or(u32::MAX));
    }
    scratch.seg_for = (slots, segments);
}

#[cfg(test)]
#[path = "leak_tests.rs"]
mod tests;
