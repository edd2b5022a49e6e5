//! The memory-health reads of the NVML source: ECC mode and counters, row
//! remapping, retired pages and memory temperature per GPU, at the
//! `[health]` rate, and the critical-Xid event set, drained with a
//! zero timeout each poll so it never blocks the poll. Part of the NVML
//! source (it may name `nvml_wrapper`); it must not decide whether a device
//! is up nor keep Xid totals (the pipeline does).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use nvml_wrapper::Device;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper_sys::bindings::{
    field_id::NVML_FI_DEV_MEMORY_TEMP, nvmlEventData_t, nvmlEventSet_t, nvmlEventTypeXidCriticalError,
};

use super::describe;
use super::errors::symbol;
use super::topology::Handle;
use crate::collect::health::HealthConfig;
use crate::collect::source::RawDevice;
use crate::data::snapshot::health::{Ecc, EccCounts, Health, Remap, Retired};

/// At most this many events are taken per poll, so a storm of events cannot
/// stretch a poll; the rest wait in NVML's queue for the next one.
const MAX_EVENTS_PER_POLL: usize = 256;

/// The events asked for: every critical Xid. Not the single- and
/// double-bit ECC event types: the ECC counters, read each poll by default,
/// already count those errors, a double-bit error also raises Xid 48, and
/// a stream of single-bit events would only be read and dropped
/// (docs/design.md, "Memory health").
const WANTED: u64 = nvmlEventTypeXidCriticalError as u64;

/// Parts a GPU answered NOT_SUPPORTED for: not asked again until NVML is
/// initialised again (support cannot change while the driver stays loaded).
#[derive(Debug, Clone, Copy, Default)]
struct Unsupported {
    ecc: bool,
    remap: bool,
    retired: bool,
    temperature: bool,
}

#[derive(Debug, Default)]
struct PerDevice {
    last: Option<(Instant, Health)>,
    unsupported: Unsupported,
    /// ECC mode (current, pending) and when it was read.
    ecc_mode: Option<(Instant, bool, bool)>,
}

/// How long an ECC mode reading is reused. The mode changes only when a
/// GPU is reset (a pending change takes effect then), and the call is the
/// one costly health read: about 157 us on the H200 (driver 580), against
/// 2-3 us for every other (BENCHMARKS.md, "Memory health reads").
const ECC_MODE_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// NVML's event set handle. Only the poller thread ever uses it.
struct EventSet(nvmlEventSet_t);

// SAFETY: the handle is an opaque token NVML accepts from any thread; the
// source that owns it is used by one thread at a time.
unsafe impl Send for EventSet {}

/// Health reads and the event set, owned by `NvmlSource`.
#[derive(Default)]
pub(super) struct HealthReader {
    cfg: HealthConfig,
    devices: HashMap<String, PerDevice>,
    events: Option<EventSet>,
    /// Device handle (as an address) -> UUID, for the GPUs registered.
    registered: HashMap<usize, String>,
    /// The UUIDs of `registered`.
    watched: HashSet<String>,
    /// GPUs whose registration failed for good (e.g. not supported).
    refused: HashMap<String, String>,
}

impl HealthReader {
    pub(super) fn new(cfg: HealthConfig) -> Self {
        Self { cfg, ..Self::default() }
    }

    /// Reads health for every GPU of `devices` that is up (MIG instances
    /// share their GPU's memory health), and this poll's events. `handles`
    /// are the poll's own (by index), so no handle is fetched twice a poll.
    pub(super) fn read_all(&mut self, nvml: &Nvml, handles: &[(u32, Handle)], devices: &mut [RawDevice]) {
        if !self.cfg.enabled && !self.cfg.xid_events {
            return;
        }
        let now = Instant::now();
        let mut seen = HashSet::new();
        for dev in devices
            .iter_mut()
            .filter(|d| d.device.up && d.device.parent_uuid.is_empty())
        {
            let Some(index) = dev.device.index else { continue };
            // A GPU that is up was read whole this poll, so its handle is here.
            let Some((_, handle)) = handles.iter().find(|(i, _)| *i == index) else {
                continue;
            };
            let device = handle.device(nvml);
            let mut h = if self.cfg.enabled {
                self.read_one(&device, &dev.device.uuid, now, &mut dev.device.errors)
            } else {
                Health::default()
            };
            if self.cfg.xid_events {
                self.register(nvml, &device, &dev.device.uuid, &mut dev.device.errors);
                h.xid_watched = self.watched.contains(&dev.device.uuid);
            }
            dev.device.health = Some(h);
            seen.insert(dev.device.uuid.clone());
        }
        self.devices.retain(|uuid, _| seen.contains(uuid));
        if self.cfg.xid_events {
            self.drain(nvml, devices);
        }
    }

