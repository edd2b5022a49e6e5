//! `NvmlSource`: the only code that names `nvml_wrapper`. It owns the NVML
//! handle (initialised lazily, re-initialised with backoff after the driver
//! goes away), reads every device once per poll and maps each NVML error once,
//! per field or per device, so one failing GPU or field never fails the poll.
//! The device list (count, handles, UUIDs) is kept between polls
//! (`topology.rs`); what a GPU holds is read every poll.
//! It must not read /proc or build snapshots; it returns plain `RawPoll` data.

use std::collections::HashMap;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use nvml_wrapper::Device;
use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

mod errors;
mod gate;
mod health;
mod idle;
mod memo;
mod mig;
mod reads;
mod topology;

use errors::{describe, is_device_fatal};
use errors::{init_error, needs_reinit};
use memo::Memo;
use reads::read_memory;
use topology::{Handle, Topology};

use super::{GpuSource, PollErrorReason, RawDevice, RawPoll, SourceError, Utilization};
use crate::data::snapshot::DriverInfo;

const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Static facts about a device, read once per UUID because they cannot change
/// while the GPU stays on the bus.
#[derive(Debug, Clone, Default)]
struct Identity {
    name: String,
    pci_bus_id: String,
}

/// What the source keeps per device between polls (`read_device` updates it).
#[derive(Default)]
struct Known {
    /// UUID per index from earlier polls, so a GPU that is lost now is still
    /// reported under its UUID with `up = false`.
    uuid_by_index: HashMap<u32, String>,
    identity: HashMap<String, Identity>,
    /// Newest utilisation sample timestamp per device, so each sample is
    /// returned once.
    util_seen: HashMap<String, u64>,
    /// The costly, rarely changing answers per device (by UUID).
    memo: HashMap<String, Memo>,
}

/// Reads GPUs through NVML.
pub struct NvmlSource {
    library: OsString,
    nvml: Option<Nvml>,
    driver: Option<DriverInfo>,
    next_init: Option<Instant>,
    backoff: Duration,
    /// Why the last initialisation failed, repeated while backing off.
    last_error: String,
    known: Known,
    /// Polls made, for the memo's re-read schedule.
    polls: u64,
    /// The device count, handles and UUIDs, kept between polls.
    topology: Topology,
    /// Memory health reads and the Xid event set (`[health]`).
    health: health::HealthReader,
    /// The pipeline saw a listed process leave: read every list next poll
    /// (`gate.rs`).
    refresh_lists: bool,
}

impl NvmlSource {
    /// Creates a source for `library` (a file name for the loader or a path).
    /// Nothing is loaded until the first poll.
    pub fn new(library: impl Into<OsString>) -> Self {
        Self {
            library: library.into(),
            nvml: None,
            driver: None,
            next_init: None,
            backoff: BACKOFF_MIN,
            last_error: String::new(),
            known: Known::default(),
            polls: 0,
            topology: Topology::default(),
            health: health::HealthReader::new(crate::collect::health::HealthConfig::default()),
            refresh_lists: false,
        }
    }

    /// Reads memory health and Xid events as `cfg` says (default: on).
    pub fn with_health(mut self, cfg: crate::collect::health::HealthConfig) -> Self {
        self.health = health::HealthReader::new(cfg);
        self
    }

    fn ensure_init(&mut self) -> Result<(), SourceError> {
        if self.nvml.is_some() {
            return Ok(());
        }
        if self.next_init.is_some_and(|t| Instant::now() < t) {
            return Err(SourceError::Unavailable(self.last_error.clone()));
        }
        match Nvml::builder().lib_path(&self.library).init() {
            Ok(nvml) => {
                self.driver = Some(driver_info(&nvml));
                self.nvml = Some(nvml);
                self.next_init = None;
                self.backoff = BACKOFF_MIN;
                Ok(())
            }
            Err(e) => {
                self.last_error = init_error(&self.library, &e);
                self.next_init = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                Err(SourceError::Unavailable(self.last_error.clone()))
            }
        }
    }

    /// Drops the handle after the driver went away under us, so the next
    /// poll re-initialises (with backoff) instead of failing forever.
    fn reset(&mut self, why: &NvmlError) -> SourceError {
        self.nvml = None;
        self.health.forget();
        // After re-initialisation the index order may differ; an old map
        // could report a failing GPU under another GPU's UUID.
        self.known.uuid_by_index.clear();
        // A re-initialised driver may come back with another MIG layout,
        // and the old handles are invalid.
        self.known.memo.clear();
        self.topology.forget();
        self.next_init = Some(Instant::now() + self.backoff);
        self.last_error = format!("the driver went away ({}); re-initialising", describe(why));
        SourceError::Unavailable(self.last_error.clone())
    }
}

