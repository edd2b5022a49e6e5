//! Diagnosis over successive polls: the holder split (live, zombie, exited,
//! unattributed), (in `late.rs`) memory not released after a holder left,
//! idle holders, (in `stuck.rs`) processes stuck in D, (in `leak.rs`) leak
//! trends and (in `forecast.rs`) the time to full. Pure state machines fed
//! with snapshot times;
//! this module must not read clocks, /proc or NVML.

pub mod forecast;
mod late;
pub mod leak;
pub mod leak_alloc;
pub mod peaks;
pub mod stuck;

pub use late::LateRelease;

use crate::data::snapshot::{Holder, Holders, Process};

/// Splits `used` between holder classes so the four parts add up exactly.
///
/// Processes whose memory is unavailable add nothing (their memory is part
/// of `unattributed`). If the listed sum exceeds `used` (NVML reads the two
/// at different instants), the excess is taken off the listed classes,
/// live first, so the parts still add up to `used`.
pub fn holder_split(used: u64, processes: &[Process]) -> Holders {
    // Sum in u128 so absurd inputs cannot saturate and break the invariant.
    let (mut live, mut zombie, mut exited) = (0u128, 0u128, 0u128);
    for p in processes {
        let b = u128::from(p.used_bytes.unwrap_or(0));
        match p.holder {
            Some(Holder::Zombie) => zombie += b,
            Some(Holder::Exited) => exited += b,
            // A process is never `Unattributed`; unknown counts as live.
            Some(Holder::Live | Holder::Unattributed) | None => live += b,
        }
    }
    let used128 = u128::from(used);
    let mut excess = (live + zombie + exited).saturating_sub(used128);
    for part in [&mut live, &mut zombie, &mut exited] {
        let cut = excess.min(*part);
        *part -= cut;
        excess -= cut;
    }
    // Each part is now at most `used`, so the conversions cannot fail.
    let narrow = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    let (live, zombie, exited) = (narrow(live), narrow(zombie), narrow(exited));
    Holders {
        live,
        zombie,
        exited,
        unattributed: used - (live + zombie + exited).min(used),
    }
}

/// Identity of a process on a device across polls: (device id, pid, start
/// time bits). PIDs are reused, so the start time is part of the key (its
/// bits, to be hashable). The device is a small id the caller interns per
/// UUID (`pipeline::DeviceIds`) rather than the UUID string: the key is then
/// `Copy`, so the leak, idle and liveness maps do not allocate and hash a
/// 40-byte string per process per poll (measured: the bulk of a 64 x 1000
/// poll before this change).
pub type ProcKey = (u32, u32, u64);

pub fn proc_key(device: u32, p: &Process) -> ProcKey {
    (device, p.pid, p.start_time.map_or(0, f64::to_bits))
}

#[cfg(test)]
mod tests;
