//! Healthy fleets: identity, memory arithmetic, process lists (including
//! unavailable memory and one pid in several lists), utilisation samples,
//! the timeline, init/shutdown reference counting, and init failing for a
//! missing or invalid scenario.

use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use crate::harness::{assert_passed, fixture, in_child, init, memory_v1, poll, test_path};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn pids(list: Result<Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>, NvmlError>) -> Vec<u32> {
    list.expect("process list").iter().map(|p| p.pid).collect()
}

scenario_test!(one_gpu, "one-gpu.toml", one_gpu_body);
fn one_gpu_body() {
    let nvml = init().expect("init");
    assert_eq!(nvml.sys_driver_version().unwrap(), "550.54.15");
    assert_eq!(nvml.sys_nvml_version().unwrap(), "12.550.54.15");
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 12040);
    assert_eq!(poll(&nvml), 0);
    assert_eq!(nvml.device_count().unwrap(), 1);
    assert_eq!(poll(&nvml), 1);

    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu.uuid().unwrap(), "GPU-3a8f2c41-7b9e-4d05-a6c3-1e2f3a4b5c6d");
    assert_eq!(gpu.name().unwrap(), "NVIDIA H100 80GB HBM3");
    assert_eq!(gpu.index().unwrap(), 0);
    let pci = gpu.pci_info().unwrap();
    assert_eq!(pci.bus_id, "00000000:1B:00.0");
    assert_eq!((pci.domain, pci.bus, pci.device), (0, 0x1b, 0));
    assert_eq!(pci.pci_device_id, 0x2330_10de);

    let memory = gpu.memory_info().unwrap();
    assert_eq!(memory.total, 81559 * MIB);
    assert_eq!(memory.reserved, 535 * MIB);
    assert_eq!(memory.used, (518 + 4) * MIB, "process plus overhead");
    assert_eq!(memory.free, (81559 - 535 - 522) * MIB);
    let v1 = memory_v1(&nvml, &gpu).unwrap();
    assert_eq!(
        (v1.total, v1.used, v1.free),
        (81559 * MIB, (535 + 522) * MIB, memory.free)
    );

    let compute = gpu.running_compute_processes().unwrap();
    assert_eq!(compute.len(), 1);
    assert_eq!(compute[0].pid, 4242);
    assert_eq!(compute[0].used_gpu_memory, UsedGpuMemory::Used(518 * MIB));
    assert_eq!(
        (compute[0].gpu_instance_id, compute[0].compute_instance_id),
        (None, None)
    );
    assert!(gpu.running_graphics_processes().unwrap().is_empty());
    assert!(gpu.mps_running_compute_processes().unwrap().is_empty());

    let samples = gpu.process_utilization_stats(None).unwrap();
    assert_eq!(samples.len(), 1);
    assert_eq!((samples[0].pid, samples[0].sm_util, samples[0].mem_util), (4242, 12, 3));
    let seen = samples[0].timestamp;
    assert!(matches!(gpu.process_utilization_stats(seen), Err(NvmlError::NotFound)));
    nvml.device_count().unwrap();
    let next = gpu.process_utilization_stats(seen).unwrap();
    assert_eq!(next[0].timestamp, seen + 1_000_000, "one sample per poll");

    assert_eq!(gpu.mig_mode().unwrap().current, 0);
    assert_eq!(gpu.mig_device_count().unwrap(), 0);
    assert!(!gpu.mig_is_mig_device_handle().unwrap());
    assert!(matches!(gpu.mig_parent_device(), Err(NvmlError::InvalidArg)));
    assert!(matches!(nvml.device_by_index(1), Err(NvmlError::InvalidArg)));
    let by_uuid = nvml.device_by_uuid("GPU-3a8f2c41-7b9e-4d05-a6c3-1e2f3a4b5c6d").unwrap();
    assert_eq!(by_uuid.index().unwrap(), 0);
    assert!(matches!(nvml.device_by_uuid("GPU-nope"), Err(NvmlError::NotFound)));
    // SAFETY: the handle is never dereferenced; the fake must reject it.
    let bogus = unsafe { Device::new(std::ptr::dangling_mut(), &nvml) };
    assert!(matches!(bogus.uuid(), Err(NvmlError::InvalidArg)));

    // SAFETY: a plain copy of the handle value, compared below.
    let handle = unsafe { gpu.handle() };
    nvml.shutdown().unwrap();
    let nvml = init().expect("re-init");
    assert_eq!(poll(&nvml), 2, "the poll clock survives shutdown and dlclose");
    nvml.device_count().unwrap();
    assert_eq!(poll(&nvml), 3);
    // SAFETY: as above.
    assert_eq!(unsafe { nvml.device_by_index(0).unwrap().handle() }, handle);
}

