//! One record per process on a device: everything the pipeline remembers
//! between polls about it (its peak window, leak history and last activity),
//! in one map entry.
//!
//! Owns: the map, its sweep and the per-process observations that read or
//! write it. Must not: decide what the figures mean (the trackers in
//! `diagnosis/` do), or read files, clocks or NVML.
//!
//! Why one map: three maps (peaks, leak trend, idle time) would cost three
//! lookups and three sweeps per process per poll; one record costs one.
//! Why an `IndexMap`: its entries sit in one vector, so the map holds about
//! one record per process where a hash map's buckets hold up to two.

use crate::collect::diagnosis::ProcKey;
use crate::collect::diagnosis::leak::{LeakTracker, Series as LeakSeries, Trend};
use crate::collect::diagnosis::peaks::{PeakTracker, Series as PeakSeries};
use indexmap::IndexMap;
use rustc_hash::FxBuildHasher;

/// What one process on one device left behind from earlier polls.
struct Record {
    peak: PeakSeries,
    leak: LeakSeries,
    /// Unix time of the last SM activity, once it is a live holder on a
    /// device with utilisation samples.
    last_active: Option<f64>,
    /// Observed since the last sweep.
    seen: bool,
}

/// What one poll observed of one process, as the snapshot reports it.
pub(super) struct Observed {
    pub used_max_bytes: Option<u64>,
    pub trend: Option<Trend>,
    /// Seconds without SM activity, when tracked.
    pub idle_seconds: Option<f64>,
}

/// The records, and the trackers whose configuration judges them.
pub(super) struct Records {
    map: IndexMap<ProcKey, Record, FxBuildHasher>,
    /// The entry after the last one observed. A poll lists processes in
    /// about the order they were first seen, which is the entries' order,
    /// so the next process's record is usually here: no hashing, and the
    /// entries are read in sequence.
    next: usize,
    pub(super) peaks: PeakTracker<ProcKey>,
    pub(super) leak: LeakTracker<ProcKey>,
}

/// What a process's utilisation says this poll, for its idle time.
pub(super) enum Activity {
    /// Not a live holder, or no sample was ever seen on its device: idle
    /// time is unknown and is not tracked.
    Untracked,
    /// Tracked; `active` when this poll's sample showed SM use.
    Tracked { active: bool },
}

impl Records {
    pub(super) fn new(peaks: PeakTracker<ProcKey>, leak: LeakTracker<ProcKey>) -> Self {
        Records {
            map: IndexMap::default(),
            next: 0,
            peaks,
            leak,
        }
    }

    /// Records one poll's figures of `key` at `now`: one lookup.
    pub(super) fn observe(&mut self, key: ProcKey, now: f64, used: Option<u64>, activity: Activity) -> Observed {
        let at = match self.map.get_index(self.next) {
            Some((k, _)) if *k == key => self.next,
            _ => {
                let (peaks, leak) = (&self.peaks, &self.leak);
                let e = self.map.entry(key);
                let at = e.index();
                e.or_insert_with(|| Record {
                    peak: peaks.series(now),
                    leak: leak.series(),
                    last_active: None,
                    seen: false,
                });
                at
            }
        };
        self.next = at + 1;
        let r = &mut self.map[at];
        r.seen = true;
        let used_max_bytes = self.peaks.observe_series(&mut r.peak, now, used);
        let trend = self.leak.observe_series(&mut r.leak, now, used);
        let idle_seconds = match activity {
            // A process first tracked counts as active then, so a new
            // process is never idle at once.
            Activity::Tracked { active } => {
                let last = match r.last_active {
                    Some(t) if !active => t,
                    _ => now,
                };
                r.last_active = Some(last);
                Some((now - last).max(0.0))
            }
            Activity::Untracked => None,
        };
        Observed {
            used_max_bytes,
            trend,
            idle_seconds,
        }
    }

    /// Room for the `listed` processes of this poll, allocated near their
    /// number, with an eighth more for newcomers before the sweep: left to
    /// grow one by one, the entries would be sized to the index table
    /// (up to 1.75 times the count) and held twice while moving, the
    /// largest part of the daemon's memory at tens of thousands of
    /// processes.
    pub(super) fn reserve(&mut self, listed: usize) {
        let want = listed + listed / 8;
        self.map.reserve_exact(want.saturating_sub(self.map.len()));
    }

