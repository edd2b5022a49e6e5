#![allow(clippy::unwrap_used, clippy::expect_used)]
use gpumemd::alerts::AlertEngine;
use gpumemd::config::Config;
use gpumemd::pipeline::Pipeline;
use gpumemd::snapshot::{PollOutcome, PollStats, Snapshot};
use gpumemd::source::GpuSource;
use gpumemd::source::scenario::Scenario;
use gpumemd::source::simulated::SimulatedSource;
use std::time::{Duration, Instant};
fn main() {
    let sc = Scenario::resolve(&std::env::args().nth(1).unwrap()).unwrap();
    let cfg = Config::defaults(false);
    let mut src = SimulatedSource::new(sc, Duration::from_secs(1), 1_767_225_600.0);
    let mut pipe = Pipeline::for_source(&cfg.processes, &src);
    let mut engine = AlertEngine::new(cfg.effective_rules(), "h".into(), 100);
    let n = 20000;
    let (mut tb, mut te, mut tp) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for i in 0..n {
        let now = 1_767_225_600.0 + i as f64;
        let t0 = Instant::now();
        let raw = src.poll(i % 10 == 0).unwrap();
        let (driver, devices) = pipe.build(raw, now);
        let t1 = Instant::now();
        let snap = Snapshot::of_poll(
            PollOutcome {
                seq: i,
                timestamp: now,
                monotonic: i as f64,
                nvml: Ok((driver, devices)),
            },
            None,
            PollStats::default(),
        );
        let snap = std::sync::Arc::new(snap);
        let t2 = Instant::now();
        engine.evaluate(&snap);
        let t3 = Instant::now();
        tb += t1 - t0;
        tp += t2 - t1;
        te += t3 - t2;
    }
    println!(
        "per poll: source+build {:.1} us, of_poll {:.1} us, evaluate {:.1} us",
        tb.as_secs_f64() * 1e6 / n as f64,
        tp.as_secs_f64() * 1e6 / n as f64,
        te.as_secs_f64() * 1e6 / n as f64
    );
}
