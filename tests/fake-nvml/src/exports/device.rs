//! Per-device exports: identity (UUID, name, PCI, index), memory (v1 and
//! v2) and MIG topology. MIG instance handles answer identity and memory
//! for the instance and PCI/index for their parent GPU.

use std::ffi::{c_char, c_uint};

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlPciInfo_t, nvmlReturn_t};

use super::{by_handle, encode, put, put_str};
use crate::codes::{ARGUMENT_VERSION_MISMATCH, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED};
use crate::funcs::Func;
use crate::model::{DevRef, Device};
use crate::runtime::call;

/// NVML_STRUCT_VERSION(Memory, 2), which the caller must have set.
const MEMORY_V2_VERSION: u32 = size_of::<nvmlMemory_v2_t>() as u32 | (2 << 24);

/// A call about one device handle; `answer` sees the device and which part.
pub(super) fn on_device(
    func: Func,
    handle: nvmlDevice_t,
    answer: impl FnOnce(&Device, DevRef) -> nvmlReturn_t,
) -> nvmlReturn_t {
    call(func, &by_handle(handle), |global, at| {
        match at.and_then(|at| Some((global.devices().get(at.dev)?, at))) {
            Some((device, at)) => answer(device, at),
            None => INVALID_ARGUMENT,
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> nvmlReturn_t {
    on_device(Func::Uuid, device, |d, at| {
        let text = at.slot.and_then(|s| d.instance(s)).map_or(&d.uuid, |i| &i.uuid);
        // SAFETY: NVML's contract: `uuid` holds `length` bytes.
        unsafe { put_str(uuid, length, text) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) -> nvmlReturn_t {
    on_device(Func::Name, device, |d, at| {
        let text = at.slot.and_then(|s| d.instance(s)).map_or(&d.name, |i| &i.name);
        // SAFETY: NVML's contract: `name` holds `length` bytes.
        unsafe { put_str(name, length, text) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    on_device(Func::PciInfo, device, |d, _| {
        let mut info = nvmlPciInfo_t {
            busIdLegacy: [0; 16],
            domain: d.pci.domain,
            bus: d.pci.bus,
            device: d.pci.device,
            pciDeviceId: d.pci.pci_device_id,
            pciSubSystemId: d.pci.pci_subsystem_id,
            busId: [0; 32],
        };
        let legacy = format!("{:04X}:{:02X}:{:02X}.0", d.pci.domain & 0xffff, d.pci.bus, d.pci.device);
        for (dst, src) in info.busId.iter_mut().zip(d.pci.bus_id.bytes().take(31)) {
            *dst = src as c_char;
        }
        for (dst, src) in info.busIdLegacy.iter_mut().zip(legacy.bytes().take(15)) {
            *dst = src as c_char;
        }
        // SAFETY: NVML's contract: a valid out-pointer or null.
        unsafe { put(pci, info) }
    })
}

/// A MIG instance answers its parent's index.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) -> nvmlReturn_t {
    on_device(Func::Index, device, |_, at| {
        // SAFETY: NVML's contract: a valid out-pointer or null.
        unsafe { put(index, c_uint::try_from(at.dev).unwrap_or(c_uint::MAX)) }
    })
}

/// v1 has no `reserved`: as on current drivers, it is folded into `used`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: nvmlDevice_t, memory: *mut nvmlMemory_t) -> nvmlReturn_t {
    on_device(Func::MemoryV1, device, |d, at| {
        let Some(r) = d.reading(at.slot) else {
            return INVALID_ARGUMENT;
        };
        let info = nvmlMemory_t {
            total: r.total,
            free: r.free,
            used: r.reserved.saturating_add(r.used),
        };
        // SAFETY: NVML's contract: a valid out-pointer or null.
        unsafe { put(memory, info) }
    })
}

/// Rejects a caller that forgot the struct version, as NVML does, so the
/// daemon's use of nvml-wrapper is checked too.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    on_device(Func::MemoryV2, device, |d, at| {
        if memory.is_null() {
            return INVALID_ARGUMENT;
        }
        // SAFETY: non-null; NVML's contract makes it a valid struct.
        if unsafe { (*memory).version } != MEMORY_V2_VERSION {
            return ARGUMENT_VERSION_MISMATCH;
        }
        let Some(r) = d.reading(at.slot) else {
            return INVALID_ARGUMENT;
        };
        let info = nvmlMemory_v2_t {
            version: MEMORY_V2_VERSION,
            total: r.total,
            reserved: r.reserved,
            free: r.free,
            used: r.used,
        };
        // SAFETY: as above.
        unsafe { put(memory, info) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current_mode: *mut c_uint,
    pending_mode: *mut c_uint,
) -> nvmlReturn_t {
    on_device(Func::MigMode, device, |d, at| {
        if !d.mig_capable || at.slot.is_some() {
            return NOT_SUPPORTED;
        }
        if current_mode.is_null() || pending_mode.is_null() {
            return INVALID_ARGUMENT;
        }
        let mode = c_uint::from(d.mig.is_some());
        // SAFETY: both checked non-null; NVML's contract does the rest.
        unsafe {
            put(current_mode, mode);
            put(pending_mode, mode)
        }
    })
}

/// NVML documents 0 when MIG is unsupported or disabled.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: nvmlDevice_t, count: *mut c_uint) -> nvmlReturn_t {
    on_device(Func::MigCount, device, |d, at| {
        if at.slot.is_some() {
            return NOT_SUPPORTED;
        }
        // SAFETY: NVML's contract: a valid out-pointer or null.
        unsafe { put(count, d.mig.as_ref().map_or(0, |m| m.max_devices)) }
    })
}

/// Slots below the maximum with no instance are NOT_FOUND, which is how
/// callers walking 0..max learn which instances exist.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig_device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    on_device(Func::MigHandle, device, |d, at| {
        let Some(mig) = d.mig.as_ref().filter(|_| at.slot.is_none()) else {
            return NOT_SUPPORTED;
        };
        if index >= mig.max_devices {
            return INVALID_ARGUMENT;
        }
        if d.instance(index).is_none() {
            return NOT_FOUND;
        }
        let handle = encode(DevRef {
            dev: at.dev,
            slot: Some(index),
        });
        // SAFETY: NVML's contract: a valid out-pointer or null.
        unsafe { put(mig_device, handle) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: nvmlDevice_t, is_mig_device: *mut c_uint) -> nvmlReturn_t {
    on_device(Func::IsMig, device, |_, at| {
        // SAFETY: NVML's contract: a valid out-pointer or null.
        unsafe { put(is_mig_device, c_uint::from(at.slot.is_some())) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    on_device(Func::MigParent, mig_device, |_, at| match at.slot {
        // SAFETY: NVML's contract: a valid out-pointer or null.
        Some(_) => unsafe {
            put(
                device,
                encode(DevRef {
                    dev: at.dev,
                    slot: None,
                }),
            )
        },
        None => INVALID_ARGUMENT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_version_matches_nvml_wrapper() {
        // nvml-wrapper computes size_of | 2 << 24 on its side; the v2 struct
        // is 40 bytes with padding after the u32 version.
        assert_eq!(MEMORY_V2_VERSION, 40 | (2 << 24));
    }
}
