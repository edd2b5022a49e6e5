//! [`Listed`]: who NVML listed on which GPU at the latest poll, for the
//! allocator view's checks (a report's sender must be listed, and on every
//! GPU it names) and for naming an OOM event before its GPU has a holder
//! table.
//!
//! Owns: the listing, a map from PID to its GPUs and names, rebuilt each
//! poll (a node lists a few hundred processes). Must not: read sockets,
//! /proc or NVML, or hold anything beyond the latest poll's listing.

use std::sync::Arc;

use arcstr::ArcStr;
use rustc_hash::FxHashMap;

use crate::data::snapshot::{Device, Who};

/// One listed PID.
#[derive(Debug)]
struct Entry {
    /// Indices into `uuids`, in device order.
    gpus: Vec<usize>,
    /// As listed on its first GPU.
    who: Arc<Who>,
}

/// The latest poll's listing.
#[derive(Debug, Default)]
pub(super) struct Listed {
    pids: FxHashMap<u32, Entry>,
    /// The UUIDs of the latest poll's devices.
    uuids: Vec<String>,
}

impl Listed {
    /// Takes the listing of `devices`.
    pub(super) fn refill(&mut self, devices: &[Device]) {
        self.uuids.clear();
        self.uuids.extend(devices.iter().map(|d| d.uuid.clone()));
        // Entries outlive a poll, so a steady process's GPU list is reused,
        // not allocated again each poll.
        self.pids.values_mut().for_each(|e| e.gpus.clear());
        for (gpu, d) in devices.iter().enumerate() {
            for p in &d.processes {
                let entry = self.pids.entry(p.pid).or_insert_with(|| Entry {
                    gpus: Vec::new(),
                    who: p.who.clone(),
                });
                if entry.gpus.is_empty() {
                    entry.who = p.who.clone();
                }
                entry.gpus.push(gpu);
            }
        }
        self.pids.retain(|_, e| !e.gpus.is_empty());
    }

    /// Whether NVML listed `pid` at the latest poll.
    pub(super) fn contains(&self, pid: u32) -> bool {
        self.pids.contains_key(&pid)
    }

    /// The comm and user of `pid`, when listed.
    pub(super) fn names(&self, pid: u32) -> Option<(&ArcStr, &ArcStr)> {
        self.pids.get(&pid).map(|e| (&e.who.comm, &e.who.user))
    }

    /// The UUIDs of the GPUs `pid` is listed on, in device order.
    pub(super) fn uuids_of(&self, pid: u32) -> impl Iterator<Item = &str> {
        let gpus = self.pids.get(&pid).map(|e| e.gpus.as_slice()).unwrap_or_default();
        gpus.iter().filter_map(|&g| self.uuids.get(g)).map(String::as_str)
    }

    /// How many distinct PIDs are listed.
    pub(super) fn pids(&self) -> usize {
        self.pids.len()
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
