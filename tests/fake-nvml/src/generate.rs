//! Generated fleets (`[generate]`): many identical GPUs with many processes,
//! deterministic from a seed, for scale tests. Also the deterministic UUIDs
//! and PCI bus ids used for devices a scenario leaves unnamed.

use serde::Deserialize;

use crate::model::{Device, Holder, Lists, Memory, Process};
use crate::scenario::{self, DEFAULT_NAME, DEFAULT_TOTAL, RawSize};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGenerate {
    gpus: u32,
    #[serde(default)]
    processes_per_gpu: u32,
    name: Option<String>,
    total: Option<RawSize>,
    reserved: Option<RawSize>,
    overhead: Option<RawSize>,
    process_used: Option<RawSize>,
    process_used_max: Option<RawSize>,
    first_pid: Option<u32>,
    lists: Option<Vec<String>>,
    #[serde(default)]
    sm_util: bool,
    seed: Option<u64>,
}

const MIB: u64 = 1 << 20;

/// Devices `first_index..first_index + gpus`, appended after the explicit ones.
pub fn fleet(raw: &RawGenerate, first_index: usize) -> Result<Vec<Device>, String> {
    let seed = raw.seed.unwrap_or(1);
    let size = |field: &Option<RawSize>, default: u64| field.as_ref().map_or(Ok(default), RawSize::bytes);
    let used_min = size(&raw.process_used, 16 * MIB)?;
    let used_max = size(&raw.process_used_max, used_min)?.max(used_min);
    let first_pid = raw.first_pid.unwrap_or(100_000);
    let lists = Lists::parse(raw.lists.as_deref().unwrap_or(&["compute".to_string()]))?;
    let per_gpu = raw.processes_per_gpu;
    let memory = Memory {
        total: size(&raw.total, DEFAULT_TOTAL)?,
        reserved: size(&raw.reserved, 0)?,
        used: None,
        overhead: size(&raw.overhead, 0)?,
    };
    (0..raw.gpus)
        .map(|gpu| {
            let index = first_index + gpu as usize;
            let processes = (0..per_gpu)
                .map(|i| {
                    let roll = mix(seed, (u64::from(gpu) << 32) | u64::from(i));
                    let used = used_min + (roll % ((used_max - used_min) / MIB + 1)) * MIB;
                    let pid = first_pid.checked_add(gpu.checked_mul(per_gpu)?)?.checked_add(i)?;
                    Some(Process {
                        pid,
                        used: Some(used),
                        actual: used,
                        lists,
                        sm_util: raw.sm_util.then_some((roll >> 32) as u32 % 101),
                        mem_util: 0,
                    })
                })
                .collect::<Option<Vec<_>>>()
                .ok_or("generated pids overflow u32")?;
            Ok(Device {
                uuid: uuid("GPU", seed, index as u64),
                name: raw.name.clone().unwrap_or_else(|| DEFAULT_NAME.into()),
                pci: scenario::pci(&bus_id(index), None, None)?,
                holder: Holder {
                    memory: memory.clone(),
                    processes,
                },
                mig_capable: true,
                mig: None,
            })
        })
        .collect()
}

/// splitmix64: a well-spread, dependency-free hash, so generated values are
/// stable across runs, platforms and crate versions.
fn mix(seed: u64, n: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(n)
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A UUID in NVML's format: "GPU-8-4-4-4-12 hex digits" (or "MIG-...").
pub fn uuid(prefix: &str, seed: u64, index: u64) -> String {
    let hi = mix(seed, index.wrapping_mul(2));
    let lo = mix(seed, index.wrapping_mul(2) + 1);
    format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// Bus ids counting up from 0x18, spilling into the next PCI domain, so
/// even thousands of GPUs get distinct, well-formed ids.
pub fn bus_id(index: usize) -> String {
    let n = index + 0x18;
    format!("{:08X}:{:02X}:00.0", n / 256, n % 256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_stable_and_well_formed() {
        let a = uuid("GPU", 1, 0);
        assert_eq!(a, uuid("GPU", 1, 0));
        assert_ne!(a, uuid("GPU", 1, 1));
        assert_ne!(a, uuid("GPU", 2, 0));
        let groups: Vec<usize> = a.trim_start_matches("GPU-").split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
    }

    #[test]
    fn bus_ids_are_distinct() {
        assert_eq!(bus_id(0), "00000000:18:00.0");
        assert_eq!(bus_id(300), "00000001:44:00.0");
    }
}
