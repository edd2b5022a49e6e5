//! Diagnosis over successive polls: the holder split (live, zombie, exited,
//! unattributed), memory not released after a holder left, idle holders, and
//! (in `leak.rs`) leak trends. Pure state machines fed with snapshot times;
//! this module must not read clocks, /proc or NVML.

pub mod leak;

use std::collections::HashMap;

use crate::snapshot::{Holder, Holders, Process, Unreleased};

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
            Some(Holder::Live) | None => live += b,
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
    let h = Holders {
        live: narrow(live),
        zombie: narrow(zombie),
        exited: narrow(exited),
        unattributed: 0,
    };
    Holders {
        unattributed: used - (h.live + h.zombie + h.exited).min(used),
        ..h
    }
}

/// Identity of a process on a device across polls: PIDs are reused, so the
/// start time is part of the key (its bits, to be hashable).
pub type ProcKey = (String, u32, u64);

pub fn proc_key(uuid: &str, p: &Process) -> ProcKey {
    (uuid.to_string(), p.pid, p.start_time.map_or(0, f64::to_bits))
}

/// A holder that left NVML's list, and the device's unattributed memory just
/// before, so later polls can tell whether its memory came back.
#[derive(Debug, Clone)]
struct Departure {
    pid: u32,
    comm: String,
    user: String,
    bytes: u64,
    since: f64,
    unattributed_before: u64,
}

/// Tracks memory that stays used after its holder left the process list
/// (the driver releasing late, or a context kept by something invisible).
#[derive(Debug, Default)]
pub struct LateRelease {
    /// Per device: the previous poll's processes and unattributed bytes.
    last: HashMap<String, (Vec<Process>, u64)>,
    pending: HashMap<String, Vec<Departure>>,
}

/// A device keeps at most this many pending departures: enough for any
/// real job teardown, bounded under PID churn.
const MAX_PENDING: usize = 64;

impl LateRelease {
    /// Feeds one device's poll; returns what is still unreleased after
    /// `after` seconds. A departure counts as released once the device's
    /// unattributed memory has fallen back below half of its bytes above
    /// the level before it left.
    pub fn observe(
        &mut self,
        uuid: &str,
        now: f64,
        after: f64,
        processes: &[Process],
        holders: &Holders,
    ) -> Vec<Unreleased> {
        let pending = self.pending.entry(uuid.to_string()).or_default();
        if let Some((prev, unattributed_before)) = self.last.get(uuid) {
            for p in prev
                .iter()
                .filter(|p| !processes.iter().any(|q| q.pid == p.pid && q.start_time == p.start_time))
            {
                let bytes = p.used_bytes.unwrap_or(0);
                if bytes > 0 && pending.len() < MAX_PENDING {
                    pending.push(Departure {
                        pid: p.pid,
                        comm: p.comm.clone(),
                        user: p.user.clone(),
                        bytes,
                        since: now,
                        unattributed_before: *unattributed_before,
                    });
                }
            }
        }
        pending.retain(|d| holders.unattributed.saturating_sub(d.unattributed_before) >= d.bytes / 2);
        self.last
            .insert(uuid.to_string(), (processes.to_vec(), holders.unattributed));
        pending
            .iter()
            .filter(|d| now - d.since >= after)
            .map(|d| Unreleased {
                pid: d.pid,
                comm: d.comm.clone(),
                user: d.user.clone(),
                bytes: d.bytes.min(holders.unattributed.saturating_sub(d.unattributed_before)),
                since: d.since,
            })
            .collect()
    }

    /// Forgets devices not seen this poll (lost or gone).
    pub fn retain_devices(&mut self, present: &dyn Fn(&str) -> bool) {
        self.last.retain(|k, _| present(k));
        self.pending.retain(|k, _| present(k));
    }
}

/// Tracks when each process last showed SM activity.
#[derive(Debug, Default)]
pub struct IdleTracker {
    last_active: HashMap<ProcKey, f64>,
}

impl IdleTracker {
    /// Records a utilisation sample (`None` when not sampled this poll) and
    /// returns seconds without activity. A process first seen counts as
    /// active then, so a new process is never idle at once.
    pub fn observe(&mut self, key: &ProcKey, now: f64, sm_util: Option<u32>, sampled: bool) -> f64 {
        let t = self.last_active.entry(key.clone()).or_insert(now);
        if sampled && sm_util.is_some_and(|u| u > 0) {
            *t = now;
        }
        (now - *t).max(0.0)
    }

    pub fn retain(&mut self, keep: impl Fn(&ProcKey) -> bool) {
        self.last_active.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests;