    /// The device's health: the last reading while younger than the
    /// configured interval, else a new one.
    fn read_one(&mut self, device: &Device<'_>, uuid: &str, now: Instant, errors: &mut Vec<String>) -> Health {
        let per = self.devices.entry(uuid.to_string()).or_default();
        if let (Some(every), Some((at, h))) = (self.cfg.interval, &per.last)
            && now.duration_since(*at) < every.get()
        {
            return h.clone();
        }
        let h = read_health(device, per, now, errors);
        per.last = Some((now, h.clone()));
        h
    }

    /// Creates the event set once and registers each GPU once.
    fn register(&mut self, nvml: &Nvml, device: &Device<'_>, uuid: &str, errors: &mut Vec<String>) {
        if self.refused.contains_key(uuid) {
            return;
        }
        // SAFETY: the handle stays valid while NVML stays initialised; it is
        // only compared, never dereferenced.
        let key = unsafe { device.handle() }.addr();
        if self.registered.contains_key(&key) {
            return;
        }
        let result = self.ensure_set(nvml).and_then(|set| register_raw(nvml, device, set));
        match result {
            Ok(()) => {
                self.registered.insert(key, uuid.to_string());
                self.watched.insert(uuid.to_string());
            }
            Err(e) => {
                let why = format!("xid events: {}", describe(&e));
                errors.push(why.clone());
                if matches!(e, NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) {
                    self.refused.insert(uuid.to_string(), why);
                }
            }
        }
    }

    fn ensure_set(&mut self, nvml: &Nvml) -> Result<nvmlEventSet_t, NvmlError> {
        if let Some(s) = &self.events {
            return Ok(s.0);
        }
        let sym = symbol(&nvml.lib().nvmlEventSetCreate)?;
        let mut set: nvmlEventSet_t = std::ptr::null_mut();
        // SAFETY: the symbol's signature comes from the bindings; `set` is a
        // valid out-pointer.
        nvml_try(unsafe { sym(&mut set) })?;
        self.events = Some(EventSet(set));
        Ok(set)
    }

    /// Takes the events waiting now (zero timeout: never blocks) and adds
    /// their Xid codes to the devices they came from.
    fn drain(&mut self, nvml: &Nvml, devices: &mut [RawDevice]) {
        let Some(set) = &self.events else { return };
        let Ok(wait) = nvml.lib().nvmlEventSetWait_v2.as_ref() else {
            return;
        };
        for _ in 0..MAX_EVENTS_PER_POLL {
            // SAFETY: plain-data out-struct zeroed first; `set` is live.
            let mut data: nvmlEventData_t = unsafe { std::mem::zeroed() };
            let rc = unsafe { wait(set.0, &mut data, 0) };
            if nvml_try(rc).is_err() {
                // Timeout: nothing more waiting. Any other error is retried
                // next poll; the count is not lost, NVML keeps the queue.
                return;
            }
            let Some(uuid) = self.registered.get(&data.device.addr()) else {
                continue;
            };
            let Some(dev) = devices.iter_mut().find(|d| &d.device.uuid == uuid) else {
                continue;
            };
            if data.eventType & u64::from(nvmlEventTypeXidCriticalError) != 0 {
                dev.xid_events.push(data.eventData);
            }
        }
    }

    /// Frees the event set while NVML is still initialised.
    pub(super) fn release(&mut self, nvml: &Nvml) {
        if let (Some(set), Ok(free)) = (self.events.take(), nvml.lib().nvmlEventSetFree.as_ref()) {
            // SAFETY: the set was created by this library and is freed once.
            let _ = unsafe { free(set.0) };
        }
        self.forget();
    }

    /// Forgets handles after the driver went away (they are invalid now).
    pub(super) fn forget(&mut self) {
        self.events = None;
        self.registered.clear();
        self.watched.clear();
        self.refused.clear();
        self.devices.clear();
    }
}

fn register_raw(nvml: &Nvml, device: &Device<'_>, set: nvmlEventSet_t) -> Result<(), NvmlError> {
    let supported = device.supported_event_types().map(|t| t.bits()).unwrap_or(WANTED);
    let wanted = supported & WANTED;
    if wanted == 0 {
        return Err(NvmlError::NotSupported);
    }
    let sym = symbol(&nvml.lib().nvmlDeviceRegisterEvents)?;
    // SAFETY: a live device handle and event set; the signature is the bindings'.
    nvml_try(unsafe { sym(device.handle(), wanted, set) })
}

/// One full health reading. NOT_SUPPORTED leaves a part absent and is
/// remembered; other errors leave it absent this time and are recorded.
fn read_health(device: &Device<'_>, per: &mut PerDevice, now: Instant, errors: &mut Vec<String>) -> Health {
    let u = &mut per.unsupported;
    Health {
        ecc: part(&mut u.ecc, "ecc", errors, || read_ecc(device, &mut per.ecc_mode, now)),
        remap: part(&mut u.remap, "remapped rows", errors, || read_remap(device)),
        retired: part(&mut u.retired, "retired pages", errors, || read_retired(device)),
        memory_temperature_celsius: part(&mut u.temperature, "memory temperature", errors, || {
            memory_temperature(device)
        }),
        ..Health::default()
    }
}

