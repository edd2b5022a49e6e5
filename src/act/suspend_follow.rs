//! What suspend reads from the poller: whether NVML still lists a PID (the
//! last check before a lock), and, after each poll, whether a suspended
//! process's device has room for it again (`resume = "when-free"`).
//!
//! Owns: the follower of the snapshots for when-free resumes. Lives
//! beside `reclaim/` rather than in it so that reclaim does not depend on the
//! poller (config -> reclaim would close a circle). Must not: call NVML (the poller owns it) or run driver calls on an async
//! worker (they go to the blocking pool, one batch at a time).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::act::reclaim::{Listing, Reclaimer, ResumeMode};
use crate::collect::poller::Snapshots;
use crate::data::snapshot::Snapshot;

/// "Does the latest poll list this PID on any device?"
pub fn listing(snaps: Snapshots) -> Listing {
    Arc::new(move |pid| {
        snaps
            .borrow()
            .devices
            .iter()
            .any(|d| d.processes.iter().any(|p| p.pid == pid))
    })
}

/// Resumes when-free candidates after each snapshot it is handed (the
/// daemon's alert loop hands it every published one), one batch at a time
/// on the blocking pool: a poll that comes while a batch runs is left to
/// the next one.
pub fn when_free(reclaimer: Arc<Reclaimer>) -> impl FnMut(&Snapshot) + Send {
    let busy = Arc::new(AtomicBool::new(false));
    move |snap| {
        // Nothing suspended (the usual case) is answered without cloning
        // the reclaim config on every poll.
        if reclaimer.suspended().is_empty() || reclaimer.config().suspend.resume != ResumeMode::WhenFree {
            return;
        }
        if busy.swap(true, Ordering::AcqRel) {
            return;
        }
        let now = snap.timestamp;
        let free: BTreeMap<String, u64> = snap
            .devices
            .iter()
            .filter_map(|d| Some((d.uuid.clone(), d.memory.as_ref()?.free_bytes)))
            .collect();
        let r = Arc::clone(&reclaimer);
        let done = Idle(Arc::clone(&busy));
        tokio::task::spawn_blocking(move || {
            let _done = done;
            r.resume_when_free(&|uuid| free.get(uuid).copied(), now);
        });
    }
}

/// Marks the batch over when dropped, however it ends (a panic included).
struct Idle(Arc<AtomicBool>);

impl Drop for Idle {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
