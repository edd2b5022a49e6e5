//! Which listed processes left since the last poll: a source
//! that keeps its process lists between polls (the NVML source reads them
//! again only when the GPU's used memory changes, `source/nvml/gate.rs`)
//! must read them anew after a listed process exits or turns zombie, as
//! the driver may drop it from its lists while keeping its memory.
//!
//! Owns: the set of PIDs listed as exited or zombie, poll to poll. Must
//! not: read /proc (attribution already did) or call the source.

#[cfg(test)]
use crate::snapshot::Device;
use crate::snapshot::{Holder, Process};

/// PIDs listed as exited or zombie last poll, sorted, and whether the
/// latest poll found one that was not.
#[derive(Debug, Default)]
pub(super) struct Departures {
    gone: Vec<u32>,
    /// This poll's, gathered device by device (see `note_device`).
    next: Vec<u32>,
    departed: bool,
}

impl Departures {
    /// The exited and zombie holders of one device of this poll, noted
    /// while its processes are in cache (a separate walk over every process
    /// of the snapshot was 2 % of a 64 x 1000 poll).
    pub(super) fn note_device(&mut self, processes: &[Process]) {
        self.next.extend(
            processes
                .iter()
                .filter(|p| matches!(p.holder, Some(Holder::Zombie | Holder::Exited)))
                .map(|p| p.pid),
        );
    }

    /// The poll's devices are all noted: whether one of them left since.
    pub(super) fn end_poll(&mut self) {
        let mut gone = std::mem::take(&mut self.next);
        gone.sort_unstable();
        gone.dedup();
        self.departed = gone.iter().any(|pid| self.gone.binary_search(pid).is_err());
        self.next = std::mem::replace(&mut self.gone, gone);
        self.next.clear();
    }

    /// The devices of one whole poll (tests).
    #[cfg(test)]
    pub(super) fn note(&mut self, devices: &[Device]) {
        for d in devices {
            self.note_device(&d.processes);
        }
        self.end_poll();
    }

    pub(super) fn departed(&self) -> bool {
        self.departed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(holders: &[(u32, Holder)]) -> Device {
        Device {
            processes: holders
                .iter()
                .map(|&(pid, h)| Process {
                    pid,
                    holder: Some(h),
                    ..Process::default()
                })
                .collect(),
            ..Device::default()
        }
    }

    #[test]
    fn a_process_that_exits_or_turns_zombie_is_a_departure_once() {
        let mut d = Departures::default();
        d.note(&[device(&[(1, Holder::Live), (2, Holder::Live)])]);
        assert!(!d.departed(), "live processes are no departure");
        d.note(&[device(&[(1, Holder::Exited), (2, Holder::Live)])]);
        assert!(d.departed(), "an exit is");
        d.note(&[device(&[(1, Holder::Exited), (2, Holder::Live)])]);
        assert!(!d.departed(), "the same exited holder again is not news");
        d.note(&[device(&[(1, Holder::Exited)]), device(&[(2, Holder::Zombie)])]);
        assert!(d.departed(), "a zombie on another device is");
        d.note(&[device(&[(3, Holder::Unattributed)])]);
        assert!(!d.departed(), "an unattributed holder says nothing about /proc");
    }
}
