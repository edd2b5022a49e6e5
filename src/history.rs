//! The daemon's short memory: the last minutes (`[poll] history`, default 15)
//! of each device's used memory and holder split, and of each exported
//! process's memory, at poll resolution, for `GET /api/v1/history`, the status
//! page's sparklines and out-of-memory events.
//!
//! Owns: the ring buffers and their bound. Every series shares one ring of
//! poll times, so a point costs its value alone (8 bytes a device field,
//! 4 a process: KiB in a u32, which NVML's MiB granularity never notices),
//! and a run of equal points one value and a count (`runs.rs`); process
//! series are capped in number whatever the fleet size.
//! Must not: read hardware, clocks or config files (it records snapshots it
//! is handed), or hold its lock across anything slow.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::snapshot::{Holder, Snapshot};

mod runs;
use runs::{Point, Runs};

/// Process series kept at most, across all devices (the largest holders of
/// each device come first). 4096 x 900 points x 4 bytes is 14 MiB at worst.
pub const MAX_PROCESS_SERIES: usize = 4096;

/// What a missing point is stored as (the device or process was not seen):
/// the top value a series holds; real figures stop below it.
const ABSENT_U64: u64 = u64::TOP;
const ABSENT_U32: u32 = u32::TOP;

/// One device's series; the last element of each is the latest poll.
#[derive(Debug, Default)]
struct DeviceSeries {
    used: Runs<u64>,
    /// Live, zombie, exited, unattributed (in `Holder::ALL` order).
    holders: [Runs<u64>; 4],
}

/// A process on a device, by identity across PID reuse. The device is a
/// number (see `History::uuids`): a key with the UUID in it cost a String
/// per process per poll, dropped at once when the series existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ProcId {
    dev: u32,
    pid: u32,
    /// `start_time` bits; 0 when unknown.
    start: u64,
}

#[derive(Debug)]
struct ProcSeries {
    comm: String,
    start_time: Option<f64>,
    kib: Runs<u32>,
    /// Polls since the process was last seen; dropped once all its points are absent.
    absent_for: usize,
}

/// The bounded history of recent polls.
#[derive(Debug)]
pub struct History {
    capacity: usize,
    top_n: usize,
    last_seq: u64,
    times: VecDeque<f64>,
    devices: BTreeMap<String, DeviceSeries>,
    /// Our own integer keys: FxHash, not SipHash.
    processes: FxHashMap<ProcId, ProcSeries>,
    /// The number of each device UUID ever seen (a few per host; kept),
    /// and the UUIDs by number.
    uuid_ids: BTreeMap<String, u32>,
    uuids: Vec<String>,
}

/// `GET /api/v1/history`: every series aligned to `timestamps`; `null` where
/// the device or process was not seen at that poll.
#[derive(Debug, Serialize, PartialEq)]
pub struct HistoryView {
    pub timestamps: Vec<f64>,
    pub devices: Vec<DeviceHistory>,
    pub processes: Vec<ProcessHistory>,
}

/// What [`History::view_with`] returns.
#[derive(Debug, Clone, Copy, Default)]
pub struct ViewOptions<'a> {
    pub gpu: Option<&'a str>,
    pub since: Option<f64>,
    pub points: Option<usize>,
    pub processes: bool,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct DeviceHistory {
    pub uuid: String,
    pub used_bytes: Vec<Option<u64>>,
    pub held_bytes: BTreeMap<&'static str, Vec<Option<u64>>>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct ProcessHistory {
    pub uuid: String,
    pub pid: u32,
    pub start_time: Option<f64>,
    pub comm: String,
    pub used_bytes: Vec<Option<u64>>,
}

impl History {
    /// Keeps `points` polls (at least 1), process series for the `top_n`
    /// largest holders of each device.
    pub fn new(points: usize, top_n: usize) -> Self {
        History {
            capacity: points.max(1),
            top_n,
            last_seq: 0,
            times: VecDeque::new(),
            devices: BTreeMap::new(),
            processes: FxHashMap::default(),
            uuid_ids: BTreeMap::new(),
            uuids: Vec::new(),
        }
    }

    /// How many points a `history` span holds at poll `interval`.
    pub fn points_for(history: std::time::Duration, interval: std::time::Duration) -> usize {
        let n = history.as_secs_f64() / interval.as_secs_f64().max(1e-3);
        (n.ceil() as usize).clamp(1, 100_000)
    }

