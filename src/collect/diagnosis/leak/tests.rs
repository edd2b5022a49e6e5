//! Tests of the leak detector: synthetic shapes from a seeded PRNG and edge
//! cases, plus the helpers of its two sibling files (replays of the real
//! H200 PyTorch traces in `leak_trace_tests.rs`, false-positive and
//! detection rates in `leak_rate_tests.rs`). Kept apart so `leak.rs` stays
//! readable; no I/O except reading the committed trace CSVs.

use super::*;

/// Shorthands the tests use; the pipeline only needs `observe_and_assess`.
impl<K: Hash + Eq + Clone> LeakTracker<K> {
    /// The configuration in use (after clamping).
    pub fn config(&self) -> &LeakConfig {
        &self.cfg
    }

    pub fn observe(&mut self, key: &K, t: f64, used_bytes: u64) {
        self.observe_and_assess(key, t, Some(used_bytes));
    }

    /// The latest verdict for `key`.
    pub fn assess(&self, key: &K) -> Option<Trend> {
        self.series.get(key).and_then(|(s, _)| s.trend)
    }

    /// Keeps only the keys for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.series.retain(|k, _| keep(k));
    }
}

const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1024.0 * MIB;

/// Traces live in the repository; the scratch crate symlinks `tests/traces`.
const TRACE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/traces/h200-pytorch/");

/// xorshift64*: tiny, seeded, good enough for test shapes.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

fn to_bytes(v: f64) -> u64 {
    // `as` saturates: negative -> 0, huge -> u64::MAX.
    v as u64
}

/// What a replay saw.
#[derive(Debug, Default)]
struct Replay {
    first_suspected: Option<f64>,
    /// Every sample time at which the verdict was "suspected".
    suspected_at: Vec<f64>,
    last: Option<Trend>,
    suspected_at_end: bool,
}

/// Feeds `shape(t)` sampled every `poll` seconds from 0 to `until` into a
/// fresh tracker with key 0; `None` from the shape is a missed sample.
fn replay(cfg: LeakConfig, poll: f64, until: f64, mut shape: impl FnMut(f64) -> Option<f64>) -> Replay {
    let mut tracker = LeakTracker::new(cfg);
    let mut out = Replay::default();
    let steps = (until / poll).ceil() as usize;
    for i in 0..=steps {
        let t = i as f64 * poll;
        let Some(v) = shape(t) else { continue };
        tracker.observe(&0u32, t, to_bytes(v));
        if let Some(trend) = tracker.assess(&0) {
            if trend.suspected {
                out.first_suspected.get_or_insert(t);
                out.suspected_at.push(t);
            }
            out.suspected_at_end = trend.suspected;
            out.last = Some(trend);
        }
    }
    out
}

const W: f64 = 300.0;
const POLL: f64 = 1.0;

/// The defaults with a 5-minute window (1 s polls: 5 samples per bucket,
/// half what the 10-minute default sees, so a little harder).
fn cfg() -> LeakConfig {
    LeakConfig::with_window(W)
}

fn saw(t: f64, period: f64, amp: f64) -> f64 {
    amp * (t % period) / period
}

fn square(t: f64, period: f64, amp: f64) -> f64 {
    if t % period < period / 2.0 { amp } else { 0.0 }
}

// ---------- synthetic shapes ----------

#[test]
fn linear_leaks_slow_and_fast_are_caught_with_the_right_rate() {
    for rate in [2.0 * MIB, 200.0 * MIB] {
        let r = replay(cfg(), 1.0, 3.0 * W, |t| Some(GIB + rate * t));
        let at = r.first_suspected.expect("suspected");
        let g = r.last.expect("assessed").growth_bytes_per_second;
        assert!(at <= 1.5 * W, "rate {rate}: suspected at {at}");
        assert!((g / rate - 1.0).abs() < 0.05, "rate {rate}: estimate {g}");
    }
}

#[test]
fn noisy_and_staircase_leaks_are_caught() {
    let mut rng = Rng::new(7);
    let noisy = replay(cfg(), 1.0, 3.0 * W, |t| {
        Some(GIB + 3.0 * MIB * t + rng.range(0.0, 500.0 * MIB))
    });
    assert!(noisy.first_suspected.is_some_and(|t| t <= 1.5 * W), "{noisy:?}");
    let g = noisy.last.map_or(0.0, |t| t.growth_bytes_per_second);
    assert!((g / (3.0 * MIB) - 1.0).abs() < 0.2, "noisy estimate {g}");
    // 16 MiB kept every 4 s, like leak.py at a slower pace.
    let stairs = replay(cfg(), 1.0, 3.0 * W, |t| Some(GIB + 16.0 * MIB * (t / 4.0).floor()));
    assert!(stairs.first_suspected.is_some_and(|t| t <= 1.5 * W), "{stairs:?}");
}

/// A memory shape: bytes at time `t`, `None` for a missed sample.
type Shape = Box<dyn FnMut(f64) -> Option<f64>>;

