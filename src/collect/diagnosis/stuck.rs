//! [`StuckTracker`]: since when each process has been in D (uninterruptible),
//! so that a live CUDA process waiting in the driver (D for a moment) is
//! told apart from one stuck there (D past `stuck_after`: unkillable, its
//! memory counted as holder `zombie`).
//!
//! Owns: the per-(pid, start_ticks) "in D since" times. Must not: read
//! clocks or /proc (times and states come from the caller), or keep an entry
//! for a process that left D or was not seen in the last poll.

use std::collections::HashMap;

/// A process's identity across PID reuse: (pid, start ticks).
pub type TaskKey = (u32, u64);

#[derive(Debug, Default)]
pub struct StuckTracker {
    /// When the process was first seen in D, and whether it was seen this poll.
    since: HashMap<TaskKey, (f64, bool)>,
}

impl StuckTracker {
    /// Records one sighting at `now`: true when the process has been in D
    /// at every sighting for at least `after` seconds. A poll only samples
    /// the state, so D spells shorter than the poll interval that happen to
    /// be sampled back to back look continuous; `after` is many polls long.
    pub fn observe(&mut self, key: TaskKey, in_d: bool, now: f64, after: f64) -> bool {
        if !in_d {
            // Almost every process is out of D: skip hashing when none is in.
            if !self.since.is_empty() {
                self.since.remove(&key);
            }
            return false;
        }
        let entry = self.since.entry(key).or_insert((now, true));
        entry.1 = true;
        now - entry.0 >= after
    }

    /// Forgets processes not observed since the last call (gone, or out of D).
    pub fn retain_seen(&mut self) {
        self.since.retain(|_, (_, seen)| std::mem::take(seen));
    }

    /// Processes remembered in D.
    pub fn len(&self) -> usize {
        self.since.len()
    }

    pub fn is_empty(&self) -> bool {
        self.since.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d_is_live_until_it_lasts() {
        let mut t = StuckTracker::default();
        let k = (42, 1000);
        // (time, in D) -> stuck, with stuck_after = 30 s.
        let steps = [
            (0.0, true, false),
            (29.0, true, false),
            (30.0, true, true),
            (31.0, false, false),
            (32.0, true, false),
            (61.9, true, false),
            (62.0, true, true),
        ];
        for (now, in_d, want) in steps {
            assert_eq!(t.observe(k, in_d, now, 30.0), want, "at {now}");
            t.retain_seen();
        }
    }

    #[test]
    fn pid_reuse_and_unseen_processes_start_over() {
        let mut t = StuckTracker::default();
        assert!(!t.observe((7, 1), true, 0.0, 10.0));
        t.retain_seen();
        // Same PID, new start time: a different process, its own clock.
        assert!(!t.observe((7, 2), true, 20.0, 10.0));
        assert!(t.observe((7, 1), true, 20.0, 10.0));
        t.retain_seen();
        assert_eq!(t.len(), 2);
        // A poll that did not list (7, 1): forgotten, and its D starts over.
        assert!(!t.observe((7, 2), true, 25.0, 10.0));
        t.retain_seen();
        assert_eq!(t.len(), 1);
        assert!(!t.observe((7, 1), true, 40.0, 10.0));
        // Seen twice in one poll (on two GPUs): one entry, same answer.
        assert!(t.observe((7, 2), true, 40.0, 10.0));
        assert!(t.observe((7, 2), true, 40.0, 10.0));
        t.retain_seen();
        assert_eq!(t.len(), 2);
        t.retain_seen();
        assert!(t.is_empty(), "nothing observed in the last poll");
    }
}