    /// Records one poll. The placeholder, stale re-publications and repeats
    /// of a poll already recorded add nothing.
    pub fn record(&mut self, snap: &Snapshot) {
        if !snap.has_polled() || snap.stale || snap.seq <= self.last_seq {
            return;
        }
        self.last_seq = snap.seq;
        let max = self.capacity + 1;
        push(&mut self.times, snap.timestamp, max);
        for d in snap.devices.iter().filter(|d| d.up) {
            // Looked up by &str: `entry` would take a new String each poll.
            if !self.devices.contains_key(&d.uuid) {
                self.devices.insert(d.uuid.clone(), DeviceSeries::default());
            }
            let Some(s) = self.devices.get_mut(&d.uuid) else {
                continue;
            };
            s.used.pad_to(self.times.len() - 1, ABSENT_U64, max);
            for h in &mut s.holders {
                h.pad_to(self.times.len() - 1, ABSENT_U64, max);
            }
            s.used.push(bytes(d.memory.map(|m| m.used_bytes)), max);
            for (i, &class) in Holder::ALL.iter().enumerate() {
                s.holders[i].push(bytes(d.holders.map(|h| h.get(class))), max);
            }
            self.record_processes(d);
        }
        self.close_poll();
    }

    /// The number of device `uuid`, given on first sight.
    fn dev_id(&mut self, uuid: &str) -> u32 {
        if let Some(&i) = self.uuid_ids.get(uuid) {
            return i;
        }
        let i = u32::try_from(self.uuids.len()).unwrap_or(u32::MAX);
        self.uuids.push(uuid.to_string());
        self.uuid_ids.insert(uuid.to_string(), i);
        i
    }

    fn record_processes(&mut self, d: &crate::snapshot::Device) {
        let (len, max) = (self.times.len(), self.capacity + 1);
        let dev = self.dev_id(&d.uuid);
        // `processes` is sorted largest first, as the exposition's top_n is.
        for p in d.processes.iter().take(self.top_n) {
            let id = ProcId {
                dev,
                pid: p.pid,
                start: p.start_time.map_or(0, f64::to_bits),
            };
            if !self.processes.contains_key(&id) && self.processes.len() >= MAX_PROCESS_SERIES {
                continue;
            }
            let s = self.processes.entry(id).or_insert_with(|| ProcSeries {
                comm: p.comm.to_string(),
                start_time: p.start_time,
                kib: Runs::default(),
                absent_for: 0,
            });
            s.kib.pad_to(len - 1, ABSENT_U32, max);
            let kib = p
                .used_bytes
                .map_or(ABSENT_U32, |b| (b / 1024).min(u64::from(ABSENT_U32 - 1)) as u32);
            s.kib.push(kib, max);
            s.absent_for = 0;
        }
    }

    /// Pads series not seen this poll, trims everything to `capacity`, and
    /// drops series with no point left in the window.
    fn close_poll(&mut self) {
        let (len, max) = (self.times.len(), self.capacity + 1);
        for s in self.devices.values_mut() {
            s.used.pad_to(len, ABSENT_U64, max);
            for h in &mut s.holders {
                h.pad_to(len, ABSENT_U64, max);
            }
        }
        for s in self.processes.values_mut() {
            if s.kib.len() < len {
                s.absent_for += 1;
                s.kib.pad_to(len, ABSENT_U32, max);
            }
        }
        if len > self.capacity {
            self.times.pop_front();
            for s in self.devices.values_mut() {
                s.used.pop_front();
                s.holders.iter_mut().for_each(|h| {
                    h.pop_front();
                });
            }
            self.processes.values_mut().for_each(|s| {
                s.kib.pop_front();
            });
        }
        let len = self.times.len();
        self.devices.retain(|_, s| s.used.any_but(ABSENT_U64));
        self.processes.retain(|_, s| s.absent_for < len);
    }

    /// The points after Unix time `since` (all when `None`) of one device
    /// (all when `None`) and its processes, largest latest value first.
    pub fn view(&self, gpu: Option<&str>, since: Option<f64>) -> HistoryView {
        self.view_with(&ViewOptions {
            gpu,
            since,
            points: None,
            processes: true,
        })
    }

