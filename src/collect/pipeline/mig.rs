//! The MIG parent's holder split, summed from its instances. Owns only
//! that sum; it must not read NVML or /proc (the pipeline has built every
//! device before this runs).

use crate::collect::diagnosis::holder_split;
use crate::data::snapshot::{Device, Holder, Holders, Process};

/// A MIG parent lists no processes (they are on its instances); its holder
/// split is the sum of its instances', with the rest unattributed. Linear
/// in the device count: the instances' sums are gathered in one pass (a
/// scan of every device per device made 30,000 GPUs take seconds).
pub(super) fn aggregate_mig_parents(devices: &mut [Device]) {
    let mut sums: rustc_hash::FxHashMap<String, Holders> = rustc_hash::FxHashMap::default();
    for c in devices.iter().filter(|c| !c.parent_uuid.is_empty()) {
        let h = sums.entry(c.parent_uuid.clone()).or_default();
        if let Some(ch) = c.holders {
            h.live += ch.live;
            h.zombie += ch.zombie;
            h.exited += ch.exited;
        }
    }
    if sums.is_empty() {
        return;
    }
    for d in devices.iter_mut().filter(|d| d.up && d.memory.is_some()) {
        let Some(h) = sums.get(&d.uuid) else { continue };
        let used = d.memory.map_or(0, |m| m.used_bytes);
        let parts = [
            (h.live, Holder::Live),
            (h.zombie, Holder::Zombie),
            (h.exited, Holder::Exited),
        ];
        let parts = parts.map(|(bytes, holder)| Process {
            used_bytes: Some(bytes),
            holder: Some(holder),
            ..Process::default()
        });
        d.holders = Some(holder_split(used, &parts));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::snapshot::Memory;

    fn dev(uuid: &str, parent: &str, used: u64, holders: Option<Holders>) -> Device {
        Device {
            uuid: uuid.into(),
            parent_uuid: parent.into(),
            up: true,
            memory: Some(Memory {
                total_bytes: 1000,
                used_bytes: used,
                free_bytes: 1000 - used,
                reserved_bytes: None,
            }),
            holders,
            ..Device::default()
        }
    }

    #[test]
    fn each_parent_gets_the_sum_of_its_own_instances_and_the_rest_unattributed() {
        let h = |live, zombie, exited| {
            Some(Holders {
                live,
                zombie,
                exited,
                ..Holders::default()
            })
        };
        let mut devices = vec![
            dev("GPU-a", "", 500, None),
            dev("MIG-a1", "GPU-a", 200, h(100, 20, 0)),
            dev("GPU-b", "", 300, None),
            dev("MIG-a2", "GPU-a", 150, h(50, 0, 30)),
            dev("MIG-b1", "GPU-b", 100, h(80, 0, 0)),
            dev("GPU-c", "", 10, None),
        ];
        aggregate_mig_parents(&mut devices);
        let a = devices[0].holders.expect("GPU-a summed");
        assert_eq!((a.live, a.zombie, a.exited), (150, 20, 30));
        let b = devices[2].holders.expect("GPU-b summed");
        assert_eq!((b.live, b.zombie, b.exited), (80, 0, 0));
        assert!(devices[5].holders.is_none(), "no instances: left as it was");
    }
}
