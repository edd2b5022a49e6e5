//! Memory health over time: the `[health]` config section and `XidBook`,
//! which counts Xid events per device and code, keeps the last few with
//! their time, and keeps the memory-related ones of the rule window apart
//! (so the `memory_xid` rule does not depend on `recent_events`). Kept by
//! the pipeline; it must not read events itself (the sources do) nor talk
//! to hardware. The per-poll data types live in `snapshot::health`.

pub mod config;

use std::collections::{BTreeMap, HashMap, VecDeque};

pub use crate::data::snapshot::health::{Health, XidEvent};
use crate::data::snapshot::health::{MEMORY_XID_WINDOW, memory_related};
pub use config::HealthConfig;

/// At most this many memory-related Xid events are kept per device for the
/// rule window: a storm cannot grow the book, and the rule's value (their
/// count) saturates there, far above its threshold.
pub const MEMORY_XIDS_KEPT: usize = 256;

#[derive(Debug, Default)]
struct Book {
    counts: BTreeMap<u64, u64>,
    recent: VecDeque<XidEvent>,
    /// Memory-related events younger than `MEMORY_XID_WINDOW`.
    memory: VecDeque<XidEvent>,
    seen: bool,
}

impl Book {
    /// Adds a poll's `events` and marks the book as seen.
    fn add(&mut self, events: &[u64], now: f64, keep: usize) {
        self.seen = true;
        for &xid in events {
            *self.counts.entry(xid).or_insert(0) += 1;
            let e = XidEvent { xid, time: now };
            self.recent.push_back(e);
            if memory_related(xid) {
                self.memory.push_back(e);
            }
        }
        self.recent.drain(..self.recent.len().saturating_sub(keep));
        self.memory.drain(..self.memory.len().saturating_sub(MEMORY_XIDS_KEPT));
        while self.memory.front().is_some_and(|e| now - e.time > MEMORY_XID_WINDOW) {
            self.memory.pop_front();
        }
    }
}

/// Xid counts and recent events per device UUID.
#[derive(Debug)]
pub struct XidBook {
    keep: usize,
    devices: HashMap<String, Book>,
}

impl XidBook {
    /// A book that keeps the last `keep` events of each device (0: none;
    /// the memory-Xid rule window is kept regardless).
    pub fn new(keep: usize) -> Self {
        Self {
            keep,
            devices: HashMap::new(),
        }
    }

    /// Records `events` (codes read this poll, at Unix time `now`) for
    /// `uuid` and fills `health`'s Xid fields with the totals so far.
    pub fn record(&mut self, uuid: &str, events: &[u64], now: f64, health: &mut Health) {
        let book = self.devices.entry(uuid.to_string()).or_default();
        book.add(events, now, self.keep);
        health.xid_counts.clone_from(&book.counts);
        health.xid_recent = book.recent.iter().copied().collect();
        health.memory_xids = book.memory.iter().copied().collect();
        health.problems = health.find_problems();
    }

    /// Records `events` for a device that has no health reading this poll
    /// (down, or health reads off), and keeps its book: the events just
    /// before a GPU is lost are the ones an operator needs when it returns.
    /// A device without a book and without events gets none.
    pub fn note(&mut self, uuid: &str, events: &[u64], now: f64) {
        if events.is_empty() && !self.devices.contains_key(uuid) {
            return;
        }
        self.devices
            .entry(uuid.to_string())
            .or_default()
            .add(events, now, self.keep);
    }

    /// Forgets devices neither recorded nor kept since the last call, so
    /// the book stays bounded when GPUs (or MIG instances) come and go.
    pub fn retain_seen(&mut self) {
        self.devices.retain(|_, b| std::mem::take(&mut b.seen));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl XidBook {
        fn len(&self) -> usize {
            self.devices.len()
        }
    }

    #[test]
    fn counts_per_code_and_keeps_the_last_few() {
        let mut book = XidBook::new(2);
        let mut h = Health::default();
        book.record("GPU-a", &[48, 48], 10.0, &mut h);
        book.record("GPU-a", &[], 11.0, &mut h);
        book.record("GPU-a", &[63], 12.0, &mut h);
        assert_eq!(h.xid_counts, [(48, 2), (63, 1)].into_iter().collect());
        assert_eq!(
            h.xid_recent,
            [XidEvent { xid: 48, time: 10.0 }, XidEvent { xid: 63, time: 12.0 }]
        );
        let mut other = Health::default();
        book.record("GPU-b", &[], 12.0, &mut other);
        assert!(other.xid_counts.is_empty());
    }

    #[test]
    fn forgets_devices_that_are_gone() {
        let mut book = XidBook::new(4);
        book.record("GPU-a", &[31], 1.0, &mut Health::default());
        book.retain_seen();
        assert_eq!(book.len(), 1);
        book.retain_seen();
        assert_eq!(book.len(), 0);
    }

    #[test]
    fn a_down_device_keeps_its_book_and_its_events() {
        let mut book = XidBook::new(4);
        book.record("GPU-a", &[13], 1.0, &mut Health::default());
        book.retain_seen();
        // Down for a poll, with the Xid that took it down.
        book.note("GPU-a", &[48], 2.0);
        book.note("GPU-never", &[], 2.0);
        book.retain_seen();
        assert_eq!(book.len(), 1, "the down GPU stays, an unknown one is not added");
        let mut h = Health::default();
        book.record("GPU-a", &[], 3.0, &mut h);
        assert_eq!(h.xid_counts, [(13, 1), (48, 1)].into_iter().collect());
        assert_eq!(h.memory_xids, [XidEvent { xid: 48, time: 2.0 }]);
    }

    #[test]
    fn memory_xids_outlive_the_recent_list_for_the_window_only() {
        let mut book = XidBook::new(1);
        let mut h = Health::default();
        book.record("GPU-a", &[48, 13, 13], 10.0, &mut h);
        assert_eq!(h.xid_recent, [XidEvent { xid: 13, time: 10.0 }]);
        assert_eq!(h.memory_xids, [XidEvent { xid: 48, time: 10.0 }]);
        book.record("GPU-a", &[], 10.0 + MEMORY_XID_WINDOW, &mut h);
        assert_eq!(h.memory_xids.len(), 1, "still inside the window");
        book.record("GPU-a", &[], 11.0 + MEMORY_XID_WINDOW, &mut h);
        assert!(h.memory_xids.is_empty(), "pruned once older than the window");
        let storm: Vec<u64> = vec![94; MEMORY_XIDS_KEPT + 10];
        book.record("GPU-a", &storm, 20.0 + MEMORY_XID_WINDOW, &mut h);
        assert_eq!(h.memory_xids.len(), MEMORY_XIDS_KEPT);
    }
}
