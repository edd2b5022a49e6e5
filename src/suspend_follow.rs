//! What suspend reads from the poller: whether NVML still lists a PID (the
//! last check before a lock), and, after each poll, whether a suspended
//! process's device has room for it again (`resume = "when-free"`).
//!
//! Owns: the task that follows the snapshots for when-free resumes. Lives
//! beside `reclaim/` rather than in it so that reclaim does not depend on the
//! poller (config -> reclaim would close a circle). Must not: call NVML (the poller owns it) or run driver calls on an async
//! worker (they go to the blocking pool, one batch at a time).

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use crate::poller::Snapshots;
use crate::reclaim::{Listing, Reclaimer, ResumeMode};

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

/// Resumes when-free candidates after each poll, until shutdown.
pub async fn follow(reclaimer: Arc<Reclaimer>, mut snaps: Snapshots, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            r = snaps.changed() => if r.is_err() { return },
        }
        // Nothing suspended (the usual case) is answered without cloning
        // the reclaim config on every poll.
        if reclaimer.suspended().is_empty() || reclaimer.config().suspend.resume != ResumeMode::WhenFree {
            continue;
        }
        let snap = snaps.borrow_and_update().clone();
        let now = snap.timestamp;
        let free: BTreeMap<String, u64> = snap
            .devices
            .iter()
            .filter_map(|d| Some((d.uuid.clone(), d.memory.as_ref()?.free_bytes)))
            .collect();
        let r = Arc::clone(&reclaimer);
        // Awaited: the next poll's batch starts only after this one ends.
        let _ = tokio::task::spawn_blocking(move || r.resume_when_free(&|uuid| free.get(uuid).copied(), now)).await;
    }
}
