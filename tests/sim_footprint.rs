//! The simulated `large` fleet's own memory: the scenario (64 GPUs x 1000
//! processes), its `SimulatedSource` and the in-memory `/proc` tree after
//! the first poll, counted by a global allocator that tracks live bytes.
//! The demo's RSS at 64 x 1000 includes all of it, and the daemon's budget
//! (64 MiB) is for the daemon; this keeps the simulation at about 10 MB.
//! Own binary: the counting allocator must not see other tests.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use gpumemd::source::GpuSource;
use gpumemd::source::scenario::large;
use gpumemd::source::simulated::SimulatedSource;

static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

struct Counting;

impl Counting {
    fn add(n: i64) {
        let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

// SAFETY: every call forwards to System with the caller's arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        Counting::add(l.size() as i64);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        Counting::add(-(l.size() as i64));
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        Counting::add(new as i64 - l.size() as i64);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const MB: f64 = 1e6;
/// The target the issue sets for the scenario and its tree together.
const BUDGET: i64 = 10_000_000;

#[test]
fn the_large_fleet_and_its_proc_tree_fit_in_10_mb() {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let scenario = large(64, 1000);
    let after_scenario = LIVE.load(Ordering::Relaxed) - base;
    let mut src = SimulatedSource::new(scenario, Duration::from_secs(1), 1_767_225_600.0);
    let after_source = LIVE.load(Ordering::Relaxed) - base;
    // The first poll fills the tree with 64 000 processes; the poll itself
    // is the pipeline's to keep or drop.
    let poll = src.poll(true).expect("simulated poll");
    let tree = src.proc_tree().expect("a simulated source keeps a /proc tree");
    let polled = poll.devices.iter().map(|d| d.processes.len()).sum::<usize>();
    drop(poll);
    let after_poll = LIVE.load(Ordering::Relaxed) - base;
    let peak = PEAK.load(Ordering::Relaxed) - base;
    eprintln!(
        "large(64, 1000): scenario {:.2} MB, + source {:.2} MB, + tree after poll 1 {:.2} MB (peak {:.2} MB)",
        after_scenario as f64 / MB,
        after_source as f64 / MB,
        after_poll as f64 / MB,
        peak as f64 / MB,
    );
    assert_eq!(polled, 64_000, "every process is listed on poll 1");
    let mut buf = Vec::new();
    let read = tree.read(
        gpumemd::attribution::TreeFile::Pid(163_999, gpumemd::attribution::PidFile::Stat),
        4096,
        &mut buf,
    );
    assert!(
        read.is_ok() && buf.starts_with(b"163999 (worker-7) S "),
        "the last process is in the tree"
    );
    assert!(after_poll <= BUDGET, "{after_poll} bytes live, budget {BUDGET}");
    drop(src);
}
