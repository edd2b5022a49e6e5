//! Job-end memory reports: when a process, Slurm job, pod, systemd unit or
//! container leaves its GPUs, a short persisted summary of how it used
//! them (peak and p95 per GPU, time near full, allocator peaks, OOMs and
//! retries, memory left behind and for how long, idle holding) and the
//! request that would have fit (`GET /api/v1/reports`, `gpumemd report`).
//! Also the per-user byte-seconds held idle behind
//! `gpumem_user_idle_held_byte_seconds_total`.
//!
//! Owns: [`Reports`], the one shared handle (tracker, kept reports, the
//! file, the idle counter), and the report's JSON shape. Must not: read
//! anything but the snapshots it is handed, or block a reader for longer
//! than a copy of the kept list.

mod gpu;
mod idle;
mod store;
mod tracker;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

pub use gpu::{GpuReport, Suggestion, suggest};
pub use idle::{OTHER_USER, TOP_USERS};
pub use store::{FILE, KEEP, KEEP_PER_SUBJECT, RETENTION_SECONDS};
pub use tracker::{LEFT_BEHIND_LIMIT, MAX_OPEN, Tracker};

use crate::data::snapshot::Snapshot;

/// What a report is about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Subject {
    #[default]
    Process,
    Job,
    Pod,
    Unit,
    Container,
}

/// Where a subject stands: still holding memory, gone but its memory left
/// behind, or done (the report is final and kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportState {
    Running,
    Ending,
    #[default]
    Ended,
}

/// One subject's memory report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Report {
    pub subject: Subject,
    /// The PID, job id, pod UID, unit or container id.
    pub id: String,
    /// User and command of its first process seen.
    pub user: String,
    pub comm: String,
    /// Its PIDs seen holding memory (at most 32).
    pub pids: Vec<u32>,
    pub state: ReportState,
    /// Unix seconds: first seen holding memory; last seen live; first seen
    /// with no live process; when the report was closed.
    pub started: f64,
    pub last_live: f64,
    pub ended: Option<f64>,
    pub closed: Option<f64>,
    /// The largest peak of any of its GPUs.
    pub peak_bytes: u64,
    pub ooms: u64,
    pub alloc_retries: u64,
    pub idle_gib_hours: f64,
    pub left_behind_bytes: u64,
    /// Sized on the GPU it filled most.
    pub suggested: Option<Suggestion>,
    pub gpus: Vec<GpuReport>,
}

/// Which reports a reader wants: all filters given must match.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Query {
    /// A Slurm job's report.
    pub job: Option<String>,
    /// A pod's report, by UID.
    pub pod: Option<String>,
    /// A process's reports (a PID may have been reused: newest first).
    pub pid: Option<u32>,
    /// Every report whose first process ran as this user.
    pub user: Option<String>,
    /// At most this many, newest first (default and cap: [`KEEP`]).
    pub limit: Option<usize>,
}

impl Query {
    fn matches(&self, r: &Report) -> bool {
        let is = |s: Subject, id: &str| r.subject == s && r.id == id;
        self.job.as_deref().is_none_or(|j| is(Subject::Job, j))
            && self.pod.as_deref().is_none_or(|p| is(Subject::Pod, p))
            && self.pid.is_none_or(|p| is(Subject::Process, &p.to_string()))
            && self.user.as_deref().is_none_or(|u| r.user == u)
    }
}

struct Inner {
    tracker: Tracker,
    kept: VecDeque<Report>,
    store: Option<store::Writer>,
    idle: idle::UserIdle,
    /// Unix time of the latest snapshot followed.
    now: f64,
}

/// The daemon's reports: followed from each snapshot, read by the API and
/// the exposition. One short lock per snapshot or read.
pub struct Reports {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Reports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reports").finish_non_exhaustive()
    }
}

impl Reports {
    /// Reports kept in memory only (tests, or no state dir).
    pub fn in_memory() -> Self {
        Self::with(None, VecDeque::new())
    }

    /// Reports kept in `dir` too: those written before are read back. A
    /// missing `dir` is not made (packaging makes it: systemd's
    /// StateDirectory, the chart's volume); reports then stay in memory.
    pub fn persisted(dir: &Path, now: f64) -> Self {
        if !dir.is_dir() {
            tracing::info!(dir = %dir.display(), "no state dir: job memory reports are kept in memory only");
            return Self::in_memory();
        }
        let (store, kept) = store::Store::open(dir, now);
        Self::with(store::Writer::spawn(store, kept.clone()), kept)
    }

    fn with(store: Option<store::Writer>, kept: VecDeque<Report>) -> Self {
        Reports {
            inner: Mutex::new(Inner {
                tracker: Tracker::default(),
                kept,
                store,
                idle: idle::UserIdle::default(),
                now: 0.0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Plain data inside: a panic elsewhere cannot leave it torn.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows one snapshot: closes, keeps and writes the reports of
    /// subjects that left their GPUs.
    pub fn observe(&self, snap: &Snapshot) {
        let mut g = self.lock();
        let (closed, idle) = g.tracker.observe(snap);
        g.now = g.now.max(snap.timestamp);
        for (user, bs) in idle {
            g.idle.add(&user, bs);
        }
        let now = g.now;
        store::expire(&mut g.kept, now);
        for r in closed {
            if let Some(w) = &g.store {
                w.send(r.clone());
            }
            store::push_bounded(&mut g.kept, r);
        }
    }

    /// The reports `q` asks for, newest first: subjects still open (as
    /// "running" or "ending") before those kept.
    pub fn query(&self, q: &Query) -> Vec<Report> {
        let g = self.lock();
        let limit = q.limit.unwrap_or(KEEP).min(KEEP);
        let mut open: Vec<Report> = g
            .tracker
            .open_reports(g.now)
            .into_iter()
            .filter(|r| q.matches(r))
            .collect();
        open.sort_by(|a, b| b.started.total_cmp(&a.started));
        open.into_iter()
            .chain(g.kept.iter().rev().filter(|r| q.matches(r)).cloned())
            .take(limit)
            .collect()
    }

    /// Byte-seconds held idle per user (the first [`TOP_USERS`] users, then
    /// [`OTHER_USER`]), in the order users were first seen.
    pub fn idle_by_user(&self) -> Vec<(String, f64)> {
        self.lock().idle.list()
    }

    /// Reports the writer has written to the file (or tried to).
    pub fn written(&self) -> u64 {
        let g = self.lock();
        g.store
            .as_ref()
            .map_or(0, |w| w.written.load(std::sync::atomic::Ordering::Acquire))
    }

    /// (open subjects, kept reports), for checks that both stay bounded.
    #[cfg(test)]
    pub fn sizes(&self) -> (usize, usize) {
        let g = self.lock();
        (g.tracker.open_len(), g.kept.len())
    }
}

/// Follows each snapshot it is handed (the daemon's alert loop hands it
/// every published one).
pub fn recorder(reports: Arc<Reports>) -> impl FnMut(&Snapshot) + Send {
    move |snap| reports.observe(snap)
}

#[cfg(test)]
mod tests;
