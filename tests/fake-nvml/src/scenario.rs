//! The scenario file: its TOML shape (serde structs that mirror the file)
//! and the conversion into the validated `model::Scenario`, so everything
//! past this module works with typed, checked values. Timeline and fault
//! sections are converted in `timeline.rs`, generated fleets in `generate.rs`.

use std::collections::HashSet;

use serde::Deserialize;

use crate::codes::parse_code;
use crate::generate::{self, RawGenerate};
use crate::model::{Device, Holder, InitFail, Lists, Memory, Mig, MigInstance, Pci, Process, Scenario};
use crate::timeline::{self, RawFault, RawStep};
use crate::units::parse_size;

pub const DEFAULT_NAME: &str = "NVIDIA H100 80GB HBM3";
/// What an H100 80GB really reports as total (81559 MiB), not 80 GiB.
pub const DEFAULT_TOTAL: u64 = 81_559 << 20;
/// PCI device id 0x2330 (H100 SXM5 80GB) with NVIDIA's vendor id 0x10de.
const DEFAULT_PCI_DEVICE_ID: u32 = 0x2330_10de;
const DEFAULT_PCI_SUBSYSTEM_ID: u32 = 0x16c1_10de;
/// H100 can be split into at most seven MIG instances.
const DEFAULT_MIG_MAX_DEVICES: u32 = 7;
/// 2023-11-14 in microseconds: looks like the CPU timestamps NVML uses.
const DEFAULT_UTILIZATION_EPOCH_US: u64 = 1_700_000_000_000_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    driver_version: Option<String>,
    nvml_version: Option<String>,
    cuda_driver_version: Option<i32>,
    utilization_epoch_us: Option<u64>,
    #[serde(default)]
    init: RawInit,
    #[serde(default, rename = "device")]
    devices: Vec<RawDevice>,
    generate: Option<RawGenerate>,
    #[serde(default, rename = "step")]
    steps: Vec<RawStep>,
    #[serde(default, rename = "fault")]
    faults: Vec<RawFault>,
    #[serde(default)]
    health: Vec<crate::health::RawHealth>,
    #[serde(default)]
    xid: Vec<crate::health::RawXid>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawInit {
    fail: Option<String>,
    attempts: Option<u64>,
}

/// A byte count, a size with a unit, or a keyword ("unavailable", "auto")
/// where the field allows one.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub enum RawSize {
    Bytes(u64),
    Text(String),
}

impl RawSize {
    pub fn bytes(&self) -> Result<u64, String> {
        match self {
            RawSize::Bytes(n) => Ok(*n),
            RawSize::Text(t) => parse_size(t),
        }
    }

    /// `None` when the field holds the given keyword.
    pub fn bytes_or(&self, keyword: &str) -> Result<Option<u64>, String> {
        match self {
            RawSize::Text(t) if t.trim().eq_ignore_ascii_case(keyword) => Ok(None),
            other => other.bytes().map(Some),
        }
    }
}

fn size_or(raw: &Option<RawSize>, default: u64) -> Result<u64, String> {
    raw.as_ref().map_or(Ok(default), RawSize::bytes)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    uuid: Option<String>,
    name: Option<String>,
    pci_bus_id: Option<String>,
    pci_device_id: Option<u32>,
    pci_subsystem_id: Option<u32>,
    total: Option<RawSize>,
    reserved: Option<RawSize>,
    used: Option<RawSize>,
    overhead: Option<RawSize>,
    #[serde(default, rename = "process")]
    processes: Vec<RawProcess>,
    #[serde(default)]
    mig: bool,
    mig_capable: Option<bool>,
    mig_max_devices: Option<u32>,
    mig_aggregate_processes: Option<bool>,
    #[serde(default, rename = "mig_instance")]
    mig_instances: Vec<RawInstance>,
}

