//! `NvmlSource`: the only code that names `nvml_wrapper`. It owns the NVML
//! handle (initialised lazily, re-initialised with backoff after the driver
//! goes away), reads every device once per poll and maps each NVML error once,
//! per field or per device, so one failing GPU or field never fails the poll.
//! It must not read /proc or build snapshots; it returns plain `RawPoll` data.

use std::collections::HashMap;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use nvml_wrapper::Device;
use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

mod errors;
mod health;
mod reads;

use errors::{describe, is_device_fatal};
use errors::{init_error, needs_reinit};
use reads::{read_memory, read_processes, sample_util};

use super::{GpuSource, RawDevice, RawPoll, SourceError, Utilization};
use crate::snapshot::DriverInfo;

const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Polls between re-reads of a GPU's MIG mode. Measured on an H200 (driver
/// 580, `examples/nvml_calls.rs`), `nvmlDeviceGetMigMode` costs about 80 us,
/// as much as the compute process list, and the mode only changes with a
/// GPU reset, which no process survives.
const MIG_RECHECK_POLLS: u64 = 30;

/// Static facts about a device, read once per UUID because they cannot change
/// while the GPU stays on the bus.
#[derive(Debug, Clone, Default)]
struct Identity {
    name: String,
    pci_bus_id: String,
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
    /// UUID per index from earlier polls, so a GPU that is lost now is still
    /// reported under its UUID with `up = false`.
    uuid_by_index: HashMap<u32, String>,
    identity: HashMap<String, Identity>,
    /// Newest utilisation sample timestamp per device, so each sample is
    /// returned once.
    util_seen: HashMap<String, u64>,
    /// The costly, rarely changing answers per device (by UUID).
    memo: HashMap<String, Memo>,
    /// Polls made, for the memo's re-read schedule.
    polls: u64,
    /// Memory health reads and the Xid event set (`[health]`).
    health: health::HealthReader,
}

/// What `read_device` remembers between polls to skip costly NVML calls.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Memo {
    /// MIG mode and the poll it was read at.
    mig: Option<(bool, u64)>,
    /// Polls in a row the graphics and the MPS list had no process.
    quiet: [u32; 2],
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
            uuid_by_index: HashMap::new(),
            identity: HashMap::new(),
            util_seen: HashMap::new(),
            memo: HashMap::new(),
            polls: 0,
            health: health::HealthReader::new(crate::health::HealthConfig::default()),
        }
    }

    /// Reads memory health and Xid events as `cfg` says (default: on).
    pub fn with_health(mut self, cfg: crate::health::HealthConfig) -> Self {
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
        self.uuid_by_index.clear();
        // A re-initialised driver may come back with another MIG layout.
        self.memo.clear();
        self.next_init = Some(Instant::now() + self.backoff);
        self.last_error = format!("the driver went away ({}); re-initialising", describe(why));
        SourceError::Unavailable(self.last_error.clone())
    }
}

impl GpuSource for NvmlSource {
    fn poll(&mut self, sample_utilization: bool) -> Result<RawPoll, SourceError> {
        self.ensure_init()?;
        let Some(nvml) = self.nvml.as_ref() else {
            return Err(SourceError::Unavailable("NVML handle missing".into()));
        };
        let count = match nvml.device_count() {
            Ok(n) => n,
            Err(e) if needs_reinit(&e) => return Err(self.reset(&e)),
            // "failed" is one of the reasons `gpumem_poll_errors_total`
            // exports; an unlisted reason would be counted but never shown.
            Err(e) => {
                return Err(SourceError::Failed {
                    reason: "failed",
                    message: format!("device count: {}", describe(&e)),
                });
            }
        };
        let mut devices = Vec::with_capacity(count as usize);
        let mut utilization = sample_utilization.then(Utilization::new);
        let mut reinit = None;
        self.polls += 1;
        for index in 0..count {
            let mut ctx = PollCtx {
                uuid_by_index: &mut self.uuid_by_index,
                identity: &mut self.identity,
                util_seen: &mut self.util_seen,
                memo: &mut self.memo,
                poll: self.polls,
                utilization: utilization.as_mut(),
            };
            match read_device(nvml, index, &mut ctx) {
                Ok(mut devs) => devices.append(&mut devs),
                Err(f) => {
                    if needs_reinit(&f.error) {
                        reinit = Some(f.error);
                        break;
                    }
                    devices.extend(f.device);
                }
            }
        }
        if let Some(e) = reinit {
            return Err(self.reset(&e));
        }
        self.health.read_all(nvml, &mut devices);
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

/// The per-poll state `read_device` updates.
pub(super) struct PollCtx<'a> {
    uuid_by_index: &'a mut HashMap<u32, String>,
    identity: &'a mut HashMap<String, Identity>,
    util_seen: &'a mut HashMap<String, u64>,
    memo: &'a mut HashMap<String, Memo>,
    poll: u64,
    utilization: Option<&'a mut Utilization>,
}

/// A whole-device failure: the device marked down (when its UUID is known
/// from an earlier poll) and the NVML error behind it.
struct DeviceFailure {
    device: Option<RawDevice>,
    error: NvmlError,
}

/// Reads one GPU and, when MIG is on, its instances. On a whole-device
/// failure returns the device marked down (if its UUID is known) and the error.
fn read_device(nvml: &Nvml, index: u32, ctx: &mut PollCtx<'_>) -> Result<Vec<RawDevice>, Box<DeviceFailure>> {
    let down = |ctx: &PollCtx<'_>, e: NvmlError| {
        let dev = ctx.uuid_by_index.get(&index).map(|uuid| {
            let id = ctx.identity.get(uuid).cloned().unwrap_or_default();
            RawDevice {
                uuid: uuid.clone(),
                index: Some(index),
                name: id.name,
                pci_bus_id: id.pci_bus_id,
                up: false,
                errors: vec![format!("device: {}", describe(&e))],
                ..RawDevice::default()
            }
        });
        Box::new(DeviceFailure { device: dev, error: e })
    };
    let device = nvml.device_by_index(index).map_err(|e| down(ctx, e))?;
    let uuid = device.uuid().map_err(|e| down(ctx, e))?;
    ctx.uuid_by_index.insert(index, uuid.clone());
    let mut errors = Vec::new();
    let id = identity(&device, &uuid, ctx, &mut errors);
    let mut gpu = RawDevice {
        uuid: uuid.clone(),
        index: Some(index),
        name: id.name,
        pci_bus_id: id.pci_bus_id,
        up: true,
        errors,
        ..RawDevice::default()
    };
    read_memory(&device, &mut gpu).map_err(|e| down(ctx, e))?;
    let poll = ctx.poll;
    let memo = ctx.memo.entry(uuid.clone()).or_default();
    let mig_on = mig_mode(&device, memo, poll, &mut gpu.errors);
    let mut out = Vec::new();
    if mig_on {
        // Processes live on the instances; listing them on the parent as
        // well would count their memory twice.
        let count = device.mig_device_count().unwrap_or_else(|e| {
            gpu.errors.push(format!("mig instance count: {}", describe(&e)));
            0
        });
        for slot in 0..count {
            match device.mig_device_by_index(slot) {
                Ok(mig) => out.push(read_mig(&mig, &gpu, ctx)),
                Err(NvmlError::NotFound) => {}
                Err(e) => gpu.errors.push(format!("mig instance {slot}: {}", describe(&e))),
            }
        }
    } else {
        read_processes(&device, &mut gpu, memo, poll).map_err(|e| down(ctx, e))?;
        sample_util(&device, &uuid, ctx);
    }
    out.insert(0, gpu);
    Ok(out)
}

