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
//! (`leak/judge.rs`), at every verdict over 10% of a window. Once raised,
//! the flag holds until, over 20% of a window, the kept floor's growth stays
//! below a fraction of the threshold or its latest half kept nothing more:
//! hysteresis, so an estimate at the threshold cannot flap.
//! Warm-ups (rise, then flat), periodic allocate/free (flat kept floor),
//! single steps and floors that only jitter fail the spread.
//!
//! Cost: memory per key is one exact minimum per bucket in a fixed ring
//! (60 buckets by default) plus a few fields, whatever the poll rate.
//! A sample that stays in the open bucket is O(1); the verdict is
//! recomputed once per bucket, in O(buckets + segments²), at the key's
//! phase of the next bucket (`PHASES`: keys do not all judge in one
//! poll); `assess` is a lookup.

use std::collections::HashMap;
use std::hash::Hash;

mod config;

pub use config::LeakConfig;

/// The verdict on one key's recent history.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
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
    /// The phase the next new key gets (see [`PHASES`]).
    next_phase: u8,
}

/// Verdict phases within a bucket. When buckets close, every key's closes
/// at once (they share boundaries), and judging 64,000 keys in that one
/// poll made it ~100 ms longer than the others. So a
/// key judges its closed window at the first sample at least `phase /
/// PHASES` of the way into the next bucket: the same buckets, the same
/// verdict, reported up to one bucket width later, and a poll judges about
/// a tenth of the keys at ten polls a bucket. New keys take the phases in
/// turn (the first key of a tracker judges at once, as before), so the
/// split is even and replayable whatever the keys are.
const PHASES: u8 = 64;

mod at;
mod eval;
mod judge;
mod quiet;
mod ring;

