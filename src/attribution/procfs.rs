//! [`ProcFs`]: reads one PID's identity from a `/proc` tree rooted anywhere
//! (the host's `/proc`, `/host/proc` in a container, or a test fixture).
//!
//! Owns: which files are read, how their errors map to [`ProcError`], and the
//! caches (passwd, btime, and each process's status uid and cgroup). Must not: walk all of `/proc` (it runs for every
//! GPU process every second, so it reads only stat, status, cgroup and, when
//! asked, cmdline of the PIDs it is given), or fail a whole read because an
//! optional part (cgroup, cmdline) is unreadable.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cgroup::parse_cgroup;
use super::redact::format_cmdline;
use super::stat::{StatError, parse_btime, parse_stat, parse_status_uid};
use super::users::UserCache;
use super::{CgroupInfo, ProcError, ProcessIdentity, ReadOptions};

/// USER_HZ, the unit of stat's starttime. It is 100 on every architecture
/// a GPU host runs (x86_64, aarch64, ppc64le); sysconf(_SC_CLK_TCK) would
/// need libc, so it is a setting instead ([`ProcFs::with_clock_ticks`]).
pub const DEFAULT_CLOCK_TICKS: u64 = 100;

/// ESRCH on Linux (asm-generic/errno-base.h): a reaped task's open proc
/// file. std has no ErrorKind for it.
const ESRCH: i32 = 3;

/// Caps on what is read, so a hostile or huge file cannot cost memory.
const SMALL_FILE_MAX: u64 = 64 * 1024;
const CMDLINE_READ_MAX: u64 = 256 * 1024;

/// How long a process's uid and cgroup are reused before they are read
/// again. Both are set when a job starts (setuid, the scheduler placing it
/// in its cgroup) and almost never change after; re-reading status and
/// cgroup every poll was two of the three file reads per GPU process.
/// stat is still read every poll: state, ppid and the start time (which
/// tells a reused PID from the old process) change.
pub const IDENTITY_REFRESH: Duration = Duration::from_secs(30);

/// A process's slow-changing identity, valid while its start time matches.
#[derive(Debug, Clone)]
struct Cached {
    start_ticks: u64,
    uid: Option<u32>,
    cgroup: CgroupInfo,
    read_at: Instant,
    used_at: Instant,
}

/// Cheap to clone (a clone has its own caches).
#[derive(Debug, Clone)]
pub struct ProcFs {
    root: PathBuf,
    users: UserCache,
    clock_ticks: u64,
    /// Read once: the kernel recomputes btime from the clock on every read
    /// and it can move by a second, which would make start times (and so
    /// process identity) jitter.
    boot_time: Option<f64>,
    /// Per PID; entries unused for a refresh period are swept.
    identities: HashMap<u32, Cached>,
    last_sweep: Instant,
    refresh: Duration,
}