/// The memory fields shared by devices and MIG instances (serde's
/// `flatten` would lose `deny_unknown_fields`, so they are repeated).
struct MemoryFields<'a> {
    total: &'a Option<RawSize>,
    reserved: &'a Option<RawSize>,
    used: &'a Option<RawSize>,
    overhead: &'a Option<RawSize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstance {
    slot: Option<u32>,
    uuid: Option<String>,
    profile: String,
    gpu_instance_id: Option<u32>,
    compute_instance_id: Option<u32>,
    total: Option<RawSize>,
    reserved: Option<RawSize>,
    used: Option<RawSize>,
    overhead: Option<RawSize>,
    #[serde(default, rename = "process")]
    processes: Vec<RawProcess>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProcess {
    pid: u32,
    used: RawSize,
    actual: Option<RawSize>,
    lists: Option<Vec<String>>,
    sm_util: Option<u32>,
    mem_util: Option<u32>,
}

/// Parses and validates a scenario file's text.
pub fn parse(text: &str) -> Result<Scenario, String> {
    let raw: RawScenario = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    let mut devices = raw
        .devices
        .iter()
        .enumerate()
        .map(|(index, d)| device(index, d).map_err(|e| format!("device {index}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(spec) = &raw.generate {
        let generated = generate::fleet(spec, devices.len())?;
        devices.extend(generated);
    }
    check_unique_uuids(&devices)?;
    let init_fail = match (&raw.init.fail, raw.init.attempts) {
        (Some(code), attempts) => Some(InitFail {
            code: parse_code(code)?,
            attempts,
        }),
        (None, Some(_)) => return Err("init.attempts needs init.fail".into()),
        (None, None) => None,
    };
    let steps = timeline::steps(&raw.steps, &devices)?;
    let faults = timeline::faults(&raw.faults, &devices)?;
    let health = crate::health::plan(&raw.health, &raw.xid, devices.len())?;
    Ok(Scenario {
        driver_version: raw.driver_version.unwrap_or_else(|| "550.54.15".into()),
        nvml_version: raw.nvml_version.unwrap_or_else(|| "12.550.54.15".into()),
        cuda_driver_version: raw.cuda_driver_version.unwrap_or(12040),
        init_fail,
        utilization_epoch_us: raw.utilization_epoch_us.unwrap_or(DEFAULT_UTILIZATION_EPOCH_US),
        devices,
        steps,
        faults,
        health,
    })
}

fn device(index: usize, raw: &RawDevice) -> Result<Device, String> {
    let name = raw.name.clone().unwrap_or_else(|| DEFAULT_NAME.into());
    let mig_capable = raw.mig_capable.unwrap_or(true);
    if raw.mig && !mig_capable {
        return Err("mig = true on a device with mig_capable = false".into());
    }
    if !raw.mig && !raw.mig_instances.is_empty() {
        return Err("mig_instance entries need mig = true".into());
    }
    let mig = raw.mig.then(|| mig(index, raw, &name)).transpose()?;
    let bus_id = raw.pci_bus_id.clone().unwrap_or_else(|| generate::bus_id(index));
    Ok(Device {
        uuid: raw
            .uuid
            .clone()
            .unwrap_or_else(|| generate::uuid("GPU", 0, index as u64)),
        pci: pci(&bus_id, raw.pci_device_id, raw.pci_subsystem_id)?,
        name,
        holder: holder(
            MemoryFields {
                total: &raw.total,
                reserved: &raw.reserved,
                used: &raw.used,
                overhead: &raw.overhead,
            },
            &raw.processes,
            DEFAULT_TOTAL,
        )?,
        mig_capable,
        mig,
    })
}

fn mig(index: usize, raw: &RawDevice, parent_name: &str) -> Result<Mig, String> {
    let max_devices = raw.mig_max_devices.unwrap_or(DEFAULT_MIG_MAX_DEVICES);
    let mut slots = HashSet::new();
    let instances = raw
        .mig_instances
        .iter()
        .enumerate()
        .map(|(position, i)| {
            let slot = i.slot.unwrap_or(position as u32);
            if slot >= max_devices || !slots.insert(slot) {
                return Err(format!("MIG slot {slot} is out of range or used twice"));
            }
            let uuid = i
                .uuid
                .clone()
                .unwrap_or_else(|| generate::uuid("MIG", 1000 + index as u64, slot.into()));
            let total = i.total.as_ref().ok_or("a mig_instance needs total")?;
            let fields = MemoryFields {
                total: &i.total,
                reserved: &i.reserved,
                used: &i.used,
                overhead: &i.overhead,
            };
            Ok(MigInstance {
                slot,
                uuid,
                name: format!("{parent_name} MIG {}", i.profile),
                gpu_instance_id: i.gpu_instance_id.unwrap_or(slot + 1),
                compute_instance_id: i.compute_instance_id.unwrap_or(0),
                holder: holder(fields, &i.processes, total.bytes()?)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Mig {
        max_devices,
        instances,
        aggregate_processes: raw.mig_aggregate_processes.unwrap_or(true),
    })
}

fn holder(raw: MemoryFields, processes: &[RawProcess], total: u64) -> Result<Holder, String> {
    let mut seen = HashSet::new();
    let processes = processes
        .iter()
        .map(|p| {
            if !seen.insert(p.pid) {
                return Err(format!("pid {} listed twice (use lists = [..] instead)", p.pid));
            }
            process(p)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Holder {
        memory: Memory {
            total: size_or(raw.total, total)?,
            reserved: size_or(raw.reserved, 0)?,
            used: raw.used.as_ref().map(RawSize::bytes).transpose()?,
            overhead: size_or(raw.overhead, 0)?,
        },
        processes,
    })
}

pub fn process(raw: &RawProcess) -> Result<Process, String> {
    let used = raw
        .used
        .bytes_or("unavailable")
        .map_err(|e| format!("pid {}: {e}", raw.pid))?;
    let lists = match &raw.lists {
        Some(names) => Lists::parse(names).map_err(|e| format!("pid {}: {e}", raw.pid))?,
        None => Lists {
            compute: true,
            ..Lists::default()
        },
    };
    if raw.sm_util.is_some_and(|u| u > 100) || raw.mem_util.is_some_and(|u| u > 100) {
        return Err(format!("pid {}: utilisation is a percentage", raw.pid));
    }
    Ok(Process {
        pid: raw.pid,
        used,
        actual: match &raw.actual {
            Some(size) => size.bytes()?,
            None => used.unwrap_or(0),
        },
        lists,
        sm_util: raw.sm_util,
        mem_util: raw.mem_util.unwrap_or(0),
    })
}

/// Parses "00000000:19:00.0" (domain:bus:device.function, hex).
pub fn pci(bus_id: &str, device_id: Option<u32>, subsystem_id: Option<u32>) -> Result<Pci, String> {
    let bad = || format!("PCI bus id {bus_id:?} is not like 00000000:19:00.0");
    let (domain, rest) = bus_id.split_once(':').ok_or_else(bad)?;
    let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
    let (device, _function) = rest.split_once('.').ok_or_else(bad)?;
    let hex = |s: &str| u32::from_str_radix(s, 16).map_err(|_| bad());
    // nvmlPciInfo_t.busId holds 32 bytes including the terminating NUL.
    if bus_id.len() >= 32 {
        return Err(bad());
    }
    Ok(Pci {
        bus_id: bus_id.to_string(),
        domain: hex(domain)?,
        bus: hex(bus)?,
        device: hex(device)?,
        pci_device_id: device_id.unwrap_or(DEFAULT_PCI_DEVICE_ID),
        pci_subsystem_id: subsystem_id.unwrap_or(DEFAULT_PCI_SUBSYSTEM_ID),
    })
}

fn check_unique_uuids(devices: &[Device]) -> Result<(), String> {
    let mut seen = HashSet::new();
    let instances = devices.iter().flat_map(|d| d.mig.iter().flat_map(|m| &m.instances));
    for uuid in devices.iter().map(|d| &d.uuid).chain(instances.map(|i| &i.uuid)) {
        if !seen.insert(uuid.as_str()) {
            return Err(format!("uuid {uuid} used twice"));
        }
    }
    Ok(())
}

/// toml's own rendering spans several lines (with a source excerpt); the
/// fake reports failures as one stderr line, so keep the line number and
/// the message only.
fn toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim().replace('\n', "; ");
    match error.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            format!("line {line}: {message}")
        }
        None => message,
    }
}
