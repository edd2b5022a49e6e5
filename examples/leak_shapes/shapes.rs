//! Synthetic memory shapes for the leak detector, and a replay that scores
//! one shape against what it should be judged.
//!
//! Owns: the shapes of docs/leak-detection.md (staircases, leaks under
//! square and ramp sawtooths, warm-ups, noise at the threshold, a leak that
//! stops, and the shapes that must never be flagged), each with its
//! expectation, and the per-poll false-positive / false-negative counts.
//! Shared by `examples/leak_shapes` (the rate table) and
//! `tests/library/leak_shapes.rs` (the table tests) through `#[path]`.
//! Must not: print, read clocks or files; everything is seeded.

use gpumemd::collect::diagnosis::leak::{LeakConfig, LeakTracker};

pub const MIB: f64 = 1_048_576.0;
pub const GIB: f64 = 1024.0 * MIB;
/// The daemon's default `leak_min_rate`.
pub const RATE: f64 = MIB;
/// Poll interval of every replay (the daemon's default).
pub const POLL: f64 = 1.0;
/// A leak from the process's start, to be flagged within 1.5 windows.
const LEAK: Expect = Expect::Leak { from: 0.0, within: 1.5 };

/// What the detector should say about a shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Expect {
    /// A leak from `from` on: flagged within `within` windows of it
    /// (1.5 unless noise hides it), then on for good.
    Leak { from: f64, within: f64 },
    /// A leak from `from` to `until`, then flat: flagged, then cleared
    /// within one window of `until`.
    Stops { from: f64, until: f64 },
    /// Never flagged.
    Never,
    /// Growth at or above the threshold for longer than a window, then a
    /// plateau from `plateau`: no detector can tell it from a leak while it
    /// grows, so it may be flagged, once, and must be clear one window
    /// after the plateau began.
    LongWarmUp { plateau: f64 },
    /// Noise far above what the threshold adds over a window: flagged at
    /// most once (one episode), and rarely.
    Rare,
    /// A leak at exactly the threshold: its estimate sits on it, so when it
    /// is flagged is chance; once flagged it must stay flagged (no flapping).
    AtThreshold { from: f64 },
    /// A leak the poll interval cannot resolve (see the docs): only the
    /// absence of flapping is asserted.
    Limit { from: f64 },
}

/// Bytes at time `t`; `None` is a missed sample.
pub type Curve = Box<dyn FnMut(f64) -> Option<f64>>;

pub struct Shape {
    pub name: String,
    pub expect: Expect,
    pub curve: Curve,
}

/// xorshift64*: tiny, seeded, good enough for shapes.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

/// A process's context: 20 MiB right after creation, ~500 MiB once it has
/// launched kernels (measured on the H200), from 3 s on.
fn context(t: f64) -> f64 {
    if t < 3.0 { 20.0 * MIB } else { 500.0 * MIB }
}

/// Phase (0..1) in a cycle of about `period` whose length varies by 10%
/// from cycle to cycle, as real loops do.
fn cycles(period: f64, rng: &mut Rng) -> impl FnMut(f64) -> f64 + use<> {
    let mut r = rng.clone();
    let (mut start, mut len) = (0.0, period * r.range(0.9, 1.1));
    move |t| {
        while t >= start + len {
            start += len;
            len = period * r.range(0.9, 1.1);
        }
        (t - start) / len
    }
}

fn shape(name: impl Into<String>, expect: Expect, curve: impl FnMut(f64) -> Option<f64> + 'static) -> Shape {
    Shape {
        name: name.into(),
        expect,
        curve: Box::new(curve),
    }
}

/// Every shape for window `w` (seconds); `seed` varies phases and noise.
pub fn all(w: f64, seed: u64) -> Vec<Shape> {
    let mut v = leaks(w, seed);
    v.extend(negatives(w, seed));
    v
}

