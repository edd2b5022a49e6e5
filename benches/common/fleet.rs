//! The simulated fleet the exposition benches scrape: `large(gpus, per_gpu)`
//! after 5 polls 10 s apart (growth and idle tracking warmed up). Shared by
//! `benches/compression.rs`, `benches/exposition.rs` and `benches/scrape.rs`
//! through `#[path]`, so all measure the same snapshot, attributed from the
//! fleet's own /proc tree as the demo daemon does. Must not measure
//! anything itself.

use std::time::Duration;

use gpumemd::app::config::Config;
use gpumemd::collect::pipeline::Pipeline;
use gpumemd::collect::source::GpuSource;
use gpumemd::collect::source::scenario::large;
use gpumemd::collect::source::simulated::SimulatedSource;
use gpumemd::data::snapshot::{PollStats, Snapshot};

/// The snapshots' clock: 2026-01-01T00:00:00Z.
pub const EPOCH: f64 = 1_767_225_600.0;

/// The fleet after 5 polls 10 s apart.
pub fn snapshot(cfg: &Config, gpus: usize, per_gpu: usize) -> Snapshot {
    let mut src = SimulatedSource::new(large(gpus, per_gpu), Duration::from_secs(10), EPOCH);
    let mut pipe = Pipeline::for_source(&cfg.processes, &src);
    let mut snap = Snapshot::default();
    for i in 0..5u64 {
        let now = EPOCH + 10.0 * i as f64;
        let (driver, devices) = pipe.build(src.poll(true).expect("simulated poll"), now);
        snap = Snapshot {
            seq: i + 1,
            timestamp: now,
            nvml_up: true,
            driver,
            devices,
            poll: PollStats {
                polls_total: i + 1,
                success: true,
                last_success_timestamp: Some(now),
                ..PollStats::default()
            },
            ..Snapshot::default()
        };
    }
    snap
}