impl ProcFs {
    /// A tree rooted at `root` (e.g. "/proc"); users from `/etc/passwd`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ProcFs {
            root: root.into(),
            users: UserCache::new(PathBuf::from("/etc/passwd")),
            clock_ticks: DEFAULT_CLOCK_TICKS,
            boot_time: None,
            identities: HashMap::new(),
            last_sweep: Instant::now(),
            refresh: IDENTITY_REFRESH,
        }
    }

    /// How long a process's uid and cgroup are reused (default
    /// [`IDENTITY_REFRESH`]; zero reads them on every call).
    pub fn with_identity_refresh(mut self, every: Duration) -> Self {
        self.refresh = every;
        self
    }

    /// Resolve users from this passwd file instead (e.g. "/host/etc/passwd").
    pub fn with_passwd(mut self, path: impl Into<PathBuf>) -> Self {
        self.users = UserCache::new(path.into());
        self
    }

    /// How often passwd's mtime is checked (default 5 s).
    pub fn with_passwd_recheck(mut self, every: Duration) -> Self {
        self.users.set_recheck(every);
        self
    }

    /// USER_HZ when it is not 100; 0 is taken as 100.
    pub fn with_clock_ticks(mut self, hz: u64) -> Self {
        self.clock_ticks = if hz == 0 { DEFAULT_CLOCK_TICKS } else { hz };
        self
    }

    /// The tree this reads, e.g. "/proc".
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Reads stat, status and cgroup (and cmdline when `opts.cmdline`).
    /// `Err(Gone)` when the process does not exist (any more).
    pub fn read(&mut self, pid: u32, opts: &ReadOptions) -> Result<ProcessIdentity, ProcError> {
        let dir = self.root.join(pid.to_string());
        let stat = read_required(&dir.join("stat"), pid, "stat")?;
        let stat = parse_stat(&stat).map_err(|e| match e {
            StatError::Empty => ProcError::Gone { pid },
            StatError::Malformed(detail) => ProcError::Malformed {
                pid,
                what: "stat",
                detail,
            },
        })?;
        // A zombie may lack what a live process has; never call it gone.
        let zombie = stat.state.is_zombie_like();
        let now = Instant::now();
        let (uid, cgroup) = match self.identities.get_mut(&pid) {
            Some(c) if c.start_ticks == stat.start_ticks && now.duration_since(c.read_at) < self.refresh => {
                c.used_at = now;
                (c.uid, c.cgroup.clone())
            }
            _ => {
                let status = read_required(&dir.join("status"), pid, "status")?;
                let uid = parse_status_uid(&String::from_utf8_lossy(&status));
                let cgroup = read_optional(&dir.join("cgroup"), pid, zombie, SMALL_FILE_MAX)?
                    .map(|(bytes, _)| parse_cgroup(&String::from_utf8_lossy(&bytes)))
                    .unwrap_or_else(CgroupInfo::default);
                let cached = Cached {
                    start_ticks: stat.start_ticks,
                    uid,
                    cgroup: cgroup.clone(),
                    read_at: now,
                    used_at: now,
                };
                self.identities.insert(pid, cached);
                (uid, cgroup)
            }
        };
        // The name is looked up every time: the passwd cache notices edits.
        let user = uid.map(|uid| self.users.name(uid)).unwrap_or_default();
        self.sweep(now);
        let cmdline = if opts.cmdline {
            read_optional(&dir.join("cmdline"), pid, zombie, CMDLINE_READ_MAX)?
                .map(|(bytes, cut)| format_cmdline(whole_args(&bytes, cut), opts.cmdline_max_bytes))
        } else {
            None
        };
        let start_time = self
            .boot_time()
            .ok()
            .map(|btime| btime + stat.start_ticks as f64 / self.clock_ticks as f64);
        Ok(ProcessIdentity {
            pid,
            ppid: stat.ppid,
            comm: stat.comm,
            uid,
            user,
            state: stat.state,
            start_ticks: stat.start_ticks,
            start_time,
            cmdline,
            cgroup,
        })
    }

    /// Forgets processes not asked about for a refresh period, so PID churn
    /// cannot grow the cache; runs at most once per period.
    fn sweep(&mut self, now: Instant) {
        let period = self.refresh.max(Duration::from_secs(1));
        if now.duration_since(self.last_sweep) < period {
            return;
        }
        self.last_sweep = now;
        self.identities.retain(|_, c| now.duration_since(c.used_at) < period);
    }

    /// Processes whose identity is cached (for the soak's retained-state check).
    pub fn cached_identities(&self) -> usize {
        self.identities.len()
    }

    /// `btime` of `<root>/stat` in Unix seconds, read once and cached.
    /// Errors carry pid 0: they are about the system, not a process.
    pub fn boot_time(&mut self) -> Result<f64, ProcError> {
        if let Some(btime) = self.boot_time {
            return Ok(btime);
        }
        let path = self.root.join("stat");
        let (bytes, _) = read_limited(&path, SMALL_FILE_MAX).map_err(|source| ProcError::Unreadable {
            pid: 0,
            what: "system stat",
            source,
        })?;
        let btime = parse_btime(&String::from_utf8_lossy(&bytes)).ok_or_else(|| ProcError::Malformed {
            pid: 0,
            what: "system stat",
            detail: "no numeric btime line".into(),
        })? as f64;
        self.boot_time = Some(btime);
        Ok(btime)
    }
}

impl Default for ProcFs {
    /// The host's `/proc` and `/etc/passwd`.
    fn default() -> Self {
        ProcFs::new("/proc")
    }
}

/// NotFound or ESRCH: the process exited (or never existed).
fn is_gone(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::NotFound || err.raw_os_error() == Some(ESRCH)
}

/// A file the identity cannot do without (stat, status).
fn read_required(path: &Path, pid: u32, what: &'static str) -> Result<Vec<u8>, ProcError> {
    match read_limited(path, SMALL_FILE_MAX) {
        Ok((bytes, _)) => Ok(bytes),
        Err(e) if is_gone(&e) => Err(ProcError::Gone { pid }),
        Err(source) => Err(ProcError::Unreadable { pid, what, source }),
    }
}

/// A file the identity can do without: `Ok(None)` when unreadable (permission
/// denied, a zombie's missing parts); `Err(Gone)` only when a live-looking
/// process vanished between reads.
fn read_optional(path: &Path, pid: u32, zombie: bool, limit: u64) -> Result<Option<(Vec<u8>, bool)>, ProcError> {
    match read_limited(path, limit) {
        Ok(read) => Ok(Some(read)),
        Err(e) if is_gone(&e) && !zombie => Err(ProcError::Gone { pid }),
        Err(_) => Ok(None),
    }
}

/// Up to `limit` bytes; the bool says the file had more.
fn read_limited(path: &Path, limit: u64) -> io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    let cut = bytes.len() as u64 > limit;
    if cut {
        bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok((bytes, cut))
}

/// A cut cmdline ends in a partial arg: drop it, so that half of a secret
/// (`https://user:pa`) is never shown unredacted because its end is missing.
fn whole_args(bytes: &[u8], cut: bool) -> &[u8] {
    if !cut {
        return bytes;
    }
    match bytes.iter().rposition(|&b| b == 0) {
        Some(last_nul) => &bytes[..last_nul],
        None => bytes,
    }
}
