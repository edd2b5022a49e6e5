//! Soak test: a million polls of a fleet with heavy PID churn through
//! everything the daemon runs per poll, checking that retained state and
//! per-poll cost stay flat.
//!
//! ```sh
//! cargo run --release --example soak -- --polls 1000000
//! ```
//!
//! The fleet (`ChurnSource`, `--gpus` x `--per-gpu`, default 4 x 10): every
//! poll 10 % of each GPU's processes are replaced by new ones with a fresh
//! PID and start time; some of those leave as exited or zombie holders for a
//! few polls, or leave memory the driver releases late. PIDs wrap at 32768,
//! so they are reused all run long. Long-lived processes leak, fill GPUs
//! past 90 % and hold memory after exit, so every default rule goes pending,
//! fires and resolves over and over. The snapshot clock advances 1 s per
//! poll, so the leak window (10 m), late release (30 s) and rule `for`
//! durations all elapse many times. The default size is what a million
//! polls allow in under 3 minutes on 2 cores; `--gpus 8 --per-gpu 50` is a
//! big node, for fewer polls.
//!
//! Two threads, as in the daemon: the poll thread runs the source and
//! `Pipeline::build` (attribution, holder split, late release, idle, leak
//! trend); the alert loop runs `AlertEngine::evaluate` with the default
//! rules and builds the view the API publishes, and every `--render-every`
//! polls renders the Prometheus exposition (every 100th, the JSON snapshot).
//!
//! Measured per window of `--window` polls: wall and CPU time per poll (and
//! per stage), the process's VmRSS, and the sizes of the pipeline's and the
//! alert engine's state. Exits 1 when, after the first window (warm-up),
//! VmRSS grew by more than 10 % or 4 MiB (whichever is larger), when the
//! per-poll cost of the last window is more than 1.5x the first window's,
//! or when per-process state outgrew the processes listed. Cost is judged
//! two ways, and only a rise in both fails the run: the lower quartile of
//! 1000-poll chunks' (a tenth of a shorter window's) wall time (more work shifts every chunk, another
//! process taking the CPU for a while shifts only some) and CPU time per
//! poll (which competition for the CPU barely moves). `--inject-leak`
//! checks the checks: it keeps every 100th snapshot and walks them all each
//! poll, and the run must then fail on both memory and cost.
//!
//! This file reads the arguments, runs the alert loop and judges the
//! windows; `churn.rs` is the fleet and `run.rs` the poll thread and the
//! measurements. None of them may touch the host beyond reading this
//! process's own /proc entries.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a failed step ends the run

mod churn;
mod run;

use std::process::ExitCode;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use gpumemd::act::alerts::AlertEngine;
use gpumemd::app::config::{Config, GroupBy};
use gpumemd::collect::pipeline::Pipeline;
use gpumemd::data::snapshot::Snapshot;
use gpumemd::serve::metrics::{DaemonState, Format, render};

use churn::{ChurnSource, MIB};
use run::{CHUNK, Polled, Window, cpu_time, mib, poll_thread, rss};

/// Static fullness rules with short windows, besides the defaults: the
/// defaults' own are info over 30 minutes and more (a GPU full by design
/// pages nobody), longer than a short run, which must still see alerts
/// fire and resolve.
const SOAK_RULES: &str = r#"
[[rule]]
name = "SoakMemoryHigh"
kind = "device_used_ratio"
above = "90%"
clear = "85%"
for = "5m"
[[rule]]
name = "SoakHeadroomLow"
kind = "device_free_bytes"
below = "2GiB"
clear = "3GiB"
for = "2m"
"#;
struct Args {
    polls: u64,
    window: u64,
    render_every: u64,
    fleet: Fleet,
    /// Self-test: keep state that grows, so the run must fail.
    inject_leak: bool,
}

/// The fleet's shape.
#[derive(Clone, Copy)]
struct Fleet {
    gpus: usize,
    per_gpu: usize,
    /// Slots 0..long_lived of each GPU hold long-running jobs; the rest churn.
    long_lived: usize,
    /// New processes per GPU per poll: 10 % of the GPU's processes.
    replaced: usize,
}