/// Shapes that are, or contain, a leak.
pub fn leaks(w: f64, seed: u64) -> Vec<Shape> {
    let mut rng = Rng::new(seed);
    let mut v = Vec::new();
    // The caching allocator's staircase: a leak of `rate` reserved in
    // chunks, `k` chunks per window, from a random phase.
    for k in [3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        let (step, gap) = (2.0 * RATE * w / k, w / k);
        let phase = rng.range(0.0, gap);
        let expect = LEAK;
        v.push(shape(
            format!("staircase {k} steps/window, 2 MiB/s"),
            expect,
            move |t| Some(context(t) + step * ((t + phase) / gap).floor()),
        ));
    }
    // Issue 15's case: one 2 MiB tensor kept per second, reserved by the
    // allocator 20 MiB at a time.
    v.push(shape("2 MiB/s reserved 20 MiB per 10 s", LEAK, |t| {
        Some(context(t) + 20.0 * MIB * (t / 10.0).floor())
    }));
    let mut noise = Rng::new(seed ^ 0x51);
    // Noise of half what the demo's window grows by delays the flag there.
    let expect = Expect::Leak { from: 0.0, within: 2.0 };
    v.push(shape("linear 2 MiB/s, 32 MiB noise", expect, move |t| {
        Some(context(t) + 2.0 * RATE * t + noise.range(0.0, 32.0 * MIB))
    }));
    // Under periodic allocate/free: the troughs rise. A square wave holds
    // its trough for half a period, so it is sampled exactly.
    let mut sq = cycles(w / 5.0, &mut rng);
    v.push(shape(
        "1.5 MiB/s under a 1 GiB square wave, 5 periods/window",
        LEAK,
        move |t| Some(context(t) + 1.5 * RATE * t + if sq(t) < 0.5 { GIB } else { 0.0 }),
    ));
    // Issue 15's ramp: accumulates per batch, frees per epoch, keeps a
    // little each time. The poll sees the trough only to within one poll of
    // the ramp.
    for (k, expect) in ramp_cases(w) {
        let mut saw = cycles(w / k, &mut rng);
        let name = format!("1.5 MiB/s under a +-500 MiB ramp sawtooth, {k} periods/window");
        v.push(shape(name, expect, move |t| {
            Some(context(t) + 1.5 * RATE * t + 1000.0 * MIB * saw(t))
        }));
    }
    // Issue 15's exact case: 1 MiB/s, the threshold itself.
    let mut saw = cycles(w / 5.0, &mut rng);
    let expect = match ramp_cases(w)[1].1 {
        Expect::Leak { from, .. } => Expect::AtThreshold { from },
        other => other,
    };
    v.push(shape(
        "1 MiB/s (the threshold) under the same sawtooth, 5 periods/window",
        expect,
        move |t| Some(context(t) + RATE * t + 1000.0 * MIB * saw(t)),
    ));
    // A leak at the threshold whose estimate wanders around it.
    let mut noise = Rng::new(seed ^ 0x77);
    let amp = threshold_noise(w);
    v.push(shape(
        "1 MiB/s (the threshold), noise",
        Expect::AtThreshold { from: 0.0 },
        move |t| Some(context(t) + RATE * t + noise.range(0.0, amp)),
    ));
    // A leak that stops after two windows.
    let until = 2.0 * w;
    v.push(shape(
        "3 MiB/s for 2 windows, then flat",
        Expect::Stops { from: 0.0, until },
        move |t| Some(context(t) + 3.0 * RATE * t.min(until)),
    ));
    v
}

/// Sample noise of the shapes at and below the threshold: a quarter of
/// what the threshold adds over window `w` (7.5 MiB at 30 s, 150 MiB at
/// 10 min), so the growth estimate wanders a few percent around it.
fn threshold_noise(w: f64) -> f64 {
    RATE * w / 4.0
}

/// The ramp sawtooth at window `w`: which period counts are expected to be
/// caught. The trough is seen to within one poll of the ramp (1000 MiB per
/// period), so the growth of a whole window must dwarf that.
fn ramp_cases(w: f64) -> Vec<(f64, Expect)> {
    [3.0, 5.0, 10.0]
        .into_iter()
        .map(|k| {
            let jitter = 1000.0 * MIB * POLL / (w / k);
            let expect = if 1.5 * RATE * w >= 8.0 * jitter {
                LEAK
            } else {
                Expect::Limit { from: 0.0 }
            };
            (k, expect)
        })
        .collect()
}

