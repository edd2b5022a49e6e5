//! What the pipeline keeps per process between polls at fleet scale (issue
//! 21): the per-process record (peak window, leak history, idle time) and
//! its map slot, for 64 GPUs x 1000 processes (`--demo large`'s shape). A
//! counting global allocator measures the heap the pipeline holds, so the
//! figure is the same in debug and release; `--nocapture` prints it.
//!
//! Attribution reads a /proc root that does not exist, so its caches stay
//! empty and what the pipeline holds is the records (their map slots and
//! leak rings) and late-release detection's list of the previous poll's
//! processes. Own binary, one test: the allocator counts every
//! thread.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed step is the test failing

#[path = "counting/mod.rs"]
mod counting;

use std::time::Duration;

use gpumemd::config::Processes;
use gpumemd::pipeline::Pipeline;
use gpumemd::source::GpuSource;
use gpumemd::source::scenario::large;
use gpumemd::source::simulated::SimulatedSource;

const GPUS: usize = 64;
const PER_GPU: usize = 1000;
const EPOCH: f64 = 1_767_225_600.0;
/// Bytes per process measured with the leak ring's exact 60 minima per
/// record (1496), plus 10 %: a layout change that grows the record fails
/// here.
const BOUND_PER_PROCESS: f64 = 1.10 * 1496.0;

#[test]
fn per_process_history_at_64_x_1000_stays_within_its_bound() {
    let mut src = SimulatedSource::new(large(GPUS, PER_GPU), Duration::from_secs(10), EPOCH);
    let cfg = Processes {
        proc_root: "/nonexistent/gpumemd-record-memory".into(),
        ..Processes::default()
    };
    let mut pipe = Pipeline::new(&cfg);
    // Three polls 10 s apart: the second and third close a leak bucket, so
    // each ring holds a filed minimum, not only its allocation.
    for i in 0..3 {
        let raw = src.poll(true).expect("simulated poll");
        drop(pipe.build(raw, EPOCH + 10.0 * f64::from(i)));
    }
    let retained = pipe.retained();
    assert_eq!(retained.leak_series, GPUS * PER_GPU, "every process has a leak history");
    assert!(retained.peak_series >= GPUS * PER_GPU, "{retained:?}");
    let with = counting::live();
    drop(pipe);
    let held = with - counting::live();
    let per = held as f64 / (GPUS * PER_GPU) as f64;
    eprintln!(
        "pipeline state at {GPUS} x {PER_GPU}: {:.2} MB, {per:.1} bytes per process (bound {BOUND_PER_PROCESS:.0})",
        held as f64 / 1e6
    );
    assert!(per > 0.0, "the pipeline holds its records");
    assert!(per <= BOUND_PER_PROCESS, "{per:.1} bytes per process");
}
