//! Failure scenarios: a GPU lost for a range of polls, unsupported and
//! refused calls, init failing then recovering, a driver upgrade, and a
//! call that hangs without blocking other threads.

use std::time::{Duration, Instant};

use nvml_wrapper::bitmasks::InitFlags;
use nvml_wrapper::error::NvmlError;

use crate::harness::{hanging_calls, init, lib_path, memory_v1, poll, wait_until};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

scenario_test!(lost_8gpu, "lost-8gpu.toml", lost_8gpu_body);
fn lost_8gpu_body() {
    let nvml = init().unwrap();
    assert_eq!(nvml.device_count().unwrap(), 8);
    let held = nvml.device_by_index(3).unwrap();
    let uuid = held.uuid().unwrap();
    for at in 1..=11 {
        if at > 1 {
            assert_eq!(nvml.device_count().unwrap(), 8, "count is unaffected");
        }
        assert_eq!(poll(&nvml), at);
        let lost = (5..=9).contains(&at);
        for index in 0..8 {
            let device = nvml.device_by_index(index);
            if index == 3 && lost {
                assert!(matches!(device, Err(NvmlError::GpuLost)), "poll {at}");
                continue;
            }
            let device = device.unwrap_or_else(|e| panic!("poll {at} gpu {index}: {e}"));
            assert!(device.uuid().unwrap().starts_with("GPU-"));
            assert!(device.memory_info().unwrap().used > 0);
            assert_eq!(device.running_compute_processes().unwrap().len(), 2);
        }
        // A handle taken before the loss fails the same way, for every call.
        if lost {
            assert!(matches!(held.uuid(), Err(NvmlError::GpuLost)));
            assert!(matches!(held.memory_info(), Err(NvmlError::GpuLost)));
            assert!(matches!(held.running_compute_processes(), Err(NvmlError::GpuLost)));
            assert!(matches!(held.pci_info(), Err(NvmlError::GpuLost)));
            assert_eq!(memory_v1(&nvml, &held).unwrap_err(), 15);
        } else {
            assert_eq!(held.uuid().unwrap(), uuid);
            // Not memory: a second memory read of GPU 3 would start the
            // next poll (the clock of a daemon that keeps its handles).
            assert_eq!(held.running_compute_processes().unwrap().len(), 2);
        }
    }
}

scenario_test!(not_supported, "not-supported.toml", not_supported_body);
fn not_supported_body() {
    let nvml = init().unwrap();
    assert_eq!(nvml.device_count().unwrap(), 2);
    let old = nvml.device_by_index(0).unwrap();
    assert_eq!(old.name().unwrap(), "NVIDIA A100-SXM4-40GB");
    assert!(matches!(old.memory_info(), Err(NvmlError::NotSupported)));
    let v1 = memory_v1(&nvml, &old).unwrap();
    assert_eq!(v1.total, 40960 * MIB);
    assert_eq!(v1.used, 512 * MIB + 2 * GIB, "v1 folds reserved into used");
    assert_eq!(v1.free, 40960 * MIB - 512 * MIB - 2 * GIB);
    assert_eq!(old.running_compute_processes().unwrap()[0].pid, 7001);

    let locked = nvml.device_by_index(1).unwrap();
    assert_eq!(locked.memory_info().unwrap().used, 3 * GIB);
    assert!(matches!(
        locked.running_compute_processes(),
        Err(NvmlError::NoPermission)
    ));
    assert!(matches!(
        locked.running_graphics_processes(),
        Err(NvmlError::NoPermission)
    ));
    assert!(matches!(
        locked.mps_running_compute_processes(),
        Err(NvmlError::NoPermission)
    ));
    assert_eq!(locked.uuid().unwrap(), "GPU-9c1d2e3f-5a6b-4c7d-8e9f-0a1b2c3d4e5f");
}

