//! [`PidIndex`]: PID to slot, for the in-memory `/proc`. Owns only the
//! mapping; must not know what a slot holds.
//!
//! Why not a `HashMap<u32, _>`: the tree is read once per GPU process per
//! poll (64 000 reads at 64 GPUs x 1000 processes), and a hash map there
//! costs a hash and two cache misses (control bytes, then the bucket) per
//! read, and 64 000 entries round up to 131 072 buckets. PIDs are small and
//! dense (Linux caps them at 2^22), so a two-level table indexed by the PID
//! itself costs one load in a small, hot directory and one in a page of
//! 1024 slots, 4 bytes per PID of a page in use.

use std::collections::HashMap;

/// PIDs per page.
const PAGE: usize = 1024;
/// Linux's PID_MAX_LIMIT: PIDs below it go in pages, others (never seen on
/// Linux, possible in tests) in a map.
const PAGED_BELOW: u32 = 1 << 22;

#[derive(Debug)]
struct Page {
    /// Slot + 1 per PID; 0: none.
    slots: Box<[u32; PAGE]>,
    used: u32,
}

/// PID to slot number (see the module docs).
#[derive(Debug, Default)]
pub(super) struct PidIndex {
    pages: Vec<Option<Page>>,
    far: HashMap<u32, u32>,
}

impl PidIndex {
    pub(super) fn get(&self, pid: u32) -> Option<u32> {
        if pid >= PAGED_BELOW {
            return self.far.get(&pid).copied();
        }
        let page = self.pages.get(pid as usize / PAGE)?.as_ref()?;
        page.slots[pid as usize % PAGE].checked_sub(1)
    }

    /// Sets `pid`'s slot; the slot it had before, if any.
    pub(super) fn set(&mut self, pid: u32, slot: u32) -> Option<u32> {
        if pid >= PAGED_BELOW {
            return self.far.insert(pid, slot);
        }
        let p = pid as usize / PAGE;
        if self.pages.len() <= p {
            self.pages.resize_with(p + 1, || None);
        }
        let page = self.pages[p].get_or_insert_with(|| Page {
            slots: Box::new([0; PAGE]),
            used: 0,
        });
        let cell = &mut page.slots[pid as usize % PAGE];
        let old = cell.checked_sub(1);
        *cell = slot.saturating_add(1);
        if old.is_none() {
            page.used += 1;
        }
        old
    }

    /// Forgets `pid`; its slot, if it had one. A page left empty is freed,
    /// so a long run of short-lived PIDs does not grow the index.
    pub(super) fn remove(&mut self, pid: u32) -> Option<u32> {
        if pid >= PAGED_BELOW {
            return self.far.remove(&pid);
        }
        let p = pid as usize / PAGE;
        let page = self.pages.get_mut(p)?.as_mut()?;
        let cell = &mut page.slots[pid as usize % PAGE];
        let old = cell.checked_sub(1)?;
        *cell = 0;
        page.used -= 1;
        if page.used == 0 {
            self.pages[p] = None;
            while self.pages.last().is_some_and(Option::is_none) {
                self.pages.pop();
            }
        }
        Some(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_remove_across_pages_and_beyond_pid_max() {
        let mut ix = PidIndex::default();
        let pids = [1, 1023, 1024, 100_000, PAGED_BELOW - 1, PAGED_BELOW, u32::MAX];
        for (slot, &pid) in pids.iter().enumerate() {
            assert_eq!(ix.set(pid, slot as u32), None, "{pid}");
        }
        for (slot, &pid) in pids.iter().enumerate() {
            assert_eq!(ix.get(pid), Some(slot as u32), "{pid}");
        }
        assert_eq!(ix.get(2), None);
        assert_eq!(ix.set(1024, 70), Some(2));
        assert_eq!(ix.get(1024), Some(70));
        for (slot, &pid) in pids.iter().enumerate() {
            let want = if pid == 1024 { 70 } else { slot as u32 };
            assert_eq!(ix.remove(pid), Some(want), "{pid}");
            assert_eq!(ix.get(pid), None);
        }
        assert_eq!(ix.remove(1), None, "already gone");
        assert!(ix.pages.is_empty() && ix.far.is_empty(), "empty pages are freed");
    }
}