    /// [`History::view`] with at most `points` points (evenly spaced, the
    /// latest always kept: a sparkline needs the shape, not every poll) and
    /// process series only when `processes`. Only what is returned is
    /// built: a device-only view of 64 GPUs never touches process series.
    pub fn view_with(&self, o: &ViewOptions<'_>) -> HistoryView {
        let skip = o
            .since
            .map_or(0, |t| self.times.iter().take_while(|&&x| x <= t).count());
        let picked = pick(skip, self.times.len(), o.points);
        let tail64 = |v: &Runs<u64>| -> Vec<Option<u64>> {
            v.at(&picked)
                .into_iter()
                .map(|x| x.filter(|&x| x != ABSENT_U64))
                .collect()
        };
        let wanted = |uuid: &str| o.gpu.is_none_or(|g| g == uuid);
        let devices = self
            .devices
            .iter()
            .filter(|(u, _)| wanted(u))
            .map(|(uuid, s)| DeviceHistory {
                uuid: uuid.clone(),
                used_bytes: tail64(&s.used),
                held_bytes: Holder::ALL
                    .iter()
                    .zip(&s.holders)
                    .map(|(c, h)| (c.as_str(), tail64(h)))
                    .collect(),
            })
            .collect();
        let uuid_of = |id: &ProcId| self.uuids.get(id.dev as usize).map_or("", String::as_str);
        let mut processes: Vec<ProcessHistory> = self
            .processes
            .iter()
            .filter(|(id, _)| o.processes && wanted(uuid_of(id)))
            .map(|(id, s)| ProcessHistory {
                uuid: uuid_of(id).to_string(),
                pid: id.pid,
                start_time: s.start_time,
                comm: s.comm.clone(),
                used_bytes: s
                    .kib
                    .at(&picked)
                    .into_iter()
                    .map(|k| k.filter(|&k| k != ABSENT_U32).map(|k| u64::from(k) * 1024))
                    .collect(),
            })
            .collect();
        let latest = |p: &ProcessHistory| p.used_bytes.last().copied().flatten().unwrap_or(0);
        processes.sort_by(|a, b| {
            latest(b)
                .cmp(&latest(a))
                .then(a.uuid.cmp(&b.uuid))
                .then(a.pid.cmp(&b.pid))
        });
        HistoryView {
            timestamps: picked.iter().filter_map(|&i| self.times.get(i).copied()).collect(),
            devices,
            processes,
        }
    }

    /// Series and points held now, for the soak's boundedness check.
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.times.len(), self.devices.len(), self.processes.len())
    }
}

/// The history as the daemon shares it: recorded by [`follow`], read by
/// the HTTP handler. Each holds the lock for one record or one view.
pub type SharedHistory = Arc<Mutex<History>>;

/// Records each snapshot it is handed (the daemon's alert loop hands it
/// every published one).
pub fn recorder(history: SharedHistory) -> impl FnMut(&Snapshot) + Send {
    move |snap| {
        // Plain data inside: a panic elsewhere cannot leave it torn.
        history.lock().unwrap_or_else(PoisonError::into_inner).record(snap);
    }
}

/// A device figure as a point: absent when unknown, and never the marker.
fn bytes(v: Option<u64>) -> u64 {
    v.map_or(ABSENT_U64, |b| b.min(ABSENT_U64 - 1))
}

/// The indices in `from..len` a view returns: all of them, or at most
/// `points` evenly spaced counting back from the latest.
fn pick(from: usize, len: usize, points: Option<usize>) -> Vec<usize> {
    let n = len.saturating_sub(from);
    match points {
        Some(p) if p < n => {
            let p = p.max(1);
            let step = n.div_ceil(p);
            let mut v: Vec<usize> = (0..p)
                .filter_map(|k| (len - 1).checked_sub(k * step))
                .filter(|&i| i >= from)
                .collect();
            v.reverse();
            v
        }
        _ => (from..len).collect(),
    }
}

/// Appends `x` to the poll times, which never hold more than `max`: they
/// grow by doubling as a `VecDeque` does, but not past `max` (a full
/// 900-point window doubled to 1,024 left an eighth as slack, round 7).
fn push<T>(v: &mut VecDeque<T>, x: T, max: usize) {
    if v.len() == v.capacity() {
        let want = (2 * v.len()).max(4).min(max).max(v.len() + 1);
        v.reserve_exact(want - v.len());
    }
    v.push_back(x);
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
