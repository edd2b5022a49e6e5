//! [`Listed`]: who NVML listed on which GPU at the latest poll, for the
//! allocator view's checks (a report's sender must be listed, and on every
//! GPU it names) and for naming an OOM event before its GPU has a holder
//! table.
//!
//! Owns: the sorted listing, its names and the fingerprint that says
//! whether a poll changed them. Must not: read sockets, /proc or NVML, or
//! hold anything beyond the latest poll's listing.
//!
//! Why: the hash map this replaced was rebuilt every poll for
//! every listed process (64,000 at 64 GPUs x 1000) with two name clones
//! each: 11 MiB and 5.5 % of the poll thread, for the few PIDs that ever
//! report. Here the listing is a vector sorted by PID (a lookup is a binary
//! search), rebuilt only when a fingerprint of (PID, GPU, names) over the
//! poll changes: a steady poll hashes each process's integers and touches
//! no reference count.

use arcstr::ArcStr;

use crate::snapshot::{Device, Process};

/// One process on one GPU.
#[derive(Debug)]
struct Entry {
    pid: u32,
    /// Index into `uuids`.
    gpu: u32,
    comm: ArcStr,
    user: ArcStr,
}

/// The latest poll's listing.
#[derive(Debug, Default)]
pub(super) struct Listed {
    /// Sorted by (PID, GPU).
    entries: Vec<Entry>,
    /// The UUIDs of the latest poll's devices.
    uuids: Vec<String>,
    /// Of the listing `entries` holds (see [`fingerprint`]).
    print: (u64, usize),
    /// How many polls rebuilt the listing.
    rebuilds: u64,
}

impl Listed {
    /// Takes the listing of `devices`, whose fingerprint is `print`,
    /// rebuilding only when it changed.
    pub(super) fn refill(&mut self, devices: &[Device], print: Fingerprint) {
        if self.uuids.len() != devices.len() || self.uuids.iter().zip(devices).any(|(u, d)| *u != d.uuid) {
            self.uuids.clear();
            self.uuids.extend(devices.iter().map(|d| d.uuid.clone()));
            // The indices changed meaning: rebuild whatever the print says.
            self.print = (0, usize::MAX);
        }
        let print = (print.sum, print.n);
        if print == self.print {
            return;
        }
        self.print = print;
        self.rebuilds += 1;
        self.entries.clear();
        // Exactly what this poll lists: growing by doubling held the old
        // and the new vector at once, and up to twice what was used.
        let n: usize = devices.iter().map(|d| d.processes.len()).sum();
        if self.entries.capacity() > 2 * n.max(64) {
            self.entries = Vec::new();
        }
        self.entries.reserve_exact(n);
        for (i, d) in devices.iter().enumerate() {
            let gpu = u32::try_from(i).unwrap_or(u32::MAX);
            self.entries.extend(d.processes.iter().map(|p| Entry {
                pid: p.pid,
                gpu,
                comm: p.comm.clone(),
                user: p.user.clone(),
            }));
        }
        self.entries.sort_unstable_by_key(|e| (e.pid, e.gpu));
    }

    /// The entries of `pid`, by GPU.
    fn of(&self, pid: u32) -> &[Entry] {
        let lo = self.entries.partition_point(|e| e.pid < pid);
        let n = self
            .entries
            .get(lo..)
            .map_or(0, |rest| rest.partition_point(|e| e.pid == pid));
        self.entries.get(lo..lo + n).unwrap_or_default()
    }

    /// Whether NVML listed `pid` at the latest poll.
    pub(super) fn contains(&self, pid: u32) -> bool {
        !self.of(pid).is_empty()
    }

    /// The comm and user of `pid`, when listed.
    pub(super) fn names(&self, pid: u32) -> Option<(&ArcStr, &ArcStr)> {
        self.of(pid).first().map(|e| (&e.comm, &e.user))
    }

    /// The UUIDs of the GPUs `pid` is listed on, in device order.
    pub(super) fn uuids_of(&self, pid: u32) -> impl Iterator<Item = &str> {
        self.of(pid)
            .iter()
            .filter_map(|e| self.uuids.get(e.gpu as usize))
            .map(String::as_str)
    }

