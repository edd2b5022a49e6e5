//! [`read_task`]: reclaim's uncached view of one PID (stat, status and
//! argv[0]), read just before it signals, on `procfs`'s low-level readers.
//! Must not cache: a stale view is what reclaim's re-check exists to avoid.

use super::files::{read_required, stat_error};
use super::stat::{parse_stat, parse_status_uid};
use super::tree::{PidFile, ProcTree, TreeFile};
use super::{ProcError, ProcState};

/// Enough of cmdline for argv[0] (PATH_MAX): all reclaim needs.
const ARGV0_MAX: u64 = 4096;

/// What `/proc` says about one PID right now, uncached: reclaim's view
/// just before it signals (a stale view is what its re-check exists to avoid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub pid: u32,
    pub ppid: u32,
    pub state: ProcState,
    /// stat field 9 (PF_* bits).
    pub flags: u64,
    /// stat field 22: with the pid, the exact identity.
    pub start_ticks: u64,
    /// Real uid; `None` when status has no parsable `Uid:` line.
    pub uid: Option<u32>,
    pub comm: String,
    /// `argv[0]`; `None` when cmdline is empty (kernel threads, exiting tasks).
    pub argv0: Option<String>,
}

/// Reads stat, status and the start of cmdline of `pid`, with no cache.
///
/// # Errors
/// `Gone` when the process does not exist (any more); `Unreadable` or
/// `Malformed` for stat or status.
pub fn read_task(tree: &dyn ProcTree, pid: u32) -> Result<Task, ProcError> {
    let mut buf = Vec::new();
    read_required(tree, pid, PidFile::Stat, &mut buf)?;
    // An empty stat is a task being torn down: `Gone`.
    let stat = parse_stat(&buf).map_err(|e| stat_error(pid, e))?;
    read_required(tree, pid, PidFile::Status, &mut buf)?;
    let uid = parse_status_uid(&String::from_utf8_lossy(&buf));
    // An exiting task may already have lost its mm: no argv then.
    let argv0 = tree
        .read(TreeFile::Pid(pid, PidFile::Cmdline), ARGV0_MAX, &mut buf)
        .ok()
        .and_then(|_| buf.split(|&b| b == 0).next())
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned());
    Ok(Task {
        pid,
        ppid: stat.ppid,
        state: stat.state,
        flags: stat.flags,
        start_ticks: stat.start_ticks,
        uid,
        comm: stat.comm,
        argv0,
    })
}
