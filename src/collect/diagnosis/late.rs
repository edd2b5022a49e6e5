//! Late release: memory that stays used after its holder left NVML's
//! process list (the driver releasing late, or a context kept by something
//! invisible).
//!
//! Owns: per device, the previous poll's listed processes (what a departure
//! needs: PID, name, bytes, place in the list) and the departures still
//! watched. Must not: read clocks, /proc or NVML (times come from the
//! caller), or keep anything of a process beyond the poll after it left.
//!
//! A device's processes are one vector sorted by (PID, start time), walked
//! once beside this poll's keys sorted the same way; the entries of
//! processes still listed are updated in place, so a steady poll moves no
//! name.

use std::collections::HashMap;

use arcstr::ArcStr;

use crate::data::snapshot::{Holders, Process, Unreleased};

/// A process's identity on one device: (PID and whether a start time is
/// known, the start time's bits), so that keys sort and compare as one
/// pair of integers (the same process when PID and start time match; PIDs
/// are reused). Two `u64`, not a `u128`: an entry keeps 8-byte alignment.
type Key = (u64, u64);

fn key(p: &Process) -> Key {
    let pid = u64::from(p.pid) << 1;
    p.start_time.map_or((pid, 0), |t| (pid | 1, t.to_bits()))
}

fn pid_of(k: Key) -> u32 {
    // Bits 1 to 32 hold the PID: the cast keeps exactly those.
    (k.0 >> 1) as u32
}

/// One process of the previous poll.
#[derive(Debug)]
struct Seen {
    key: Key,
    bytes: u64,
    /// Position in the poll's list, so departures keep the list's order.
    order: u32,
    comm: ArcStr,
    user: ArcStr,
}

/// A holder that left NVML's list, and the device's unattributed memory just
/// before, so later polls can tell whether its memory came back.
#[derive(Debug, Clone)]
struct Departure {
    pid: u32,
    comm: ArcStr,
    user: ArcStr,
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
    /// Scratch: PID and position of each process, for sorting `keys`.
    order: Vec<u64>,
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
///
/// Sorted as one `u64` a process, PID then position, and only runs of one
/// PID (rare: a PID reused within a list) again by the whole key: the key
/// orders by PID first, so that is the same order. Sorting the tuples
/// themselves costs 6 % of a 64 x 1000 `Pipeline::build`.
fn sorted_keys(processes: &[Process], keys: &mut Vec<(Key, u32)>, scratch: &mut Vec<u64>) {
    scratch.clear();
    scratch.extend(
        processes
            .iter()
            .enumerate()
            .map(|(i, p)| (u64::from(p.pid) << 32) | u64::from(u32::try_from(i).unwrap_or(u32::MAX))),
    );
    scratch.sort_unstable();
    keys.clear();
    keys.extend(scratch.iter().map(|&k| {
        let i = k as u32;
        (processes.get(i as usize).map_or((0, 0), key), i)
    }));
    let mut at = 0;
    while at < keys.len() {
        let pid = pid_of(keys[at].0);
        let run = keys[at..].iter().take_while(|k| pid_of(k.0) == pid).count();
        if run > 1 {
            keys[at..at + run].sort_unstable();
        }
        at += run;
    }
    // Sorted by (key, position): the last of equal keys is the last listed.
    keys.dedup_by(|later, earlier| {
        let same = later.0 == earlier.0;
        if same {
            earlier.1 = later.1;
        }
        same
    });
}

/// Moves `old` into `new` in key order beside this poll's sorted `keys`: a
/// process still listed keeps its entry (and its names) with this poll's
/// bytes and position, a new one gets an entry, and one that left with
/// memory is noted in `gone` with its last position.
fn merge(
    old: &mut Vec<Seen>,
    new: &mut Vec<Seen>,
    (keys, processes): (&[(Key, u32)], &[Process]),
    gone: &mut Vec<(u32, Departure)>,
    now: f64,
) {
    let mut left = old.drain(..).peekable();
    let leave = |s: Seen, gone: &mut Vec<(u32, Departure)>| {
        if s.bytes > 0 {
            // The caller sets the unattributed level.
            let d = Departure {
                pid: pid_of(s.key),
                comm: s.comm,
                user: s.user,
                bytes: s.bytes,
                since: now,
                unattributed_before: 0,
            };
            gone.push((s.order, d));
        }
    };
    for &(k, i) in keys {
        while let Some(s) = left.next_if(|s| s.key < k) {
            leave(s, gone);
        }
        let p = processes.get(i as usize);
        let bytes = p.map_or(0, |p| p.used_bytes.unwrap_or(0));
        let (comm, user) = match left.next_if(|s| s.key == k) {
            Some(s) => (s.comm, s.user),
            None => p.map_or((ArcStr::new(), ArcStr::new()), |p| (p.comm.clone(), p.user.clone())),
        };
        new.push(Seen {
            key: k,
            bytes,
            order: i,
            comm,
            user,
        });
    }
    left.for_each(|s| leave(s, gone));
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
            order,
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
        sorted_keys(processes, keys, order);
        let same = dev.listed.len() == keys.len() && dev.listed.iter().zip(keys.iter()).all(|(s, k)| s.key == k.0);
        if same {
            // Nobody left or came: update in place.
            for (s, &(_, i)) in dev.listed.iter_mut().zip(keys.iter()) {
                s.order = i;
                s.bytes = processes.get(i as usize).map_or(0, |p| p.used_bytes.unwrap_or(0));
            }
        } else {
            merge(&mut dev.listed, next, (keys, processes), gone, now);
            std::mem::swap(&mut dev.listed, next);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The PID-first sort gives what sorting the whole keys with their
    /// positions and keeping the last of equal keys gives, for lists with
    /// repeated PIDs, with and without start times.
    #[test]
    fn sorted_keys_match_a_sort_of_the_whole_keys() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut keys, mut order) = (Vec::new(), Vec::new());
        for n in [0usize, 1, 2, 5, 64, 500] {
            let list: Vec<Process> = (0..n)
                .map(|_| Process {
                    pid: (next() % 16) as u32,
                    start_time: (next() % 3 != 0).then(|| (next() % 3) as f64),
                    ..Process::default()
                })
                .collect();
            let mut want: Vec<(Key, u32)> = list.iter().enumerate().map(|(i, p)| (key(p), i as u32)).collect();
            want.sort_unstable();
            want.reverse();
            want.dedup_by_key(|k| k.0);
            want.reverse();
            sorted_keys(&list, &mut keys, &mut order);
            assert_eq!(keys, want, "n = {n}");
        }
    }