impl GpuSource for NvmlSource {
    fn note_departure(&mut self) {
        self.refresh_lists = true;
    }

    fn poll(&mut self, sample_utilization: bool) -> Result<RawPoll, SourceError> {
        self.ensure_init()?;
        let Some(nvml) = self.nvml.as_ref() else {
            return Err(SourceError::Unavailable("NVML handle missing".into()));
        };
        let poll = self.polls + 1;
        let kept = self.topology.count(poll);
        let count = match kept.map_or_else(|| nvml.device_count(), Ok) {
            Ok(n) => n,
            Err(e) if needs_reinit(&e) => return Err(self.reset(&e)),
            Err(e) => {
                return Err(SourceError::Failed {
                    reason: PollErrorReason::Failed,
                    message: format!("device count: {}", describe(&e)),
                });
            }
        };
        let mut utilization = sample_utilization.then(Utilization::new);
        self.polls = poll;
        let mut ctx = PollCtx {
            known: &mut self.known,
            poll,
            utilization: utilization.as_mut(),
            refresh: std::mem::take(&mut self.refresh_lists),
        };
        let kept_list = kept.is_some().then_some(&self.topology);
        let Sweep {
            mut devices,
            handles,
            failed,
            reinit,
        } = read_devices(nvml, count, kept_list, &mut ctx);
        if let Some(e) = reinit {
            return Err(self.reset(&e));
        }
        if failed {
            // Read the whole list again next poll: a GPU that fell off the
            // bus must be found by its handle call, as NVML reports it.
            self.topology.forget();
        } else if kept.is_none() {
            let list = handles
                .iter()
                .filter_map(|(i, h)| Some((*h, self.known.uuid_by_index.get(i)?.clone())))
                .collect();
            self.topology.keep(list, poll);
        }
        self.health.read_all(nvml, &handles, &mut devices);
        Ok(RawPoll {
            driver: self.driver.clone(),
            devices,
            utilization,
        })
    }
}

impl Drop for NvmlSource {
    fn drop(&mut self) {
        if let Some(nvml) = &self.nvml {
            self.health.release(nvml);
        }
    }
}

/// What one pass over the devices found.
struct Sweep {
    devices: Vec<RawDevice>,
    /// The handle of each GPU read whole, by index.
    handles: Vec<(u32, Handle)>,
    /// Some GPU failed as a whole (it is in `devices` marked down).
    failed: bool,
    /// The error after which NVML must be initialised again; the pass
    /// stopped there.
    reinit: Option<NvmlError>,
}

/// Reads GPUs `0..count`, through the kept handles of `kept` when given.
fn read_devices(nvml: &Nvml, count: u32, kept: Option<&Topology>, ctx: &mut PollCtx<'_>) -> Sweep {
    let mut sweep = Sweep {
        devices: Vec::with_capacity(count as usize),
        handles: Vec::with_capacity(count as usize),
        failed: false,
        reinit: None,
    };
    for index in 0..count {
        let known = kept.and_then(|t| t.get(index)).map(|(h, uuid)| (h, uuid.to_string()));
        match read_device(nvml, index, known, ctx) {
            Ok((handle, mut devs)) => {
                sweep.handles.push((index, handle));
                sweep.devices.append(&mut devs);
            }
            Err(f) => {
                sweep.failed = true;
                if needs_reinit(&f.error) {
                    sweep.reinit = Some(f.error);
                    break;
                }
                sweep.devices.extend(f.device);
            }
        }
    }
    sweep
}

/// The per-poll state `read_device` updates.
pub(super) struct PollCtx<'a> {
    known: &'a mut Known,
    poll: u64,
    utilization: Option<&'a mut Utilization>,
    /// Read every process list this poll (`gate.rs`).
    refresh: bool,
}

/// A whole-device failure: the device marked down (when its UUID is known
/// from an earlier poll) and the NVML error behind it.
struct DeviceFailure {
    device: Option<RawDevice>,
    error: NvmlError,
}

