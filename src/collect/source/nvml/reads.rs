//! The per-poll reads of one NVML device handle: memory (v2, with the v1
//! fallback of old drivers), the three process lists (one call each into a
//! buffer sized from the last poll, with the quiet-list schedule that skips
//! empty graphics and MPS lists) and the per-process utilisation samples. Part of the NVML source, so it may name
//! `nvml_wrapper`; it must not decide whether a device is up (its caller
//! does, from the errors returned) nor keep state beyond `Memo`.

use std::ffi::c_uint;

use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlProcessInfo_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE, nvmlReturn_t,
};

use super::errors::symbol;
use super::{Memo, PollCtx, describe, is_device_fatal};
use crate::collect::source::{RawDevice, RawProcess};
use crate::data::snapshot::Memory;

/// The graphics and MPS process lists (135 and 70 us of CPU on the H200)
/// are empty on most compute nodes. Once one has been empty (or
/// unsupported) for `QUIET_READS` reads in a row (reads, not polls: the
/// lists are read only when something may have changed, `gate.rs`), it is
/// read at most every `SPARSE_EVERY` polls while memory moves, so a process
/// only in that list counts as unattributed memory for at most that many
/// polls; and at most every `QUIET_REFRESH_POLLS` polls when nothing moved
/// and the lists are read only because `gate::REFRESH_POLLS` passed, when
/// no process can have appeared there unseen but by memory that cancels to
/// the byte.
const QUIET_READS: u32 = 3;
pub(super) const SPARSE_EVERY: u64 = 5;
const QUIET_REFRESH_POLLS: u64 = 30;

/// The three lists, in `Memo::room` order: compute, graphics, MPS.
const KINDS: [&str; 3] = ["compute", "graphics", "mps"];

/// The signature the three `_v3` list symbols share.
type ListSym = unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;

/// Memory v2, falling back to v1 (no `reserved`) on drivers without v2.
/// Field-level failures are recorded; a lost GPU fails the device.
pub(super) fn read_memory(device: &Device<'_>, dev: &mut RawDevice) -> Result<(), NvmlError> {
    let read = match device.memory_info() {
        Ok(m) => Ok(Memory {
            total_bytes: m.total,
            used_bytes: m.used,
            free_bytes: m.free,
            reserved_bytes: Some(m.reserved),
        }),
        Err(NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound | NvmlError::NotSupported) => {
            memory_v1(device)
        }
        Err(e) => Err(e),
    };
    match read {
        Ok(m) => dev.device.memory = Some(m),
        Err(e) if is_device_fatal(&e) => return Err(e),
        Err(e) => dev.device.errors.push(format!("memory: {}", describe(&e))),
    }
    Ok(())
}

fn memory_v1(device: &Device<'_>) -> Result<Memory, NvmlError> {
    use nvml_wrapper_sys::bindings::nvmlMemory_t;
    // SAFETY: `lib()` and `handle()` give the loaded library and a handle that
    // is valid while `device` borrows the live `Nvml`; the symbol's signature
    // comes from the bindings and the out-struct is plain data we zero first.
    unsafe {
        let sym = symbol(&device.nvml().lib().nvmlDeviceGetMemoryInfo)?;
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
/// `periodic`: nothing moved since the last read; the lists are read only
/// because they are old.
pub(super) fn read_processes(
    device: &Device<'_>,
    dev: &mut RawDevice,
    memo: &mut Memo,
    poll: u64,
    periodic: bool,
) -> Result<(), NvmlError> {
    let mut by_pid: Vec<RawProcess> = Vec::new();
    let every = if periodic { QUIET_REFRESH_POLLS } else { SPARSE_EVERY };
    // Decided once for both quiet lists: deciding per list let the graphics
    // read (which moves `sparse_read_at`) keep a quiet MPS list unread.
    let sparse_due = poll.saturating_sub(memo.sparse_read_at) >= every;
    for (i, kind) in KINDS.into_iter().enumerate() {
        // Slot of this list in `memo.quiet`; the compute list is always read.
        let quiet = i.checked_sub(1).and_then(|q| memo.quiet.get_mut(q));
        if let Some(q) = &quiet
            && **q >= QUIET_READS
            && !sparse_due
        {
            // Skipped: a read of the lists that changes anything must come
            // back for it once it is due (`Memo::sparse_due`). A periodic
            // read saw no change to come back for.
            memo.sparse_pending |= !periodic;
            continue;
        }
        if i > 0 {
            memo.sparse_read_at = poll;
        }
        let result = read_list(device, i, &mut memo.room[i]);
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
                dev.device.errors.push(format!("processes ({kind}): {}", describe(&e)));
                dev.device.processes_unreadable = true;
                continue;
            }
        };
        merge_list(&mut by_pid, list, kind);
    }
    if memo.sparse_read_at == poll {
        memo.sparse_pending = false;
    }
    dev.processes = by_pid;
    Ok(())
}

