//! [`ProcTree`]: where the files attribution parses come from. One trait,
//! two trees: [`DirTree`], a directory laid out like `/proc` (the host's,
//! `/host/proc` in a container, a test fixture), and
//! [`MemTree`](super::MemTree), the simulated fleet's processes rendered in
//! the kernel's text formats. Everything above this seam (parsing, caches,
//! cgroup classification, redaction, holder logic) is the same for both.
//!
//! Owns: naming the files a reader may ask for and the size caps of reading
//! them. Must not: list processes (the caller asks for the PIDs NVML gave
//! it), parse, or cache.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

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
#[derive(Debug, Clone)]
pub struct DirTree {
    root: PathBuf,
    passwd: PathBuf,
}

impl DirTree {
    /// `root` as `/proc`, users from `passwd`.
    pub fn new(root: impl Into<PathBuf>, passwd: impl Into<PathBuf>) -> Self {
        DirTree {
            root: root.into(),
            passwd: passwd.into(),
        }
    }

    /// The directory read as `/proc`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The passwd file users come from.
    pub fn passwd(&self) -> &Path {
        &self.passwd
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
