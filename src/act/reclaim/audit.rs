//! The audit trail: one JSON line per decision in
//! `<state dir>/reclaim-audit.jsonl`, and the counters behind
//! `gpumem_reclaim_actions_total{action,result}`.
//!
//! Owns: the line format, the file's lifecycle and the rate of lines that
//! changed nothing. Must not: decide anything. The file is opened per line
//! (decisions are rare) so that logrotate's move-and-recreate or a deleted
//! file never swallows lines, and each line is fsynced: a record of a kill
//! must survive the crash that may follow it. Refusals and dry runs, which
//! anyone who can reach the lifecycle API can ask for as fast as they can
//! send requests, go through a token bucket; those past it are counted and
//! written as one summary line before the next line that is written.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// The line written in place of the lines the bucket held back.
#[derive(Debug, Serialize)]
struct Suppressed {
    time: String,
    ts: f64,
    action: &'static str,
    result: &'static str,
    reason: &'static str,
    /// Refusals and dry runs not written since the last line.
    suppressed: u64,
}

/// Lines that changed nothing, written at once before the bucket is empty:
/// a script that asks about a few dozen processes is audited line by line.
pub const AUDIT_BURST: u32 = 30;
/// One more such line per this interval once the burst is spent: a flood
/// of refused requests (hundreds a second, each an fsync) costs one line
/// a second and a summary.
pub const AUDIT_REFILL: Duration = Duration::from_secs(1);

/// The token bucket of lines that changed nothing, and what it held back.
#[derive(Debug)]
struct Bucket {
    tokens: u32,
    last: Instant,
    suppressed: u64,
}

impl Bucket {
    /// Whether a line that changed nothing may be written at `now`.
    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        let earned = elapsed.as_nanos() / AUDIT_REFILL.as_nanos().max(1);
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(earned).min(AUDIT_BURST);
            self.last = now;
        }
        if self.tokens == 0 {
            self.suppressed += 1;
            return false;
        }
        self.tokens -= 1;
        true
    }
}

/// Appends lines to `<dir>/reclaim-audit.jsonl`.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    bucket: Mutex<Bucket>,
}

impl AuditLog {
    pub fn new(state_dir: &Path) -> Self {
        AuditLog {
            path: state_dir.join(AUDIT_FILE),
            bucket: Mutex::new(Bucket {
                tokens: AUDIT_BURST,
                last: Instant::now(),
                suppressed: 0,
            }),
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

    /// Appends one line in a single write (O_APPEND keeps lines whole),
    /// unless it changed nothing and the bucket is empty: then it is only
    /// counted, and the count goes out as a summary line ahead of the next
    /// line written.
    pub fn append(&self, target: &Target, entry: Entry<'_>) -> io::Result<()> {
        self.append_at(target, entry, Instant::now())
    }

    fn append_at(&self, target: &Target, entry: Entry<'_>, at: Instant) -> io::Result<()> {
        let mut bucket = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let changed_nothing = matches!(entry.outcome, Outcome::Refused(_) | Outcome::DryRun);
        if changed_nothing && !bucket.take(at) {
            return Ok(());
        }
        let rec = record(target, entry)?;
        let mut line = match bucket.suppressed {
            0 => Vec::new(),
            n => summary(n)?,
        };
        let suppressed = std::mem::take(&mut bucket.suppressed);
        line.extend(rec);
        let written = self.open().and_then(|mut file| {
            file.write_all(&line)?;
            file.sync_data()
        });
        if written.is_err() {
            // Not written: still owed to the next line.
            bucket.suppressed += suppressed;
        }
        written
    }
}

fn stamp() -> (String, f64) {
    let now = SystemTime::now();
    (
        humantime::format_rfc3339_millis(now).to_string(),
        now.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
    )
}

fn summary(suppressed: u64) -> io::Result<Vec<u8>> {
    let (time, ts) = stamp();
    json_line(&Suppressed {
        time,
        ts,
        action: "audit",
        result: "suppressed",
        reason: "rate_limit",
        suppressed,
    })
}

fn json_line<T: Serialize>(v: &T) -> io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(v).map_err(io::Error::other)?;
    line.push(b'\n');
    Ok(line)
}

fn record(target: &Target, entry: Entry<'_>) -> io::Result<Vec<u8>> {
    let (result, reason) = entry.outcome.result_and_reason();
    let (time, ts) = stamp();
    json_line(&AuditRecord {
        time,
        ts,
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
    })
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
        self.counts.get(&(action, result)).copied().unwrap_or(0)
    }

    pub(super) fn add(&mut self, action: Action, outcome: &Outcome) {
        let key = (action.as_str(), outcome.result_and_reason().0);
        *self.counts.entry(key).or_insert(0) += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(log: &AuditLog) -> Vec<serde_json::Value> {
        fs::read_to_string(log.path())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    #[test]
    fn a_flood_of_refusals_is_bounded_and_summed_up_while_actions_are_all_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = AuditLog::new(dir.path());
        let refused = Outcome::Refused("not_suspended");
        let done = Outcome::Done;
        let entry = |outcome| Entry {
            action: Action::Resume,
            outcome,
            dry_run: false,
            grace_ms: None,
        };
        let t0 = Instant::now();
        let target = Target {
            pid: 42,
            ..Target::default()
        };
        for _ in 0..500 {
            log.append_at(&target, entry(&refused), t0).expect("append");
        }
        assert_eq!(lines(&log).len(), AUDIT_BURST as usize, "only the burst is written");
        // What changed something is always written, and carries the count.
        log.append_at(&target, entry(&done), t0).expect("append");
        let all = lines(&log);
        let n = AUDIT_BURST as usize;
        assert_eq!(all.len(), n + 2);
        assert_eq!(all[n]["result"], "suppressed");
        assert_eq!(all[n]["suppressed"], 500 - u64::from(AUDIT_BURST));
        assert_eq!(all[n + 1]["result"], "done");
        // A second later one more refusal gets through, with no summary
        // (nothing was held back since).
        log.append_at(&target, entry(&refused), t0 + AUDIT_REFILL)
            .expect("append");
        log.append_at(&target, entry(&refused), t0 + AUDIT_REFILL)
            .expect("append");
        log.append_at(&target, entry(&refused), t0 + AUDIT_REFILL * 2)
            .expect("append");
        let all = lines(&log);
        assert_eq!(all.len(), n + 5, "{all:#?}");
        assert_eq!(all[n + 2]["result"], "refused");
        assert_eq!(all[n + 3]["suppressed"], 1);
        assert_eq!(all[n + 4]["result"], "refused");
    }
}
