//! Reading one PID's files from a [`ProcTree`] for [`ProcFs`](super::ProcFs)
//! and reclaim's `task.rs`: the size caps, and how a read's failure maps to
//! [`ProcError`] (gone, unreadable, malformed). Must not cache or parse
//! beyond telling where a cut cmdline's last whole argument ends.

use std::io;

use super::ProcError;
use super::stat::StatError;
use super::tree::{PidFile, ProcTree, TreeFile};

/// ESRCH on Linux (asm-generic/errno-base.h): a reaped task's open proc
/// file. std has no ErrorKind for it.
const ESRCH: i32 = 3;

/// Caps on what is read, so a hostile or huge file cannot cost memory.
pub(super) const SMALL_FILE_MAX: u64 = 64 * 1024;
pub(super) const CMDLINE_READ_MAX: u64 = 256 * 1024;

pub(super) fn stat_error(pid: u32, e: StatError) -> ProcError {
    match e {
        StatError::Empty => ProcError::Gone { pid },
        StatError::Malformed(detail) => ProcError::Malformed {
            pid,
            what: "stat",
            detail,
        },
    }
}

/// NotFound or ESRCH: the process exited (or never existed).
fn is_gone(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::NotFound || err.raw_os_error() == Some(ESRCH)
}

/// A file the identity cannot do without (stat, status), into `buf`.
pub(super) fn read_required(tree: &dyn ProcTree, pid: u32, file: PidFile, buf: &mut Vec<u8>) -> Result<(), ProcError> {
    match tree.read(TreeFile::Pid(pid, file), SMALL_FILE_MAX, buf) {
        Ok(_) => Ok(()),
        Err(e) if is_gone(&e) => Err(ProcError::Gone { pid }),
        Err(source) => Err(ProcError::Unreadable {
            pid,
            what: file.name(),
            source,
        }),
    }
}

/// A file the identity can do without, into `buf`: `Ok(Some(cut))` when
/// read, `Ok(None)` when unreadable (permission denied, a zombie's missing
/// parts); `Err(Gone)` only when a live-looking process vanished between reads.
pub(super) fn read_optional(
    tree: &dyn ProcTree,
    pid: u32,
    file: PidFile,
    exited: bool,
    limit: u64,
    buf: &mut Vec<u8>,
) -> Result<Option<bool>, ProcError> {
    match tree.read(TreeFile::Pid(pid, file), limit, buf) {
        Ok(cut) => Ok(Some(cut)),
        Err(e) if is_gone(&e) && !exited => Err(ProcError::Gone { pid }),
        Err(_) => Ok(None),
    }
}

/// A cut cmdline ends in a partial arg: drop it, so that half of a secret
/// (`https://user:pa`) is never shown unredacted because its end is missing.
pub(super) fn whole_args(bytes: &[u8], cut: bool) -> &[u8] {
    let last_nul = bytes.iter().rposition(|&b| b == 0).filter(|_| cut);
    last_nul.map_or(bytes, |end| &bytes[..end])
}
