//! Leak detector rates: false positives over random non-leaking shapes and
//! detection of leaks added to them, from a seeded PRNG (the seed and the
//! number of runs can be changed by environment, see below).

use super::*;

/// How the random background behaves.
#[derive(Clone, Copy, PartialEq)]
enum Noise {
    /// Periodic shapes and random batch levels that often return to the
    /// base (idle server), as a caching allocator's footprint does.
    Usual,
    /// Random batch levels that rarely return to the base: the floor of a
    /// segment itself jitters by about amp / 16.
    Harsh,
}

/// A random non-leaking shape: process start at 20 MiB, warm-up steps in the
/// first fifth of a window, then a plateau with optional periodic
/// allocate/free (period up to one segment, 10% cycle-to-cycle jitter) or
/// random batch levels, sample jitter, a late step up, missed samples.
fn background(rng: &mut Rng, noise: Noise) -> impl FnMut(f64) -> Option<f64> + use<> {
    let mut r = Rng::new(rng.next_u64());
    let base = r.range(0.1, 20.0) * GIB;
    let start = r.range(1.0, 5.0);
    let n_steps = (r.unit() * 5.0) as usize;
    let steps: Vec<(f64, f64)> = (0..n_steps)
        .map(|_| (r.range(0.0, 0.2 * W), r.range(0.0, 4.0) * GIB))
        .collect();
    let kind = if noise == Noise::Harsh {
        3
    } else {
        (r.unit() * 4.0) as u32
    };
    let (period, duty) = (r.range(2.0, W / 6.0), r.range(0.2, 0.8));
    let amp = r.range(0.0, 4.0) * GIB;
    let jitter = r.range(0.0, 64.0) * MIB;
    let late_step = (r.unit() < 0.3).then(|| (r.range(0.0, 2.0 * W), r.range(0.0, 4.0) * GIB));
    let idle = if noise == Noise::Harsh { 0.0 } else { 0.3 };
    let (mut level, drop_p) = (0.0, r.range(0.0, 0.1));
    let (mut cycle_start, mut cycle_len) = (0.0, period);
    move |t| {
        while t >= cycle_start + cycle_len {
            cycle_start += cycle_len;
            cycle_len = period * r.range(0.9, 1.1);
        }
        let phase = (t - cycle_start) / cycle_len;
        if r.unit() < drop_p {
            return None;
        }
        if t < start {
            return Some(20.0 * MIB);
        }
        let mut v = base + steps.iter().filter(|s| t >= s.0).map(|s| s.1).sum::<f64>();
        v += match kind {
            0 => 0.0,
            1 => amp * phase,
            2 => {
                if phase < duty {
                    amp
                } else {
                    0.0
                }
            }
            _ => {
                // A new batch about every 3 s; sometimes the server is idle.
                if r.unit() < 0.3 {
                    level = if r.unit() < idle { 0.0 } else { r.range(0.0, amp) };
                }
                level
            }
        };
        v += late_step.filter(|s| t >= s.0).map_or(0.0, |s| s.1);
        Some(v + r.range(0.0, jitter))
    }
}

/// Share of `runs` random backgrounds suspected at any poll over 2 windows.
fn false_positive_rate(noise: Noise, runs: usize, seed: u64) -> f64 {
    let mut rng = Rng::new(seed);
    let hits = (0..runs)
        .filter(|_| {
            replay(cfg(), POLL, 2.0 * W, background(&mut rng, noise))
                .first_suspected
                .is_some()
        })
        .count();
    hits as f64 / runs as f64
}

/// A leak at 1.5-20x the threshold added at a random time in the first
/// window of `runs` random backgrounds: (share suspected within 1.5 windows
/// of its start, median delay in windows).
fn detection_rate(noise: Noise, runs: usize, seed: u64) -> (f64, f64) {
    let mut rng = Rng::new(seed);
    let mut delays = Vec::new();
    for _ in 0..runs {
        let mut shape = background(&mut rng, noise);
        let t0 = rng.range(0.0, W);
        let rate = rng.range(1.5, 20.0) * cfg().min_growth_bytes_per_second;
        let mut tracker = LeakTracker::new(cfg());
        // Stops at the first suspicion after the leak started: the rest of
        // the replay would not change the outcome and costs test time.
        let mut i = 0.0;
        while i * POLL <= t0 + 1.5 * W {
            let t = i * POLL;
            i += 1.0;
            let Some(v) = shape(t) else { continue };
            tracker.observe(&0u8, t, to_bytes(v + rate * (t - t0).max(0.0)));
            if t >= t0 && tracker.assess(&0).is_some_and(|tr| tr.suspected) {
                delays.push((t - t0) / W);
                break;
            }
        }
    }
    delays.sort_by(f64::total_cmp);
    let median = delays.get(delays.len() / 2).copied().unwrap_or(f64::NAN);
    (delays.len() as f64 / runs as f64, median)
}

/// `LEAK_TEST_SEED` / `LEAK_TEST_RUNS` re-run the rate tests with other
/// seeds or more runs (e.g. in release mode) without editing the file.
fn seed(default: u64) -> u64 {
    std::env::var("LEAK_TEST_SEED").map_or(default, |v| v.parse().expect("LEAK_TEST_SEED: u64"))
}

fn runs(default: usize) -> usize {
    std::env::var("LEAK_TEST_RUNS").map_or(default, |v| v.parse().expect("LEAK_TEST_RUNS: usize"))
}

#[test]
fn false_positive_rate_is_below_one_percent() {
    let fp = false_positive_rate(Noise::Usual, runs(1000), seed(2024));
    eprintln!("usual backgrounds: false positives {:.2}% over 2 windows", fp * 100.0);
    assert!(fp < 0.01, "false-positive rate {fp}");
}

#[test]
fn leaks_above_threshold_are_detected_within_one_and_a_half_windows() {
    let (det, delay) = detection_rate(Noise::Usual, runs(1000), seed(2025));
    eprintln!(
        "usual backgrounds: detected {:.2}% within 1.5 windows, median delay {delay:.2} windows",
        det * 100.0
    );
    assert!(det >= 0.99, "detection rate {det}");
}

#[test]
fn harsh_floor_noise_rates() {
    let fp = false_positive_rate(Noise::Harsh, runs(150), seed(77));
    let (det, delay) = detection_rate(Noise::Harsh, runs(150), seed(78));
    eprintln!(
        "harsh floor noise: false positives {:.2}%, detected {:.2}% within 1.5 windows, median delay {delay:.2} windows",
        fp * 100.0,
        det * 100.0
    );
    assert!(fp < 0.02, "false-positive rate {fp}");
    assert!(det >= 0.6, "detection rate {det}");
}

#[test]
fn keys_not_seen_since_the_last_sweep_are_dropped() {
    let mut tr = LeakTracker::new(cfg());
    for t in 0..3 {
        for k in [1u8, 2, 3] {
            tr.observe_and_assess(&k, f64::from(t), Some(GIB as u64));
        }
        tr.retain_seen();
    }
    assert_eq!(tr.len(), 3);
    // 1 has a sample, 2 is only assessed (memory unavailable), 3 is gone.
    tr.observe_and_assess(&1, 3.0, Some(GIB as u64));
    assert_eq!(tr.observe_and_assess(&2, 3.0, None), tr.assess(&2));
    tr.retain_seen();
    assert_eq!(tr.len(), 2);
    assert!(tr.assess(&3).is_none());
    // An unknown key with no sample is not created.
    assert_eq!(tr.observe_and_assess(&4, 4.0, None), None);
    assert_eq!(tr.len(), 2);
}
