//! Memory-health exports: ECC mode and counters, remapped rows, retired
//! pages, the memory-temperature field value, and the event set that
//! delivers a scenario's `[[xid]]` events. Answers come from
//! `health::Plan` at the current poll; MIG instance handles answer
//! NOT_SUPPORTED (memory health belongs to the GPU). Waiting with no event
//! due sleeps for the timeout (at most `MAX_WAIT`) before TIMEOUT, as NVML
//! does, so a caller that passed a long timeout shows it as a slow poll.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_int, c_uint, c_ulonglong};
use std::sync::{Mutex, PoisonError};

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlEccCounterType_t, nvmlEnableState_t, nvmlEventData_t, nvmlEventSet_t, nvmlFieldValue_t,
    nvmlMemoryErrorType_t, nvmlPageRetirementCause_t, nvmlReturn_enum_NVML_ERROR_TIMEOUT, nvmlReturn_t,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT,
};

use super::{by_handle, encode, put};
use crate::codes::{INSUFFICIENT_SIZE, INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS};
use crate::funcs::Func;
use crate::health::{EccCounter, State};
use crate::model::DevRef;
use crate::runtime::{Global, call};

/// Single-bit ECC, double-bit ECC and critical Xid events.
const EVENT_TYPES: u64 = 0x1 | 0x2 | 0x8;
const XID_EVENT: u64 = 0x8;
/// `NVML_FI_DEV_MEMORY_TEMP`.
const FIELD_MEMORY_TEMP: u32 = 82;
const SET_TAG: usize = 0x5e70_0000_0000;
/// The longest a wait with nothing due sleeps: long enough that a poll
/// which waits shows it, short enough not to hang a test.
const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Default)]
struct Set {
    /// (GPU, event types, poll at registration).
    devices: Vec<(usize, u64, u64)>,
    /// Indices into the plan's `xids` already delivered to this set.
    delivered: HashSet<usize>,
}

#[derive(Default)]
struct Sets {
    next: usize,
    sets: HashMap<usize, Set>,
}

static SETS: Mutex<Option<Sets>> = Mutex::new(None);

fn with_sets<R>(f: impl FnOnce(&mut Sets) -> R) -> R {
    let mut guard = SETS.lock().unwrap_or_else(PoisonError::into_inner);
    f(guard.get_or_insert_with(Sets::default))
}

fn set_id(set: nvmlEventSet_t) -> Option<usize> {
    let raw = set.addr();
    (raw & !0xffff_ffff == SET_TAG).then_some(raw & 0xffff_ffff)
}

/// A health call about one handle: the GPU's state at the current poll.
fn on_health(func: Func, handle: nvmlDevice_t, answer: impl FnOnce(State) -> nvmlReturn_t) -> nvmlReturn_t {
    call(func, &by_handle(handle), |global, at| match at {
        None => INVALID_ARGUMENT,
        Some(DevRef { slot: Some(_), .. }) => NOT_SUPPORTED,
        Some(at) => answer(state(global, at.dev)),
    })
}

fn state(global: &Global, dev: usize) -> State {
    global
        .scenario()
        .map_or(State::UNKNOWN, |s| s.health.state(dev, global.poll))
}

