//! Criterion benchmarks of the daemon's per-poll and per-scrape work on the
//! simulated fleet (`scenario::large(gpus, per_gpu)`), at 1, 8 and 64 GPUs
//! with 10, 100 and 1000 processes each (plus 8 x 64, the scrape target's
//! size). The groups:
//! - `source_poll`: `SimulatedSource::poll` alone (the stand-in for NVML);
//! - `pipeline_build`: `Pipeline::build` over one `RawPoll` (attribution,
//!   holder split, late release, idle and leak tracking) on a pipeline whose
//!   leak window is already full, each poll closing a leak bucket (below);
//! - `pipeline_build_1s`: the same at 1 s per poll, so one poll in ten
//!   closes a bucket: the mean cost of a poll at the default interval;
//! - `rules_eval`: the default rule set against the resulting snapshot;
//! - `peaks_observe`, `history_record` and `report_observe`: the peak
//!   windows, and the follower's history and job-end reports, per snapshot;
//! - `render_prometheus`: `/metrics` in the text format, default config
//!   (top 50 processes per GPU), with the alert view.
//! - `rules_eval_demo` and `render_prometheus_demo` (8 x 64 and 64 x 1000
//!   only): the same with the demo's rules, whose idle-holder rule fires
//!   for one process in five (12,800 alerts at 64 x 1000).
//!
//! The fleet is stepped 10 s per poll, one leak bucket at the defaults
//! (600 s window / 60 buckets), so every measured build closes a bucket for
//! every key and recomputes every verdict: the costliest poll, which at a
//! 1 s interval is one poll in ten. Sample counts and times are small so
//! the whole run fits in about 3 minutes on 2 cores; BENCHMARKS.md has the
//! command and the results.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a failed step ends the run

use std::cell::RefCell;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use gpumemd::act::alerts::AlertEngine;
use gpumemd::app::config::Config;
use gpumemd::app::reload::ReloadStatus;
use gpumemd::collect::diagnosis::peaks::PeakTracker;
use gpumemd::collect::history::History;
use gpumemd::collect::pipeline::Pipeline;
use gpumemd::collect::source::GpuSource;
use gpumemd::collect::source::scenario::large;
use gpumemd::collect::source::simulated::SimulatedSource;
use gpumemd::data::snapshot::{PollStats, Snapshot};
use gpumemd::judge::report::Reports;
use gpumemd::judge::rules::eval::{self, EvalState};
use gpumemd::serve::metrics::{self, DaemonState, Format};

const EPOCH: f64 = 1_767_225_600.0;
/// Seconds of fleet time per poll: one leak bucket at the default window.
const STEP: f64 = 10.0;
/// Polls before measuring: fills the 60-bucket leak window.
const WARM_POLLS: u64 = 62;

/// (GPUs, processes per GPU).
const SIZES: &[(usize, usize)] = &[
    (1, 10),
    (1, 100),
    (1, 1000),
    (8, 10),
    (8, 64),
    (8, 100),
    (8, 1000),
    (64, 10),
    (64, 100),
    (64, 1000),
];

/// A source and a pipeline in steady state, and the last snapshot.
struct Fleet {
    src: SimulatedSource,
    pipe: Pipeline,
    polls: u64,
    /// Seconds of pipeline time per poll.
    step: f64,
    now: f64,
    snap: Snapshot,
}

impl Fleet {
    fn new(cfg: &Config, gpus: usize, per_gpu: usize) -> Fleet {
        let src = SimulatedSource::new(large(gpus, per_gpu), Duration::from_secs_f64(STEP), EPOCH);
        // The fleet's own /proc tree: the production attribution path.
        let pipe = Pipeline::for_source(&cfg.processes, &src);
        let mut f = Fleet {
            src,
            pipe,
            polls: 0,
            step: STEP,
            now: EPOCH,
            snap: Snapshot::default(),
        };
        for _ in 0..WARM_POLLS {
            let (raw, now) = f.next_raw();
            let (driver, devices) = f.pipe.build(raw, now);
            f.snap = snapshot(f.polls, now, driver, devices);
        }
        f
    }

    /// The next poll's raw data and its time.
    fn next_raw(&mut self) -> (gpumemd::collect::source::RawPoll, f64) {
        let now = self.now;
        self.now += self.step;
        self.polls += 1;
        (self.src.poll(true).expect("simulated poll"), now)
    }
}

fn snapshot(
    seq: u64,
    now: f64,
    driver: Option<gpumemd::data::snapshot::DriverInfo>,
    devices: Vec<gpumemd::data::snapshot::Device>,
) -> Snapshot {
    Snapshot {
        seq,
        timestamp: now,
        monotonic: now - EPOCH,
        nvml_up: true,
        driver,
        devices,
        poll: PollStats {
            polls_total: seq,
            success: true,
            duration_seconds: 0.001,
            last_success_timestamp: Some(now),
            ..PollStats::default()
        },
        ..Snapshot::default()
    }
}

fn id(gpus: usize, per_gpu: usize) -> BenchmarkId {
    BenchmarkId::from_parameter(format!("{gpus}x{per_gpu}"))
}

