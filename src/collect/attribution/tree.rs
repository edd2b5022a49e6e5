//! [`ProcTree`]: where the files attribution parses come from. One trait,
//! two trees: [`DirTree`], a directory laid out like `/proc` (the host's,
//! `/host/proc` in a container, a test fixture), and
//! [`MemTree`](super::MemTree), the simulated fleet's processes rendered in
//! the kernel's text formats. Everything above this seam (parsing, caches,
//! cgroup classification, redaction, holder logic) is the same for both.
//!
//! Owns: naming the files a reader may ask for, the size caps of reading
//! them, and (on a real procfs) the open stat files of the PIDs read each
//! poll ([`StatFds`]). Must not: list processes (the caller asks for the
//! PIDs NVML gave it), parse, or cache contents.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// The per-process files attribution and reclaim read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PidFile {
    Stat,
    Status,
    Cgroup,
    Cmdline,
}

impl PidFile {
    /// The file's name under `<root>/<pid>/`, also used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            PidFile::Stat => "stat",
            PidFile::Status => "status",
            PidFile::Cgroup => "cgroup",
            PidFile::Cmdline => "cmdline",
        }
    }
}

/// One file of a tree: a process's, `<root>/stat` (for btime) or the
/// passwd file user names come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TreeFile {
    Pid(u32, PidFile),
    SystemStat,
    Passwd,
}

/// A source of `/proc`-format files. Shared between the thread that keeps
/// a simulated tree up to date and the reader, hence `Send + Sync`.
pub trait ProcTree: Send + Sync + std::fmt::Debug {
    /// Replaces `buf` with at most `limit` bytes of `file`; `Ok(true)` when
    /// the file had more. A missing process is `NotFound` (or ESRCH), as
    /// the kernel says it.
    ///
    /// # Errors
    /// What reading the file gave.
    fn read(&self, file: TreeFile, limit: u64, buf: &mut Vec<u8>) -> io::Result<bool>;

    /// A value that changes when `file` changes (mtime and length for a
    /// real file), so a cache can skip re-reading it; `None` when missing.
    fn stamp(&self, file: TreeFile) -> Option<(SystemTime, u64)>;
}

/// A directory laid out like `/proc`, plus a passwd file.
#[derive(Debug)]
pub struct DirTree {
    root: PathBuf,
    passwd: PathBuf,
    stat_fds: Mutex<StatFds>,
}

impl DirTree {
    /// `root` as `/proc`, users from `passwd`.
    pub fn new(root: impl Into<PathBuf>, passwd: impl Into<PathBuf>) -> Self {
        DirTree {
            root: root.into(),
            passwd: passwd.into(),
            stat_fds: Mutex::new(StatFds::default()),
        }
    }

    /// Where `pid`'s stat is read. On a procfs, the main thread's
    /// `task/<pid>/stat`: the fields attribution reads (state, ppid, flags,
    /// starttime, comm) are the main thread's in both files, but the
    /// process's file also sums the fault counts and CPU times of every
    /// thread, under a lock, at each read (a PyTorch process has dozens of
    /// threads). A fixture directory has no task
    /// directories.
    fn stat_path(&self, pid: u32, procfs: bool) -> PathBuf {
        if procfs {
            self.root.join(format!("{pid}/task/{pid}/stat"))
        } else {
            self.path(TreeFile::Pid(pid, PidFile::Stat))
        }
    }

    fn path(&self, file: TreeFile) -> PathBuf {
        match file {
            TreeFile::Pid(pid, f) => self.root.join(pid.to_string()).join(f.name()),
            TreeFile::SystemStat => self.root.join("stat"),
            TreeFile::Passwd => self.passwd.clone(),
        }
    }
}

impl ProcTree for DirTree {
    fn read(&self, file: TreeFile, limit: u64, buf: &mut Vec<u8>) -> io::Result<bool> {
        if let TreeFile::Pid(pid, PidFile::Stat) = file {
            let mut fds = self.stat_fds.lock().unwrap_or_else(PoisonError::into_inner);
            let procfs = fds.is_procfs(&self.root);
            return fds.read(pid, || self.stat_path(pid, procfs), limit, buf);
        }
        buf.clear();
        File::open(self.path(file))?
            .take(limit.saturating_add(1))
            .read_to_end(buf)?;
        Ok(cap(buf, limit))
    }

    fn stamp(&self, file: TreeFile) -> Option<(SystemTime, u64)> {
        // Length too: mtime granularity can hide a quick rewrite.
        std::fs::metadata(self.path(file))
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    }
}