scenario_test!(init_is_reference_counted, "one-gpu.toml", init_refcount_body);
fn init_refcount_body() {
    let first = init().unwrap();
    let second = init().unwrap();
    first.shutdown().unwrap();
    assert_eq!(second.device_count().unwrap(), 1, "one init still outstanding");
    let shutdown = second.lib().nvmlShutdown.as_ref().unwrap();
    // SAFETY: a plain C call without arguments.
    assert_eq!(unsafe { shutdown() }, 0);
    assert!(matches!(second.device_count(), Err(NvmlError::Uninitialized)));
    let error_string = second.lib().nvmlErrorString.as_ref().unwrap();
    // SAFETY: nvmlErrorString returns a static NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(error_string(15)) };
    assert_eq!(text.to_str().unwrap(), "GPU is lost");
}

scenario_test!(timeline, "timeline.toml", timeline_body);
fn timeline_body() {
    let nvml = init().unwrap();
    // (poll, pids listed, device used)
    let expected: [(u64, &[u32], u64); 9] = [
        (1, &[], 4 * MIB),
        (2, &[7700], 522 * MIB),
        (3, &[7700], 8 * GIB + 4 * MIB),
        (4, &[7700], 20 * GIB + 4 * MIB),
        (5, &[7700], 20 * GIB + 4 * MIB),
        (6, &[], 20484 * MIB),
        (7, &[], 20484 * MIB),
        (8, &[], 4 * MIB),
        (9, &[], 4 * MIB),
    ];
    for (at, listed, used) in expected {
        nvml.device_count().unwrap();
        assert_eq!(poll(&nvml), at);
        let gpu = nvml.device_by_index(0).unwrap();
        assert_eq!(pids(gpu.running_compute_processes()), listed, "poll {at}");
        assert_eq!(gpu.memory_info().unwrap().used, used, "poll {at}");
    }
}

scenario_test!(dup_lists, "dup-lists.toml", dup_lists_body);
fn dup_lists_body() {
    let nvml = init().unwrap();
    nvml.device_count().unwrap();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(pids(gpu.running_compute_processes()), [5000, 5002]);
    assert_eq!(pids(gpu.running_graphics_processes()), [5000, 5001]);
    assert_eq!(pids(gpu.mps_running_compute_processes()), [5003]);
    let graphics = gpu.running_graphics_processes().unwrap();
    assert_eq!(graphics[0].used_gpu_memory, UsedGpuMemory::Used(4 * GIB));
    let used = gpu.memory_info().unwrap().used;
    assert_eq!(used, 4 * GIB + 256 * MIB + GIB + 512 * MIB, "pid 5000 counted once");
}

scenario_test!(unavailable_memory, "unavailable-memory.toml", unavailable_body);
fn unavailable_body() {
    let nvml = init().unwrap();
    nvml.device_count().unwrap();
    let gpu = nvml.device_by_index(0).unwrap();
    let compute = gpu.running_compute_processes().unwrap();
    assert_eq!(compute.len(), 2);
    assert_eq!(
        (compute[0].pid, &compute[0].used_gpu_memory),
        (3100, &UsedGpuMemory::Unavailable)
    );
    assert_eq!(compute[1].used_gpu_memory, UsedGpuMemory::Used(1536 * MIB));
    assert_eq!(gpu.memory_info().unwrap().used, 6 * GIB + 1536 * MIB);
}

fn expect_unknown() {
    assert!(matches!(init(), Err(NvmlError::Unknown)));
}

/// Init fails with UNKNOWN and says why in exactly one stderr line.
fn check_init_error(test: &str, scenario: Option<&std::path::Path>, why: &str) {
    if let Some(output) = in_child(test, scenario, expect_unknown) {
        assert_passed(test, &output);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line, got {stderr:?}");
        assert!(lines[0].starts_with("fake-nvml: nvmlInit failed: "), "{stderr}");
        assert!(lines[0].contains(why), "{stderr:?} should mention {why:?}");
    }
}

#[test]
fn init_fails_without_scenario() {
    let test = test_path(module_path!(), "init_fails_without_scenario");
    check_init_error(&test, None, "FAKE_NVML_SCENARIO is not set");
}

#[test]
fn init_fails_on_unreadable_scenario() {
    let test = test_path(module_path!(), "init_fails_on_unreadable_scenario");
    check_init_error(&test, Some(&fixture("does-not-exist.toml")), "cannot read");
}

#[test]
fn init_fails_on_invalid_scenario() {
    let test = test_path(module_path!(), "init_fails_on_invalid_scenario");
    check_init_error(
        &test,
        Some(&fixture("unknown-key.toml")),
        "line 5: unknown field `totl`",
    );
}
