//! The daemon's short memory: the last minutes (`[poll] history`, default 15)
//! of each device's used memory and holder split, and of each exported
//! process's memory, at poll resolution, for `GET /api/v1/history`, the status
//! page's sparklines and out-of-memory events.
//!
//! Owns: the ring buffers and their bound. Every series shares one ring of
//! poll times, so a point is its value alone (`None` where the device or
//! process was not seen; a process's in whole KiB); process series are
//! capped in number whatever the fleet size.
//! Must not: read hardware, clocks or config files (it records snapshots it
//! is handed), or hold its lock across anything slow.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::data::snapshot::{Device, Holder, Snapshot};

/// Process series kept at most, across all devices (the largest holders of
/// each device come first).
pub const MAX_PROCESS_SERIES: usize = 4096;

/// One series' points, aligned to the poll times; `None` where absent.
type Points = VecDeque<Option<u64>>;

/// One device's series; the last element of each is the latest poll.
#[derive(Debug, Default)]
struct DeviceSeries {
    used: Points,
    /// Live, zombie, exited, unattributed (in `Holder::ALL` order).
    holders: [Points; 4],
    /// The device's processes, by identity across PID reuse: pid and
    /// `start_time` bits (0 when unknown).
    processes: FxHashMap<(u32, u64), ProcSeries>,
}

#[derive(Debug)]
struct ProcSeries {
    comm: String,
    start_time: Option<f64>,
    /// Bytes, rounded down to whole KiB.
    used: Points,
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

impl DeviceSeries {
    /// The used and holder series, which always have one point a poll.
    fn points(&mut self) -> impl Iterator<Item = &mut Points> {
        std::iter::once(&mut self.used).chain(&mut self.holders)
    }
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
        self.times.push_back(snap.timestamp);
        let mut series: usize = self.devices.values().map(|s| s.processes.len()).sum();
        for d in snap.devices.iter().filter(|d| d.up) {
            let s = self.devices.entry(d.uuid.clone()).or_default();
            let before = self.times.len() - 1;
            s.points().for_each(|v| pad_to(v, before));
            s.used.push_back(d.memory.map(|m| m.used_bytes));
            for (i, &class) in Holder::ALL.iter().enumerate() {
                s.holders[i].push_back(d.holders.map(|h| h.get(class)));
            }
            record_processes(s, d, self.top_n, before, &mut series);
        }
        self.close_poll();
    }

    /// Pads series not seen this poll, trims everything to `capacity`, and
    /// drops series with no point left in the window.
    fn close_poll(&mut self) {
        let len = self.times.len();
        let full = len > self.capacity;
        if full {
            self.times.pop_front();
        }
        let kept = self.times.len();
        self.devices.retain(|_, s| {
            for v in s.points() {
                pad_to(v, len);
                if full {
                    v.pop_front();
                }
            }
            for p in s.processes.values_mut() {
                if p.used.len() < len {
                    p.absent_for += 1;
                    pad_to(&mut p.used, len);
                }
                if full {
                    p.used.pop_front();
                }
            }
            s.processes.retain(|_, p| p.absent_for < kept);
            // A device stays while its processes do; the view lists it only
            // while it has a point.
            s.used.iter().any(Option::is_some) || !s.processes.is_empty()
        });
    }

    /// The points after Unix time `since` (all when `None`) of one device
    /// (all when `None`) and its processes, largest latest value first, at
    /// most `points` points (evenly spaced, the latest always kept: a
    /// sparkline needs the shape, not every poll) and process series only
    /// when `processes`. Only what is returned is
    /// built: a device-only view of 64 GPUs never touches process series.
    pub fn view_with(&self, o: &ViewOptions<'_>) -> HistoryView {
        let skip = o
            .since
            .map_or(0, |t| self.times.iter().take_while(|&&x| x <= t).count());
        let picked = pick(skip, self.times.len(), o.points);
        let tail64 = |v: &Points| -> Vec<Option<u64>> { picked.iter().map(|&i| v.get(i).copied().flatten()).collect() };
        let wanted = |uuid: &str| o.gpu.is_none_or(|g| g == uuid);
        let devices = self
            .devices
            .iter()
            .filter(|(u, s)| wanted(u) && s.used.iter().any(Option::is_some))
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
        let mut processes: Vec<ProcessHistory> = self
            .devices
            .iter()
            .filter(|(u, _)| o.processes && wanted(u))
            .flat_map(|(uuid, s)| {
                s.processes.iter().map(move |(&(pid, _), p)| ProcessHistory {
                    uuid: uuid.clone(),
                    pid,
                    start_time: p.start_time,
                    comm: p.comm.clone(),
                    used_bytes: tail64(&p.used),
                })
            })
            .collect();
        let latest = |p: &ProcessHistory| p.used_bytes.last().copied().flatten().unwrap_or(0);
        processes.sort_by(|a, b| (latest(b), &a.uuid, a.pid).cmp(&(latest(a), &b.uuid, b.pid)));
        HistoryView {
            timestamps: picked.iter().filter_map(|&i| self.times.get(i).copied()).collect(),
            devices,
            processes,
        }
    }
}

/// The history as the daemon shares it: recorded by [`recorder`], read by
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

/// Records the `top_n` largest processes of `d` (`processes` is sorted
/// largest first, as the exposition's top_n is) into its series `s`; a new
/// series only while fewer than `MAX_PROCESS_SERIES` exist (`series`).
fn record_processes(s: &mut DeviceSeries, d: &Device, top_n: usize, before: usize, series: &mut usize) {
    for p in d.processes.iter().take(top_n) {
        let id = (p.pid, p.start_time.map_or(0, f64::to_bits));
        if !s.processes.contains_key(&id) {
            if *series >= MAX_PROCESS_SERIES {
                continue;
            }
            *series += 1;
        }
        let ps = s.processes.entry(id).or_insert_with(|| ProcSeries {
            comm: p.comm.to_string(),
            start_time: p.start_time,
            used: Points::new(),
            absent_for: 0,
        });
        pad_to(&mut ps.used, before);
        ps.used.push_back(p.used_bytes.map(|b| b / 1024 * 1024));
        ps.absent_for = 0;
    }
}

/// Appends absent points until `v` has `len`.
fn pad_to(v: &mut Points, len: usize) {
    v.resize(v.len().max(len), None);
}

#[cfg(test)]
mod tests;
