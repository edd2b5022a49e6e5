//! The reports kept across restarts: `reports.jsonl` under `[state] dir`,
//! one JSON report a line, appended as each is written, on a thread of
//! its own (a hung disk must not hold the alert loop that follows polls).
//!
//! Owns: the file, its bounds (at most [`KEEP_PER_SUBJECT`] reports of each
//! subject kind younger than [`RETENTION_SECONDS`] are loaded; the file is
//! rewritten with those when
//! it holds twice as many lines) and the reading back (a bad line is
//! skipped with a log line naming it). Must not: decide what a report
//! says, or stop the daemon when the disk refuses (reports then live in
//! memory only, logged once).

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::Report;

/// Reports kept of each subject kind (process, job, pod, unit, container),
/// in memory and in the file: short-lived processes never push a job's
/// report out.
pub const KEEP_PER_SUBJECT: usize = 500;
/// Reports kept in all.
pub const KEEP: usize = 5 * KEEP_PER_SUBJECT;
/// Reports older than this (by when they were closed) are dropped: 30 days.
pub const RETENTION_SECONDS: f64 = 30.0 * 86_400.0;
/// The file's name under `[state] dir`.
pub const FILE: &str = "reports.jsonl";
/// A larger file is not read (it cannot be ours: [`KEEP`] reports of a
/// few KiB each, twice over, is well under this).
const MAX_FILE_BYTES: u64 = 64 << 20;

/// Where reports are appended; `None` path once writing failed.
#[derive(Debug)]
pub struct Store {
    path: Option<PathBuf>,
    lines: usize,
}

impl Store {
    /// Opens `dir/reports.jsonl` and reads back the reports kept there
    /// (oldest first), dropping those past retention at `now`.
    pub fn open(dir: &Path, now: f64) -> (Store, VecDeque<Report>) {
        let path = dir.join(FILE);
        let mut kept = VecDeque::new();
        let mut lines = 0;
        match crate::data::files::read_text(&path, MAX_FILE_BYTES) {
            Ok(text) => {
                for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                    lines += 1;
                    match serde_json::from_str::<Report>(line) {
                        Ok(r) if fresh(&r, now) => push_bounded(&mut kept, r),
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(file = %path.display(), line = n + 1, error = %e, "skipping a report that cannot be read")
                        }
                    }
                }
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => tracing::warn!(file = %path.display(), error = %e, "cannot read the kept reports"),
        }
        let mut store = Store {
            path: Some(path),
            lines,
        };
        if lines > kept.len() {
            store.rewrite(&kept);
        }
        (store, kept)
    }

    /// Appends `r`; rewrites the file from `kept` (which holds `r`) when it
    /// has grown to twice its bound.
    pub fn append(&mut self, r: &Report, kept: &VecDeque<Report>) {
        let Some(path) = &self.path else { return };
        if self.lines >= 2 * KEEP {
            self.rewrite(kept);
            return;
        }
        let line = match serde_json::to_string(r) {
            Ok(l) => l,
            Err(e) => return tracing::warn!(error = %e, "cannot encode a report"),
        };
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        match written {
            Ok(()) => self.lines += 1,
            Err(e) => self.give_up(&e),
        }
    }

    /// Replaces the file with `kept`, through a temporary file and a rename
    /// so a crash leaves the old file or the new one.
    fn rewrite(&mut self, kept: &VecDeque<Report>) {
        let Some(path) = self.path.clone() else { return };
        let tmp = path.with_extension("jsonl.tmp");
        let text: String = kept
            .iter()
            .filter_map(|r| serde_json::to_string(r).ok())
            .map(|line| line + "\n")
            .collect();
        match std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path)) {
            Ok(()) => self.lines = kept.len(),
            Err(e) => self.give_up(&e),
        }
    }

    fn give_up(&mut self, e: &std::io::Error) {
        if let Some(p) = self.path.take() {
            tracing::warn!(file = %p.display(), error = %e, "cannot write job memory reports; keeping them in memory only");
        }
    }
}

fn fresh(r: &Report, now: f64) -> bool {
    now - r.closed.unwrap_or(r.started) <= RETENTION_SECONDS
}

/// Adds `r`, dropping the oldest of its subject kind beyond
/// [`KEEP_PER_SUBJECT`].
pub fn push_bounded(kept: &mut VecDeque<Report>, r: Report) {
    if kept.iter().filter(|k| k.subject == r.subject).count() >= KEEP_PER_SUBJECT
        && let Some(i) = kept.iter().position(|k| k.subject == r.subject)
    {
        kept.remove(i);
    }
    kept.push_back(r);
}

/// The writer thread's end: reports to append, and how many it wrote.
#[derive(Debug)]
pub struct Writer {
    tx: std::sync::mpsc::SyncSender<Report>,
    pub written: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// Reports waiting for the writer at most; more are kept in memory only.
const QUEUE: usize = 256;

impl Writer {
    /// Appends from a thread of its own, so a slow or hung disk never holds
    /// the snapshot followers (the alert loop); `kept` is its own copy of
    /// the kept reports, for rewrites.
    pub fn spawn(mut store: Store, mut kept: VecDeque<Report>) -> Option<Writer> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Report>(QUEUE);
        let written = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let count = written.clone();
        let spawned = std::thread::Builder::new()
            .name("gpumemd-reports".into())
            .spawn(move || {
                for r in rx {
                    push_bounded(&mut kept, r);
                    if let Some(r) = kept.back() {
                        store.append(r, &kept);
                    }
                    count.fetch_add(1, std::sync::atomic::Ordering::Release);
                }
            });
        spawned
            .inspect_err(
                |e| tracing::warn!(error = %e, "cannot start the report writer; keeping reports in memory only"),
            )
            .ok()
            .map(|_| Writer { tx, written })
    }

    /// Hands `r` to the writer; a full queue keeps it in memory only.
    pub fn send(&self, r: Report) {
        if self.tx.try_send(r).is_err() {
            tracing::debug!("report writer busy; a report is kept in memory only");
        }
    }
}

/// Drops the reports past retention at `now` (oldest first).
pub fn expire(kept: &mut VecDeque<Report>, now: f64) {
    while kept.front().is_some_and(|r| !fresh(r, now)) {
        kept.pop_front();
    }
}