    fn named(pid: u32, start: Option<f64>, comm: &ArcStr, user: &ArcStr) -> Process {
        Process {
            pid,
            start_time: start,
            used_bytes: Some(100),
            who: crate::data::snapshot::Who::shared(comm.clone(), user.clone(), None),
            ..Process::default()
        }
    }

    fn text(s: &str) -> ArcStr {
        s.to_string().into()
    }

    #[test]
    fn departures_keep_the_names_first_seen_through_every_merge() {
        let (python, bash, alice, bob) = (text("python"), text("bash"), text("alice"), text("bob"));
        let mut lr = LateRelease::default();
        let a = named(7, Some(1.0), &python, &alice);
        let b = named(8, None, &bash, &bob);
        lr.observe("g", 0.0, 0.0, &[a.clone(), b.clone()], &Holders::default());
        // 9 arrives (a merge); 7 is listed renamed, which is not taken.
        let renamed = named(7, Some(1.0), &bash, &bob);
        let c = named(9, Some(2.0), &python, &bob);
        lr.observe("g", 1.0, 0.0, &[c, renamed, b.clone()], &Holders::default());
        // 7 and 9 leave (a merge again), then 8.
        let busy = Holders {
            unattributed: 1000,
            ..Holders::default()
        };
        let r = lr.observe("g", 2.0, 0.0, std::slice::from_ref(&b), &busy);
        let names = |r: &[Unreleased]| -> Vec<(u32, String, String)> {
            r.iter()
                .map(|u| (u.pid, u.comm.to_string(), u.user.to_string()))
                .collect()
        };
        let want = [(9, "python", "bob"), (7, "python", "alice")];
        assert_eq!(names(&r), want.map(|(p, c, u)| (p, c.into(), u.into())));
        let busier = Holders {
            unattributed: 2000,
            ..Holders::default()
        };
        let r = lr.observe("g", 3.0, 0.0, &[], &busier);
        assert_eq!(names(&r)[2], (8, "bash".into(), "bob".into()));
    }

    #[test]
    fn keys_sort_as_pid_then_start_known_then_start() {
        let k = |pid, start| key(&named(pid, start, &ArcStr::new(), &ArcStr::new()));
        let mut keys = [
            k(9, None),
            k(3, Some(5.0)),
            k(3, None),
            k(3, Some(1.0)),
            k(u32::MAX, None),
        ];
        keys.sort_unstable();
        let pids: Vec<u32> = keys.iter().map(|&k| pid_of(k)).collect();
        assert_eq!(pids, [3, 3, 3, 9, u32::MAX]);
        assert_eq!(keys[0], k(3, None));
        assert_eq!(keys[1], k(3, Some(1.0)));
    }
}