/// One part of a health reading, unless `unsupported` (set here when the
/// GPU answers that it cannot tell); another error is recorded as `what`.
fn part<T>(
    unsupported: &mut bool,
    what: &str,
    errors: &mut Vec<String>,
    read: impl FnOnce() -> Result<T, NvmlError>,
) -> Option<T> {
    if *unsupported {
        return None;
    }
    match read() {
        Ok(v) => return Some(v),
        Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => *unsupported = true,
        Err(e) => errors.push(format!("{what}: {}", describe(&e))),
    }
    None
}

/// NOT_SUPPORTED as an absent figure; any other error stands.
fn optional<T>(read: Result<T, NvmlError>) -> Result<Option<T>, NvmlError> {
    match read {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => Err(e),
    }
}

fn read_ecc(device: &Device<'_>, cached: &mut Option<(Instant, bool, bool)>, now: Instant) -> Result<Ecc, NvmlError> {
    let (current, pending) = match *cached {
        Some((at, current, pending)) if now.duration_since(at) < ECC_MODE_EVERY => (current, pending),
        _ => {
            let mode = device.is_ecc_enabled()?;
            *cached = Some((now, mode.currently_enabled, mode.pending_enabled));
            (mode.currently_enabled, mode.pending_enabled)
        }
    };
    let mut ecc = Ecc {
        enabled: current,
        pending_enabled: pending,
        ..Ecc::default()
    };
    // With ECC off the counters do not count; they stay absent.
    if current {
        let count = |t: MemoryError, c: EccCounter| optional(device.total_ecc_errors(t, c));
        ecc.corrected = EccCounts {
            volatile: count(MemoryError::Corrected, EccCounter::Volatile)?,
            aggregate: count(MemoryError::Corrected, EccCounter::Aggregate)?,
        };
        ecc.uncorrected = EccCounts {
            volatile: count(MemoryError::Uncorrected, EccCounter::Volatile)?,
            aggregate: count(MemoryError::Uncorrected, EccCounter::Aggregate)?,
        };
    }
    Ok(ecc)
}

/// nvml-wrapper 0.13 has no wrapper for `nvmlDeviceGetRemappedRows`.
fn read_remap(device: &Device<'_>) -> Result<Remap, NvmlError> {
    let sym = symbol(&device.nvml().lib().nvmlDeviceGetRemappedRows)?;
    let (mut corr, mut unc, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: a live handle and four valid out-pointers.
    nvml_try(unsafe { sym(device.handle(), &mut corr, &mut unc, &mut pending, &mut failed) })?;
    Ok(Remap {
        correctable: u64::from(corr),
        uncorrectable: u64::from(unc),
        pending: pending != 0,
        failed: failed != 0,
    })
}

/// Page counts by cause, asked as a size query (no address buffers).
fn read_retired(device: &Device<'_>) -> Result<Retired, NvmlError> {
    let sym = symbol(&device.nvml().lib().nvmlDeviceGetRetiredPages)?;
    let count = |cause: u32| -> Result<u64, NvmlError> {
        let mut n: u32 = 0;
        let mut addr: u64 = 0;
        // SAFETY: a live handle; a zero count means "size query", and the
        // address pointer is valid (NVML asks for non-null).
        let rc = unsafe { sym(device.handle(), cause, &mut n, &mut addr) };
        match nvml_try(rc) {
            Ok(()) | Err(NvmlError::InsufficientSize(_)) => Ok(u64::from(n)),
            Err(e) => Err(e),
        }
    };
    let single_bit = count(0)?;
    let double_bit = count(1)?;
    let pending = optional(device.are_pages_pending_retired())?;
    Ok(Retired {
        single_bit: Some(single_bit),
        double_bit: Some(double_bit),
        pending,
    })
}

fn memory_temperature(device: &Device<'_>) -> Result<u32, NvmlError> {
    let samples = device.field_values_for(&[FieldId(NVML_FI_DEV_MEMORY_TEMP)])?;
    let sample = samples.into_iter().next().ok_or(NvmlError::NotSupported)??;
    match sample.value? {
        SampleValue::U32(v) => Ok(v),
        SampleValue::U64(v) => u32::try_from(v).map_err(|_| NvmlError::NotSupported),
        SampleValue::I64(v) => u32::try_from(v).map_err(|_| NvmlError::NotSupported),
        SampleValue::F64(v) if (0.0..1000.0).contains(&v) => Ok(v as u32),
        SampleValue::F64(_) => Err(NvmlError::NotSupported),
    }
}
