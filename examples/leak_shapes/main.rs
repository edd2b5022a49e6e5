//! Prints, per synthetic shape, how often the leak detector is wrong: the
//! share of polls after the first window wrongly flagged (false positive)
//! and wrongly not flagged (false negative), at the demo's window (30 s),
//! the 40 s window of a live run on the GPU machine, and the default window (10 min),
//! over several seeds. docs/leak-detection.md holds its output.
//!
//! ```sh
//! cargo run --release --example leak_shapes -- [--seeds N]
//! cargo run --release --example leak_shapes -- --cost
//! ```
//!
//! `--cost` instead times the tracker alone at 64 GPUs x 1000 processes
//! (64 000 keys, one in ten leaking, 1 s polls, 10 min window, 1800 polls);
//! compare its CPU time (`/usr/bin/time`) before and after a change.
//!
//! Owns only the table; the shapes and the scoring are in `shapes.rs`,
//! which `tests/library/leak_shapes.rs` asserts on. Must not read clocks or files.

#[path = "shapes.rs"]
mod shapes;

use gpumemd::collect::diagnosis::leak::{LeakConfig, LeakTracker};
use shapes::{Expect, Outcome};
use std::time::Instant;

const WINDOWS: [f64; 3] = [30.0, 40.0, 600.0];

fn main() {
    let mut seeds = 10u64;
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "--cost") {
        cost();
        return;
    }
    while let Some(a) = args.next() {
        match (a.as_str(), args.next().and_then(|v| v.parse().ok())) {
            ("--seeds", Some(n)) => seeds = n,
            _ => {
                eprintln!("usage: leak_shapes [--seeds N]");
                std::process::exit(2);
            }
        }
    }
    println!(
        "| shape | expected | {} |",
        WINDOWS
            .map(|w| format!("{w:.0} s: FP / FN / flag at / on-off"))
            .join(" | ")
    );
    println!("|---|---|{}", "---|".repeat(WINDOWS.len()));
    let names: Vec<(String, Expect)> = shapes::all(600.0, 0).into_iter().map(|s| (s.name, s.expect)).collect();
    for (row, (name, expect)) in names.iter().enumerate() {
        let cells: Vec<String> = WINDOWS.iter().map(|&w| cell(row, w, seeds)).collect();
        println!("| {name} | {} | {} |", kind(*expect), cells.join(" | "));
    }
}

/// FP and FN rates of shape `row` at window `w` over `seeds` seeds, the
/// median time of the first flag (in windows) and the most on/off
/// transitions of one run.
fn cell(row: usize, w: f64, seeds: u64) -> String {
    let mut total = Outcome::default();
    let (mut firsts, mut most) = (Vec::new(), 0);
    for seed in 0..seeds {
        let mut shape = shapes::all(w, seed).swap_remove(row);
        let until = shapes::duration(shape.expect, w);
        let o = shapes::replay(&mut shape, w, until);
        total.false_pos += o.false_pos;
        total.false_neg += o.false_neg;
        total.neg_polls += o.neg_polls;
        total.pos_polls += o.pos_polls;
        firsts.extend(o.raised.first().map(|t| t / w));
        most = most.max(o.transitions());
    }
    let pct = |n: u32, d: u32| {
        if d == 0 {
            "-".to_string()
        } else {
            format!("{:.1}%", 100.0 * f64::from(n) / f64::from(d))
        }
    };
    firsts.sort_by(f64::total_cmp);
    let first = firsts
        .get(firsts.len() / 2)
        .map_or("never".to_string(), |t| format!("{t:.2} W"));
    format!(
        "{} / {} / {first} / {most}",
        pct(total.false_pos, total.neg_polls),
        pct(total.false_neg, total.pos_polls)
    )
}

/// Times `observe_and_assess` for 64 000 keys over 1800 one-second polls.
fn cost() {
    let mut tr = LeakTracker::new(LeakConfig::with_window(600.0));
    let mut rng = shapes::Rng::new(1);
    let (mut times, mut flagged) = (Vec::new(), 0);
    for poll in 0..1800u32 {
        let t = f64::from(poll);
        let start = Instant::now();
        flagged = 0;
        for k in 0..64_000u32 {
            let leak = if k % 10 == 0 { u64::from(poll) << 21 } else { 0 };
            let v = (1u64 << 30) + (rng.range(0.0, 64.0) * shapes::MIB) as u64 + leak;
            let trend = tr.observe_and_assess(&(k / 1000, k, 0u64), t, Some(v));
            flagged += u32::from(trend.is_some_and(|x| x.suspected));
        }
        tr.retain_seen();
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    // After the first window: every key has a verdict.
    let tail = &times[600..];
    let closing: Vec<f64> = tail.iter().step_by(10).copied().collect();
    println!(
        "64000 keys: {:.2} ms per poll on average, {:.2} ms on the polls that close a bucket; {flagged} flagged at the end",
        tail.iter().sum::<f64>() / tail.len() as f64,
        closing.iter().sum::<f64>() / closing.len() as f64
    );
}

fn kind(e: Expect) -> &'static str {
    match e {
        Expect::Leak { .. } => "leak",
        Expect::Stops { .. } => "leak, stops",
        Expect::Never => "never",
        Expect::Rare => "rarely (noise)",
        Expect::LongWarmUp { .. } => "warm-up > 1 W",
        Expect::Limit { .. } => "leak (limit)",
        Expect::AtThreshold { .. } => "leak at the threshold",
    }
}