use at::At;
use eval::{Scratch, evaluate, persistence_buckets, quiet_gap};
use quiet::Quiet;
use ring::Ring;

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
    /// minimum unless empty.
    closed: Ring,
    /// The run of equal minima the ring ends with, for flat verdicts.
    quiet: Quiet,
    /// Buckets from the first sample's to the open one, saturating: how
    /// long the process has been seen (a count, not an index: 4 bytes).
    seen: u32,
    last_t: f64,
    trend: Option<Trend>,
    /// The flag behind `trend.suspected`, kept across verdicts for its
    /// hysteresis.
    flagged: bool,
    /// 1 + buckets since the one at whose opening the verdicts began to
    /// disagree with the flag (and have at every verdict since); 0 while
    /// they agree. Counted like `seen`.
    disagree: u32,
    /// When in a bucket this key judges the window closed at its start
    /// (in 1/[`PHASES`] of a bucket).
    phase: u8,
    /// The window closed at the open bucket's start is not judged yet.
    pending: bool,
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
            next_phase: 0,
        }
    }

    /// Records one sample when `used_bytes` is known, then returns the
    /// latest verdict for `key`, in one map lookup; also marks `key` as seen
    /// for [`retain_seen`](Self::retain_seen). Samples with a non-finite `t`
    /// or a `t` earlier than the key's latest are ignored. Amortised O(1);
    /// the verdict is recomputed when the sample opens a new bucket, and is
    /// `None` while less than `min_window_fraction` of the window is covered.
    /// The pipeline calls this once per process per poll: with tens of
    /// thousands of keys every lookup is a cache miss, so one instead of
    /// three (and no liveness set) matters.
    pub fn observe_and_assess(&mut self, key: &K, t: f64, used_bytes: Option<u64>) -> Option<Trend> {
        let at = At::new(t, self.bucket_width);
        let sample = used_bytes.filter(|_| t.is_finite());
        let cfg = &self.cfg;
        let scratch = &mut self.scratch;
        match self.series.get_mut(key) {
            Some((s, seen)) => {
                *seen = self.generation;
                if let Some(b) = sample {
                    s.push(at, b, cfg, scratch);
                }
                s.trend
            }
            None => {
                sample?;
                let mut s = self.series();
                let trend = self.observe_series(&mut s, t, sample);
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
        if let Some(b) = used_bytes.filter(|_| t.is_finite()) {
            if !s.started {
                s.phase = take_phase(&mut self.next_phase);
            }
            s.push(At::new(t, self.bucket_width), b, &self.cfg, &mut self.scratch);
        }
        s.trend
    }

    /// Drops the keys not observed or assessed through
    /// [`observe_and_assess`](Self::observe_and_assess) since the previous
    /// call: the processes no longer seen.
    pub fn retain_seen(&mut self) {
        let g = self.generation;
        self.series.retain(|_, (_, seen)| *seen == g);
        self.generation = g.wrapping_add(1);
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

/// The phase for a new key, and the next one's.
fn take_phase(next: &mut u8) -> u8 {
    let p = *next;
    *next = (p + 1) % PHASES;
    p
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
            quiet: Quiet::default(),
            seen: 0,
            last_t: f64::NEG_INFINITY,
            trend: None,
            flagged: false,
            disagree: 0,
            phase: 0,
            pending: false,
        }
    }

    fn push(&mut self, at: At, used: u64, cfg: &LeakConfig, scratch: &mut Scratch) {
        // Out-of-order samples would break the "oldest first" ring; a clock
        // that went backwards is the caller's bug, not a reason to panic.
        if at.t < self.last_t {
            return;
        }
        let since_last = at.t - self.last_t;
        self.last_t = at.t;
        let (started, idx) = (self.started, at.idx);
        if !started {
            self.seen = 0;
            self.started = true;
        }
        if started && self.open_idx == idx {
            self.open_min = self.open_min.min(used);
            if self.pending && self.due(at) {
                self.judge(cfg, scratch);
            }
            return;
        }
        // A deferred verdict is due before its buckets change.
        if self.pending {
            self.judge(cfg, scratch);
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
            let add = u32::try_from(span).unwrap_or(u32::MAX);
            self.seen = self.seen.saturating_add(add);
            if self.disagree > 0 {
                self.disagree = self.disagree.saturating_add(add);
            }
            if span >= cfg.buckets as i64 {
                self.closed.clear_all();
            } else {
                (done_idx..idx).for_each(|i| self.closed.clear(i));
            }
            if done_idx >= oldest {
                self.closed.set(done_idx, done_min);
                self.quiet.file(done_idx, done_min, quiet_gap(cfg));
            }
        }
        // Deferred only while samples come at least twice a bucket (not at
        // the first sample, whose `since_last` is infinite), so the verdict
        // still comes within about a bucket width.
        let frequent = 2.0 * since_last <= at.width;
        if frequent && !self.due(at) {
            self.pending = true;
        } else {
            self.judge(cfg, scratch);
        }
    }

    /// This key's phase of the bucket `at` is in has come.
    fn due(&self, at: At) -> bool {
        at.into * f64::from(PHASES) >= f64::from(self.phase)
    }

    /// Judges the window closed at the open bucket's start and moves the
    /// flag.
    fn judge(&mut self, cfg: &LeakConfig, scratch: &mut Scratch) {
        self.pending = false;
        let idx = self.open_idx;
        // The judged span: the last window, or the whole history if shorter.
        let start = idx.saturating_sub(i64::from(self.seen).min(cfg.buckets as i64));
        // No verdict (too short a history, a gap) lowers the flag: the next
        // one starts afresh.
        let flagged = self.flagged;
        let judged = evaluate(&self.closed, &self.quiet, start, idx, flagged, cfg, scratch);
        // The flag flips only once the verdicts have disagreed with it for
        // `persistence` of the window: floors that jitter line up by
        // chance for a verdict or two, and noise can hide a leak's rise as
        // briefly.
        self.disagree = match judged {
            Some(j) if j.verdict != flagged => self.disagree.max(1),
            _ => 0,
        };
        // Verdicts before `min_window_fraction` only count towards a start.
        let judged = judged.filter(|j| j.trend.window_covered + 1e-9 >= cfg.min_window_fraction);
        if judged.is_none() {
            self.flagged = false;
        } else if i64::from(self.disagree) > persistence_buckets(cfg, flagged) {
            self.flagged = !flagged;
            self.disagree = 0;
        }
        self.trend = judged.map(|j| Trend {
            suspected: self.flagged,
            ..j.trend
        });
    }
}

#[cfg(test)]
mod tests;