/// Reads one GPU and, when MIG is on, its instances, through `known` (the
/// kept handle and UUID) or, without it, a fresh handle and UUID. Returns
/// the handle with the devices; on a whole-device failure, the device
/// marked down (if its UUID is known) and the error.
fn read_device(
    nvml: &Nvml,
    index: u32,
    known: Option<(Handle, String)>,
    ctx: &mut PollCtx<'_>,
) -> Result<(Handle, Vec<RawDevice>), Box<DeviceFailure>> {
    let down = |ctx: &PollCtx<'_>, e: NvmlError| {
        let dev = ctx.known.uuid_by_index.get(&index).map(|uuid| {
            let id = ctx.known.identity.get(uuid).cloned().unwrap_or_default();
            gpu_device(
                uuid.clone(),
                index,
                id,
                false,
                vec![format!("device: {}", describe(&e))],
            )
        });
        Box::new(DeviceFailure { device: dev, error: e })
    };
    let (device, uuid) = match known {
        Some((handle, uuid)) => (handle.device(nvml), uuid),
        None => {
            let device = nvml.device_by_index(index).map_err(|e| down(ctx, e))?;
            let uuid = device.uuid().map_err(|e| down(ctx, e))?;
            ctx.known.uuid_by_index.insert(index, uuid.clone());
            (device, uuid)
        }
    };
    let mut errors = Vec::new();
    let id = identity(&device, &uuid, ctx, &mut errors);
    let mut gpu = gpu_device(uuid.clone(), index, id, true, errors);
    read_memory(&device, &mut gpu).map_err(|e| down(ctx, e))?;
    let memo = ctx.known.memo.entry(uuid.clone()).or_default();
    let mig_on = mig::mig_mode(&device, memo, ctx.poll, &mut gpu.device.errors);
    let mut out = Vec::new();
    if mig_on {
        out = mig::read_instances(&device, &mut gpu, ctx);
    } else {
        let listed = gate::processes(&device, &mut gpu, memo, ctx.poll, ctx.refresh);
        let mut watch = memo.idle;
        listed.map_err(|e| down(ctx, e))?;
        idle::poll(&device, &uuid, ctx, &mut watch);
        if let Some(memo) = ctx.known.memo.get_mut(&uuid) {
            memo.idle = watch;
        }
    }
    out.insert(0, gpu);
    Ok((Handle::of(&device), out))
}

/// A whole GPU's record (not a MIG instance), up or marked down.
fn gpu_device(uuid: String, index: u32, id: Identity, up: bool, errors: Vec<String>) -> RawDevice {
    RawDevice {
        device: crate::data::snapshot::Device {
            uuid,
            index: Some(index),
            name: id.name,
            pci_bus_id: id.pci_bus_id,
            up,
            errors,
            ..crate::data::snapshot::Device::default()
        },
        ..RawDevice::default()
    }
}

/// A GPU's name and PCI bus id, read once and kept while both were read;
/// a field that failed is recorded in `errors` and read again next poll.
fn identity(device: &Device<'_>, uuid: &str, ctx: &mut PollCtx<'_>, errors: &mut Vec<String>) -> Identity {
    if let Some(id) = ctx.known.identity.get(uuid) {
        return id.clone();
    }
    let name = device
        .name()
        .map_err(|e| errors.push(format!("name: {}", describe(&e))));
    let pci = device
        .pci_info()
        .map_err(|e| errors.push(format!("pci bus id: {}", describe(&e))));
    let complete = name.is_ok() && pci.is_ok();
    let id = Identity {
        name: name.unwrap_or_default(),
        pci_bus_id: pci.map(|p| p.bus_id).unwrap_or_default(),
    };
    if complete {
        ctx.known.identity.insert(uuid.to_string(), id.clone());
    }
    id
}

fn driver_info(nvml: &Nvml) -> DriverInfo {
    let cuda = nvml
        .sys_cuda_driver_version()
        .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10))
        .unwrap_or_default();
    DriverInfo {
        driver_version: nvml.sys_driver_version().unwrap_or_default(),
        nvml_version: nvml.sys_nvml_version().unwrap_or_default(),
        cuda_version: cuda,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_unavailable_with_a_clear_message() {
        let mut s = NvmlSource::new("/nonexistent/libnvidia-ml.so.1");
        match s.poll(false) {
            Err(SourceError::Unavailable(m)) => {
                assert!(m.starts_with("/nonexistent/libnvidia-ml.so.1 not found"), "{m}")
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        // Within the backoff no new attempt is made, and it still says why.
        assert!(matches!(s.poll(false), Err(SourceError::Unavailable(_))));
    }
}
