//! Library-level exports: init and shutdown, error strings, system
//! versions, the device count (the poll clock) and handle lookup, plus two
//! `fake_nvml_*` hooks that exist only so tests can observe the fake.

use std::ffi::{CStr, c_char, c_int, c_uint};
use std::sync::atomic::Ordering;

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_t};

use super::{encode, put, put_str};
use crate::codes::{self, INVALID_ARGUMENT};
use crate::funcs::Func;
use crate::model::{DevRef, find_uuid};
use crate::runtime::{self, HANGING, call, guard};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    runtime::init()
}

/// Flags (NO_GPUS, NO_ATTACH) change nothing a fake fleet could show.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    runtime::init()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    runtime::shutdown()
}

/// Works without init, as NVML's does; the string is static.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    codes::message(result).as_ptr()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    call(Func::DriverVersion, &|_| Ok(None), |global, _| {
        let text = global.scenario().map_or("", |s| &s.driver_version);
        // SAFETY: NVML's contract: `version` holds `length` bytes.
        unsafe { put_str(version, length, text) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    call(Func::NvmlVersion, &|_| Ok(None), |global, _| {
        let text = global.scenario().map_or("", |s| &s.nvml_version);
        // SAFETY: NVML's contract: `version` holds `length` bytes.
        unsafe { put_str(version, length, text) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(cuda_driver_version: *mut c_int) -> nvmlReturn_t {
    call(Func::CudaVersion, &|_| Ok(None), |global, _| {
        let version = global.scenario().map_or(0, |s| s.cuda_driver_version);
        // SAFETY: NVML's contract: a valid out-pointer or null.
        unsafe { put(cuda_driver_version, version) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(cuda_driver_version: *mut c_int) -> nvmlReturn_t {
    // SAFETY: same contract as the _v2 symbol.
    unsafe { nvmlSystemGetCudaDriverVersion_v2(cuda_driver_version) }
}

/// Each call is one poll of the daemon: it advances the scenario's clock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> nvmlReturn_t {
    runtime::count(|global, _| {
        let count = c_uint::try_from(global.devices().len()).unwrap_or(c_uint::MAX);
        // SAFETY: NVML's contract: a valid out-pointer or null.
        unsafe { put(device_count, count) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    let resolve = move |global: &runtime::Global| {
        let dev = index as usize;
        let exists = dev < global.devices().len();
        exists
            .then_some(Some(DevRef { dev, slot: None }))
            .ok_or(INVALID_ARGUMENT)
    };
    call(Func::HandleByIndex, &resolve, |_, at| match at {
        // SAFETY: NVML's contract: a valid out-pointer or null.
        Some(at) => unsafe { put(device, encode(at)) },
        None => INVALID_ARGUMENT,
    })
}

/// Finds GPUs ("GPU-...") and MIG instances ("MIG-...") alike.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    if uuid.is_null() {
        return guard(|| INVALID_ARGUMENT);
    }
    // SAFETY: NVML's contract: a NUL-terminated string.
    let wanted = unsafe { CStr::from_ptr(uuid) }.to_string_lossy().into_owned();
    let resolve =
        move |global: &runtime::Global| find_uuid(global.devices(), &wanted).map(Some).ok_or(codes::NOT_FOUND);
    call(Func::HandleByUuid, &resolve, |_, at| match at {
        // SAFETY: NVML's contract: a valid out-pointer or null.
        Some(at) => unsafe { put(device, encode(at)) },
        None => codes::NOT_FOUND,
    })
}

/// Test hook, not NVML: how many calls are asleep in a hang right now.
#[unsafe(no_mangle)]
pub extern "C" fn fake_nvml_hanging_calls() -> c_uint {
    HANGING.load(Ordering::SeqCst)
}

/// Test hook, not NVML: the poll clock (count calls so far).
#[unsafe(no_mangle)]
pub extern "C" fn fake_nvml_poll() -> u64 {
    std::panic::catch_unwind(runtime::poll).unwrap_or(0)
}
