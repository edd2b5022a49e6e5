//! Table tests of the leak detector over the synthetic shapes of
//! `examples/leak_shapes/shapes.rs`, at the demo's window (30 s, the
//! `leak_window` of `Config::defaults(true)`), the 40 s window of a
//! live run on the GPU machine, and the default window (10 min), for several seeds each:
//! flagged or not, time to flag, the flag staying on, a stopped leak
//! clearing within one window, and no flapping (on/off transitions).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

#[path = "../../examples/leak_shapes/shapes.rs"]
#[allow(dead_code)]
mod shapes;

use gpumemd::app::config::Config;
use shapes::{Expect, Outcome, Shape};

/// Seeds per shape; `LEAK_SHAPE_SEEDS` runs more (e.g. in release mode).
fn seeds() -> u64 {
    std::env::var("LEAK_SHAPE_SEEDS").map_or(4, |v| v.parse().expect("LEAK_SHAPE_SEEDS: u64"))
}

fn demo_window() -> f64 {
    Config::defaults(true).processes.leak_window.get().as_secs_f64()
}

/// Why `o` breaks `expect` at window `w`, if it does.
fn violation(expect: Expect, o: &Outcome, w: f64) -> Option<String> {
    let first = o.raised.first().copied();
    match expect {
        Expect::Leak { from, within } => {
            if !first.is_some_and(|t| t <= from + within * w) {
                return Some(format!("not flagged within {within} windows (first at {first:?})"));
            }
            (o.transitions() != 1).then(|| "did not stay flagged".into())
        }
        Expect::Stops { from, until } => {
            if !first.is_some_and(|t| t <= from + 1.5 * w && t < until) {
                return Some(format!("not flagged while leaking (first at {first:?})"));
            }
            if o.transitions() != 2 || !o.cleared.first().is_some_and(|&t| t <= until + w) {
                return Some("not cleared once within a window of the stop".into());
            }
            None
        }
        Expect::Never => (o.transitions() > 0).then(|| "flagged".into()),
        // The rate is in the docs' table; here: one episode at most.
        Expect::Rare => (o.transitions() > 2).then(|| "flagged more than once".into()),
        Expect::LongWarmUp { plateau } => {
            if o.transitions() > 2 {
                return Some("flapped".into());
            }
            let late = o.raised.is_empty() || o.cleared.first().is_some_and(|&t| t <= plateau + w);
            (!late).then(|| "not cleared within a window of the plateau".into())
        }
        Expect::Limit { .. } => (o.transitions() > 2).then(|| "flapped".into()),
        Expect::AtThreshold { .. } => (o.transitions() > 1).then(|| "flapped".into()),
    }
}

fn check(w: f64, pick: impl Fn(&Shape) -> bool) {
    let mut failures = Vec::new();
    let mut rows = 0;
    for seed in 0..seeds() {
        for mut shape in shapes::all(w, seed).into_iter().filter(|s| pick(s)) {
            rows += 1;
            let until = shapes::duration(shape.expect, w);
            let o = shapes::replay(&mut shape, w, until);
            if let Some(why) = violation(shape.expect, &o, w) {
                failures.push(format!(
                    "{} (window {w} s, seed {seed}): {why}; raised {:?}, cleared {:?}",
                    shape.name, o.raised, o.cleared
                ));
            }
        }
    }
    assert!(rows > 0, "no shapes picked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn is_leak(s: &Shape) -> bool {
    matches!(
        s.expect,
        Expect::Leak { .. } | Expect::Stops { .. } | Expect::Limit { .. } | Expect::AtThreshold { .. }
    )
}

#[test]
fn leaks_at_the_demo_window() {
    assert_eq!(demo_window(), 30.0, "the table in docs/leak-detection.md assumes it");
    check(demo_window(), is_leak);
}

#[test]
fn leaks_at_the_default_window() {
    check(600.0, is_leak);
}

#[test]
fn non_leaks_and_warm_ups_at_the_demo_window() {
    check(demo_window(), |s| !is_leak(s));
}

#[test]
fn non_leaks_and_warm_ups_at_the_default_window() {
    check(600.0, |s| !is_leak(s));
}

/// Issue 15, point 1: 2 MiB/s kept, reserved 20 MiB per 10 s, with the
/// 40 s window of the live run on the H200 (4 steps per window).
#[test]
fn staircase_at_a_40_s_window() {
    check(40.0, |s| {
        s.name.starts_with("2 MiB/s reserved") || s.name.starts_with("staircase")
    });
}

/// The shapes the table promises, so a renamed or dropped shape is noticed.
#[test]
fn the_generator_covers_every_shape_of_the_brief() {
    let names: Vec<String> = shapes::all(600.0, 0).into_iter().map(|s| s.name).collect();
    for want in [
        "staircase 3 steps",
        "staircase 10 steps",
        "square wave",
        "ramp sawtooth",
        "under a 1 GiB square wave",
        "under a +-500 MiB ramp",
        "warm-up to 8 GiB over 0.5",
        "warm-up to 8 GiB over 3",
        "(the threshold), noise",
        "then flat",
        "one big step",
        "fragmentation",
        "stopped process",
        "startup",
        "spawn pool",
    ] {
        assert!(names.iter().any(|n| n.contains(want)), "no shape {want:?} in {names:?}");
    }
}
