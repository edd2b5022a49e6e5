//! Process exports: the three running-process lists (v3 structs) and the
//! per-process utilisation samples, with NVML's two-call sizing protocol
//! (ask with a null buffer, get INSUFFICIENT_SIZE and the count, call again).

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{
    NVML_VALUE_NOT_AVAILABLE, nvmlDevice_t, nvmlProcessInfo_t, nvmlProcessUtilizationSample_t, nvmlReturn_t,
    nvmlUtilization_t,
};

use super::by_handle;
use super::device::on_device;
use crate::codes::{INSUFFICIENT_SIZE, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, SUCCESS};
use crate::funcs::Func;
use crate::model::ListKind;
use crate::runtime::call;

/// One second of the fake's utilisation clock per poll, in microseconds.
const POLL_US: u64 = 1_000_000;

/// Hands out `entries` by the sizing protocol: `*count` is the caller's
/// capacity on the way in and the number of entries on the way out.
///
/// # Safety
/// `count` is null or valid; `buffer` is null or holds `*count` items.
unsafe fn hand_out<T>(count: *mut c_uint, buffer: *mut T, entries: Vec<T>) -> nvmlReturn_t {
    if count.is_null() {
        return INVALID_ARGUMENT;
    }
    let needed = c_uint::try_from(entries.len()).unwrap_or(c_uint::MAX);
    // SAFETY: checked non-null; the caller vouches for validity.
    let capacity = unsafe { count.replace(needed) };
    if needed == 0 {
        return SUCCESS;
    }
    if buffer.is_null() || capacity < needed {
        return INSUFFICIENT_SIZE;
    }
    for (i, entry) in entries.into_iter().enumerate() {
        // SAFETY: i < needed <= capacity, the buffer's size.
        unsafe { buffer.add(i).write(entry) };
    }
    SUCCESS
}

fn list(
    func: Func,
    kind: ListKind,
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    on_device(func, device, |d, at| {
        let entries = d
            .list(at.slot, kind)
            .into_iter()
            .map(|(p, gpu_instance, compute_instance)| nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: p.used.unwrap_or(NVML_VALUE_NOT_AVAILABLE as u64),
                gpuInstanceId: gpu_instance,
                computeInstanceId: compute_instance,
            })
            .collect();
        // SAFETY: NVML's contract for infoCount/infos.
        unsafe { hand_out(count, infos, entries) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    list(Func::ComputeProcesses, ListKind::Compute, device, info_count, infos)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    list(Func::GraphicsProcesses, ListKind::Graphics, device, info_count, infos)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    list(Func::MpsProcesses, ListKind::Mps, device, info_count, infos)
}

/// One sample per process with `sm_util`, stamped with the current poll;
/// NOT_FOUND when none is newer than `last_seen_time_stamp` and NOT_SUPPORTED
/// under MIG, both as real NVML answers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    process_samples_count: *mut c_uint,
    last_seen_time_stamp: u64,
) -> nvmlReturn_t {
    call(Func::ProcessUtilization, &by_handle(device), |global, at| {
        let Some((d, at)) = at.and_then(|at| Some((global.devices().get(at.dev)?, at))) else {
            return INVALID_ARGUMENT;
        };
        if at.slot.is_some() || d.mig.is_some() {
            return NOT_SUPPORTED;
        }
        let epoch = global.scenario().map_or(0, |s| s.utilization_epoch_us);
        let stamp = epoch.saturating_add(global.poll.saturating_mul(POLL_US));
        let samples: Vec<_> = d
            .holder
            .processes
            .iter()
            .filter(|_| stamp > last_seen_time_stamp)
            .filter_map(|p| {
                Some(nvmlProcessUtilizationSample_t {
                    pid: p.pid,
                    timeStamp: stamp,
                    smUtil: p.sm_util?,
                    memUtil: p.mem_util,
                    encUtil: 0,
                    decUtil: 0,
                })
            })
            .collect();
        if samples.is_empty() {
            return NOT_FOUND;
        }
        // SAFETY: NVML's contract for processSamplesCount/utilization.
        unsafe { hand_out(process_samples_count, utilization, samples) }
    })
}

/// The device's busiest process's `sm_util` (and `mem_util`) as its
/// utilisation over the last sample period, 0 with none; NOT_SUPPORTED
/// under MIG, as real NVML answers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    call(Func::UtilizationRates, &by_handle(device), |global, at| {
        let Some((d, at)) = at.and_then(|at| Some((global.devices().get(at.dev)?, at))) else {
            return INVALID_ARGUMENT;
        };
        if at.slot.is_some() || d.mig.is_some() {
            return NOT_SUPPORTED;
        }
        if utilization.is_null() {
            return INVALID_ARGUMENT;
        }
        let busiest = |f: fn(&crate::model::Process) -> u32| d.holder.processes.iter().map(f).max().unwrap_or(0);
        let rates = nvmlUtilization_t {
            gpu: busiest(|p| p.sm_util.unwrap_or(0)),
            memory: busiest(|p| p.mem_util),
        };
        // SAFETY: checked non-null above; NVML's contract is one struct.
        unsafe { utilization.write(rates) };
        SUCCESS
    })
}
