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
//! that part. A leak is a floor that rises steadily: Theil–Sen slope of the
//! floors at or above the threshold, most floor-to-floor steps (the latest
//! included) close to that slope, the latest half still growing, the floors
//! close to a straight line and never falling back by much. Warm-ups (rise,
//! then flat), periodic allocate/free (flat floor), single steps and floors
//! that only jitter fail at least one of these.
//!
//! Cost: memory per key is one 8-byte minimum and one bit per bucket in a
//! fixed ring (60 buckets by default: 488 bytes) plus about 300 bytes of
//! fixed and map state, whatever the poll rate (785 bytes measured). A sample
//! that stays in the open bucket is O(1); the verdict is recomputed only
//! when a bucket closes, in O(buckets + segments²); `assess` is a lookup.

use std::collections::HashMap;
use std::hash::Hash;

/// Knobs of the leak detector. Out-of-range values are clamped by
/// [`LeakTracker::new`] rather than rejected, so a bad value cannot panic.
#[derive(Debug, Clone, PartialEq)]
pub struct LeakConfig {
    /// Length of the judged window in seconds (`[processes] leak_window`).
    /// Default 600.
    pub window: f64,
    /// Growth rate at or above which a rising floor counts as a leak.
    /// Default 1 MiB/s (about 3.5 GiB per hour).
    pub min_growth_bytes_per_second: f64,
    /// Share of the window the process must have been seen for before any
    /// verdict (`assess` returns `None` before). Default 1: a caching
    /// allocator's warm-up shorter than about 60% of the window is then
    /// never flagged (at 0.5, one longer than about 40% is). Lower it for
    /// earlier verdicts at the price of flagging long warm-ups.
    pub min_window_fraction: f64,
    /// Downsampling buckets per window; bounds memory per key. Default 60,
    /// clamped to 3..=4096.
    pub buckets: usize,
    /// Segments the covered window is cut into for the floor. Periodic
    /// allocate/free with a period up to one segment (window / segments at
    /// full coverage) leaves a flat floor. Default 6, clamped to 3..=32.
    pub segments: usize,
    /// Share of floor-to-floor steps that must be steady (see
    /// `steady_ratio`), the latest one included. Default 0.6.
    pub min_steady_steps: f64,
    /// A floor-to-floor step is steady when it rises between `steady_ratio`
    /// and `1 / steady_ratio` times what the estimated growth adds over it:
    /// jitter is too small, a warm-up or start-up step too big. The latest
    /// half of the floors must also grow at least `steady_ratio` times the
    /// whole window's growth (a warm-up that levelled off does not).
    /// Default 0.5.
    pub steady_ratio: f64,
    /// Median distance of a floor from the straight line through its two
    /// neighbours, as a share of what one segment of the estimated growth
    /// adds. A leak's floor is close to a line; a floor that only looks like
    /// it is rising because it jitters (a process that rarely returns to its
    /// floor) is not. Default 0.2.
    pub max_floor_jitter: f64,
    /// The floor may fall back below an earlier floor by at most this share
    /// of what one segment of the estimated growth adds (memory given back
    /// is not a leak). Default 0.25.
    pub max_drawdown_fraction: f64,
}

impl Default for LeakConfig {
    fn default() -> Self {
        Self {
            window: 600.0,
            min_growth_bytes_per_second: 1_048_576.0,
            min_window_fraction: 1.0,
            buckets: 60,
            segments: 6,
            min_steady_steps: 0.6,
            steady_ratio: 0.5,
            max_floor_jitter: 0.2,
            max_drawdown_fraction: 0.25,
        }
    }
}

impl LeakConfig {
    /// The defaults with another window length (seconds).
    pub fn with_window(window: f64) -> Self {
        Self {
            window,
            ..Self::default()
        }
    }