/// Shapes that must not be flagged, and warm-ups longer than a window.
pub fn negatives(w: f64, seed: u64) -> Vec<Shape> {
    let mut rng = Rng::new(seed ^ 0xA5A5);
    let mut v = Vec::new();
    v.push(shape("startup, then flat", Expect::Never, |t| Some(context(t))));
    v.push(shape("stopped process (flat 3 GiB)", Expect::Never, |_| {
        Some(3.0 * GIB)
    }));
    // Warm-ups to 8 GiB over `d` windows, fast then slowing (the rate
    // passes the threshold on its way down), in 32 MiB allocator chunks.
    for d in [0.5, 1.0, 2.0, 3.0] {
        let (len, top) = (d * w, 8.0 * GIB);
        let expect = if d <= 0.5 {
            Expect::Never
        } else {
            Expect::LongWarmUp { plateau: len }
        };
        v.push(shape(format!("warm-up to 8 GiB over {d} windows"), expect, move |t| {
            let x = (t / len).min(1.0);
            let chunk = 32.0 * MIB;
            Some(context(t) + (top * (1.0 - (1.0 - x) * (1.0 - x)) / chunk).floor() * chunk)
        }));
    }
    // A caching allocator's warm-up in 6 steps over half a window.
    let len = w / 2.0;
    v.push(shape("warm-up in 6 steps over 0.5 window", Expect::Never, move |t| {
        Some(context(t) + 8.0 * GIB * ((t / len * 6.0).floor().min(6.0) / 6.0))
    }));
    let mut sq = cycles(w / 10.0, &mut rng);
    v.push(shape("square wave 2 GiB, 10 periods/window", Expect::Never, move |t| {
        Some(GIB + if sq(t) < 0.5 { 2.0 * GIB } else { 0.0 })
    }));
    v.push(shape(
        "square wave 518 <-> 2566 MiB, 4 s (sawtooth.csv)",
        Expect::Never,
        |t| Some(518.0 * MIB + if t % 4.0 < 2.0 { 2048.0 * MIB } else { 0.0 }),
    ));
    let mut saw = cycles(w / 5.0, &mut rng);
    v.push(shape(
        "ramp sawtooth +-500 MiB, 5 periods/window",
        Expect::Never,
        move |t| Some(2.0 * GIB + 1000.0 * MIB * saw(t)),
    ));
    let at = 1.5 * w;
    v.push(shape("one big step (+8 GiB)", Expect::Never, move |t| {
        Some(GIB + if t < at { 0.0 } else { 8.0 * GIB })
    }));
    // Fragmentation: the reservation grows only when a batch larger than
    // any before arrives, so its steps thin out (records of random sizes,
    // like varlen.csv).
    let (mut frag, mut top) = (Rng::new(seed ^ 0xF7), 0.0_f64);
    // Three batches per second, of 16 sizes up to 4 GiB: the largest so
    // far stays reserved.
    v.push(shape(
        "fragmentation plateau (new largest batch)",
        Expect::Never,
        move |t| {
            for _ in 0..3 {
                top = top.max((frag.range(1.0, 17.0)).floor() * GIB / 4.0);
            }
            Some(context(t) + top)
        },
    ));
    let mut noise = Rng::new(seed ^ 0x3C);
    v.push(shape("noise +-256 MiB around 4 GiB", Expect::Rare, move |_| {
        Some(4.0 * GIB + noise.range(-256.0, 256.0) * MIB)
    }));
    // Half the threshold under noise: the hysteresis must not let it in.
    let mut noise = Rng::new(seed ^ 0x99);
    let amp = threshold_noise(w);
    v.push(shape(
        "0.5 MiB/s (half the threshold), noise",
        Expect::Never,
        move |t| Some(context(t) + 0.5 * RATE * t + noise.range(0.0, amp)),
    ));
    // A spawn pool: each worker lives half a window (a new key each time).
    v.push(shape("spawn pool (workers live half a window)", Expect::Never, |t| {
        Some(context(t) + 2.0 * GIB)
    }));
    v
}

/// What one replay of a shape saw.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// Times the flag went up.
    pub raised: Vec<f64>,
    /// Times the flag went down.
    pub cleared: Vec<f64>,
    /// Polls after the first window the flag was wrongly on / wrongly off,
    /// and polls judged (a grace window after a leak stops is not judged).
    pub false_pos: u32,
    pub false_neg: u32,
    /// Judged polls where the flag should be off / on.
    pub neg_polls: u32,
    pub pos_polls: u32,
}

impl Outcome {
    pub fn transitions(&self) -> usize {
        self.raised.len() + self.cleared.len()
    }
}

/// Should the flag be on at `t` (`None`: not judged)?
fn wanted(expect: Expect, w: f64, t: f64) -> Option<bool> {
    match expect {
        Expect::Leak { from, .. } | Expect::Limit { from } | Expect::AtThreshold { from } => Some(t >= from + w),
        Expect::Stops { from, until } => {
            if t < from + w {
                Some(false)
            } else if t < until {
                Some(true)
            } else if t < until + w {
                None
            } else {
                Some(false)
            }
        }
        Expect::Never | Expect::Rare | Expect::LongWarmUp { .. } => Some(false),
    }
}

/// Replays `shape` at window `w` for `until` seconds of 1 s polls.
pub fn replay(shape: &mut Shape, w: f64, until: f64) -> Outcome {
    let mut tracker = LeakTracker::new(LeakConfig::with_window(w));
    let mut out = Outcome::default();
    let spawn_pool = shape.name.starts_with("spawn pool");
    let (mut on, mut i) = (false, 0u32);
    loop {
        let t = f64::from(i) * POLL;
        if t > until {
            return out;
        }
        i += 1;
        // The spawn pool's workers are new processes: a new key each.
        let key = if spawn_pool { (t / (w / 2.0)).floor() as u64 } else { 0 };
        let verdict = tracker.observe_and_assess(&key, t, (shape.curve)(t).map(|b| b as u64));
        tracker.retain_seen();
        let now = verdict.is_some_and(|v| v.suspected);
        match (on, now) {
            (false, true) => out.raised.push(t),
            (true, false) => out.cleared.push(t),
            _ => {}
        }
        on = now;
        if t < w {
            continue;
        }
        if let Some(want) = wanted(shape.expect, w, t) {
            if want {
                out.pos_polls += 1;
            } else {
                out.neg_polls += 1;
            }
            out.false_pos += u32::from(now && !want);
            out.false_neg += u32::from(!now && want);
        }
    }
}

/// How long to replay a shape at window `w`: long enough for its leak to be
/// flagged and, for one that stops or a long warm-up, cleared.
pub fn duration(expect: Expect, w: f64) -> f64 {
    match expect {
        Expect::LongWarmUp { plateau } => plateau + 2.0 * w,
        Expect::Stops { until, .. } => until + 2.0 * w,
        _ => 4.0 * w,
    }
}