fn hot_paths(c: &mut Criterion) {
    let cfg = Config::defaults(false);
    let rules = cfg.effective_rules();
    let build = gpumemd::build_info();
    for &(gpus, per_gpu) in SIZES {
        let fleet = RefCell::new(Fleet::new(&cfg, gpus, per_gpu));

        c.benchmark_group("source_poll").bench_function(id(gpus, per_gpu), |b| {
            b.iter(|| black_box(fleet.borrow_mut().next_raw()));
        });

        // The RawPoll is made outside the timed part; `build` consumes it.
        c.benchmark_group("pipeline_build")
            .bench_function(id(gpus, per_gpu), |b| {
                b.iter_batched(
                    || fleet.borrow_mut().next_raw(),
                    |(raw, now)| black_box(fleet.borrow_mut().pipe.build(raw, now)),
                    BatchSize::PerIteration,
                );
            });

        fleet.borrow_mut().step = 1.0;
        c.benchmark_group("pipeline_build_1s")
            .bench_function(id(gpus, per_gpu), |b| {
                b.iter_batched(
                    || fleet.borrow_mut().next_raw(),
                    |(raw, now)| black_box(fleet.borrow_mut().pipe.build(raw, now)),
                    BatchSize::PerIteration,
                );
            });

        // Rules and rendering run on one steady-state snapshot.
        let snap = {
            let mut f = fleet.borrow_mut();
            let (raw, now) = f.next_raw();
            let (driver, devices) = f.pipe.build(raw, now);
            snapshot(f.polls, now, driver, devices)
        };
        drop(fleet);
        let (state, _) = eval::evaluate(&rules, &EvalState::new(), &snap, "bench-host");
        c.benchmark_group("rules_eval").bench_function(id(gpus, per_gpu), |b| {
            b.iter(|| black_box(eval::evaluate(&rules, &state, &snap, "bench-host")));
        });

        // The demo's rules, with the idle-holder rule firing for one
        // process in five (12,800 alerts at 64 x 1000), evaluated from
        // their own steady state, and the exposition with those alerts.
        if DEMO_RULE_SIZES.contains(&(gpus, per_gpu)) {
            demo_rules(c, &snap, (gpus, per_gpu), &build);
        }

        // To set beside pipeline_build: the peak windows the pipeline keeps
        // (one observe per process and per device each poll), and what the
        // follower does with each snapshot: history, job-end reports.
        let mut peaks = PeakTracker::new(60.0);
        let mut device_peaks = PeakTracker::new(60.0);
        let mut t = EPOCH;
        c.benchmark_group("peaks_observe")
            .bench_function(id(gpus, per_gpu), |b| {
                b.iter(|| {
                    t += 1.0;
                    for (i, d) in snap.devices.iter().enumerate() {
                        black_box(device_peaks.observe(&(i as u32), t, d.memory.map(|m| m.used_bytes)));
                        for p in &d.processes {
                            black_box(peaks.observe(&(i as u32, p.pid), t, p.used_bytes));
                        }
                    }
                    peaks.retain_seen();
                    device_peaks.retain_seen();
                });
            });
        let mut recent = History::new(900, cfg.processes.top_n);
        let mut next = snap.clone();
        c.benchmark_group("history_record")
            .bench_function(id(gpus, per_gpu), |b| {
                b.iter(|| {
                    next.seq += 1;
                    next.timestamp += 1.0;
                    recent.record(black_box(&next));
                });
            });

        // Every subject live and followed: the tracker's steady state.
        let reports = Reports::in_memory();
        let mut next = snap.clone();
        c.benchmark_group("report_observe")
            .bench_function(id(gpus, per_gpu), |b| {
                b.iter(|| {
                    next.seq += 1;
                    next.timestamp += 1.0;
                    reports.observe(black_box(&next));
                });
            });

        let mut engine = AlertEngine::new(rules.clone(), "bench-host".into(), 100);
        engine.evaluate(&snap);
        let view = engine.view();
        let daemon = DaemonState {
            alerts: Some(&view),
            reload: Some(ReloadStatus {
                successful: true,
                last_success: EPOCH,
            }),
            ..DaemonState::default()
        };
        c.benchmark_group("render_prometheus")
            .bench_function(id(gpus, per_gpu), |b| {
                b.iter(|| {
                    black_box(metrics::render(
                        &snap,
                        &daemon,
                        &cfg.processes,
                        &build,
                        Format::Prometheus,
                    ))
                });
            });
    }
}

/// Sizes that also run the demo rule set (`rules_eval_demo`,
/// `render_prometheus_demo`).
const DEMO_RULE_SIZES: &[(usize, usize)] = &[(8, 64), (64, 1000)];

fn demo_rules(c: &mut Criterion, snap: &Snapshot, (gpus, per_gpu): (usize, usize), build: &metrics::BuildInfo) {
    let cfg = Config::defaults(true);
    // The demo's idle-holder rule counts per GPU; one alert per process, as
    // a site may write it, is the engine's largest load.
    let rules: Vec<gpumemd::judge::rules::Rule> = cfg
        .effective_rules()
        .into_iter()
        .map(|r| {
            if r.cfg.per.is_none() {
                return r;
            }
            let mut one = r.cfg;
            one.per = None;
            gpumemd::judge::rules::Rule::new(one).expect("the demo's rule, one alert per process")
        })
        .collect();
    let (state, _) = eval::evaluate(&rules, &EvalState::new(), snap, "bench-host");
    let (state, _) = eval::evaluate(&rules, &state, snap, "bench-host");
    c.benchmark_group("rules_eval_demo")
        .bench_function(id(gpus, per_gpu), |b| {
            b.iter(|| black_box(eval::evaluate(&rules, &state, snap, "bench-host")));
        });
    let mut engine = AlertEngine::new(rules.clone(), "bench-host".into(), 100);
    engine.evaluate(snap);
    engine.evaluate(snap);
    let view = engine.view();
    let daemon = DaemonState {
        alerts: Some(&view),
        ..DaemonState::default()
    };
    c.benchmark_group("render_prometheus_demo")
        .bench_function(id(gpus, per_gpu), |b| {
            b.iter(|| {
                black_box(metrics::render(
                    snap,
                    &daemon,
                    &cfg.processes,
                    build,
                    Format::Prometheus,
                ))
            });
        });
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1500))
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = hot_paths
}
criterion_main!(benches);
