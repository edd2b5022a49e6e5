//! The demo's allocator view: three processes of the built-in demo fleet
//! report allocator figures derived from their simulated NVML figure, through
//! [`AllocatorState::record`] (the receiver's own checks and OOM detection,
//! without the socket): the leaking inference worker (pid 4202) leaks
//! tensors, the warming-up pod (5101) only grows its cache, and the idle
//! notebook (4303) is fragmented, its retries climbing, and runs out of memory
//! 25 s into each 5-minute loop. Owns those shapes; it must not touch the
//! socket, the source or the pipeline.

use std::sync::Arc;

use super::message::DeviceReport;
use super::state::AllocatorState;
use crate::data::snapshot::{AllocPair, Device, Snapshot};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// What NVML counts beyond the allocator's pool: context, cuBLAS, NCCL.
const CONTEXT: u64 = 512 * MIB;
const LEAKER: u32 = 4202;
const CACHER: u32 = 5101;
const FRAGMENTED: u32 = 4303;
/// The fragmented notebook's first OOM, seconds into the demo, then one per loop.
const OOM_AT: f64 = 25.0;
const LOOP: f64 = 300.0;

fn pair(current: u64) -> AllocPair {
    AllocPair { current, peak: current }
}

/// The figures of one demo process on `d` at `t` seconds, from its NVML figure.
fn figures(pid: u32, d: &Device, used: u64, t: f64) -> Option<DeviceReport> {
    let reserved = used.saturating_sub(CONTEXT);
    let (allocated, active, split, retries, ooms) = match pid {
        // A steady 1 GiB of cache; the tensors grow with NVML's figure.
        LEAKER => {
            let a = reserved.saturating_sub(GIB);
            (a, a, 64 * MIB, 0, 0)
        }
        // Tensors stay at 2 GiB; the pool grows in the warm-up.
        CACHER => (reserved.min(2 * GIB), reserved.min(2 * GIB), 32 * MIB, 0, 0),
        // A quarter of the pool in tensors, much of the rest split blocks;
        // a cudaMalloc retry every 10 s.
        FRAGMENTED => {
            let ooms = if t >= OOM_AT {
                1 + ((t - OOM_AT) / LOOP) as u64
            } else {
                0
            };
            (
                reserved / 4,
                reserved * 3 / 10,
                reserved * 2 / 5,
                3 + (t / 10.0) as u64,
                ooms,
            )
        }
        _ => return None,
    };
    Some(DeviceReport {
        uuid: d.uuid.clone(),
        allocated: pair(allocated),
        reserved: pair(reserved),
        active: pair(active),
        inactive_split: pair(split),
        alloc_retries: retries,
        ooms,
    })
}

/// Records the reports the demo processes present on `devices` send at `t`
/// seconds into the demo (Unix time `now`).
pub fn feed(state: &AllocatorState, devices: &[Device], t: f64, now: f64) {
    for d in devices {
        // The three PIDs first: most of a large fleet is none of them.
        for p in d
            .processes
            .iter()
            .filter(|p| matches!(p.pid, LEAKER | CACHER | FRAGMENTED))
        {
            let Some(r) = p.used_bytes.and_then(|u| figures(p.pid, d, u, t)) else {
                continue;
            };
            state.record(p.pid, vec![r], now);
        }
    }
}

/// Feeds the demo's reports for each snapshot it is handed (the daemon's
/// alert loop hands it every published one).
pub fn feeder(state: Arc<AllocatorState>) -> impl FnMut(&Snapshot) + Send {
    let mut start = None;
    move |snap| {
        if !snap.has_polled() || snap.stale {
            return;
        }
        let t0 = *start.get_or_insert(snap.timestamp);
        feed(&state, &snap.devices, snap.timestamp - t0, snap.timestamp);
    }
}