/// At most this many stat files stay open, and never more than a quarter of
/// the descriptors the process may open (a default soft limit of 1024 keeps
/// 256), so the HTTP side always has room.
const STAT_FDS_MAX: usize = 1024;
/// An open stat file not read for this long is closed: its process left
/// NVML's list (or exited), or polls are further apart than this.
const STAT_FD_UNUSED: Duration = Duration::from_secs(30);
/// First read size for stat (a line of 200-700 bytes); a longer file is read
/// again with a larger buffer.
const STAT_READ: usize = 1024;

/// The stat files of the PIDs read each poll, kept open: one `pread` a poll
/// instead of open, read, read, close. Only on a real procfs, where an open
/// stat file pins its task: once that process is gone (even if its PID is
/// reused) the read fails with ESRCH and the file is re-opened by path once.
/// A fixture directory keeps no files open (a file removed there would go on
/// reading as a live process).
#[derive(Debug, Default)]
struct StatFds {
    open: HashMap<u32, (File, Instant)>,
    last_sweep: Option<Instant>,
    /// Whether the tree is a procfs, learnt from its root once.
    procfs: Option<bool>,
    max: Option<usize>,
}

impl StatFds {
    fn read(&mut self, pid: u32, path: impl FnOnce() -> PathBuf, limit: u64, buf: &mut Vec<u8>) -> io::Result<bool> {
        let now = Instant::now();
        self.sweep(now);
        if let Some((file, used)) = self.open.get_mut(&pid) {
            if let Ok(cut) = read_once(file, limit, buf) {
                *used = now;
                return Ok(cut);
            }
            // ESRCH (the process this file pinned is gone; the PID may be
            // someone else's now) or any other failure: by path, once.
            self.open.remove(&pid);
        }
        let file = File::open(path())?;
        let cut = read_once(&file, limit, buf)?;
        if self.keeps() {
            self.open.insert(pid, (file, now));
        }
        Ok(cut)
    }

    /// Whether `root` is a procfs (asked once; an unreadable root is not).
    fn is_procfs(&mut self, root: &Path) -> bool {
        *self
            .procfs
            .get_or_insert_with(|| rustix::fs::statfs(root).is_ok_and(|s| s.f_type == rustix::fs::PROC_SUPER_MAGIC))
    }

    /// Whether a file just opened may stay open: a procfs, below the cap.
    fn keeps(&mut self) -> bool {
        let max = *self.max.get_or_insert_with(open_files_max);
        self.procfs == Some(true) && self.open.len() < max
    }

    /// Closes the files not read lately, at most once per `STAT_FD_UNUSED`.
    fn sweep(&mut self, now: Instant) {
        let due = self.last_sweep.is_none_or(|t| now.duration_since(t) >= STAT_FD_UNUSED);
        if due {
            self.last_sweep = Some(now);
            self.open
                .retain(|_, (_, used)| now.duration_since(*used) < STAT_FD_UNUSED);
        }
    }
}

/// How many stat files may stay open: `STAT_FDS_MAX`, or a quarter of the
/// soft RLIMIT_NOFILE when that is lower.
fn open_files_max() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    soft.map_or(STAT_FDS_MAX, |n| {
        usize::try_from(n / 4).map_or(STAT_FDS_MAX, |q| q.min(STAT_FDS_MAX))
    })
}

/// At most `limit` bytes (and one more, to tell a cut) of `file` from its
/// start, in one `pread` when the file fits `STAT_READ`: a procfs file
/// hands over all it has in one read, so a short read is its end.
fn read_once(file: &File, limit: u64, buf: &mut Vec<u8>) -> io::Result<bool> {
    let want = usize::try_from(limit.saturating_add(1)).unwrap_or(usize::MAX);
    let mut size = STAT_READ.min(want);
    loop {
        buf.clear();
        buf.resize(size, 0);
        let n = loop {
            match file.read_at(buf, 0) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r?,
            }
        };
        buf.truncate(n);
        if n < size || size >= want {
            return Ok(cap(buf, limit));
        }
        size = size.saturating_mul(4).min(want);
    }
}

/// Cuts `buf` to `limit` bytes; true when it was longer.
pub(crate) fn cap(buf: &mut Vec<u8>, limit: u64) -> bool {
    let cut = buf.len() as u64 > limit;
    if cut {
        buf.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    cut
}

/// USER_HZ, the unit of stat's starttime, as the kernel hands it to this
/// process (the auxiliary vector's AT_CLKTCK, what sysconf(_SC_CLK_TCK)
/// returns); 100 if it says 0.
pub fn clock_ticks() -> u64 {
    match rustix::param::clock_ticks_per_second() {
        0 => 100,
        hz => hz,
    }
}

#[cfg(test)]
mod tests;
