//! The validated scenario as typed values: devices, MIG instances,
//! processes, timeline steps and faults, plus the memory arithmetic and
//! timeline edits NVML answers are computed from. No FFI and no globals.

use std::time::Duration;

use nvml_wrapper_sys::bindings::nvmlReturn_t;

use crate::funcs::FuncSet;

/// NVML's "no MIG instance" id in `nvmlProcessInfo_t`.
pub const NO_INSTANCE_ID: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub struct Scenario {
    pub driver_version: String,
    pub nvml_version: String,
    pub cuda_driver_version: i32,
    pub init_fail: Option<InitFail>,
    pub utilization_epoch_us: u64,
    pub devices: Vec<Device>,
    /// Sorted by poll; steps of one poll keep file order.
    pub steps: Vec<Step>,
    pub faults: Vec<Fault>,
    /// Memory health and Xid events (`[[health]]`, `[[xid]]`).
    pub health: crate::health::Plan,
}

#[derive(Clone, Copy, Debug)]
pub struct InitFail {
    pub code: nvmlReturn_t,
    /// Init attempts (process-wide, 1-based) that fail; `None`: all of them.
    pub attempts: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct Device {
    pub uuid: String,
    pub name: String,
    pub pci: Pci,
    pub holder: Holder,
    pub mig_capable: bool,
    pub mig: Option<Mig>,
}

#[derive(Clone, Debug)]
pub struct Pci {
    pub bus_id: String,
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
}

#[derive(Clone, Debug)]
pub struct Mig {
    pub max_devices: u32,
    pub instances: Vec<MigInstance>,
    /// Whether the parent's process lists also show the instances'
    /// processes, as privileged NVML callers see them.
    pub aggregate_processes: bool,
}

#[derive(Clone, Debug)]
pub struct MigInstance {
    pub slot: u32,
    pub uuid: String,
    pub name: String,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    pub holder: Holder,
}

/// What owns memory and runs processes: a GPU or a MIG instance.
#[derive(Clone, Debug, Default)]
pub struct Holder {
    pub memory: Memory,
    pub processes: Vec<Process>,
}

#[derive(Clone, Debug, Default)]
pub struct Memory {
    pub total: u64,
    pub reserved: u64,
    /// Fixed `used`; `None` derives it from the processes.
    pub used: Option<u64>,
    pub overhead: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Process {
    pub pid: u32,
    /// What NVML reports; `None` is NVML_VALUE_NOT_AVAILABLE.
    pub used: Option<u64>,
    /// What the process really holds, for the device's `used` arithmetic.
    pub actual: u64,
    pub lists: Lists,
    pub sm_util: Option<u32>,
    pub mem_util: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lists {
    pub compute: bool,
    pub graphics: bool,
    pub mps: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    Compute,
    Graphics,
    Mps,
}

impl Lists {
    /// Parses list names ("compute", "graphics", "mps").
    pub fn parse(names: &[String]) -> Result<Self, String> {
        let mut lists = Self::default();
        for name in names {
            match name.as_str() {
                "compute" => lists.compute = true,
                "graphics" => lists.graphics = true,
                "mps" => lists.mps = true,
                other => return Err(format!("unknown process list {other:?}")),
            }
        }
        Ok(lists)
    }

    pub fn has(self, kind: ListKind) -> bool {
        match kind {
            ListKind::Compute => self.compute,
            ListKind::Graphics => self.graphics,
            ListKind::Mps => self.mps,
        }
    }
}

/// A device named by NVML index (a GPU and its MIG instances) or by UUID
/// (a GPU with its instances, or one MIG instance).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Index(u32),
    Uuid(String),
}

#[derive(Clone, Debug)]
pub struct Step {
    pub poll: u64,
    pub target: Target,
    pub total: Option<u64>,
    pub reserved: Option<u64>,
    /// `Some(None)` returns to derived `used`.
    pub used: Option<Option<u64>>,
    pub overhead: Option<u64>,
    pub remove: Vec<u32>,
    pub add: Vec<Process>,
}

#[derive(Clone, Debug)]
pub struct Fault {
    pub funcs: FuncSet,
    pub target: Option<Target>,
    pub from_poll: u64,
    pub to_poll: Option<u64>,
    pub code: Option<nvmlReturn_t>,
    pub hang: Duration,
    pub times: Option<u32>,
}

/// A handle's referent: a GPU by position, optionally one MIG slot on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevRef {
    pub dev: usize,
    pub slot: Option<u32>,
}

/// The four numbers of `nvmlMemory_v2_t` (v1 folds reserved into used).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryReading {
    pub total: u64,
    pub reserved: u64,
    pub used: u64,
    pub free: u64,
}

impl Memory {
    fn reading(&self, derived_used: u64) -> MemoryReading {
        // Saturating throughout: absurd scenario numbers must give absurd
        // readings, not an overflow panic (which would surface as UNKNOWN).
        let used = self.used.unwrap_or(derived_used.saturating_add(self.overhead));
        MemoryReading {
            total: self.total,
            reserved: self.reserved,
            used,
            free: self.total.saturating_sub(self.reserved.saturating_add(used)),
        }
    }
}

