//! Prints, per synthetic shape, how often the leak detector is wrong: the
//! share of polls after the first window wrongly flagged (false positive)
//! and wrongly not flagged (false negative), at the demo's window (30 s),
//! the 40 s window of issue 15's live run, and the default window (10 min),
//! over several seeds. docs/leak-detection.md holds its output.
//!
//! ```sh
//! cargo run --release --example leak_shapes -- [--seeds N]
//! ```
//!
//! Owns only the table; the shapes and the scoring are in `shapes.rs`,
//! which `tests/leak_shapes.rs` asserts on. Must not read clocks or files.

#[path = "shapes.rs"]
mod shapes;

use shapes::{Expect, Outcome};

const WINDOWS: [f64; 3] = [30.0, 40.0, 600.0];

fn main() {
    let mut seeds = 10u64;
    let mut args = std::env::args().skip(1);
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
