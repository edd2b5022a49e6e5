//! The poll at which the leak buckets close against the other polls, at
//! fleet scale: `Pipeline::build` over the simulated
//! `large(gpus, per_gpu)` fleet at 1 s per poll, after a full leak window,
//! timed per poll on the thread's own CPU clock (/proc/thread-self/schedstat,
//! so other work on a shared machine does not count).
//!
//! ```sh
//! cargo run --release --example poll_close -- [GPUS] [PER_GPU] [POLLS] [UTIL_EVERY]   # 64 1000 60 1
//! ```
//!
//! Prints the mean and worst poll, the polls that open a leak bucket (one in
//! ten at the default 10 m window / 60 buckets) and the others. Each poll
//! carries a per-process utilisation sample unless UTIL_EVERY says one poll
//! in N: the daemon samples once per `[processes] utilization_interval`
//! (10 s by default, so 10 at a 1 s poll), and a sampled poll costs more
//! (each process looks its sample up); rounds up to 8 measured with every
//! poll sampled, the default here still. With N > 1 the sampled polls are
//! also summed apart. A measuring tool, not part of the daemon.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a failed step ends the run

use std::time::Duration;

use gpumemd::app::config::Config;
use gpumemd::collect::pipeline::Pipeline;
use gpumemd::collect::source::GpuSource;
use gpumemd::collect::source::scenario::large;
use gpumemd::collect::source::simulated::SimulatedSource;

/// 2026-01-01T00:00:00Z, a multiple of the 10 s bucket.
const EPOCH: f64 = 1_767_225_600.0;
/// Seconds per poll while filling the window (one bucket each).
const FILL_STEP: f64 = 10.0;
/// Polls that fill the 60-bucket window.
const FILL_POLLS: u64 = 62;
/// Seconds per leak bucket at the defaults.
const BUCKET: f64 = 10.0;

/// This thread's CPU time in nanoseconds (schedstat's first field).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn arg(i: usize, default: usize) -> usize {
    std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn summary(name: &str, ms: &[f64]) {
    if ms.is_empty() {
        return;
    }
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    let max = ms.iter().copied().fold(0.0, f64::max);
    println!(
        "{name:<14} polls {:>4}  mean {mean:>7.2} ms  worst {max:>7.2} ms",
        ms.len()
    );
}

fn main() {
    let (gpus, per_gpu, polls) = (arg(1, 64), arg(2, 1000), arg(3, 60));
    let util_every = arg(4, 1).max(1) as u64;
    let cfg = Config::defaults(false);
    let mut src = SimulatedSource::new(large(gpus, per_gpu), Duration::from_secs_f64(FILL_STEP), EPOCH);
    let mut pipe = Pipeline::for_source(&cfg.processes, &src);
    let mut now = EPOCH;
    for _ in 0..FILL_POLLS {
        std::hint::black_box(pipe.build(src.poll(true).expect("simulated poll"), now));
        now += FILL_STEP;
    }
    let (mut opening, mut other, mut all, mut sampled) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..polls as u64 {
        // Half a period off the bucket opens (every 10th poll), so the
        // two costs are not summed on the same polls.
        let sample = util_every == 1 || i % util_every == util_every / 2;
        let raw = src.poll(sample).expect("simulated poll");
        let opens = ((now - 1.0) / BUCKET).floor() != (now / BUCKET).floor();
        let t0 = thread_cpu_ns();
        std::hint::black_box(pipe.build(raw, now));
        let ms = thread_cpu_ns().saturating_sub(t0) as f64 / 1e6;
        if opens { &mut opening } else { &mut other }.push(ms);
        if sample && util_every > 1 {
            sampled.push(ms);
        }
        all.push(ms);
        now += 1.0;
    }
    println!(
        "large({gpus} x {per_gpu}), {polls} polls at 1 s, utilisation sampled every {util_every}, thread CPU per Pipeline::build:"
    );
    summary("all", &all);
    summary("bucket opens", &opening);
    summary("others", &other);
    summary("util sampled", &sampled);
    let mut sorted = all.clone();
    sorted.sort_by(f64::total_cmp);
    let p = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    println!(
        "percentiles    p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms",
        p(0.5),
        p(0.9),
        p(0.99)
    );
}