    /// Replaces values that would make the arithmetic meaningless (NaN,
    /// zero or negative window, fractions outside 0..=1) by safe ones.
    fn sanitized(self) -> Self {
        let d = Self::default();
        let fraction = |v: f64, dflt: f64| if v.is_nan() { dflt } else { v.clamp(0.0, 1.0) };
        let window = if self.window.is_finite() && self.window > 0.0 {
            self.window
        } else {
            d.window
        };
        let min_growth = if self.min_growth_bytes_per_second.is_finite() {
            self.min_growth_bytes_per_second.max(0.0)
        } else {
            d.min_growth_bytes_per_second
        };
        // At least 3 segments: fewer cannot tell a steady rise from a step.
        // At most 32: Theil–Sen is quadratic in them and 32 is already more
        // than the floors of 60 buckets can fill.
        let buckets = self.buckets.clamp(3, 4096);
        Self {
            window,
            min_growth_bytes_per_second: min_growth,
            min_window_fraction: fraction(self.min_window_fraction, d.min_window_fraction),
            buckets,
            segments: self.segments.clamp(3, buckets.min(32)),
            min_steady_steps: fraction(self.min_steady_steps, d.min_steady_steps),
            steady_ratio: fraction(self.steady_ratio, d.steady_ratio),
            max_floor_jitter: fraction(self.max_floor_jitter, d.max_floor_jitter),
            max_drawdown_fraction: fraction(self.max_drawdown_fraction, d.max_drawdown_fraction),
        }
    }
}

/// The verdict on one key's recent history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// Theil–Sen slope of the segment floors over the window (bytes/s; may
    /// be negative). Exported as `gpumem_process_memory_growth_bytes_per_second`.
    pub growth_bytes_per_second: f64,
    /// All leak conditions hold. Exported as `gpumem_process_leak_suspected`.
    pub suspected: bool,
    /// Theil–Sen slope of the latest half of the floors (bytes/s).
    pub recent_growth_bytes_per_second: f64,
    /// Share of floor-to-floor steps that were steady (0..=1).
    pub steady_steps: f64,
    /// Latest floor minus first floor in the window (bytes; may be negative).
    pub floor_rise_bytes: f64,
    /// Share of the window the process has been seen for (0..=1).
    pub window_covered: f64,
}

/// Per-key bounded history and cached verdicts.
#[derive(Debug)]
pub struct LeakTracker<K> {
    cfg: LeakConfig,
    /// Seconds per bucket: `window / buckets`.
    bucket_width: f64,
    series: HashMap<K, Series>,
    /// Reused buffers so recomputing a verdict does not allocate.
    scratch: Scratch,
    /// Sweep counter for [`LeakTracker::retain_seen`].
    generation: u64,
}

/// One downsampling bucket: the lowest value seen in it. The minimum is all
/// the method needs (a leak is memory that is never given back).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// `floor(t / bucket_width)`, saturating for absurd `t`.
    idx: i64,
    min: u64,
}

#[derive(Debug)]
struct Series {
    /// The bucket still receiving samples; judged only once closed so a
    /// verdict never rests on a half-filled bucket.
    open: Option<Bucket>,
    /// The closed buckets of the `buckets` slots before `open`, as a ring:
    /// bucket `idx` lives in slot `idx mod buckets`, which holds its minimum
    /// when the slot's bit in `filled` is set. The index is implied by the
    /// slot, so a bucket costs 8 bytes and a bit rather than a 16-byte
    /// (index, minimum) pair in a deque: half the memory per key at the
    /// same verdicts (64 GPUs x 1000 processes track 64k keys).
    closed: Ring,
    /// Bucket of the first sample: how long the process has been seen.
    first_idx: Option<i64>,
    last_t: f64,
    trend: Option<Trend>,
    /// The tracker's generation when the key was last seen.
    seen: u64,
}