    /// Forgets the processes not observed since the previous sweep: gone
    /// from every list, so their history must not outlive them.
    pub(super) fn retain_seen(&mut self) {
        self.map.retain(|_, r| std::mem::take(&mut r.seen));
        self.next = 0;
    }

    /// (processes with a leak history, with an idle-time record, with a peak window).
    pub(super) fn sizes(&self) -> (usize, usize, usize) {
        let leak = self.map.values().filter(|r| r.leak.has_samples()).count();
        let idle = self.map.values().filter(|r| r.last_active.is_some()).count();
        (leak, idle, self.map.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::diagnosis::leak::LeakConfig;

    fn records() -> Records {
        Records::new(PeakTracker::new(60.0), LeakTracker::new(LeakConfig::default()))
    }

    fn idle(r: &mut Records, k: ProcKey, now: f64, activity: Activity) -> Option<f64> {
        r.observe(k, now, Some(1), activity).idle_seconds
    }

    const ACTIVE: Activity = Activity::Tracked { active: true };
    const QUIET: Activity = Activity::Tracked { active: false };

    #[test]
    fn idle_time_counts_from_last_activity() {
        let mut r = records();
        let k: ProcKey = (0, 1, 0);
        assert_eq!(idle(&mut r, k, 10.0, ACTIVE), Some(0.0));
        assert_eq!(idle(&mut r, k, 15.0, QUIET), Some(5.0));
        assert_eq!(idle(&mut r, k, 20.0, QUIET), Some(10.0));
        assert_eq!(idle(&mut r, k, 25.0, ACTIVE), Some(0.0));
        assert_eq!(idle(&mut r, k, 26.0, Activity::Untracked), None);
        r.retain_seen();
        r.retain_seen();
        assert_eq!(idle(&mut r, k, 99.0, QUIET), Some(0.0), "forgotten, so new");
    }

    #[test]
    fn each_key_finds_its_own_record_in_any_order() {
        let mut r = records();
        let keys: Vec<ProcKey> = (1..=4).map(|pid| (0, pid, 0)).collect();
        for (i, &k) in keys.iter().enumerate() {
            idle(&mut r, k, i as f64, ACTIVE);
        }
        // Reversed, with a newcomer in the middle: each keeps its own time.
        let newcomer: ProcKey = (1, 9, 0);
        for (i, &k) in keys.iter().rev().enumerate() {
            if i == 2 {
                assert_eq!(idle(&mut r, newcomer, 10.0, QUIET), Some(0.0));
            }
            assert_eq!(idle(&mut r, k, 10.0, QUIET), Some(10.0 - f64::from(k.1 - 1)));
        }
        r.retain_seen();
        assert_eq!(r.sizes().2, 5);
        assert_eq!(idle(&mut r, newcomer, 12.0, QUIET), Some(2.0));
    }

    #[test]
    fn records_not_seen_since_the_last_sweep_are_dropped() {
        let mut r = records();
        let (a, b, c): (ProcKey, ProcKey, ProcKey) = ((0, 1, 0), (0, 2, 0), (0, 3, 0));
        for k in [a, b, c] {
            idle(&mut r, k, 0.0, ACTIVE);
        }
        r.retain_seen();
        assert_eq!(r.sizes(), (3, 3, 3));
        // a is a live holder, b is listed but untracked this poll, c is gone.
        idle(&mut r, a, 1.0, ACTIVE);
        idle(&mut r, b, 1.0, Activity::Untracked);
        r.retain_seen();
        assert_eq!(r.sizes(), (2, 2, 2));
        assert_eq!(idle(&mut r, b, 5.0, QUIET), Some(5.0), "b kept its history");
        assert_eq!(idle(&mut r, c, 5.0, QUIET), Some(0.0), "c was forgotten");
    }

    #[test]
    fn one_record_keeps_peak_and_trend_and_unknown_bytes_add_no_history() {
        let mut r = records();
        let k: ProcKey = (3, 42, 7);
        assert_eq!(
            r.observe(k, 0.0, Some(900), Activity::Untracked).used_max_bytes,
            Some(900)
        );
        assert_eq!(
            r.observe(k, 1.0, Some(100), Activity::Untracked).used_max_bytes,
            Some(900)
        );
        let unknown: ProcKey = (3, 43, 7);
        assert_eq!(r.observe(unknown, 1.0, None, Activity::Untracked).used_max_bytes, None);
        assert_eq!(r.sizes(), (1, 0, 2), "only the process with bytes has a leak history");
    }
}
