//! The bounded store of out-of-memory events behind `GET /api/v1/events`:
//! each one the time, the GPU, the process and its allocator figures, and
//! the whole holder table of that GPU as of the latest poll before the
//! report, or the first one after it when there was none (who else held
//! how much). Owns the event's JSON shape and the
//! bound; it must not decide when an OOM happened (the state does).

use std::collections::VecDeque;

use serde::Serialize;

use super::message::DeviceReport;
use crate::data::snapshot::{Device, RecentOom};

/// One holder of a GPU when an OOM was reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableRow {
    pub pid: u32,
    pub comm: String,
    pub user: String,
    pub holder: String,
    /// NVML's figure; absent when NVML could not say.
    pub used_bytes: Option<u64>,
    /// The row's own allocator figures, when it reports them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_bytes: Option<u64>,
}

/// A GPU's memory and holders at one poll, largest holder first.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Table {
    pub polled_at: f64,
    pub total_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub processes: Vec<TableRow>,
}

impl Table {
    /// The largest holders other than `pid` (the process that hit the
    /// OOM), as "comm (pid) 12.0 GiB", at most `n`: what the alert names.
    pub fn biggest_except(&self, pid: u32, n: usize) -> Vec<String> {
        self.processes
            .iter()
            .filter(|r| r.pid != pid)
            .take(n)
            .map(|r| {
                let gib = r.used_bytes.unwrap_or(0) as f64 / f64::from(1u32 << 30);
                format!("{} ({}) {gib:.1} GiB", r.comm, r.pid)
            })
            .collect()
    }

    /// The table of `d` as polled at Unix time `polled_at`.
    pub fn of(d: &Device, polled_at: f64) -> Table {
        Table {
            polled_at,
            total_bytes: d.memory.map(|m| m.total_bytes),
            used_bytes: d.memory.map(|m| m.used_bytes),
            free_bytes: d.memory.map(|m| m.free_bytes),
            processes: d
                .processes
                .iter()
                .map(|p| TableRow {
                    pid: p.pid,
                    comm: p.comm.to_string(),
                    user: p.user.to_string(),
                    holder: p.holder.map(|h| h.as_str()).unwrap_or("unknown").to_string(),
                    used_bytes: p.used_bytes,
                    allocated_bytes: p.allocator.as_ref().map(|a| a.allocated.current),
                    reserved_bytes: p.allocator.as_ref().map(|a| a.reserved.current),
                })
                .collect(),
        }
    }
}

/// An out-of-memory error a process reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomEvent {
    /// Always "oom" (other kinds of events share the endpoint's list).
    pub kind: &'static str,
    /// Unix seconds the report arrived.
    pub time: f64,
    pub uuid: String,
    pub pid: u32,
    pub comm: String,
    pub user: String,
    /// The process's figures for that GPU in the report.
    pub allocator: DeviceReport,
    /// That GPU's holders at the latest poll before the report, or, when
    /// no poll had a table for it (the first report of the GPU's first
    /// reporter), at the first poll after it (`polled_at` says which).
    pub gpu: Table,
    /// The memory history the process dumped on this OOM, when the flight
    /// recorder was on (open it with PyTorch's memory_viz).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Waiting for the next poll's table.
    #[serde(skip)]
    pending: bool,
}

impl OomEvent {
    pub fn new(time: f64, pid: u32, d: &DeviceReport, gpu: Table) -> Self {
        let row = gpu.processes.iter().find(|r| r.pid == pid);
        let (comm, user) = row.map(|r| (r.comm.clone(), r.user.clone())).unwrap_or_default();
        OomEvent {
            kind: "oom",
            time,
            uuid: d.uuid.clone(),
            pid,
            comm,
            user,
            allocator: d.clone(),
            gpu,
            snapshot: None,
            pending: false,
        }
    }

    /// Marks an event that has no table yet, naming its process from the
    /// latest listing (it may be gone by the poll that brings the table).
    pub fn name(&mut self, comm: &str, user: &str) {
        self.comm = comm.to_string();
        self.user = user.to_string();
        self.pending = true;
    }
}

/// Events one process keeps at most: a job on 8 GPUs that ran out on every
/// one fits, and a process that reports more OOMs drops its own oldest
/// instead of the other processes' events.
pub const PER_PROCESS: usize = 10;

/// Bounded: the oldest event of the same process goes when it has
/// [`PER_PROCESS`], else the oldest of all when a new one would exceed `cap`.
#[derive(Debug, Default)]
pub struct Events {
    cap: usize,
    list: VecDeque<OomEvent>,
}

impl Events {
    pub fn new(cap: usize) -> Self {
        Events {
            cap: cap.max(1),
            list: VecDeque::new(),
        }
    }

    pub fn push(&mut self, e: OomEvent) {
        let own = self.list.iter().filter(|o| o.pid == e.pid).count();
        if own >= PER_PROCESS
            && let Some(i) = self.list.iter().position(|o| o.pid == e.pid)
        {
            self.list.remove(i);
        }
        while self.list.len() >= self.cap.max(1) {
            self.list.pop_front();
        }
        self.list.push_back(e);
    }

    /// Gives every event waiting for a table the one `table_of` finds for
    /// its GPU (none when the GPU left the poll); waits no longer.
    pub fn fill_pending(&mut self, mut table_of: impl FnMut(&str) -> Option<Table>) {
        for e in self.list.iter_mut().rev().filter(|e| e.pending) {
            e.pending = false;
            if let Some(t) = table_of(&e.uuid) {
                e.gpu = t;
            }
        }
    }

    /// Links `path` to `pid`'s newest event of the last minute before
    /// `now` that has no snapshot yet (the report that names a snapshot is
    /// the one that brings its OOM).
    pub fn link_snapshot(&mut self, pid: u32, now: f64, path: String) {
        let event = self
            .list
            .iter_mut()
            .rev()
            .find(|e| e.pid == pid && e.snapshot.is_none() && now - e.time <= 60.0);
        if let Some(e) = event {
            e.snapshot = Some(path);
        }
    }

    pub fn list(&self) -> Vec<OomEvent> {
        self.list.iter().cloned().collect()
    }

    /// The events of GPU `uuid` since Unix time `since`, for the snapshot.
    pub fn recent(&self, uuid: &str, since: f64) -> Vec<RecentOom> {
        self.list
            .iter()
            .rev()
            .take_while(|e| e.time >= since)
            .filter(|e| e.uuid == uuid)
            .map(|e| RecentOom {
                time: e.time,
                pid: e.pid,
                comm: e.comm.clone(),
                user: e.user.clone(),
                others: e.gpu.biggest_except(e.pid, 3).join(", "),
            })
            .collect()
    }
}
