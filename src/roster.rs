//! [`Roster`]: a map for keys that are looked up in about the same order
//! every poll (NVML lists a device's processes in a stable order), laid out
//! in that order so that a poll walks it front to back.
//!
//! Owns: the slots, their order and the key index. Must not: know what the
//! keys or values mean, read clocks, or allocate per lookup.
//!
//! Why: at 64 GPUs x 1000 processes a hash map of per-process state costs a
//! cache miss per process per poll (random buckets of a 10 MB table); that
//! was most of the poll. Here a lookup first checks the slot after the last
//! one found, which is the right one whenever the order held, and the
//! hardware prefetcher sees a sequential walk. A key out of order costs one
//! probe of a small index (key to slot number), and the next sweep puts the
//! slots back in the order they were visited.
//!
//! The index holds slot numbers only (4 bytes each, in a table at most
//! half full) and compares a probe's key in the slot it names: a map from
//! key to slot number repeated the 16-byte key and padded each entry to 24
//! bytes, 3 MiB at 64,000 keys against 0.5 here (issue 21). A lookup that
//! goes through the index then visits that slot anyway.

use std::hash::{BuildHasher, Hash};

use rustc_hash::FxBuildHasher;

#[derive(Clone)]
struct Slot<K, V> {
    key: K,
    value: V,
    /// The lookup count when it was first visited in its latest round: it
    /// was visited this round when at least the round's `start` (0: never).
    /// One number, not a round and a visit: a 4-byte key and a 32-byte
    /// value then make a 40-byte slot, not 48 (the attribution cache at
    /// 64,000 PIDs, round 7).
    stamp: u32,
}

/// Slots in last round's visit order, plus an index from key to slot.
#[derive(Clone)]
pub struct Roster<K, V> {
    slots: Vec<Slot<K, V>>,
    index: Index,
    /// The slot after the last one found.
    cursor: usize,
    /// Lookups so far (the next stamp); restarts when it nears the top.
    visits: u32,
    /// `visits` when the current round started; a slot is visited when its
    /// stamp is at least this, so starting a round touches no slot.
    start: u32,
    /// A lookup since the last reordering did not find its key at the cursor.
    strayed: bool,
}

impl<K: Copy + Eq + Hash, V> Default for Roster<K, V> {
    fn default() -> Self {
        Roster {
            slots: Vec::new(),
            index: Index::default(),
            cursor: 0,
            visits: 1,
            start: 1,
            strayed: false,
        }
    }
}

impl<K, V> std::fmt::Debug for Roster<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Roster")
            .field("len", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl<K: Copy + Eq + Hash, V> Roster<K, V> {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The value of `key`, created by `make` when absent; marks it visited.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        match self.position(&key) {
            Some(at) => self.visit(at),
            None => self.insert(key, make()),
        }
    }

    /// The value of `key` when present; marks it visited.
    pub fn find_mut(&mut self, key: &K) -> Option<&mut V> {
        let at = self.position(key)?;
        Some(self.visit(at))
    }

    /// Adds `key` (which must be absent) at the end; marks it visited.
    pub fn insert(&mut self, key: K, value: V) -> &mut V {
        self.strayed = true;
        let at = self.slots.len();
        self.index.insert(&key, at as u32, &self.slots);
        self.slots.push(Slot { key, value, stamp: 0 });
        self.visit(at)
    }

    /// Where `key` is: at the cursor when the order held, else by the index.
    fn position(&mut self, key: &K) -> Option<usize> {
        if self.slots.get(self.cursor).is_some_and(|s| s.key == *key) {
            return Some(self.cursor);
        }
        self.strayed = true;
        self.index.find(key, &self.slots)
    }

    fn visit(&mut self, at: usize) -> &mut V {
        self.cursor = at + 1;
        let visit = self.visits;
        self.visits = self.visits.saturating_add(1);
        let start = self.start;
        let slot = &mut self.slots[at];
        if slot.stamp < start {
            slot.stamp = visit;
        }
        &mut slot.value
    }

    /// The value of `key` if present, without marking it visited.
    pub fn get(&self, key: &K) -> Option<&V> {
        let i = self.index.find(key, &self.slots)?;
        self.slots.get(i).map(|s| &s.value)
    }

    /// Whether `key` was looked up this round.
    pub fn visited(&self, key: &K) -> bool {
        self.index
            .find(key, &self.slots)
            .and_then(|i| self.slots.get(i))
            .is_some_and(|s| s.stamp >= self.start)
    }

    /// Starts the next round without reordering or sweeping: no slot is
    /// touched (but once in 2^31 lookups, see [`RESTAMP_AT`]). For a cache swept less often than it is read in rounds; the
    /// order of the latest round is adopted at the next
    /// [`Roster::end_round`].
    pub fn rewind(&mut self) {
        self.cursor = 0;
        if self.visits >= RESTAMP_AT {
            // No slot is visited in the round about to start: every stamp
            // can go back to "never", and the count to its start.
            self.slots.iter_mut().for_each(|s| s.stamp = 0);
            self.visits = 1;
        }
        self.start = self.visits;
    }

    /// Ends a round: keeps the slots `keep` says yes to (it is told whether
    /// each was visited), puts the visited ones first in visit order and
    /// the kept unvisited ones after them, and starts the next round. Costs
    /// one pass when nothing left and the order held.
    pub fn end_round(&mut self, mut keep: impl FnMut(&K, &mut V, bool) -> bool) {
        let before = self.slots.len();
        let start = self.start;
        self.slots.retain_mut(|s| keep(&s.key, &mut s.value, s.stamp >= start));
        let removed = self.slots.len() != before;
        if self.strayed {
            // Unvisited slots sort last, in their old order (a stable sort;
            // the input is almost sorted, so it costs about one pass).
            self.slots
                .sort_by_key(|s| if s.stamp >= start { s.stamp } else { u32::MAX });
        }
        if removed || self.strayed {
            // A fleet that shrank gives back the slots' slack (a growing
            // one doubles as a Vec does).
            let len = self.slots.len();
            if self.slots.capacity() > len + len / 4 + 16 {
                self.slots.shrink_to(len + len / 8);
            }
            self.index.rebuild(&self.slots);
        }
        self.strayed = false;
        self.rewind();
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().map(|s| &s.value)
    }
}

