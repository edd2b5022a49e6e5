//! What attribution's identity cache holds per process at 64 GPUs x 1000
//! processes (`--demo large`'s shape, issue 21), read through the real
//! `/proc` reader over the simulated fleet's in-memory tree, counted by a
//! global allocator that tracks live bytes (the same in debug and release;
//! `--nocapture` prints it). The processes of one pod, job or unit share
//! their parsed cgroup, placement and comm; a change that gives each PID
//! its own copy again (552 bytes a PID as counted here) fails here.
//! Own binary, one test: the allocator counts every thread.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed step is the test failing

#[path = "counting/mod.rs"]
mod counting;

use std::time::{Duration, Instant};

use gpumemd::attribution::{ProcFs, ReadOptions};
use gpumemd::source::GpuSource;
use gpumemd::source::scenario::large;
use gpumemd::source::simulated::SimulatedSource;

const GPUS: usize = 64;
const PER_GPU: usize = 1000;
const EPOCH: f64 = 1_767_225_600.0;
/// Bytes per process measured with shared identities in a hash map keyed
/// by PID (104.7), plus 15 %: a cache entry that grows, or per-PID copies
/// (about 550 bytes a PID), fail here.
const BOUND_PER_PROCESS: f64 = 1.15 * 104.7;

#[test]
fn identity_cache_at_64_x_1000_stays_within_its_bound() {
    let mut src = SimulatedSource::new(large(GPUS, PER_GPU), Duration::from_secs(10), EPOCH);
    let raw = src.poll(true).expect("simulated poll");
    let pids: Vec<u32> = raw
        .devices
        .iter()
        .flat_map(|d| d.processes.iter().map(|p| p.pid))
        .collect();
    assert_eq!(pids.len(), GPUS * PER_GPU);
    let tree = src.proc_tree().expect("the simulated fleet's /proc");
    let before = counting::live();
    let mut procfs = ProcFs::on(tree);
    let opts = ReadOptions::default();
    let mut gone = 0;
    // Three polls: the first fills the cache, the others hit it.
    for _ in 0..3 {
        let now = Instant::now();
        for &pid in &pids {
            match procfs.read_at(pid, &opts, now) {
                Ok(id) => assert_eq!(id.pid, pid),
                Err(e) if e.is_gone() => gone += 1,
                Err(e) => panic!("pid {pid}: {e}"),
            }
        }
    }
    let cached = procfs.cached_identities();
    assert!(cached + gone / 3 >= pids.len() * 9 / 10, "{cached} cached, {gone} gone");
    let held = counting::live() - before;
    drop(procfs);
    let per = held as f64 / cached as f64;
    eprintln!(
        "identity cache at {GPUS} x {PER_GPU}: {cached} processes, {:.2} MB, {per:.1} bytes per process (bound {BOUND_PER_PROCESS:.0})",
        held as f64 / 1e6
    );
    assert!(per > 0.0, "the cache holds its entries");
    assert!(per <= BOUND_PER_PROCESS, "{per:.1} bytes per process");
}
