//! Diagnosis over successive polls: the holder split (live, zombie, exited,
//! unattributed), memory not released after a holder left, idle holders,
//! (in `stuck.rs`) processes stuck in D, and (in `leak.rs`) leak trends. Pure state machines fed with snapshot times;
//! this module must not read clocks, /proc or NVML.

pub mod leak;
pub mod leak_alloc;
pub mod peaks;
pub mod stuck;

use std::collections::HashMap;

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
    procs: HashMap<(u32, Option<u64>), Seen>,
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
        let first = !self.last.contains_key(uuid);
        let listed = self.last.entry(uuid.to_string()).or_default();
        listed.generation += 1;
        let generation = listed.generation;
        for (order, p) in processes.iter().enumerate() {
            // A process is the same one when pid and start time match.
            let key = (p.pid, p.start_time.map(f64::to_bits));
            let bytes = p.used_bytes.unwrap_or(0);
            match listed.procs.get_mut(&key) {
                Some(s) => {
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
                    listed.procs.insert(key, seen);
                }
            }
        }
        if !first {
            let mut gone: Vec<((u32, Option<u64>), &Seen)> = listed
                .procs
                .iter()
                .filter(|(_, s)| s.generation != generation && s.bytes > 0)
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
                    unattributed_before: listed.unattributed,
                });
            }
        }
        listed.procs.retain(|_, s| s.generation == generation);
        listed.unattributed = holders.unattributed;
        pending.retain(|d| holders.unattributed.saturating_sub(d.unattributed_before) >= d.bytes / 2);
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

    /// (devices remembered, departures pending over all devices), for
    /// checks that this stays bounded (`Pipeline::retained`).
    pub fn sizes(&self) -> (usize, usize) {
        (self.last.len(), self.pending.values().map(Vec::len).sum())
    }
}

/// Tracks when each process last showed SM activity.
#[derive(Debug, Default)]
pub struct IdleTracker {
    /// Last activity and the generation the key was last seen in.
    last_active: HashMap<ProcKey, (f64, u64)>,
    generation: u64,
}

impl IdleTracker {
    /// Records a utilisation sample (`None` when not sampled this poll) and
    /// returns seconds without activity. A process first seen counts as
    /// active then, so a new process is never idle at once.
    pub fn observe(&mut self, key: &ProcKey, now: f64, sm_util: Option<u32>, sampled: bool) -> f64 {
        let (t, seen) = self.last_active.entry(*key).or_insert((now, self.generation));
        *seen = self.generation;
        if sampled && sm_util.is_some_and(|u| u > 0) {
            *t = now;
        }
        (now - *t).max(0.0)
    }

    /// Marks a process as still present without a sample (not a live
    /// holder this poll), so [`retain_seen`](Self::retain_seen) keeps it.
    pub fn touch(&mut self, key: &ProcKey) {
        if let Some((_, seen)) = self.last_active.get_mut(key) {
            *seen = self.generation;
        }
    }

    /// Drops the processes neither observed nor touched since the previous
    /// call: a sweep without building a set of the live keys.
    pub fn retain_seen(&mut self) {
        let g = self.generation;
        self.last_active.retain(|_, (_, seen)| *seen == g);
        self.generation = g.wrapping_add(1);
    }

    pub fn retain(&mut self, keep: impl Fn(&ProcKey) -> bool) {
        self.last_active.retain(|k, _| keep(k));
    }

    /// Processes tracked.
    pub fn tracked(&self) -> usize {
        self.last_active.len()
    }
}

#[cfg(test)]
mod tests;