/// A GPU's name and PCI bus id, read once and kept while both were read;
/// a field that failed is recorded in `errors` and read again next poll.
fn identity(device: &Device<'_>, uuid: &str, ctx: &mut PollCtx<'_>, errors: &mut Vec<String>) -> Identity {
    if let Some(id) = ctx.identity.get(uuid) {
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
        ctx.identity.insert(uuid.to_string(), id.clone());
    }
    id
}

/// Whether MIG is on, re-read every `MIG_RECHECK_POLLS`. NotSupported is an
/// answer (no MIG on this GPU) and is remembered; any other error is
/// recorded, keeps the last known mode for this poll and is retried next
/// poll, never remembered as "off".
fn mig_mode(device: &Device<'_>, memo: &mut Memo, poll: u64, errors: &mut Vec<String>) -> bool {
    if let Some((on, at)) = memo.mig {
        if poll.saturating_sub(at) < MIG_RECHECK_POLLS {
            return on;
        }
    }
    let on = match device.mig_mode() {
        Ok(m) => m.current == 1,
        Err(NvmlError::NotSupported) => false,
        Err(e) => {
            errors.push(format!("mig mode: {}", describe(&e)));
            return memo.mig.is_some_and(|(on, _)| on);
        }
    };
    memo.mig = Some((on, poll));
    on
}

fn read_mig(mig: &Device<'_>, parent: &RawDevice, ctx: &mut PollCtx<'_>) -> RawDevice {
    let mut errors = Vec::new();
    let name = mig.name().unwrap_or_else(|e| {
        errors.push(format!("name: {}", describe(&e)));
        String::new()
    });
    let uuid = mig.uuid().unwrap_or_else(|e| {
        errors.push(format!("mig instance uuid: {}", describe(&e)));
        String::new()
    });
    let mut dev = RawDevice {
        up: !uuid.is_empty(),
        uuid,
        index: None,
        mig_profile: mig_profile(&name),
        name,
        pci_bus_id: parent.pci_bus_id.clone(),
        parent_uuid: parent.uuid.clone(),
        errors,
        ..RawDevice::default()
    };
    if !dev.up {
        return dev;
    }
    let poll = ctx.poll;
    let memo = ctx.memo.entry(dev.uuid.clone()).or_default();
    let result = read_memory(mig, &mut dev).and_then(|()| read_processes(mig, &mut dev, memo, poll));
    if let Err(e) = result {
        dev.up = false;
        dev.errors.push(format!("device: {}", describe(&e)));
    }
    let uuid = dev.uuid.clone();
    sample_util(mig, &uuid, ctx);
    dev
}

/// "NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "1g.10gb".
fn mig_profile(name: &str) -> String {
    name.rsplit_once(" MIG ")
        .map(|(_, p)| p.trim().to_string())
        .unwrap_or_default()
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
    fn mig_profile_from_name() {
        assert_eq!(mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), "1g.10gb");
        assert_eq!(mig_profile("NVIDIA A100-SXM4-40GB MIG 3g.20gb"), "3g.20gb");
        assert_eq!(mig_profile("NVIDIA H200"), "");
    }

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
