//! [`Listed`]: who NVML listed on which GPU at the latest poll, for the
//! allocator view's checks (a report's sender must be listed, and on every
//! GPU it names) and for naming an OOM event before its GPU has a holder
//! table.
//!
//! Owns: the listing, each PID's GPUs and names, rebuilt each
//! poll (a node lists a few hundred processes). Must not: read sockets,
//! /proc or NVML, or hold anything beyond the latest poll's listing.

use std::sync::Arc;

use arcstr::ArcStr;

use crate::data::snapshot::{Device, Who};

/// The latest poll's listing.
#[derive(Debug, Default)]
pub(super) struct Listed {
    /// (PID, index into `uuids`, who as listed there); once `sorted`, by
    /// PID and then device, so a PID's rows sit together in device order.
    /// One vector refilled each poll keeps no entry past its poll and holds
    /// 24 bytes a row; the map it replaced held about 115 bytes a process.
    rows: Vec<(u32, usize, Arc<Who>)>,
    /// Whether `rows` is sorted. Sorted at the first lookup after a
    /// refill, not at the refill: most polls see no report and no OOM, and
    /// the sort was nearly all of the listing's cost.
    sorted: bool,
    /// The UUIDs of the latest poll's devices.
    uuids: Vec<String>,
}

impl Listed {
    /// Takes the listing of `devices`.
    pub(super) fn refill(&mut self, devices: &[Device]) {
        self.uuids.clear();
        self.uuids.extend(devices.iter().map(|d| d.uuid.clone()));
        self.rows.clear();
        for (gpu, d) in devices.iter().enumerate() {
            self.rows
                .extend(d.processes.iter().map(|p| (p.pid, gpu, p.who.clone())));
        }
        self.sorted = false;
    }

    /// The rows, sorted.
    fn sorted(&mut self) -> &Self {
        if !self.sorted {
            self.rows.sort_unstable_by_key(|&(pid, gpu, _)| (pid, gpu));
            self.sorted = true;
        }
        self
    }

    /// The rows of `pid`, in device order (`rows` sorted).
    fn of(&self, pid: u32) -> &[(u32, usize, Arc<Who>)] {
        let lo = self.rows.partition_point(|r| r.0 < pid);
        let hi = self.rows.partition_point(|r| r.0 <= pid);
        &self.rows[lo..hi]
    }

    /// Whether NVML listed `pid` at the latest poll.
    pub(super) fn contains(&mut self, pid: u32) -> bool {
        !self.sorted().of(pid).is_empty()
    }

    /// The comm and user of `pid` as listed on its first GPU, when listed.
    pub(super) fn names(&mut self, pid: u32) -> Option<(&ArcStr, &ArcStr)> {
        self.sorted().of(pid).first().map(|(_, _, who)| (&who.comm, &who.user))
    }

    /// The UUIDs of the GPUs `pid` is listed on, in device order.
    pub(super) fn uuids_of(&mut self, pid: u32) -> impl Iterator<Item = &str> {
        let this = self.sorted();
        this.of(pid)
            .iter()
            .filter_map(|&(_, g, _)| this.uuids.get(g))
            .map(String::as_str)
    }

    /// How many distinct PIDs are listed.
    pub(super) fn pids(&mut self) -> usize {
        self.sorted().rows.chunk_by(|a, b| a.0 == b.0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::snapshot::Process;

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
    fn lookups_follow_each_poll_whatever_its_order() {
        let mut l = Listed::default();
        let mut devs = vec![device("GPU-a", &[(30, "x"), (10, "y")]), device("GPU-b", &[(10, "y")])];
        l.refill(&devs);
        assert!(l.contains(10) && l.contains(30) && !l.contains(20));
        assert_eq!(l.uuids_of(10).collect::<Vec<_>>(), ["GPU-a", "GPU-b"]);
        assert_eq!(l.pids(), 2);
        assert_eq!(l.names(30).map(|(c, _)| c.as_str()), Some("x"));
        // The same processes in another order: the same listing.
        devs[0].processes.reverse();
        l.refill(&devs);
        assert_eq!(l.uuids_of(10).collect::<Vec<_>>(), ["GPU-a", "GPU-b"]);
        // A process gone and a renamed one.
        devs[1].processes.clear();
        std::sync::Arc::make_mut(&mut devs[0].processes[0].who).comm = "z".into();
        l.refill(&devs);
        assert_eq!(l.uuids_of(10).collect::<Vec<_>>(), ["GPU-a"]);
        let renamed = devs[0].processes[0].pid;
        assert_eq!(l.names(renamed).map(|(c, _)| c.as_str()), Some("z"));
        // Devices in another order: the indices follow.
        devs.swap(0, 1);
        l.refill(&devs);
        assert_eq!(l.uuids_of(30).collect::<Vec<_>>(), ["GPU-a"]);
    }
}
