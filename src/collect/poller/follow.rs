//! What runs on each published snapshot (the alert evaluation, the
//! history, reclaim's followers): set once by the daemon after the poller
//! starts, then called by whichever side published (the poll thread for a
//! poll's result, the supervisor for a stale copy while a poll is stuck),
//! outside the poller's state lock. Owns the slot and the once-per-snapshot
//! rule; what the follower does is the daemon's.
//!
//! Why on the publishing thread: a follower task woke an async
//! worker once a poll, and waking the runtime from the poll thread cost
//! more than the evaluation itself (0.6 us of work against about 100 us
//! of wake-up, cold caches and scheduling on an idle 8-process node).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::data::snapshot::Snapshot;

/// The follower: called once per published snapshot, in publish order.
pub type Follower = Box<dyn FnMut(&Arc<Snapshot>) + Send>;

#[derive(Default)]
pub(super) struct FollowSlot {
    inner: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    follower: Option<Follower>,
    /// The last snapshot followed: `Weak`, so its address is not reused
    /// while it is remembered, and a snapshot is followed once even when
    /// the setter's catch-up and a publish race.
    last: Weak<Snapshot>,
}

impl FollowSlot {
    /// Hands `snap` to the follower, unless it already had it (or none is
    /// set yet: the setter catches up). A panicking follower is logged and
    /// kept; the poll goes on.
    pub(super) fn follow(&self, snap: &Arc<Snapshot>) {
        let mut slot = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Slot { follower, last } = &mut *slot;
        let Some(f) = follower.as_mut() else { return };
        if Weak::ptr_eq(last, &Arc::downgrade(snap)) {
            return;
        }
        *last = Arc::downgrade(snap);
        if std::panic::catch_unwind(AssertUnwindSafe(|| f(snap))).is_err() {
            tracing::error!(
                seq = snap.seq,
                "a snapshot follower panicked; it is called again with the next"
            );
        }
    }

    /// Sets the follower and hands it `current` (what was published before
    /// it was set) unless that has not polled yet.
    pub(super) fn set(&self, follower: Follower, current: &Arc<Snapshot>) {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).follower = Some(follower);
        if current.has_polled() {
            self.follow(current);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn polled(seq: u64) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            seq,
            ..Snapshot::default()
        })
    }

    /// Set late, the follower catches up on the current snapshot if it is a
    /// poll's; each snapshot is followed once however often it is handed
    /// over; a panic in the follower does not stop the next call.
    #[test]
    fn each_snapshot_is_followed_once_and_a_panic_is_survived() {
        let slot = FollowSlot::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let first = polled(1);
        slot.follow(&first); // no follower yet: nothing to do
        let s = seen.clone();
        slot.set(
            Box::new(move |snap: &Arc<Snapshot>| {
                s.lock().unwrap_or_else(PoisonError::into_inner).push(snap.seq);
                assert_ne!(snap.seq, 3, "a follower that panics");
            }),
            &first,
        );
        slot.follow(&first);
        let (second, third, fourth) = (polled(2), polled(3), polled(4));
        slot.follow(&second);
        slot.follow(&second);
        slot.follow(&third);
        slot.follow(&fourth);
        assert_eq!(*seen.lock().unwrap_or_else(PoisonError::into_inner), [1, 2, 3, 4]);
    }
}
