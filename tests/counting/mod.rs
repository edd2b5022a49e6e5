//! A global allocator that counts the bytes live on the heap, for the
//! per-process memory tests (`record_memory.rs`, `identity_memory.rs`):
//! the figure is the same in debug and release. A test binary that
//! includes this module counts every allocation of every thread, so each
//! such binary holds one test. Owns the counter only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

static LIVE: AtomicI64 = AtomicI64::new(0);

/// Bytes live on the heap now.
pub fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

struct Counting;

// SAFETY: every call forwards to System with the caller's arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as i64 - l.size() as i64, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;
