//! Memory health over time: the `[health]` config section and `XidBook`,
//! which counts Xid events per device and code and keeps the last few with
//! their time. Kept by the pipeline; it must not read events itself (the
//! sources do) nor talk to hardware. The per-poll data types live in
//! `snapshot::health`.

pub mod config;

use std::collections::{BTreeMap, HashMap, VecDeque};

pub use crate::snapshot::health::{Health, XidEvent};
pub use config::HealthConfig;

#[derive(Debug, Default)]
struct Book {
    counts: BTreeMap<u64, u64>,
    recent: VecDeque<XidEvent>,
    seen: bool,
}

/// Xid counts and recent events per device UUID.
#[derive(Debug)]
pub struct XidBook {
    keep: usize,
    devices: HashMap<String, Book>,
}

impl XidBook {
    /// A book that keeps the last `keep` events of each device.
    pub fn new(keep: usize) -> Self {
        Self {
            keep,
            devices: HashMap::new(),
        }
    }

    /// Records `events` (codes read this poll, at Unix time `now`) for
    /// `uuid` and fills `health`'s Xid fields with the totals so far.
    pub fn record(&mut self, uuid: &str, events: &[u64], now: f64, health: &mut Health) {
        let book = match self.devices.get_mut(uuid) {
            Some(b) => b,
            None => self.devices.entry(uuid.to_string()).or_default(),
        };
        book.seen = true;
        for &xid in events {
            *book.counts.entry(xid).or_insert(0) += 1;
            book.recent.push_back(XidEvent { xid, time: now });
            while book.recent.len() > self.keep {
                book.recent.pop_front();
            }
        }
        health.xid_counts.clone_from(&book.counts);
        health.xid_recent = book.recent.iter().copied().collect();
        health.problems = health.find_problems();
    }

    /// Forgets devices not recorded since the last call, so the book stays
    /// bounded when GPUs (or MIG instances) come and go.
    pub fn retain_seen(&mut self) {
        self.devices.retain(|_, b| std::mem::take(&mut b.seen));
    }

    /// Devices remembered now.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(book.is_empty());
    }
}
