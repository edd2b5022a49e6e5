//! The CUDA checkpoint stand-in's state: which PIDs are locked or
//! checkpointed, and where a checkpointed process's NVML entry is parked.
//! Checkpointing takes the process out of its device's list, so NVML's
//! process list and the device's used memory drop exactly as on a real GPU;
//! restoring puts it back in place. No FFI and no globals (runtime.rs holds
//! this in its one state, so a library loaded as both `--nvml-lib` and
//! `--cuda-lib` shares it).

use std::ffi::CStr;

use nvml_wrapper_sys::bindings::nvmlReturn_t;

use crate::model::{Device, Process};

pub const SUCCESS: nvmlReturn_t = 0;
pub const INVALID_VALUE: nvmlReturn_t = 1;
pub const NOT_INITIALIZED: nvmlReturn_t = 3;
pub const ILLEGAL_STATE: nvmlReturn_t = 401;
pub const NOT_FOUND: nvmlReturn_t = 500;
pub const NOT_SUPPORTED: nvmlReturn_t = 801;

/// (CUresult, name, message as cuGetErrorString words it).
const TABLE: &[(nvmlReturn_t, &str, &CStr)] = &[
    (SUCCESS, "CUDA_SUCCESS", c"no error"),
    (INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    (NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
    (100, "CUDA_ERROR_NO_DEVICE", c"no CUDA-capable device is detected"),
    (
        ILLEGAL_STATE,
        "CUDA_ERROR_ILLEGAL_STATE",
        c"the operation cannot be performed in the present state",
    ),
    (NOT_FOUND, "CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    (800, "CUDA_ERROR_NOT_PERMITTED", c"operation not permitted"),
    (NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    (909, "CUDA_ERROR_TIMEOUT", c"the operation timed out"),
    (999, "CUDA_ERROR_UNKNOWN", c"unknown error"),
];

pub fn parse_code(upper: &str) -> Result<nvmlReturn_t, String> {
    TABLE
        .iter()
        .find(|(_, name, _)| *name == upper)
        .map(|(v, _, _)| *v)
        .ok_or_else(|| format!("unknown CUDA result code {upper:?}"))
}

/// The name `cuGetErrorString` would give, if the code is known.
pub fn message(code: nvmlReturn_t) -> Option<&'static CStr> {
    TABLE.iter().find(|(v, _, _)| *v == code).map(|(_, _, m)| *m)
}

/// `CUprocessState` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Running = 0,
    Locked = 1,
    Checkpointed = 2,
}

/// Where a checkpointed process's entry sat: device, MIG slot, the entry.
#[derive(Clone, Debug)]
pub(crate) struct Parked {
    dev: usize,
    slot: Option<u32>,
    process: Process,
}

#[derive(Debug, Default)]
pub struct Cuda {
    pub initialised: bool,
    /// PIDs not running, with their parked entry once checkpointed.
    pub(crate) touched: Vec<(u32, State, Option<Parked>)>,
}

/// Where `pid` is listed now: (device, slot).
fn find(devices: &[Device], pid: u32) -> Option<(usize, Option<u32>)> {
    devices.iter().enumerate().find_map(|(dev, d)| {
        if d.holder.processes.iter().any(|p| p.pid == pid) {
            return Some((dev, None));
        }
        d.mig.iter().flat_map(|m| &m.instances).find_map(|i| {
            i.holder
                .processes
                .iter()
                .any(|p| p.pid == pid)
                .then_some((dev, Some(i.slot)))
        })
    })
}

fn holder_mut(devices: &mut [Device], dev: usize, slot: Option<u32>) -> Option<&mut crate::model::Holder> {
    let d = devices.get_mut(dev)?;
    match slot {
        None => Some(&mut d.holder),
        Some(s) => d
            .mig
            .as_mut()?
            .instances
            .iter_mut()
            .find(|i| i.slot == s)
            .map(|i| &mut i.holder),
    }
}

impl Cuda {
    fn entry(&mut self, pid: u32) -> Option<&mut (u32, State, Option<Parked>)> {
        self.touched.iter_mut().find(|(p, _, _)| *p == pid)
    }

    /// A PID the fleet lists (or one parked here) is a CUDA process;
    /// anything else is NOT_FOUND.
    pub fn state(&self, devices: &[Device], pid: u32) -> Result<State, nvmlReturn_t> {
        if let Some((_, s, _)) = self.touched.iter().find(|(p, _, _)| *p == pid) {
            return Ok(*s);
        }
        find(devices, pid).map(|_| State::Running).ok_or(NOT_FOUND)
    }

    pub fn lock(&mut self, devices: &[Device], pid: u32) -> nvmlReturn_t {
        match self.state(devices, pid) {
            Ok(State::Running) => {
                self.touched.retain(|(p, _, _)| *p != pid);
                self.touched.push((pid, State::Locked, None));
                SUCCESS
            }
            Ok(_) => ILLEGAL_STATE,
            Err(code) => code,
        }
    }

    /// Locked -> checkpointed: the entry leaves the device's lists.
    pub fn checkpoint(&mut self, devices: &mut [Device], pid: u32) -> nvmlReturn_t {
        if self.state(devices, pid) != Ok(State::Locked) {
            return ILLEGAL_STATE;
        }
        let parked = find(devices, pid).and_then(|(dev, slot)| {
            let holder = holder_mut(devices, dev, slot)?;
            let i = holder.processes.iter().position(|p| p.pid == pid)?;
            Some(Parked {
                dev,
                slot,
                process: holder.processes.remove(i),
            })
        });
        if let Some(e) = self.entry(pid) {
            *e = (pid, State::Checkpointed, parked);
        }
        SUCCESS
    }

    /// Checkpointed -> locked: the entry comes back where it was.
    pub fn restore(&mut self, devices: &mut [Device], pid: u32) -> nvmlReturn_t {
        if self.state(devices, pid) != Ok(State::Checkpointed) {
            return ILLEGAL_STATE;
        }
        let parked = self.entry(pid).and_then(|e| {
            e.1 = State::Locked;
            e.2.take()
        });
        if let Some(p) = parked
            && let Some(h) = holder_mut(devices, p.dev, p.slot)
        {
            h.upsert(p.process);
        }
        SUCCESS
    }

    pub fn unlock(&mut self, devices: &[Device], pid: u32) -> nvmlReturn_t {
        if self.state(devices, pid) != Ok(State::Locked) {
            return ILLEGAL_STATE;
        }
        self.touched.retain(|(p, _, _)| *p != pid);
        SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(pid: u32) -> Vec<Device> {
        let text = format!("[[device]]\n[[device.process]]\npid = {pid}\nused = \"8GiB\"\n");
        crate::scenario::parse(&text).expect("scenario").devices
    }

    #[test]
    fn checkpoint_parks_the_entry_and_restore_puts_it_back() {
        let mut devices = fleet(42);
        let before = devices[0].reading(None).expect("reading").used;
        let mut c = Cuda::default();
        assert_eq!(c.state(&devices, 7), Err(NOT_FOUND));
        assert_eq!(c.checkpoint(&mut devices, 42), ILLEGAL_STATE, "must be locked first");
        assert_eq!(c.lock(&devices, 42), SUCCESS);
        assert_eq!(c.lock(&devices, 42), ILLEGAL_STATE);
        assert_eq!(c.checkpoint(&mut devices, 42), SUCCESS);
        assert!(devices[0].holder.processes.is_empty());
        assert_eq!(devices[0].reading(None).expect("reading").used, before - (8 << 30));
        assert_eq!(c.state(&devices, 42), Ok(State::Checkpointed));
        assert_eq!(c.unlock(&devices, 42), ILLEGAL_STATE, "restore first");
        assert_eq!(c.restore(&mut devices, 42), SUCCESS);
        assert_eq!(devices[0].reading(None).expect("reading").used, before);
        assert_eq!(c.unlock(&devices, 42), SUCCESS);
        assert_eq!(c.state(&devices, 42), Ok(State::Running));
    }

    #[test]
    fn cuda_names_parse() {
        assert_eq!(crate::codes::parse_code("CUDA_ERROR_NOT_SUPPORTED"), Ok(NOT_SUPPORTED));
        assert_eq!(crate::codes::parse_code("cuda_error_illegal_state"), Ok(ILLEGAL_STATE));
        assert!(crate::codes::parse_code("CUDA_ERROR_ON_FIRE").is_err());
    }
}