fn enable(on: bool) -> nvmlEnableState_t {
    nvmlEnableState_t::from(on)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: nvmlDevice_t,
    current: *mut nvmlEnableState_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    on_health(Func::EccMode, device, |s| match s.ecc {
        None => NOT_SUPPORTED,
        // SAFETY: NVML's contract: valid out-pointers or null.
        Some(e) => match unsafe { put(current, enable(e.enabled)) } {
            SUCCESS => unsafe { put(pending, enable(e.pending)) },
            rc => rc,
        },
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    counter_type: nvmlEccCounterType_t,
    counts: *mut c_ulonglong,
) -> nvmlReturn_t {
    on_health(Func::EccErrors, device, |s| {
        let Some(e) = s.ecc.filter(|e| e.enabled) else {
            return NOT_SUPPORTED;
        };
        let (n, which) = match (error_type, counter_type) {
            (0, 0) => (e.corrected_volatile, EccCounter::CorrectedVolatile),
            (0, 1) => (e.corrected_aggregate, EccCounter::CorrectedAggregate),
            (1, 0) => (e.uncorrected_volatile, EccCounter::UncorrectedVolatile),
            (1, 1) => (e.uncorrected_aggregate, EccCounter::UncorrectedAggregate),
            _ => return INVALID_ARGUMENT,
        };
        if e.unsupported == Some(which) {
            return NOT_SUPPORTED;
        }
        // SAFETY: NVML's contract: a valid out-pointer or null.
        unsafe { put(counts, n) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: nvmlDevice_t,
    corr: *mut c_uint,
    unc: *mut c_uint,
    pending: *mut c_uint,
    failed: *mut c_uint,
) -> nvmlReturn_t {
    on_health(Func::RemappedRows, device, |s| {
        let Some(r) = s.remap else { return NOT_SUPPORTED };
        let outs = [
            (corr, r.correctable),
            (unc, r.uncorrectable),
            (pending, c_uint::from(r.pending)),
            (failed, c_uint::from(r.failed)),
        ];
        for (out, v) in outs {
            // SAFETY: NVML's contract: valid out-pointers or null.
            let rc = unsafe { put(out, v) };
            if rc != SUCCESS {
                return rc;
            }
        }
        SUCCESS
    })
}

/// Both retired-page calls: a count below the pages there are is answered
/// INSUFFICIENT_SIZE with the count needed, as NVML does.
unsafe fn retired(
    device: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> nvmlReturn_t {
    on_health(Func::RetiredPages, device, |s| {
        let Some(r) = s.retired else { return NOT_SUPPORTED };
        let pages = match cause {
            0 => r.single_bit,
            1 => r.double_bit,
            _ => return INVALID_ARGUMENT,
        };
        if count.is_null() {
            return INVALID_ARGUMENT;
        }
        // SAFETY: non-null, and NVML's contract says it is valid.
        let room = unsafe { count.read() };
        // SAFETY: as above.
        unsafe { count.write(pages) };
        if room < pages {
            return INSUFFICIENT_SIZE;
        }
        for i in 0..pages as usize {
            // SAFETY: the caller's buffers hold `room` >= `pages` entries.
            unsafe {
                if !addresses.is_null() {
                    addresses.add(i).write(0x1000 * (i as u64 + 1));
                }
                if !timestamps.is_null() {
                    timestamps.add(i).write(1_700_000_000_000_000);
                }
            }
        }
        SUCCESS
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages(
    device: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
) -> nvmlReturn_t {
    // SAFETY: forwarded under the same contract.
    unsafe { retired(device, cause, count, addresses, std::ptr::null_mut()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages_v2(
    device: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> nvmlReturn_t {
    // SAFETY: forwarded under the same contract.
    unsafe { retired(device, cause, count, addresses, timestamps) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    device: nvmlDevice_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    on_health(Func::RetiredPending, device, |s| match s.retired {
        None => NOT_SUPPORTED,
        // SAFETY: NVML's contract: a valid out-pointer or null.
        Some(r) => unsafe { put(pending, enable(r.pending)) },
    })
}

/// Answers the memory temperature; every other field is NOT_SUPPORTED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: nvmlDevice_t,
    count: c_int,
    values: *mut nvmlFieldValue_t,
) -> nvmlReturn_t {
    on_health(Func::FieldValues, device, |s| {
        let Ok(n) = usize::try_from(count) else {
            return INVALID_ARGUMENT;
        };
        if values.is_null() {
            return INVALID_ARGUMENT;
        }
        for i in 0..n {
            // SAFETY: the caller's array holds `count` entries.
            let v = unsafe { &mut *values.add(i) };
            match s.memory_temp.filter(|_| v.fieldId == FIELD_MEMORY_TEMP) {
                Some(t) => {
                    v.valueType = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT;
                    v.nvmlReturn = SUCCESS;
                    v.value.uiVal = t;
                }
                None => v.nvmlReturn = NOT_SUPPORTED,
            }
        }
        SUCCESS
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    types: *mut c_ulonglong,
) -> nvmlReturn_t {
    on_health(Func::EventTypes, device, |s| match s.events {
        false => NOT_SUPPORTED,
        // SAFETY: NVML's contract: a valid out-pointer or null.
        true => unsafe { put(types, EVENT_TYPES) },
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    call(Func::EventSetCreate, &|_| Ok(None), |_, _| {
        let id = with_sets(|s| {
            s.next += 1;
            s.sets.insert(s.next, Set::default());
            s.next
        });
        // SAFETY: NVML's contract: a valid out-pointer or null.
        unsafe { put(set, std::ptr::without_provenance_mut(SET_TAG | id)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    call(Func::RegisterEvents, &by_handle(device), |global, at| {
        let Some(at) = at.filter(|a| a.slot.is_none()) else {
            return NOT_SUPPORTED;
        };
        if !state(global, at.dev).events || types & !EVENT_TYPES != 0 {
            return NOT_SUPPORTED;
        }
        let poll = global.poll;
        with_sets(|s| match set_id(set).and_then(|id| s.sets.get_mut(&id)) {
            Some(set) => {
                set.devices.push((at.dev, types, poll));
                SUCCESS
            }
            None => INVALID_ARGUMENT,
        })
    })
}

/// Delivers the oldest due event for a GPU registered in `set`: one whose
/// poll has come, that arrived after the registration, not yet delivered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeout_ms: c_uint,
) -> nvmlReturn_t {
    let rc = wait_once(set, data);
    if rc == nvmlReturn_enum_NVML_ERROR_TIMEOUT {
        // Outside the library's lock, so other calls go on meanwhile.
        std::thread::sleep(MAX_WAIT.min(std::time::Duration::from_millis(timeout_ms.into())));
    }
    rc
}

/// The due event, or TIMEOUT at once.
fn wait_once(set: nvmlEventSet_t, data: *mut nvmlEventData_t) -> nvmlReturn_t {
    call(Func::EventSetWait, &|_| Ok(None), |global, _| {
        let poll = global.poll;
        let xids = global.scenario().map(|s| s.health.xids.clone()).unwrap_or_default();
        let due = with_sets(|s| {
            let set = set_id(set).and_then(|id| s.sets.get_mut(&id))?;
            let (i, x) = xids.iter().enumerate().find(|(i, x)| {
                x.poll <= poll
                    && !set.delivered.contains(i)
                    && set
                        .devices
                        .iter()
                        .any(|&(d, t, at)| d == x.device && t & XID_EVENT != 0 && x.poll > at)
            })?;
            set.delivered.insert(i);
            Some(*x)
        });
        let Some(x) = due else {
            return nvmlReturn_enum_NVML_ERROR_TIMEOUT;
        };
        let event = nvmlEventData_t {
            device: encode(DevRef {
                dev: x.device,
                slot: None,
            }),
            eventType: XID_EVENT,
            eventData: x.code,
            gpuInstanceId: u32::MAX,
            computeInstanceId: u32::MAX,
        };
        // SAFETY: NVML's contract: a valid out-pointer or null.
        unsafe { put(data, event) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    call(Func::EventSetFree, &|_| Ok(None), |_, _| {
        let gone = with_sets(|s| set_id(set).and_then(|id| s.sets.remove(&id)));
        if gone.is_some() { SUCCESS } else { INVALID_ARGUMENT }
    })
}