scenario_test!(driver_not_loaded, "driver-not-loaded.toml", driver_not_loaded_body);
fn driver_not_loaded_body() {
    let path = lib_path();
    for attempt in 1..=3 {
        // Alternate the two init symbols: both count as attempts.
        let result = if attempt == 2 {
            nvml_wrapper::Nvml::builder()
                .lib_path(path.as_os_str())
                .flags(InitFlags::NO_GPUS)
                .init()
        } else {
            init()
        };
        assert!(matches!(result, Err(NvmlError::DriverNotLoaded)), "attempt {attempt}");
    }
    let nvml = init().expect("the 4th attempt succeeds");
    assert_eq!(nvml.device_count().unwrap(), 1);
    assert_eq!(
        nvml.device_by_index(0).unwrap().running_compute_processes().unwrap()[0].pid,
        8100
    );
    drop(nvml);
    let again = init().expect("later attempts keep succeeding");
    assert_eq!(again.device_count().unwrap(), 1);
    assert_eq!(poll(&again), 2);
}

scenario_test!(driver_upgrade, "driver-upgrade.toml", driver_upgrade_body);
fn driver_upgrade_body() {
    let nvml = init().unwrap();
    nvml.device_count().unwrap();
    let held = nvml.device_by_index(0).unwrap();
    for at in 2..=8 {
        assert_eq!(nvml.device_count().unwrap(), 2);
        assert_eq!(poll(&nvml), at);
        assert!(nvml.sys_driver_version().is_ok(), "system calls keep working");
        let expected = match at {
            4 | 5 => Some(NvmlError::LibRmVersionMismatch),
            6 => Some(NvmlError::Uninitialized),
            _ => None,
        };
        for index in 0..2 {
            let got = nvml.device_by_index(index).map(|_| ());
            match &expected {
                Some(e) => assert_eq!(got.unwrap_err().to_string(), e.to_string(), "poll {at}"),
                None => got.unwrap(),
            }
        }
        let memory = held.memory_info().map(|m| m.used);
        match &expected {
            Some(e) => assert_eq!(memory.unwrap_err().to_string(), e.to_string(), "poll {at}"),
            None => assert_eq!(memory.unwrap(), 9 * GIB),
        }
    }
}

scenario_test!(hang, "hang.toml", hang_body);
fn hang_body() {
    const HANG: Duration = Duration::from_secs(3);
    let nvml = init().unwrap();
    let (gpu0, gpu1) = (nvml.device_by_index(0).unwrap(), nvml.device_by_index(1).unwrap());
    for _ in 1..=2 {
        nvml.device_count().unwrap();
        let start = Instant::now();
        gpu0.memory_info().unwrap();
        assert!(start.elapsed() < Duration::from_secs(1), "polls 1-2 do not hang");
    }
    nvml.device_count().unwrap();
    assert_eq!(poll(&nvml), 3);
    std::thread::scope(|scope| {
        let stuck = scope.spawn(|| {
            let start = Instant::now();
            let memory = gpu0.memory_info();
            (start.elapsed(), memory)
        });
        wait_until("the memory call to hang", Duration::from_secs(10), || {
            hanging_calls(&nvml) == 1
        });
        let start = Instant::now();
        assert_eq!(gpu0.name().unwrap(), "NVIDIA H100 80GB HBM3");
        assert_eq!(gpu1.memory_info().unwrap().used, 0);
        assert_eq!(gpu0.running_compute_processes().unwrap()[0].pid, 1300);
        assert!(start.elapsed() < Duration::from_secs(1));
        assert_eq!(hanging_calls(&nvml), 1, "other calls finished while the hang slept");
        let (took, memory) = stuck.join().unwrap();
        assert!(took >= HANG, "hung only {took:?}");
        assert!(took < HANG * 10, "hung {took:?}");
        assert_eq!(memory.unwrap().used, 2 * GIB, "answers normally after the hang");
    });
    nvml.device_count().unwrap();
    let start = Instant::now();
    gpu0.memory_info().unwrap();
    assert!(start.elapsed() < Duration::from_secs(1), "poll 4 does not hang");
}
