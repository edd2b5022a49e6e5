//! The per-poll reads of one NVML device handle: memory (v2, with the v1
//! fallback of old drivers), the three process lists (with the quiet-list
//! schedule that skips empty graphics and MPS lists) and the per-process
//! utilisation samples. Part of the NVML source, so it may name
//! `nvml_wrapper`; it must not decide whether a device is up (its caller
//! does, from the errors returned) nor keep state beyond `Memo`.

use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;

use super::{Memo, PollCtx, describe, is_device_fatal};
use crate::snapshot::Memory;
use crate::source::{RawDevice, RawProcess};

/// The graphics and MPS process lists (50 and 60 us on that H200) are empty
/// on most compute nodes. Once one has been empty (or unsupported) for
/// `QUIET_POLLS` polls in a row it is read every `SPARSE_EVERY` polls until
/// it shows a process again; a process only in that list meanwhile counts
/// as unattributed memory for at most that many polls.
const QUIET_POLLS: u32 = 10;
const SPARSE_EVERY: u64 = 5;

/// Memory v2, falling back to v1 (no `reserved`) on drivers without v2.
/// Field-level failures are recorded; a lost GPU fails the device.
pub(super) fn read_memory(device: &Device<'_>, dev: &mut RawDevice) -> Result<(), NvmlError> {
    match device.memory_info() {
        Ok(m) => {
            dev.memory = Some(Memory {
                total_bytes: m.total,
                used_bytes: m.used,
                free_bytes: m.free,
                reserved_bytes: Some(m.reserved),
            });
            Ok(())
        }
        Err(NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound | NvmlError::NotSupported) => {
            match memory_v1(device) {
                Ok(m) => {
                    dev.memory = Some(m);
                    Ok(())
                }
                Err(e) if is_device_fatal(&e) => Err(e),
                Err(e) => {
                    dev.errors.push(format!("memory: {}", describe(&e)));
                    Ok(())
                }
            }
        }
        Err(e) if is_device_fatal(&e) => Err(e),
        Err(e) => {
            dev.errors.push(format!("memory: {}", describe(&e)));
            Ok(())
        }
    }
}

fn memory_v1(device: &Device<'_>) -> Result<Memory, NvmlError> {
    use nvml_wrapper_sys::bindings::nvmlMemory_t;
    // SAFETY: `lib()` and `handle()` give the loaded library and a handle that
    // is valid while `device` borrows the live `Nvml`; the symbol's signature
    // comes from the bindings and the out-struct is plain data we zero first.
    unsafe {
        let sym = device
            .nvml()
            .lib()
            .nvmlDeviceGetMemoryInfo
            .as_ref()
            .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
        let mut m: nvmlMemory_t = std::mem::zeroed();
        nvml_wrapper::error::nvml_try(sym(device.handle(), &mut m))?;
        Ok(Memory {
            total_bytes: m.total,
            used_bytes: m.used,
            free_bytes: m.free,
            reserved_bytes: None,
        })
    }
}

/// Merges the compute, graphics and MPS lists by PID: a process in several
/// lists is one process (its memory is the same allocation reported twice).
/// The graphics and MPS lists are read sparsely while quiet (see `Memo`).
pub(super) fn read_processes(
    device: &Device<'_>,
    dev: &mut RawDevice,
    memo: &mut Memo,
    poll: u64,
) -> Result<(), NvmlError> {
    type ListFn = fn(&Device<'_>) -> Result<Vec<ProcessInfo>, NvmlError>;
    let lists: [(&str, ListFn); 3] = [
        ("compute", |d| d.running_compute_processes()),
        ("graphics", |d| d.running_graphics_processes()),
        ("mps", |d| d.mps_running_compute_processes()),
    ];
    let mut by_pid: Vec<RawProcess> = Vec::new();
    for (i, (kind, read)) in lists.into_iter().enumerate() {
        // Slot of this list in `memo.quiet`; the compute list is always read.
        let quiet = i.checked_sub(1).and_then(|q| memo.quiet.get_mut(q));
        if let Some(q) = &quiet
            && **q >= QUIET_POLLS
            && poll % SPARSE_EVERY != 0
        {
            continue;
        }
        let result = read(device);
        if let Some(q) = quiet {
            *q = match &result {
                Ok(l) if !l.is_empty() => 0,
                _ => q.saturating_add(1),
            };
        }
        let list = match result {
            Ok(l) => l,
            Err(e) if is_device_fatal(&e) => return Err(e),
            // Graphics and MPS lists are unsupported on many data-centre
            // setups; that is normal, not an error worth reporting.
            Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) if kind != "compute" => continue,
            Err(e) => {
                dev.errors.push(format!("processes ({kind}): {}", describe(&e)));
                dev.processes_unreadable = true;
                continue;
            }
        };
        merge_list(&mut by_pid, list, kind);
    }
    dev.processes = by_pid;
    Ok(())
}

/// Adds one list's processes to `by_pid`, marking the list they came from;
/// a PID already there keeps the larger of its figures.
fn merge_list(by_pid: &mut Vec<RawProcess>, list: Vec<ProcessInfo>, kind: &str) {
    for p in list {
        let used = match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        };
        let entry = match by_pid.iter_mut().position(|r| r.pid == p.pid) {
            Some(i) => &mut by_pid[i],
            None => {
                by_pid.push(RawProcess {
                    pid: p.pid,
                    used_bytes: used,
                    ..RawProcess::default()
                });
                let last = by_pid.len() - 1;
                &mut by_pid[last]
            }
        };
        entry.used_bytes = entry.used_bytes.max(used);
        let k = &mut entry.kinds;
        match kind {
            "compute" => k.compute = true,
            "graphics" => k.graphics = true,
            _ => k.mps = true,
        }
    }
}

pub(super) fn sample_util(device: &Device<'_>, uuid: &str, ctx: &mut PollCtx<'_>) {
    let Some(util) = ctx.utilization.as_deref_mut() else {
        return;
    };
    let since = ctx.util_seen.get(uuid).copied().unwrap_or(0);
    let samples = match device.process_utilization_stats(since) {
        Ok(s) => s,
        // NotFound means "no sample newer than `since`": an idle GPU.
        Err(NvmlError::NotFound) => Vec::new(),
        Err(_) => return,
    };
    let per_pid = util.entry(uuid.to_string()).or_default();
    for s in samples {
        ctx.util_seen.insert(uuid.to_string(), s.timestamp.max(since));
        let e = per_pid.entry(s.pid).or_insert(0);
        *e = (*e).max(s.sm_util);
    }
}