    #[cfg(test)]
    pub(super) fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// How many distinct PIDs are listed.
    pub(super) fn pids(&self) -> usize {
        self.entries.chunk_by(|a, b| a.pid == b.pid).count()
    }
}

/// An order-independent digest of every (PID, GPU, comm, user) of a poll,
/// and the count: equal digests mean an equal listing (up to a 64-bit hash
/// collision). Names are compared by address: an `ArcStr` is immutable and the
/// listing holds a clone of each, so an address seen last poll is still the
/// same string. The sort order of a device's processes (by size, which
/// changes every poll) does not matter. Fed by the join's own walk over
/// the processes.
#[derive(Debug, Default)]
pub(super) struct Fingerprint {
    sum: u64,
    n: usize,
}

impl Fingerprint {
    /// Adds process `p` of the device at index `gpu`.
    pub(super) fn add(&mut self, gpu: usize, p: &Process) {
        // One mix of the fields, each multiplied by its own odd constant
        // first: a per-field mix was 4 % of the daemon's poll.
        let fields = [
            u64::from(p.pid) | ((gpu as u64) << 32),
            p.comm.as_ptr() as u64,
            p.comm.len() as u64,
            p.user.as_ptr() as u64,
            p.user.len() as u64,
        ];
        let folded = fields
            .iter()
            .zip(ODD)
            .fold(0u64, |h, (&f, k)| h.rotate_left(23) ^ f.wrapping_mul(k));
        self.sum = self.sum.wrapping_add(mix(folded));
        self.n += 1;
    }

    /// The digest of all of `devices`.
    #[cfg(test)]
    fn of(devices: &[Device]) -> Fingerprint {
        let mut f = Fingerprint::default();
        for (i, d) in devices.iter().enumerate() {
            d.processes.iter().for_each(|p| f.add(i, p));
        }
        f
    }
}

/// Odd multipliers (SplitMix64's and golden-ratio constants), one a field.
const ODD: [u64; 5] = [
    0x9e37_79b9_7f4a_7c15,
    0xbf58_476d_1ce4_e5b9,
    0x94d0_49bb_1331_11eb,
    0xd6e8_feb8_6659_fd93,
    0xa076_1d64_78bd_642f,
];

/// SplitMix64's finaliser: every input bit moves every output bit.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Who;

    fn device(uuid: &str, procs: &[(u32, &str)]) -> Device {
        Device {
            uuid: uuid.into(),
            processes: procs
                .iter()
                .map(|&(pid, comm)| Process {
                    pid,
                    who: Who::shared(comm, "", None),
                    ..Process::default()
                })
                .collect(),
            ..Device::default()
        }
    }

    #[test]
    fn lookups_follow_each_poll_and_a_reordered_poll_keeps_the_listing() {
        let mut l = Listed::default();
        let mut devs = vec![device("GPU-a", &[(30, "x"), (10, "y")]), device("GPU-b", &[(10, "y")])];
        l.refill(&devs, Fingerprint::of(&devs));
        assert!(l.contains(10) && l.contains(30) && !l.contains(20));
        assert_eq!(l.uuids_of(10).collect::<Vec<_>>(), ["GPU-a", "GPU-b"]);
        assert_eq!(l.pids(), 2);
        assert_eq!(l.names(30).map(|(c, _)| c.as_str()), Some("x"));
        // The same processes in another order: nothing rebuilt.
        devs[0].processes.reverse();
        l.refill(&devs, Fingerprint::of(&devs));
        assert_eq!(l.rebuilds, 1);
        assert_eq!(l.uuids_of(10).count(), 2);
        // A process gone and a renamed one: rebuilt.
        devs[1].processes.clear();
        std::sync::Arc::make_mut(&mut devs[0].processes[0].who).comm = "z".into();
        l.refill(&devs, Fingerprint::of(&devs));
        assert_eq!(l.rebuilds, 2);
        assert_eq!(l.uuids_of(10).collect::<Vec<_>>(), ["GPU-a"]);
        let renamed = devs[0].processes[0].pid;
        assert_eq!(l.names(renamed).map(|(c, _)| c.as_str()), Some("z"));
        // Devices in another order: the indices follow.
        devs.swap(0, 1);
        l.refill(&devs, Fingerprint::of(&devs));
        assert_eq!(l.uuids_of(30).collect::<Vec<_>>(), ["GPU-a"]);
    }
}
