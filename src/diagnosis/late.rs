//! Late release: memory that stays used after its holder left NVML's
//! process list (the driver releasing late, or a context kept by something
//! invisible).
//!
//! Owns: per device, the previous poll's listed processes (what a departure
//! needs: PID, name, bytes, place in the list) and the departures still
//! watched. Must not: read clocks, /proc or NVML (times come from the
//! caller), or keep anything of a process beyond the poll after it left.
//!
//! Why sorted vectors (issue 21): at 64 GPUs x 1000 processes the hash map
//! per device this replaced held 12 MiB (80-byte entries in tables kept
//! under seven-eighths full) and cost a cache miss per process per poll.
//! Here a device's processes are one vector sorted by (PID, start time),
//! walked once beside this poll's keys sorted the same way; the entries of
//! processes still listed are updated in place, so a steady poll moves no
//! name and touches no reference count.

use std::collections::HashMap;

use crate::snapshot::{Holders, Process, Text, Unreleased};

/// A process's identity on one device: PID, whether a start time is known,
/// and its bits, packed so that keys sort and compare as one integer (the
/// same process when PID and start time match; PIDs are reused).
type Key = u128;

fn key(p: &Process) -> Key {
    let start = p.start_time.map_or(0, |t| (1u128 << 64) | u128::from(t.to_bits()));
    (u128::from(p.pid) << 65) | start
}

fn pid_of(k: Key) -> u32 {
    // The top 63 bits hold the PID: the cast keeps exactly those 32.
    (k >> 65) as u32
}

/// One process of the previous poll.
#[derive(Debug)]
struct Seen {
    key: Key,
    bytes: u64,
    /// Position in the poll's list, so departures keep the list's order.
    order: u32,
    comm: Text,
    user: Text,
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

/// What is remembered of one device.
#[derive(Debug, Default)]
struct DeviceLate {
    /// The previous poll's processes, sorted by key, one entry a key.
    listed: Vec<Seen>,
    unattributed: u64,
    pending: Vec<Departure>,
}

/// Tracks memory that stays used after its holder left the process list.
#[derive(Debug, Default)]
pub struct LateRelease {
    devices: HashMap<String, DeviceLate>,
    /// Scratch, reused for every device: this poll's keys with their
    /// positions, sorted.
    keys: Vec<(Key, u32)>,
    /// Scratch: the next `listed` of a device whose processes changed
    /// (swapped with it, so one spare buffer serves every device).
    next: Vec<Seen>,
    /// Scratch: departures of one poll with their positions.
    gone: Vec<(u32, Departure)>,
}

/// A device keeps at most this many pending departures: enough for any
/// real job teardown, bounded under PID churn.
const MAX_PENDING: usize = 64;

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

/// Sorts `processes`' keys into `keys`, one entry a key: a key listed twice
/// keeps its last position (as the map this replaced did).
fn sorted_keys(processes: &[Process], keys: &mut Vec<(Key, u32)>) {
    keys.clear();
    keys.extend(
        processes
            .iter()
            .enumerate()
            .map(|(i, p)| (key(p), u32::try_from(i).unwrap_or(u32::MAX))),
    );
    keys.sort_unstable();
    // Sorted by (key, position): the last of equal keys is the last listed.
    keys.dedup_by(|later, earlier| {
        let same = later.0 == earlier.0;
        if same {
            earlier.1 = later.1;
        }
        same
    });
}

/// Moves `listed` into `next` in key order beside this poll's sorted
/// `keys`: a process still listed keeps its entry (and its names, moved, not
/// cloned) with this poll's bytes and position, a new one gets an entry, and
/// one that left with memory is noted in `gone` with its last position.
fn merge(
    listed: &mut Vec<Seen>,
    keys: &[(Key, u32)],
    processes: &[Process],
    next: &mut Vec<Seen>,
    gone: &mut Vec<(u32, Departure)>,
    now: f64,
) {
    let mut old = listed.drain(..).peekable();
    for &(k, i) in keys {
        while let Some(s) = old.next_if(|s| s.key < k) {
            if s.bytes > 0 {
                gone.push((s.order, departure(s, now)));
            }
        }
        let p = processes.get(i as usize);
        let bytes = p.map_or(0, |p| p.used_bytes.unwrap_or(0));
        match old.next_if(|s| s.key == k) {
            Some(s) => next.push(Seen { bytes, order: i, ..s }),
            None => next.push(Seen {
                key: k,
                bytes,
                order: i,
                comm: p.map_or(Text::EMPTY, |p| p.comm.clone()),
                user: p.map_or(Text::EMPTY, |p| p.user.clone()),
            }),
        }
    }
    gone.extend(old.filter(|s| s.bytes > 0).map(|s| (s.order, departure(s, now))));
}

/// A departure of `s` at `now`; the caller sets the unattributed level.
fn departure(s: Seen, now: f64) -> Departure {
    Departure {
        pid: pid_of(s.key),
        comm: s.comm,
        user: s.user,
        bytes: s.bytes,
        since: now,
        unattributed_before: 0,
    }
}

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
        let LateRelease {
            devices,
            keys,
            next,
            gone,
        } = self;
        // Looked up before inserting: a device seen before (every poll but
        // its first) costs no UUID copy.
        let first = !devices.contains_key(uuid);
        if first {
            devices.insert(uuid.to_string(), DeviceLate::default());
        }
        let Some(dev) = devices.get_mut(uuid) else {
            return Vec::new();
        };
        sorted_keys(processes, keys);
        let same = dev.listed.len() == keys.len() && dev.listed.iter().zip(keys.iter()).all(|(s, k)| s.key == k.0);
        if same {
            // Nobody left or came: update in place.
            for (s, &(_, i)) in dev.listed.iter_mut().zip(keys.iter()) {
                s.order = i;
                s.bytes = processes.get(i as usize).map_or(0, |p| p.used_bytes.unwrap_or(0));
            }
        } else {
            merge(&mut dev.listed, keys, processes, next, gone, now);
            std::mem::swap(&mut dev.listed, next);
            next.clear();
        }
        if !first && !gone.is_empty() {
            gone.sort_unstable_by_key(|(order, _)| *order);
            let room = MAX_PENDING.saturating_sub(dev.pending.len());
            let before = dev.unattributed;
            dev.pending.extend(gone.drain(..).take(room).map(|(_, d)| Departure {
                unattributed_before: before,
                ..d
            }));
        }
        gone.clear();
        dev.unattributed = holders.unattributed;
        dev.pending
            .retain(|d| holders.unattributed.saturating_sub(d.unattributed_before) >= d.bytes / 2);
        unreleased(&dev.pending, holders.unattributed, now, after)
    }

    /// Forgets devices not seen this poll (lost or gone).
    pub fn retain_devices(&mut self, present: &dyn Fn(&str) -> bool) {
        self.devices.retain(|k, _| present(k));
    }

    /// (devices remembered, departures pending over all devices), for
    /// checks that this stays bounded (`Pipeline::retained`).
    pub fn sizes(&self) -> (usize, usize) {
        let pending = self.devices.values().map(|d| d.pending.len()).sum();
        (self.devices.len(), pending)
    }
}