#[test]
fn non_leaking_shapes_are_never_suspected() {
    let mut rng = Rng::new(11);
    let cases: Vec<(&str, Shape)> = vec![
        ("flat", Box::new(|_| Some(3.0 * GIB))),
        (
            "warm-up steps then plateau",
            Box::new(|t| Some(GIB * [0.02, 0.5, 1.0, 2.5, 3.4][(t / 12.0).min(4.0) as usize])),
        ),
        (
            "process start 20 MiB -> 500 MiB",
            Box::new(|t| Some(if t < 3.0 { 20.0 * MIB } else { 500.0 * MIB })),
        ),
        ("ramp sawtooth 40 s", Box::new(|t| Some(GIB + saw(t, 40.0, 2.0 * GIB)))),
        ("ramp sawtooth 7 s", Box::new(|t| Some(GIB + saw(t, 7.0, 6.0 * GIB)))),
        (
            "square wave 4 s (trace-like)",
            Box::new(|t| Some(518.0 * MIB + square(t, 4.0, 2048.0 * MIB))),
        ),
        ("square wave 45 s", Box::new(|t| Some(GIB + square(t, 45.0, 8.0 * GIB)))),
        (
            "single big step",
            Box::new(|t| Some(if t < 400.0 { GIB } else { 9.0 * GIB })),
        ),
        ("step down", Box::new(|t| Some(if t < 400.0 { 9.0 * GIB } else { GIB }))),
        (
            "sub-threshold leak under sawtooth",
            Box::new(|t| Some(GIB + 0.5 * MIB * t + saw(t, 30.0, 4.0 * GIB))),
        ),
        (
            "noise around a constant",
            Box::new(move |_| Some(4.0 * GIB + rng.range(-256.0, 256.0) * MIB)),
        ),
    ];
    for (name, shape) in cases {
        let r = replay(cfg(), 1.0, 3.0 * W, shape);
        assert_eq!(r.first_suspected, None, "{name}: {r:?}");
        assert!(r.last.is_some(), "{name}: never assessed");
    }
}

/// The built-in demo scenario's shapes (src/collect/source/scenarios/default.toml)
/// with the demo's 30 s window: warm-ups must stay quiet, the leaking
/// worker must show within a minute.
#[test]
fn demo_scenario_shapes_with_a_30s_window() {
    let cfg = || LeakConfig::with_window(30.0);
    // Caching-allocator warm-up in `steps` equal steps over `ramp` seconds.
    let ramp = |from: f64, to: f64, ramp: f64, steps: f64| {
        move |t: f64| Some(from + (to - from) * ((t / ramp * steps).floor().min(steps) / steps))
    };
    let mut rng = Rng::new(3);
    let train = ramp(600.0 * MIB, 38.0 * GIB, 20.0, 6.0);
    let r = replay(cfg(), 1.0, 300.0, |t| train(t).map(|v| v + rng.range(0.0, 8.0 * MIB)));
    assert_eq!(r.first_suspected, None, "training warm-up: {r:?}");
    let r = replay(cfg(), 1.0, 300.0, ramp(GIB, 24.0 * GIB, 10.0, 4.0));
    assert_eq!(r.first_suspected, None, "pod warm-up: {r:?}");
    let r = replay(cfg(), 1.0, 300.0, |t| {
        Some(6.0 * GIB + 48.0 * MIB * t + rng.range(0.0, 4.0 * MIB))
    });
    assert!(r.first_suspected.is_some_and(|t| t <= 60.0), "leaking worker: {r:?}");
}

#[test]
fn inference_server_random_batches_are_not_a_leak() {
    let mut rng = Rng::new(5);
    let mut level = 0.0;
    let r = replay(cfg(), 1.0, 3.0 * W, |_| {
        // A new batch size every ~3 s; the allocator frees down to the base.
        if rng.unit() < 0.3 {
            level = rng.range(0.0, 6.0) * GIB;
        }
        Some(2.0 * GIB + level)
    });
    assert_eq!(r.first_suspected, None, "{r:?}");
}

#[test]
fn slow_leak_under_a_sawtooth_is_caught_once_above_threshold() {
    let r = replay(cfg(), 1.0, 3.0 * W, |t| {
        Some(GIB + 2.0 * MIB * t + saw(t, 30.0, 4.0 * GIB))
    });
    assert!(r.first_suspected.is_some_and(|t| t <= 1.5 * W), "{r:?}");
    // Growth switches from 0.3 to 3 MiB/s at one window: caught after, not before.
    let r = replay(cfg(), 1.0, 4.0 * W, |t| {
        let leak = if t < W {
            0.3 * MIB * t
        } else {
            0.3 * MIB * W + 3.0 * MIB * (t - W)
        };
        Some(GIB + leak + square(t, 20.0, 3.0 * GIB))
    });
    let at = r.first_suspected.expect("caught");
    assert!(at > W && at <= 2.5 * W, "suspected at {at}");
}

