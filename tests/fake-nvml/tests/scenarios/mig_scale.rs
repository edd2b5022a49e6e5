//! MIG topology (instances, empty slots, parents, per-instance memory and
//! processes) and the generated 64 x 1000 fleet.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use crate::harness::init;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

scenario_test!(mig, "mig.toml", mig_body);
fn mig_body() {
    let nvml = init().unwrap();
    assert_eq!(nvml.device_count().unwrap(), 2);
    let parent = nvml.device_by_index(0).unwrap();
    let parent_uuid = parent.uuid().unwrap();
    let mode = parent.mig_mode().unwrap();
    assert_eq!((mode.current, mode.pending), (1, 1));
    assert_eq!(parent.mig_device_count().unwrap(), 7);
    assert!(!parent.mig_is_mig_device_handle().unwrap());

    let mut found = Vec::new();
    for slot in 0..7 {
        match parent.mig_device_by_index(slot) {
            Ok(instance) => found.push((slot, instance)),
            Err(NvmlError::NotFound) => {}
            Err(e) => panic!("slot {slot}: {e}"),
        }
    }
    assert!(matches!(parent.mig_device_by_index(7), Err(NvmlError::InvalidArg)));
    let slots: Vec<u32> = found.iter().map(|(s, _)| *s).collect();
    assert_eq!(slots, [0, 2, 3]);

    let big = &found[0].1;
    assert!(big.mig_is_mig_device_handle().unwrap());
    assert_eq!(big.uuid().unwrap(), "MIG-7a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d");
    assert_eq!(big.name().unwrap(), "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
    assert_eq!(big.mig_parent_device().unwrap().uuid().unwrap(), parent_uuid);
    assert_eq!(big.pci_info().unwrap().bus_id, "00000000:61:00.0");
    assert_eq!(big.index().unwrap(), 0);
    assert!(matches!(big.mig_mode(), Err(NvmlError::NotSupported)));
    let memory = big.memory_info().unwrap();
    assert_eq!((memory.total, memory.used), (40320 * MIB, 30 * GIB));
    let procs = big.running_compute_processes().unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(
        (procs[0].pid, procs[0].gpu_instance_id, procs[0].compute_instance_id),
        (6100, Some(1), Some(0))
    );
    assert!(matches!(
        big.process_utilization_stats(None),
        Err(NvmlError::NotSupported)
    ));

    let middle = found[1].1.running_compute_processes().unwrap();
    assert_eq!(middle.iter().map(|p| p.pid).collect::<Vec<_>>(), [6200, 6201]);
    let small = found[2].1.running_compute_processes().unwrap();
    assert_eq!(small[0].used_gpu_memory, UsedGpuMemory::Unavailable);

    let by_uuid = nvml.device_by_uuid("MIG-9c3d4e5f-6a7b-5c8d-0e9f-1a2b3c4d5e6f").unwrap();
    assert!(by_uuid.mig_is_mig_device_handle().unwrap());
    assert_eq!(by_uuid.name().unwrap(), "NVIDIA H100 80GB HBM3 MIG 1g.10gb");

    // The parent aggregates: memory of all instances, processes with ids.
    let memory = parent.memory_info().unwrap();
    assert_eq!(memory.used, 30 * GIB + 12 * GIB + GIB);
    let all = parent.running_compute_processes().unwrap();
    let ids: Vec<(u32, Option<u32>)> = all.iter().map(|p| (p.pid, p.gpu_instance_id)).collect();
    assert_eq!(
        ids,
        [(6100, Some(1)), (6200, Some(5)), (6201, Some(5)), (6300, Some(13))]
    );
    assert!(matches!(
        parent.process_utilization_stats(None),
        Err(NvmlError::NotSupported)
    ));

    let plain = nvml.device_by_index(1).unwrap();
    assert_eq!(plain.mig_mode().unwrap().current, 0);
    assert_eq!(plain.mig_device_count().unwrap(), 0);
    assert!(matches!(plain.mig_device_by_index(0), Err(NvmlError::NotSupported)));
    assert_eq!(plain.running_compute_processes().unwrap()[0].gpu_instance_id, None);
    assert_eq!(plain.process_utilization_stats(None).unwrap()[0].sm_util, 80);
}

scenario_test!(large, "large.toml", large_body);
fn large_body() {
    let nvml = init().unwrap();
    let start = Instant::now();
    assert_eq!(nvml.device_count().unwrap(), 64);
    let mut uuids = HashSet::new();
    let mut pids = HashSet::new();
    for index in 0..64 {
        let gpu = nvml.device_by_index(index).unwrap();
        assert!(uuids.insert(gpu.uuid().unwrap()));
        assert!(uuids.insert(gpu.pci_info().unwrap().bus_id), "bus ids distinct too");
        let procs = gpu.running_compute_processes().unwrap();
        assert_eq!(procs.len(), 1000);
        let mut sum = 0;
        for p in &procs {
            assert!(pids.insert(p.pid), "pid {} twice", p.pid);
            let UsedGpuMemory::Used(used) = p.used_gpu_memory else {
                panic!("unavailable")
            };
            assert!((16 * MIB..=64 * MIB).contains(&used) && used % MIB == 0, "{used}");
            sum += used;
        }
        assert_eq!(gpu.memory_info().unwrap().used, sum + 4 * MIB);
        assert_eq!(gpu.process_utilization_stats(None).unwrap().len(), 1000);
    }
    assert_eq!(pids.len(), 64_000);
    assert_eq!(pids.iter().min(), Some(&100_000));
    assert_eq!(pids.iter().max(), Some(&163_999));
    // Generous: a full sweep is milliseconds; this only catches a blow-up.
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "sweep took {:?}",
        start.elapsed()
    );
    // Deterministic across runs: pin the first GPU's generated UUID.
    assert_eq!(nvml.device_by_index(0).unwrap().uuid().unwrap(), FIRST_UUID);
}

const FIRST_UUID: &str = "GPU-2a7b67af-6c6a-d50e-b86c-9a98359e0b62";