impl Holder {
    fn process_sum(&self) -> u64 {
        self.processes.iter().fold(0, |sum, p| sum.saturating_add(p.actual))
    }

    pub fn reading(&self) -> MemoryReading {
        self.memory.reading(self.process_sum())
    }

    /// Adds a process, or replaces the one with the same pid in place so a
    /// timeline can change a process's memory without reordering the list.
    pub fn upsert(&mut self, process: Process) {
        match self.processes.iter_mut().find(|p| p.pid == process.pid) {
            Some(slot) => *slot = process,
            None => self.processes.push(process),
        }
    }
}

impl Device {
    pub fn instance(&self, slot: u32) -> Option<&MigInstance> {
        self.mig.as_ref()?.instances.iter().find(|i| i.slot == slot)
    }

    pub fn holder(&self, slot: Option<u32>) -> Option<&Holder> {
        match slot {
            None => Some(&self.holder),
            Some(s) => self.instance(s).map(|i| &i.holder),
        }
    }

    /// A MIG parent's used memory includes what its instances hold.
    pub fn reading(&self, slot: Option<u32>) -> Option<MemoryReading> {
        if slot.is_some() {
            return self.holder(slot).map(Holder::reading);
        }
        let instances: u64 = self
            .mig
            .iter()
            .flat_map(|m| &m.instances)
            .map(|i| {
                let r = i.holder.reading();
                r.reserved.saturating_add(r.used)
            })
            .fold(0, u64::saturating_add);
        Some(
            self.holder
                .memory
                .reading(self.holder.process_sum().saturating_add(instances)),
        )
    }

    /// Entries of one process list as (process, gpu instance id, compute
    /// instance id).
    pub fn list(&self, slot: Option<u32>, kind: ListKind) -> Vec<(&Process, u32, u32)> {
        match slot {
            Some(s) => self.instance(s).into_iter().flat_map(|i| i.entries(kind)).collect(),
            None => {
                let own = self.holder.processes.iter().filter(|p| p.lists.has(kind));
                let mut out: Vec<_> = own.map(|p| (p, NO_INSTANCE_ID, NO_INSTANCE_ID)).collect();
                if let Some(mig) = self.mig.as_ref().filter(|m| m.aggregate_processes) {
                    out.extend(mig.instances.iter().flat_map(|i| i.entries(kind)));
                }
                out
            }
        }
    }
}

impl MigInstance {
    fn entries(&self, kind: ListKind) -> impl Iterator<Item = (&Process, u32, u32)> {
        let ids = (self.gpu_instance_id, self.compute_instance_id);
        let listed = self.holder.processes.iter().filter(move |p| p.lists.has(kind));
        listed.map(move |p| (p, ids.0, ids.1))
    }
}

impl Target {
    /// Whether a fault aimed at this target applies to a call on `at`.
    pub fn matches(&self, devices: &[Device], at: DevRef) -> bool {
        let Some(device) = devices.get(at.dev) else {
            return false;
        };
        match self {
            Target::Index(i) => *i as usize == at.dev,
            Target::Uuid(uuid) if *uuid == device.uuid => true,
            Target::Uuid(uuid) => at
                .slot
                .and_then(|s| device.instance(s))
                .is_some_and(|i| i.uuid == *uuid),
        }
    }

    /// The single GPU or instance a timeline step edits.
    pub fn resolve(&self, devices: &[Device]) -> Option<DevRef> {
        match self {
            Target::Index(i) => {
                let dev = *i as usize;
                (dev < devices.len()).then_some(DevRef { dev, slot: None })
            }
            Target::Uuid(uuid) => find_uuid(devices, uuid),
        }
    }
}

pub fn find_uuid(devices: &[Device], uuid: &str) -> Option<DevRef> {
    devices.iter().enumerate().find_map(|(dev, d)| {
        if d.uuid == uuid {
            return Some(DevRef { dev, slot: None });
        }
        let inst = d.mig.as_ref()?.instances.iter().find(|i| i.uuid == uuid)?;
        Some(DevRef {
            dev,
            slot: Some(inst.slot),
        })
    })
}

impl Step {
    pub fn apply(&self, devices: &mut [Device]) {
        let Some(at) = self.target.resolve(devices) else {
            return;
        };
        let device = &mut devices[at.dev];
        let holder = match at.slot {
            None => &mut device.holder,
            Some(s) => match device
                .mig
                .as_mut()
                .and_then(|m| m.instances.iter_mut().find(|i| i.slot == s))
            {
                Some(instance) => &mut instance.holder,
                None => return,
            },
        };
        let memory = &mut holder.memory;
        memory.total = self.total.unwrap_or(memory.total);
        memory.reserved = self.reserved.unwrap_or(memory.reserved);
        memory.used = self.used.unwrap_or(memory.used);
        memory.overhead = self.overhead.unwrap_or(memory.overhead);
        holder.processes.retain(|p| !self.remove.contains(&p.pid));
        for process in &self.add {
            holder.upsert(process.clone());
        }
    }
}

impl Fault {
    pub fn active_at(&self, poll: u64) -> bool {
        poll >= self.from_poll && self.to_poll.is_none_or(|to| poll <= to)
    }
}
