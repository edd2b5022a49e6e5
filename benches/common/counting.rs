//! The one counting allocator of the measuring tools: allocations and bytes
//! asked for (reallocations included), live bytes and their peak. Shared
//! through `#[path]` by `benches/exposition.rs` and `examples/footprint.rs`,
//! each of which installs it as its `#[global_allocator]`. Must not be used
//! by a test: it counts every thread of the process, so only a binary that
//! measures one thing at a time can read it.

#![allow(dead_code)] // each user reads only some of the counters

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Forwards to the system allocator and counts what succeeded.
pub struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

fn grow(by: i64) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn asked(bytes: usize) {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
}

// SAFETY: every call forwards to System with the caller's arguments and
// only counts what succeeded.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            asked(l.size());
            grow(l.size() as i64);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        grow(-(l.size() as i64));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            asked(new);
            grow(new as i64 - l.size() as i64);
        }
        q
    }
}

/// Bytes allocated and not yet freed.
pub fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

/// Starts a new peak from what is live now; returns that base.
pub fn reset_peak() -> i64 {
    let base = live();
    PEAK.store(base, Ordering::Relaxed);
    base
}

/// The most bytes live since the last [`reset_peak`].
pub fn peak() -> i64 {
    PEAK.load(Ordering::Relaxed)
}

/// Runs `f` and says how many allocations and bytes it asked for.
pub fn allocations<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    let (a, b) = (ALLOCS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed));
    let out = f();
    let (a2, b2) = (ALLOCS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed));
    (out, a2 - a, b2 - b)
}
