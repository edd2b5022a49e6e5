//! Which listed processes left since the last poll: a source that keeps
//! its process lists between polls (the NVML source reads them again only
//! when the GPU's used memory changes, `source/nvml/gate.rs`) must read
//! them anew after a listed process exits or turns zombie, as the driver
//! may drop it from its lists while keeping its memory.
//!
//! Owns: the set of PIDs listed as exited or zombie, poll to poll. Must
//! not: read /proc (attribution already did) or call the source.

use rustc_hash::FxHashSet;

use crate::data::snapshot::{Device, Holder};

/// PIDs listed as exited or zombie last poll, and whether the latest poll
/// found one that was not.
#[derive(Debug, Default)]
pub(super) struct Departures {
    gone: FxHashSet<u32>,
    departed: bool,
}

impl Departures {
    /// Notes the devices of one whole poll.
    pub(super) fn note(&mut self, devices: &[Device]) {
        let gone: FxHashSet<u32> = devices
            .iter()
            .flat_map(|d| &d.processes)
            .filter(|p| matches!(p.holder, Some(Holder::Zombie | Holder::Exited)))
            .map(|p| p.pid)
            .collect();
        self.departed = gone.iter().any(|pid| !self.gone.contains(pid));
        self.gone = gone;
    }

    pub(super) fn departed(&self) -> bool {
        self.departed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::snapshot::Process;

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