#[derive(Debug, Default)]
struct Scratch {
    /// Per segment: lowest bucket minimum and the bucket it is in.
    floors: Vec<Option<(u64, i64)>>,
    /// Non-empty segment floors as (seconds since window start, bytes).
    points: Vec<(f64, f64)>,
    slopes: Vec<f64>,
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
            Some(s) => {
                s.seen = self.generation;
                if let Some(b) = sample {
                    s.push(idx, t, b, cfg, scratch);
                }
                s.trend
            }
            None => {
                let b = sample?;
                let mut s = Series::new(cfg.buckets, self.generation);
                s.push(idx, t, b, cfg, scratch);
                let trend = s.trend;
                self.series.insert(key.clone(), s);
                trend
            }
        }
    }

    /// Drops the keys not observed or assessed through
    /// [`observe_and_assess`](Self::observe_and_assess) (or `observe`)
    /// since the previous call: the processes no longer seen.
    pub fn retain_seen(&mut self) {
        let g = self.generation;
        self.series.retain(|_, s| s.seen == g);
        self.generation = g.wrapping_add(1);
    }

    /// The latest verdict for `key`: `None` while less than
    /// `min_window_fraction` of the window is covered or the key is unknown.
    pub fn assess(&self, key: &K) -> Option<Trend> {
        self.series.get(key).and_then(|s| s.trend)
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

/// Fixed storage for the closed buckets of one key: `len` minima, then a
/// bitmap of the slots that hold one.
#[derive(Debug)]
struct Ring {
    words: Box<[u64]>,
    len: usize,
}

impl Ring {
    fn new(len: usize) -> Self {
        Self {
            words: vec![0; len + len.div_ceil(64)].into_boxed_slice(),
            len,
        }
    }

    fn slot(&self, idx: i64) -> usize {
        // rem_euclid of a positive modulus is in 0..len.
        usize::try_from(idx.rem_euclid(self.len as i64)).unwrap_or(0)
    }

    fn get_slot(&self, s: usize) -> Option<u64> {
        let filled = ((self.words[self.len + s / 64] >> (s % 64)) & 1) == 1;
        filled.then(|| self.words[s])
    }

    fn set(&mut self, idx: i64, min: u64) {
        let s = self.slot(idx);
        self.words[s] = min;
        self.words[self.len + s / 64] |= 1 << (s % 64);
    }

    fn clear(&mut self, idx: i64) {
        let s = self.slot(idx);
        self.words[self.len + s / 64] &= !(1 << (s % 64));
    }

    fn clear_all(&mut self) {
        self.words[self.len..].fill(0);
    }

    /// The closed buckets with an index in `lo..hi` (at most `len` apart),
    /// oldest first. The slot advances with the index (one modulo in all:
    /// this runs for every key each time a bucket closes).
    fn iter(&self, lo: i64, hi: i64) -> impl Iterator<Item = Bucket> + '_ {
        let mut slot = self.slot(lo);
        (lo..hi).filter_map(move |idx| {
            let s = slot;
            slot = if slot + 1 == self.len { 0 } else { slot + 1 };
            self.get_slot(s).map(|min| Bucket { idx, min })
        })
    }

    /// How many slots hold a bucket.
    #[cfg(test)]
    fn filled(&self) -> usize {
        self.words[self.len..].iter().map(|w| w.count_ones() as usize).sum()
    }
}

impl Series {
    fn new(buckets: usize, seen: u64) -> Self {
        Self {
            open: None,
            closed: Ring::new(buckets),
            first_idx: None,
            last_t: f64::NEG_INFINITY,
            trend: None,
            seen,
        }
    }

    fn push(&mut self, idx: i64, t: f64, used: u64, cfg: &LeakConfig, scratch: &mut Scratch) {
        // Out-of-order samples would break the "oldest first" ring; a clock
        // that went backwards is the caller's bug, not a reason to panic.
        if t < self.last_t {
            return;
        }
        self.last_t = t;
        let first_idx = *self.first_idx.get_or_insert(idx);
        if let Some(open) = self.open.as_mut() {
            if open.idx == idx {
                open.min = open.min.min(used);
                return;
            }
        }
        // Keep only the `buckets` bucket slots before the new open one. The
        // slots leaving the window are those the indices from the old open
        // bucket up to the new one map to: empty them, then file the old
        // open bucket if it is still inside.
        let oldest = idx.saturating_sub(cfg.buckets as i64);
        if let Some(done) = self.open.replace(Bucket { idx, min: used }) {
            let span = idx.saturating_sub(done.idx);
            if span >= cfg.buckets as i64 {
                self.closed.clear_all();
            } else {
                (done.idx..idx).for_each(|i| self.closed.clear(i));
            }
            if done.idx >= oldest {
                self.closed.set(done.idx, done.min);
            }
        }
        // The judged span: the last window, or the whole history if shorter.
        let start = oldest.max(first_idx);
        self.trend = evaluate(&self.closed, start, idx, cfg, scratch);
    }
}