/// The lookup count at which [`Roster::rewind`] restamps every slot: half
/// the range, so a round may still count 2^31 lookups before its stamps
/// saturate (a poll of 64,000 keys a second restamps every 9 hours).
const RESTAMP_AT: u32 = 1 << 31;

/// Slot numbers in an open-addressing table (linear probing, at most half
/// full; `EMPTY` marks a free entry), found by the key in the slot.
#[derive(Clone, Default)]
struct Index {
    table: Vec<u32>,
    len: usize,
}

const EMPTY: u32 = u32::MAX;

fn hash<K: Hash>(key: &K) -> usize {
    // FxHash's `finish` rotates its state so the low bits mix well; the
    // truncation keeps the bits the mask uses.
    FxBuildHasher.hash_one(key) as usize
}

impl Index {
    /// The slot holding `key`.
    fn find<K: Eq + Hash, V>(&self, key: &K, slots: &[Slot<K, V>]) -> Option<usize> {
        let mask = self.table.len().checked_sub(1)?;
        let mut i = hash(key) & mask;
        loop {
            let at = *self.table.get(i)?;
            if at == EMPTY {
                return None;
            }
            if slots.get(at as usize).is_some_and(|s| s.key == *key) {
                return Some(at as usize);
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds slot `at` for `key`, which must be absent; `slots` are the
    /// others, should the table grow.
    fn insert<K: Hash, V>(&mut self, key: &K, at: u32, slots: &[Slot<K, V>]) {
        if 2 * (self.len + 1) > self.table.len() {
            // Room for one more key, at most half full: the table doubles.
            // (Twice that again left a growing fleet's table a quarter
            // full, 1 MiB at 64,000 keys until the round's end rebuilt it.)
            self.resize(slots.len() + 1, slots);
        }
        self.put(hash(key), at);
    }

    /// Indexes exactly `slots`, in a table sized for them.
    fn rebuild<K: Hash, V>(&mut self, slots: &[Slot<K, V>]) {
        self.resize(slots.len(), slots);
    }

    /// A table of at least twice `keys` entries holding `slots`.
    fn resize<K: Hash, V>(&mut self, keys: usize, slots: &[Slot<K, V>]) {
        let size = (2 * keys).max(16).next_power_of_two();
        if self.table.len() == size {
            self.table.fill(EMPTY);
        } else {
            self.table = vec![EMPTY; size];
        }
        self.len = 0;
        for (i, s) in slots.iter().enumerate() {
            self.put(hash(&s.key), i as u32);
        }
    }

    fn put(&mut self, hash: usize, at: u32) {
        let mask = self.table.len() - 1;
        let mut i = hash & mask;
        while let Some(e) = self.table.get_mut(i) {
            if *e == EMPTY {
                *e = at;
                self.len += 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(r: &Roster<u32, u32>) -> Vec<u32> {
        r.slots.iter().map(|s| s.key).collect()
    }

    #[test]
    fn a_round_in_the_same_order_needs_no_index() {
        let mut r: Roster<u32, u32> = Roster::default();
        for k in [5, 3, 9] {
            *r.get_or_insert_with(k, || 0) += 1;
        }
        r.end_round(|_, _, seen| seen);
        for k in [5, 3, 9] {
            *r.get_or_insert_with(k, || 0) += 1;
        }
        assert!(!r.strayed, "every key was at the cursor");
        r.end_round(|_, _, seen| seen);
        assert_eq!(keys(&r), vec![5, 3, 9]);
        assert_eq!(r.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
    }

    #[test]
    fn a_changed_order_is_found_through_the_index_and_adopted() {
        let mut r: Roster<u32, u32> = Roster::default();
        for k in [1, 2, 3, 4] {
            r.get_or_insert_with(k, || k * 10);
        }
        r.end_round(|_, _, seen| seen);
        // 3 moved to the front, 2 left, 7 is new.
        for k in [3, 1, 7, 4] {
            r.get_or_insert_with(k, || k * 10);
        }
        assert!(r.visited(&3) && !r.visited(&2));
        r.end_round(|_, _, seen| seen);
        assert_eq!(keys(&r), vec![3, 1, 7, 4]);
        assert_eq!(r.get(&2), None);
        assert_eq!(r.get(&7), Some(&70));
        for (i, k) in [3, 1, 7, 4].iter().enumerate() {
            assert_eq!(r.index.find(k, &r.slots), Some(i), "index of {k}");
        }
    }

    #[test]
    fn a_rewound_round_touches_nothing_and_the_next_end_adopts_its_order() {
        let mut r: Roster<u32, u32> = Roster::default();
        for k in [1, 2, 3] {
            r.get_or_insert_with(k, || k);
        }
        r.rewind();
        for k in [3, 2] {
            r.get_or_insert_with(k, || 0);
        }
        assert!(r.visited(&3) && !r.visited(&1));
        assert_eq!(keys(&r), vec![1, 2, 3], "no reordering on a rewind");
        r.end_round(|_, _, seen| seen);
        assert_eq!(keys(&r), vec![3, 2]);
        assert_eq!(r.get(&2), Some(&2));
    }

    #[test]
    fn kept_unvisited_slots_stay_findable_after_the_visited_ones() {
        let mut r: Roster<u32, u32> = Roster::default();
        for k in [1, 2, 3] {
            r.get_or_insert_with(k, || k);
        }
        r.end_round(|_, _, _| true);
        r.get_or_insert_with(3, || 0);
        r.end_round(|_, _, _| true);
        assert_eq!(keys(&r), vec![3, 1, 2]);
        assert_eq!(r.get(&1), Some(&1));
        // A key seen twice in a round counts from its first visit.
        r.get_or_insert_with(2, || 0);
        r.get_or_insert_with(2, || 0);
        r.get_or_insert_with(1, || 0);
        r.end_round(|_, _, seen| seen);
        assert_eq!(keys(&r), vec![2, 1]);
    }

    #[test]
    fn a_restamp_keeps_what_a_round_sees_and_the_order_it_adopts() {
        let mut r: Roster<u32, u32> = Roster::default();
        for k in [1, 2, 3] {
            r.get_or_insert_with(k, || k);
        }
        r.end_round(|_, _, seen| seen);
        r.get_or_insert_with(2, || 0);
        r.visits = RESTAMP_AT;
        r.get_or_insert_with(3, || 0);
        r.rewind();
        assert_eq!((r.visits, r.start), (1, 1), "restamped");
        assert!(!r.visited(&3) && !r.visited(&2), "a new round sees nobody yet");
        for k in [3, 1] {
            r.get_or_insert_with(k, || 0);
        }
        assert!(r.visited(&1) && !r.visited(&2));
        r.end_round(|_, _, _| true);
        assert_eq!(keys(&r), vec![3, 1, 2]);
        assert_eq!(
            std::mem::size_of::<Slot<u32, [u64; 4]>>(),
            40,
            "a stamp, not a round and a visit"
        );
    }
}
