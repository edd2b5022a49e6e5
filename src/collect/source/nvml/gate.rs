//! Whether a device's process lists must be read this poll, or the lists of
//! an earlier poll still say who holds its memory.
//!
//! On an H200 with 8 PyTorch processes the compute list costs about 415 us
//! of CPU a call, in the driver (it walks every client's objects), and
//! its size query alone 175 us, against 75 us for the device's memory
//! figures that every poll reads anyway (BENCHMARKS.md, "Where an idle
//! poll's microseconds go"). A process cannot appear, leave, grow or
//! shrink on a GPU without changing the GPU's used memory, except when
//! changes cancel to the byte or the driver drops an exited process from
//! its lists while keeping its memory. So the lists are read again when:
//! - the device's used memory differs from when they were last read;
//! - the caller says a listed process left (`refresh`: the pipeline saw
//!   one exit, turn zombie or be replaced, which covers the two cases
//!   above, one poll later at most);
//! - `REFRESH_POLLS` polls have passed (a bound on anything else; such a
//!   read leaves quiet graphics and MPS lists to their own, longer bound,
//!   `reads::QUIET_REFRESH_POLLS`);
//! - a quiet graphics or MPS list is due (see `reads.rs`) after a change;
//! - the last read failed in part, or memory could not be read.
//!
//! Owns: that decision and the kept lists. Must not: read anything itself
//! beyond calling `reads::read_processes`, or look at /proc (the caller's
//! `refresh` carries what /proc said).

use nvml_wrapper::Device;
use nvml_wrapper::error::NvmlError;

use super::Memo;
use super::reads::read_processes;
use crate::collect::source::{RawDevice, RawProcess};

/// The lists are read at least this often, whatever else is seen.
pub(super) const REFRESH_POLLS: u64 = 10;

/// The lists as last read and the used memory they were read at.
#[derive(Debug, Clone, Default)]
pub(super) struct Kept {
    used: u64,
    read_at: u64,
    processes: Vec<RawProcess>,
}

/// Sets `dev.processes` for this poll: last read's lists when they still
/// hold, else a fresh read. `dev.memory` must be this poll's.
pub(super) fn processes(
    device: &Device<'_>,
    dev: &mut RawDevice,
    memo: &mut Memo,
    poll: u64,
    refresh: bool,
) -> Result<(), NvmlError> {
    let used = dev.device.memory.map(|m| m.used_bytes);
    let mut periodic = false;
    if let (Some(kept), Some(used)) = (&memo.kept, used) {
        let fresh = poll.saturating_sub(kept.read_at) < REFRESH_POLLS;
        let still = !refresh && kept.used == used && !memo.sparse_due(poll);
        if still && fresh {
            dev.processes.clone_from(&kept.processes);
            return Ok(());
        }
        periodic = still;
    }
    let errors_before = dev.device.errors.len();
    let result = read_processes(device, dev, memo, poll, periodic);
    let whole = result.is_ok() && !dev.device.processes_unreadable && dev.device.errors.len() == errors_before;
    memo.kept = match used {
        Some(used) if whole => Some(Kept {
            used,
            read_at: poll,
            processes: dev.processes.clone(),
        }),
        _ => None,
    };
    result
}
