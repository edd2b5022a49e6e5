//! Diagnosis over successive polls: the holder split (live, zombie, exited,
//! unattributed), memory not released after a holder left, idle holders,
//! (in `stuck.rs`) processes stuck in D, and (in `leak.rs`) leak trends. Pure state machines fed with snapshot times;
//! this module must not read clocks, /proc or NVML.

mod bytes32;
pub mod leak;
pub mod leak_alloc;
pub mod peaks;
pub mod stuck;

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use crate::snapshot::{Holder, Holders, Process, Text, Unreleased};

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

/// A holder that left NVML's list, and the device's unattributed memory just
/// before, so later polls can tell whether its memory came back.
#[derive(Debug, Clone)]
struct Departure {
    pid: u32,
    comm: Text,
    user: Text,
    bytes: u64,
    since: f64,
    unattributed_before: u64,
}

/// Tracks memory that stays used after its holder left the process list
/// (the driver releasing late, or a context kept by something invisible).
#[derive(Debug, Default)]
pub struct LateRelease {
    /// Per device: the processes of the previous poll and its unattributed
    /// bytes.
    last: HashMap<String, Listed>,
    pending: HashMap<String, Vec<Departure>>,
}

/// One device's listed processes, updated in place each poll: a process
/// still listed costs a hash lookup, not a copy of the whole `Process` and
/// a scan of the new list (which was O(n²) and cloned every string of
/// every process each poll).
#[derive(Debug, Default)]
struct Listed {
    /// Poll counter; an entry not stamped with the current one has left.
    generation: u64,
    unattributed: u64,
    /// FxHash: the keys are the kernel's PIDs and start times, not input
    /// anyone picks to collide.
    procs: FxHashMap<(u32, Option<u64>), Seen>,
}

#[derive(Debug)]
struct Seen {
    generation: u64,
    /// Position in the poll's list, so departures keep the list's order.
    order: usize,
    bytes: u64,
    comm: Text,
    user: Text,
}

impl Listed {
    /// Stamps this poll's processes with a new generation, adding those not
    /// seen before; returns how many entries carry the new stamp. When that
    /// is all of them, nobody left and the sweeps are skipped.
    fn stamp(&mut self, processes: &[Process]) -> usize {
        self.generation += 1;
        let generation = self.generation;
        let mut stamped = 0;
        for (order, p) in processes.iter().enumerate() {
            // A process is the same one when pid and start time match.
            let key = (p.pid, p.start_time.map(f64::to_bits));
            let bytes = p.used_bytes.unwrap_or(0);
            match self.procs.get_mut(&key) {
                Some(s) => {
                    stamped += usize::from(s.generation != generation);
                    s.generation = generation;
                    s.order = order;
                    s.bytes = bytes;
                }
                None => {
                    let seen = Seen {
                        generation,
                        order,
                        bytes,
                        comm: p.comm.clone(),
                        user: p.user.clone(),
                    };
                    self.procs.insert(key, seen);
                    stamped += 1;
                }
            }
        }
        stamped
    }

    /// Adds to `pending`, in the poll list's order and up to
    /// [`MAX_PENDING`], the processes with memory that this poll did not see.
    fn record_departures(&self, pending: &mut Vec<Departure>, now: f64) {
        let mut gone: Vec<((u32, Option<u64>), &Seen)> = self
            .procs
            .iter()
            .filter(|(_, s)| s.generation != self.generation && s.bytes > 0)
            .map(|(k, s)| (*k, s))
            .collect();
        gone.sort_unstable_by_key(|(_, s)| s.order);
        for ((pid, _), s) in gone {
            if pending.len() >= MAX_PENDING {
                break;
            }
            pending.push(Departure {
                pid,
                comm: s.comm.clone(),
                user: s.user.clone(),
                bytes: s.bytes,
                since: now,
                unattributed_before: self.unattributed,
            });
        }
    }
}

/// The departures pending for at least `after` seconds, each with the part
/// of its bytes still unattributed.
fn unreleased(pending: &[Departure], unattributed: u64, now: f64, after: f64) -> Vec<Unreleased> {
    pending
        .iter()
        .filter(|d| now - d.since >= after)
        .map(|d| Unreleased {
            pid: d.pid,
            comm: d.comm.clone(),
            user: d.user.clone(),
            bytes: d.bytes.min(unattributed.saturating_sub(d.unattributed_before)),
            since: d.since,
        })
        .collect()
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
        // Looked up before inserting: a device seen before (every poll but
        // its first) costs no UUID copy.
        if !self.pending.contains_key(uuid) {
            self.pending.insert(uuid.to_string(), Vec::new());
        }
        let first = !self.last.contains_key(uuid);
        if first {
            self.last.insert(uuid.to_string(), Listed::default());
        }
        let (Some(pending), Some(listed)) = (self.pending.get_mut(uuid), self.last.get_mut(uuid)) else {
            return Vec::new();
        };
        let stamped = listed.stamp(processes);
        let someone_left = stamped < listed.procs.len();
        if !first && someone_left {
            listed.record_departures(pending, now);
        }
        if someone_left {
            let generation = listed.generation;
            listed.procs.retain(|_, s| s.generation == generation);
        }
        listed.unattributed = holders.unattributed;
        pending.retain(|d| holders.unattributed.saturating_sub(d.unattributed_before) >= d.bytes / 2);
        unreleased(pending, holders.unattributed, now, after)
    }

    /// Forgets devices not seen this poll (lost or gone).
    pub fn retain_devices(&mut self, present: &dyn Fn(&str) -> bool) {
        self.last.retain(|k, _| present(k));
        self.pending.retain(|k, _| present(k));
    }

    /// (devices remembered, departures pending over all devices), for
    /// checks that this stays bounded (`Pipeline::retained`).
    pub fn sizes(&self) -> (usize, usize) {
        (self.last.len(), self.pending.values().map(Vec::len).sum())
    }
}

#[cfg(test)]
mod tests;
