//! The audit trail: one JSON line per decision in
//! `<state dir>/reclaim-audit.jsonl`, and the counters behind
//! `gpumem_reclaim_actions_total{action,result}`.
//!
//! Owns: the line format and the file's lifecycle. Must not: decide
//! anything. The file is opened per line (decisions are rare) so that
//! logrotate's move-and-recreate or a deleted file never swallows lines, and
//! each line is fsynced: a record of a kill must survive the crash that may
//! follow it.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::{Action, Outcome, Target};

/// The file name inside the state dir.
pub const AUDIT_FILE: &str = "reclaim-audit.jsonl";

/// One audit line. Field order is the serialization order.
#[derive(Debug, Serialize)]
struct AuditRecord<'a> {
    /// RFC 3339, UTC, milliseconds.
    time: String,
    /// Unix seconds, for machines.
    ts: f64,
    action: &'static str,
    result: &'static str,
    reason: Option<&'a str>,
    signal: Option<&'static str>,
    dry_run: bool,
    pid: u32,
    start_ticks: Option<u64>,
    start_time: Option<f64>,
    uid: Option<u32>,
    user: &'a str,
    comm: &'a str,
    rule: &'a str,
    gpu_uuid: &'a str,
    used_bytes: Option<u64>,
    /// When a SIGKILL follows a delivered SIGTERM (ms).
    grace_ms: Option<u64>,
}

/// What one line says beyond the target.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub action: Action,
    pub outcome: &'a Outcome,
    pub dry_run: bool,
    pub grace_ms: Option<u64>,
}

/// Appends lines to `<dir>/reclaim-audit.jsonl`.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
}

impl AuditLog {
    pub fn new(state_dir: &Path) -> Self {
        AuditLog {
            path: state_dir.join(AUDIT_FILE),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the dir and the file (0600: it names users and their
    /// processes), so a read-only or missing state dir fails at startup
    /// rather than at the first kill.
    pub fn ensure(&self) -> io::Result<()> {
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir)?;
        }
        self.open().map(drop)
    }

    fn open(&self) -> io::Result<fs::File> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)
    }

    /// Appends one line in a single write (O_APPEND keeps lines whole).
    pub fn append(&self, target: &Target, entry: Entry<'_>) -> io::Result<()> {
        let (result, reason) = entry.outcome.result_and_reason();
        let now = SystemTime::now();
        let record = AuditRecord {
            time: humantime::format_rfc3339_millis(now).to_string(),
            ts: now.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
            action: entry.action.as_str(),
            result,
            reason,
            signal: matches!(entry.outcome, Outcome::Signalled).then(|| entry.action.signal_name()),
            dry_run: entry.dry_run,
            pid: target.pid,
            start_ticks: target.start_ticks,
            start_time: target.start_time,
            uid: target.uid,
            user: &target.user,
            comm: &target.comm,
            rule: &target.rule,
            gpu_uuid: &target.gpu_uuid,
            used_bytes: target.used_bytes,
            grace_ms: entry.grace_ms,
        };
        let mut line = serde_json::to_vec(&record).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut file = self.open()?;
        file.write_all(&line)?;
        file.sync_data()
    }
}

/// Every (action, result) pair that can happen. They are exported from zero
/// so `increase(...{result="failed"}[1h]) > 0` works from the first failure.
pub const SERIES: &[(&str, &str)] = &[
    ("terminate", "dry_run"),
    ("terminate", "signalled"),
    ("terminate", "refused"),
    ("terminate", "failed"),
    ("terminate", "disabled"),
    ("kill", "signalled"),
    ("kill", "exited"),
    ("kill", "refused"),
    ("kill", "failed"),
    ("kill", "cancelled"),
    ("suspend", "dry_run"),
    ("suspend", "done"),
    ("suspend", "refused"),
    ("suspend", "failed"),
    ("suspend", "disabled"),
    ("resume", "done"),
    ("resume", "refused"),
    ("resume", "failed"),
];

/// Counts of decisions by (action, result): the source of
/// `gpumem_reclaim_actions_total{action,result}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReclaimStats {
    counts: BTreeMap<(&'static str, &'static str), u64>,
}

impl Default for ReclaimStats {
    fn default() -> Self {
        ReclaimStats {
            counts: SERIES.iter().map(|&key| (key, 0)).collect(),
        }
    }
}

impl ReclaimStats {
    /// `(action, result, count)` for every pair in [`SERIES`] (zeros
    /// included), sorted by action then result.
    pub fn entries(&self) -> Vec<(&'static str, &'static str, u64)> {
        self.counts.iter().map(|(&(a, r), &n)| (a, r, n)).collect()
    }

    /// One count; 0 when it never happened.
    pub fn get(&self, action: &str, result: &str) -> u64 {
        self.counts
            .iter()
            .find(|((a, r), _)| *a == action && *r == result)
            .map_or(0, |(_, &n)| n)
    }

    pub(super) fn add(&mut self, action: Action, outcome: &Outcome) {
        let key = (action.as_str(), outcome.result_and_reason().0);
        *self.counts.entry(key).or_insert(0) += 1;
    }
}