/// Builds the segment floors of the closed buckets in the bucket slots
/// `start..end` and judges them.
fn evaluate(closed: &Ring, start: i64, end: i64, cfg: &LeakConfig, scratch: &mut Scratch) -> Option<Trend> {
    // Coverage is how long the process has been seen, not how many buckets
    // hold samples: a poll slower than a bucket must not hide the verdict.
    let slots = end
        .checked_sub(start)
        .and_then(|s| u64::try_from(s).ok())
        .filter(|&s| s > 0)?;
    let covered = (slots as f64 / cfg.buckets as f64).min(1.0);
    if covered + 1e-9 < cfg.min_window_fraction {
        return None;
    }
    let segments = cfg.segments.min(usize::try_from(slots).unwrap_or(usize::MAX));
    scratch.floors.clear();
    scratch.floors.resize(segments, None);
    // The bucket at offset `o` from `start` is in segment
    // floor(o * segments / slots); segment `s` starts at offset
    // ceil(s * slots / segments). Walking those boundaries saves a division
    // per bucket.
    let first_of = |s: usize| (s as u64).saturating_mul(slots).div_ceil(segments as u64);
    let (mut seg, mut next) = (0, first_of(1));
    for b in closed.iter(start, end) {
        let offset = b.idx.abs_diff(start);
        while offset >= next {
            seg += 1;
            next = first_of(seg + 1);
        }
        if let Some(slot) = scratch.floors.get_mut(seg) {
            // Ties keep the earliest bucket: where a flat floor began.
            if slot.is_none_or(|(m, _)| b.min < m) {
                *slot = Some((b.min, b.idx));
            }
        }
    }
    let width = cfg.window / cfg.buckets as f64;
    let seg_slots = slots as f64 / segments as f64;
    scratch.points.clear();
    scratch
        .points
        .extend(scratch.floors.iter().flatten().map(|&(min, idx)| {
            // Placed where the floor was seen, relative to the window start
            // (keeps f64 precision): under a sawtooth that is a trough, which
            // lies on the leak's line wherever it falls in the segment.
            ((idx.abs_diff(start) as f64 + 0.5) * width, min as f64)
        }));
    judge(&scratch.points, seg_slots * width, covered, cfg, &mut scratch.slopes)
}

/// Applies the leak conditions to segment floors (time-ordered points,
/// segments `seg_secs` long).
fn judge(points: &[(f64, f64)], seg_secs: f64, covered: f64, cfg: &LeakConfig, slopes: &mut Vec<f64>) -> Option<Trend> {
    // Three floors are the least that can show a rise spread over time.
    if points.len() < 3 {
        return None;
    }
    let (first, last) = (points.first()?.1, points.last()?.1);
    let growth = theil_sen(points, slopes)?;
    let recent = theil_sen(&points[(points.len() - 1) / 2..], slopes)?;
    let ratio = cfg.steady_ratio;
    // Steady: the floor rose about as much as the estimated growth predicts
    // over this step. Jitter of a flat floor is far below, the start-up or
    // warm-up step of a caching allocator far above.
    let steady = |w: &[(f64, f64)]| {
        let (rise, expected) = (w[1].1 - w[0].1, growth * (w[1].0 - w[0].0));
        rise > 0.0 && rise >= ratio * expected && rise * ratio <= expected
    };
    let steady_steps = points.windows(2).filter(|w| steady(w)).count() as f64 / (points.len() - 1) as f64;
    let rise = last - first;
    let suspected = growth > 0.0
        && growth >= cfg.min_growth_bytes_per_second
        && recent >= ratio * growth
        && steady_steps + 1e-9 >= cfg.min_steady_steps
        && points.windows(2).last().is_some_and(steady)
        && rise > 0.0
        // Memory given back is not leaked: the floor may dip by jitter, not
        // by a share of what one segment of this growth adds.
        && max_drawdown(points) <= cfg.max_drawdown_fraction * growth * seg_secs
        && floor_jitter(points, slopes) <= cfg.max_floor_jitter * growth * seg_secs;
    Some(Trend {
        growth_bytes_per_second: growth,
        suspected,
        recent_growth_bytes_per_second: recent,
        steady_steps,
        floor_rise_bytes: rise,
        window_covered: covered,
    })
}

/// Median distance (bytes) of each inner floor from the line through its
/// neighbours: about zero for a steady rise, the floor's own noise otherwise.
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

/// Largest fall of a floor below an earlier, higher floor (bytes).
fn max_drawdown(points: &[(f64, f64)]) -> f64 {
    let mut peak = f64::NEG_INFINITY;
    let mut worst = 0.0_f64;
    for &(_, v) in points {
        peak = peak.max(v);
        worst = worst.max(peak - v);
    }
    worst
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
/// not finite. Sorts `values`.
fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_unstable_by(f64::total_cmp);
    let mid = values.len() / 2;
    let m = if values.len() % 2 == 1 {
        *values.get(mid)?
    } else {
        (*values.get(mid.checked_sub(1)?)? + *values.get(mid)?) / 2.0
    };
    m.is_finite().then_some(m)
}

#[cfg(test)]
#[path = "leak_tests.rs"]
mod tests;