#[test]
fn finished_leak_is_cleared() {
    // Growth for one window, then flat: suspected, then no longer.
    let r = replay(cfg(), 1.0, 4.0 * W, |t| Some(GIB + 4.0 * MIB * t.min(1.5 * W)));
    assert!(r.first_suspected.is_some());
    assert!(!r.suspected_at_end, "{r:?}");
}

#[test]
fn gaps_in_sampling_are_tolerated() {
    // 20 s without samples every 60 s.
    let gap = |t: f64| (t % 60.0) >= 40.0;
    let leak = replay(cfg(), 1.0, 3.0 * W, |t| (!gap(t)).then_some(GIB + 3.0 * MIB * t));
    assert!(leak.first_suspected.is_some_and(|t| t <= 1.5 * W), "{leak:?}");
    let flat = replay(cfg(), 1.0, 3.0 * W, |t| (!gap(t)).then_some(GIB + square(t, 10.0, GIB)));
    assert_eq!(flat.first_suspected, None);
    // A gap longer than the window forgets the history.
    let mut tr = LeakTracker::new(cfg());
    for i in 0..600 {
        tr.observe(&1u8, f64::from(i), to_bytes(GIB + 5.0 * MIB * f64::from(i)));
    }
    assert!(tr.assess(&1).is_some_and(|t| t.suspected));
    tr.observe(&1, 600.0 + 2.0 * W, to_bytes(GIB));
    assert_eq!(tr.assess(&1), None);
}

#[test]
fn bad_times_and_extreme_values_do_not_panic() {
    let mut tr = LeakTracker::new(cfg());
    // Time going backwards: ignored.
    for i in (0..500).rev() {
        tr.observe(&0u8, f64::from(i), 1);
    }
    assert_eq!(tr.assess(&0), None);
    // Late (out-of-order) samples among good ones are dropped, not merged.
    let mut tr2 = LeakTracker::new(cfg());
    for i in 0..600 {
        let t = f64::from(i);
        tr2.observe(&0u8, t, to_bytes(GIB + 3.0 * MIB * t));
        if i % 7 == 0 {
            tr2.observe(&0u8, t - 3.0, 0);
        }
    }
    assert!(tr2.assess(&0).is_some_and(|t| t.suspected), "{:?}", tr2.assess(&0));
    for t in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300, -1e300, f64::MAX] {
        tr.observe(&1, t, u64::MAX);
        tr.observe(&2, t, 0);
    }
    // Alternating 0 / u64::MAX is a square wave, not a leak.
    let r = replay(cfg(), 1.0, 3.0 * W, |t| {
        Some(if (t as u64).is_multiple_of(2) {
            0.0
        } else {
            u64::MAX as f64
        })
    });
    assert_eq!(r.first_suspected, None);
    let r = replay(cfg(), 1.0, 3.0 * W, |_| Some(u64::MAX as f64));
    assert!(r.last.is_some_and(|t| !t.suspected && t.growth_bytes_per_second == 0.0));
    // Growth that saturates at u64::MAX stops being a leak once flat.
    // (It clears within a window of levelling off: 5 windows, not 4.)
    let r = replay(cfg(), 1.0, 5.0 * W, |t| Some(u64::MAX as f64 - 1e13 + 1e10 * t));
    assert!(r.first_suspected.is_some() && !r.suspected_at_end, "{r:?}");
    // Absurd configurations are clamped rather than panicking.
    let bad = LeakConfig {
        window: f64::NAN,
        min_growth_bytes_per_second: f64::INFINITY,
        min_window_fraction: f64::NAN,
        buckets: 0,
        segments: usize::MAX,
        spread_ratio: 7.0,
        off_fraction: f64::NAN,
        max_given_back: -3.0,
        persistence: f64::INFINITY,
        min_rise_over_scatter: f64::NAN,
    };
    let mut tr = LeakTracker::new(bad);
    assert!(tr.config().window > 0.0 && tr.config().buckets >= 3);
    for i in 0..2000 {
        tr.observe(&0u8, f64::from(i), i as u64);
    }
}

#[test]
fn memory_per_key_is_bounded_whatever_the_poll_rate() {
    let mut tr = LeakTracker::new(cfg());
    let buckets = tr.config().buckets;
    let mut longest = [0usize; 2];
    for i in 0..100_000u32 {
        // 100 samples per second (1000 s, over 3 windows) on key 0; one per
        // 3 s on key 1, which opens a new bucket at most samples.
        tr.observe(&0u8, f64::from(i) * 0.01, u64::from(i));
        if i % 10 == 0 {
            tr.observe(&1u8, f64::from(i) * 0.3, u64::from(i));
        }
        if i % 500 == 0 {
            for k in [0u8, 1] {
                let len = tr.series[&k].0.closed.filled();
                longest[usize::from(k)] = longest[usize::from(k)].max(len);
            }
        }
    }
    assert!(longest.iter().all(|&l| l <= buckets), "{longest:?}");
    tr.retain(|k| *k == 1);
    assert_eq!(tr.len(), 1);
    tr.retain(|_| false);
    assert!(tr.is_empty());
}

mod traces;

mod rates;

mod phases;

mod quiet;