impl Fleet {
    fn new(gpus: usize, per_gpu: usize) -> Self {
        Fleet {
            gpus,
            per_gpu,
            long_lived: (per_gpu / 5).max(2),
            replaced: (per_gpu / 10).max(1),
        }
    }
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        polls: 1_000_000,
        window: 100_000,
        render_every: 10,
        fleet: Fleet::new(4, 10),
        inject_leak: false,
    };
    let (mut gpus, mut per_gpu) = (4, 10);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&v: &u64| v > 0)
                .ok_or_else(|| format!("{name} needs a positive number"))
        };
        match flag.as_str() {
            "--polls" => a.polls = value("--polls")?,
            "--window" => a.window = value("--window")?,
            "--render-every" => a.render_every = value("--render-every")?,
            "--gpus" => gpus = value("--gpus")? as usize,
            "--per-gpu" => per_gpu = value("--per-gpu")?.max(3) as usize,
            "--inject-leak" => a.inject_leak = true,
            "-h" | "--help" => {
                return Err(
                    "usage: soak [--polls N] [--window N] [--render-every N] [--gpus N] [--per-gpu N] [--inject-leak]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other}; see --help")),
        }
    }
    a.fleet = Fleet::new(gpus, per_gpu);
    if a.polls < 2 * a.window {
        return Err(format!(
            "--polls ({}) must cover at least two windows of {} (warm-up and one to compare)",
            a.polls, a.window
        ));
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::from(2);
        }
    };
    let mut cfg = Config::defaults(false);
    cfg.processes.group_by = vec![GroupBy::User, GroupBy::Container, GroupBy::Job];
    let mut rules = cfg.effective_rules();
    let soak = gpumemd::judge::rules::parse_rule_set(SOAK_RULES).expect("the soak's rules parse");
    rules.extend(
        soak.into_iter()
            .map(|c| gpumemd::judge::rules::Rule::new(c).expect("valid")),
    );
    let f = args.fleet;
    println!(
        "soak: {} polls, {} GPUs x {} processes ({} long-lived), {} replaced per GPU per poll, {} rules, render every {} polls",
        args.polls,
        f.gpus,
        f.per_gpu,
        f.long_lived,
        f.replaced,
        rules.len(),
        args.render_every
    );
    // As in the daemon: a poll thread (source, pipeline) hands snapshots to
    // the alert loop, which evaluates and publishes a view; scrapes render
    // from the same snapshot. A short queue keeps the poller from running
    // ahead, like the daemon's one-poll-per-tick.
    let (tx, rx) = mpsc::sync_channel::<Polled>(4);
    let util_every = cfg.processes.utilization_interval.get().as_secs().max(1);
    let poller = {
        let src = ChurnSource::new(f);
        let (pipeline, polls) = (Pipeline::for_source(&cfg.processes, &src), args.polls);
        std::thread::Builder::new()
            .name("soak-poll".into())
            .spawn(move || poll_thread(src, pipeline, polls, util_every, tx))
            .expect("spawn the poll thread")
    };
    let mut engine = AlertEngine::new(rules, "soak".into(), cfg.alerting.recent_transitions);
    let build = gpumemd::build_info();

    let mut windows: Vec<Window> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let (mut fired, mut resolved, mut max_listed) = (0u64, 0u64, 0usize);
    let mut exposition_bytes = 0usize;
    let (mut w_cpu, mut w_wall, mut chunk_start) = (cpu_time(), Instant::now(), Instant::now());
    let mut chunks: Vec<f64> = Vec::new();
    // A window of fewer than 10,000 polls (a big fleet's short run) still
    // gets ten chunks, so its lower quartile means something.
    let chunk = CHUNK.min(args.window / 10).max(1);
    // Time per stage in the window: source, pipeline (poll thread), rules,
    // the published view, exposition and JSON (alert loop).
    let mut stages = [Duration::ZERO; 5];
    let mut last = 0;
    // --inject-leak: what a bug would do, keeping every 100th snapshot and
    // walking them all on every poll (memory and cost both grow).
    let mut leaked: Vec<Arc<Snapshot>> = Vec::new();
    for p in rx.iter() {
        let n = p.n;
        last = n;
        stages[0] += p.source;
        stages[1] += p.pipeline;
        max_listed = max_listed.max(p.listed);
        if let Some(problem) = p.problem {
            failures.push(problem);
            break;
        }
        let t0 = Instant::now();
        for t in engine.evaluate(&p.snap) {
            match t.to {
                gpumemd::judge::rules::eval::State::Firing => fired += 1,
                gpumemd::judge::rules::eval::State::Resolved => resolved += 1,
                gpumemd::judge::rules::eval::State::Pending => {}
            }
        }
        let t_eval = Instant::now();
        // The alert loop publishes a fresh view after every evaluation.
        let view = Arc::new(engine.view());
        let t1 = Instant::now();
        if n % args.render_every == 0 {
            let daemon = DaemonState {
                alerts: Some(&view),
                ..DaemonState::default()
            };
            exposition_bytes = render(&p.snap, &daemon, &cfg.processes, &build, Format::Prometheus).len();
        }
        if n % 100 == 0 {
            let _ = serde_json::to_vec(&*p.snap).map(|v| v.len());
        }
        if args.inject_leak {
            if n % 100 == 0 {
                leaked.push(p.snap.clone());
            }
            let walked: u64 = leaked
                .iter()
                .flat_map(|s| s.devices.iter().flat_map(|d| d.processes.iter()))
                .map(|p| p.used_bytes.unwrap_or(0))
                .sum();
            std::hint::black_box(walked);
        }
        stages[2] += t_eval - t0;
        stages[3] += t1 - t_eval;
        stages[4] += t1.elapsed();
        if n % chunk == 0 {
            chunks.push(chunk_start.elapsed().as_secs_f64() * 1e6 / chunk as f64);
            chunk_start = Instant::now();
        }
        if n % args.window == 0 {
            let (cpu, wall) = (cpu_time() - w_cpu, w_wall.elapsed());
            chunks.sort_by(f64::total_cmp);
            let w = Window {
                cpu_us: cpu.as_secs_f64() * 1e6 / args.window as f64,
                wall_us: wall.as_secs_f64() * 1e6 / args.window as f64,
                p25_us: chunks.get(chunks.len() / 4).copied().unwrap_or(0.0),
                rss: rss(),
            };
            let us = |d: Duration| d.as_secs_f64() * 1e6 / args.window as f64;
            let r = p.retained;
            println!(
                "window {:>2}: polls {:>8}-{:<8} cpu {:>6.1} us/poll  wall {:>6.1} us/poll (p25 {:.1}; source {:.1}, \
                 pipeline {:.1}, rules {:.1}, view {:.1}, render {:.1})  VmRSS {:>5.1} MiB  listed {} leak_series {} idle {} \
                 late_pending {}  alerts {} transitions kept {}  exposition {} KiB",
                windows.len() + 1,
                n - args.window + 1,
                n,
                w.cpu_us,
                w.wall_us,
                w.p25_us,
                us(stages[0]),
                us(stages[1]),
                us(stages[2]),
                us(stages[3]),
                us(stages[4]),
                mib(w.rss),
                p.listed,
                r.leak_series,
                r.idle_entries,
                r.late_pending,
                view.alerts.len(),
                view.transitions.len(),
                exposition_bytes / 1024
            );
            windows.push(w);
            stages = [Duration::ZERO; 5];
            chunks.clear();
            (w_cpu, w_wall) = (cpu_time(), Instant::now());
        }
    }
    drop(rx);
    if poller.join().is_err() {
        failures.push("the poll thread panicked".into());
    } else if last != args.polls && failures.is_empty() {
        failures.push(format!("the poll thread stopped after {last} polls"));
    }
    println!("alerts fired {fired}, resolved {resolved}; at most {max_listed} processes listed in one poll");
    if fired == 0 || resolved == 0 {
        failures.push("no alert fired and resolved: the fleet does not exercise the rules".into());
    }
    if let (Some(first), Some(last)) = (windows.first(), windows.last()) {
        let growth = last.rss.saturating_sub(first.rss);
        let allowed = (first.rss / 10).max(4 * MIB);
        println!(
            "VmRSS after warm-up {:.1} MiB, at the end {:.1} MiB: +{:.2} MiB (allowed {:.1} MiB)",
            mib(first.rss),
            mib(last.rss),
            mib(growth),
            mib(allowed)
        );
        if growth > allowed {
            failures.push(format!("VmRSS grew by {:.2} MiB after warm-up", mib(growth)));
        }
        // More work per poll raises both; another process competing for
        // the CPU raises wall time far more than CPU time.
        let p25_ratio = last.p25_us / first.p25_us.max(f64::MIN_POSITIVE);
        let cpu_ratio = last.cpu_us / first.cpu_us.max(f64::MIN_POSITIVE);
        let ratio = p25_ratio.min(cpu_ratio);
        println!(
            "per-poll cost, first window: {:.1} us wall (p25 {:.1}), {:.1} us CPU; last: {:.1} us wall (p25 {:.1}), \
             {:.1} us CPU; ratio {p25_ratio:.2}x wall p25, {cpu_ratio:.2}x CPU (allowed 1.5x)",
            first.wall_us, first.p25_us, first.cpu_us, last.wall_us, last.p25_us, last.cpu_us
        );
        if ratio > 1.5 {
            failures.push(format!(
                "per-poll cost rose {ratio:.2}x from the first window to the last"
            ));
        }
    }
    if failures.is_empty() {
        println!("soak: PASS");
        ExitCode::SUCCESS
    } else {
        for f in &failures {
            println!("soak: FAIL: {f}");
        }
        ExitCode::FAILURE
    }
}