/// Room for a list that held `last` entries: a few more, so a process
/// that starts between two polls rarely costs a second call.
fn room_for(last: u32) -> u32 {
    (last.saturating_mul(5) / 4).saturating_add(4).max(8)
}

/// One `_v3` process list (list `i` of `KINDS`) in one NVML call, where
/// nvml-wrapper makes two (a size query, then the fill): the buffer is
/// sized from `last`, the entries the list held last poll. On
/// INSUFFICIENT_SIZE NVML has written the count it needs; the buffer grows
/// to that plus room and the call is made once more, so a burst of new
/// processes is still listed in this poll. The symbol and the struct are
/// the ones nvml-wrapper 0.13 uses, and entries convert through its own
/// `ProcessInfo::from` (NVML_VALUE_NOT_AVAILABLE -> `Unavailable`).
fn read_list(device: &Device<'_>, i: usize, last: &mut u32) -> Result<Vec<ProcessInfo>, NvmlError> {
    let lib = device.nvml().lib();
    let sym: &ListSym = symbol(match i {
        0 => &lib.nvmlDeviceGetComputeRunningProcesses_v3,
        1 => &lib.nvmlDeviceGetGraphicsRunningProcesses_v3,
        _ => &lib.nvmlDeviceGetMPSComputeRunningProcesses_v3,
    })?;
    let blank = nvmlProcessInfo_t {
        pid: 0,
        usedGpuMemory: 0,
        gpuInstanceId: 0,
        computeInstanceId: 0,
    };
    let mut room = room_for(*last);
    for _ in 0..2 {
        let mut buf = vec![blank; room as usize];
        let mut count: c_uint = room;
        // SAFETY: `handle()` is valid while `device` borrows the live
        // `Nvml`; `count` says how many entries `buf` holds, and NVML
        // writes at most that many (it answers INSUFFICIENT_SIZE instead).
        let rc = unsafe { sym(device.handle(), &mut count, buf.as_mut_ptr()) };
        if rc == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
            *last = count;
            room = room_for(count);
            continue;
        }
        nvml_try(rc)?;
        *last = count;
        buf.truncate(count.min(room) as usize);
        return Ok(buf.into_iter().map(ProcessInfo::from).collect());
    }
    Err(NvmlError::InsufficientSize(Some(room as usize)))
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

/// Takes the per-process samples newer than the last seen into this
/// poll's `ctx.utilization`. Returns whether any process was active, or
/// `None` when NVML gave no answer (`idle.rs` watches on that).
pub(super) fn sample_util(device: &Device<'_>, uuid: &str, ctx: &mut PollCtx<'_>) -> Option<bool> {
    let util = ctx.utilization.as_deref_mut()?;
    let since = ctx.known.util_seen.get(uuid).copied().unwrap_or(0);
    let samples = match device.process_utilization_stats(since) {
        Ok(s) => s,
        // NotFound means "no sample newer than `since`": an idle GPU.
        Err(NvmlError::NotFound) => Vec::new(),
        Err(_) => return None,
    };
    let per_pid = util.entry(uuid.to_string()).or_default();
    let mut active = false;
    for s in samples {
        ctx.known.util_seen.insert(uuid.to_string(), s.timestamp.max(since));
        if s.sm_util > 0 {
            tracing::trace!(uuid, pid = s.pid, sm = s.sm_util, ts = s.timestamp, "active sample");
        }
        active |= s.sm_util > 0;
        let e = per_pid.entry(s.pid).or_insert(0);
        *e = (*e).max(s.sm_util);
    }
    Some(active)
}
