//! [`ProcFs`]: reads one PID's identity from a [`ProcTree`]: a directory
//! (the host's `/proc`, `/host/proc` in a container, a test fixture) or the
//! simulated fleet's in-memory tree. Reclaim's uncached view of one PID is
//! `task.rs`, on the same low-level readers.
//!
//! Owns: which files are read, how their errors map to [`ProcError`], and the
//! caches (passwd, btime; each process's uid, comm and cgroup are
//! `cache.rs`'s). Must not: walk all of `/proc` (it runs for every
//! GPU process every second, so it reads only stat, status, cgroup and, when
//! asked, cmdline of the PIDs it is given), or fail a whole read because an
//! optional part (cgroup, cmdline) is unreadable.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcstr::ArcStr;

use super::cache::{Identity, IdentityCache};
use super::files::{CMDLINE_READ_MAX, SMALL_FILE_MAX, read_optional, read_required, stat_error, whole_args};
use super::nss::{NssNames, system_lookup};
use super::redact::format_cmdline;
use super::stat::{parse_btime, parse_stat_ref, parse_status_uid};
use super::tree::{DirTree, PidFile, ProcTree, TreeFile, clock_ticks};
use super::users::UserCache;
use super::{ProcError, ProcessIdentity, ReadOptions};

/// How long a process's uid and cgroup are reused before they are read
/// again. Both are set when a job starts (setuid, the scheduler placing it
/// in its cgroup) and almost never change after; re-reading status and
/// cgroup every poll was two of the three file reads per GPU process;
/// stat, which says whether it is the same process, is read every poll.
pub const IDENTITY_REFRESH: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct ProcFs {
    tree: Arc<dyn ProcTree>,
    users: UserCache,
    clock_ticks: u64,
    /// Read once: the kernel recomputes btime from the clock on every read
    /// and it can move by a second, which would make start times (and so
    /// process identity) jitter.
    boot_time: Option<f64>,
    /// Per PID: uid, comm and cgroup, while the start time holds.
    cache: IdentityCache,
    /// Reused across reads: one allocation per process per poll saved.
    buf: Vec<u8>,
    /// For status and cgroup, read while `buf` holds stat (and its comm).
    aux: Vec<u8>,
}

impl ProcFs {
    /// A directory tree rooted at `root` (e.g. "/proc", "/host/proc"), users
    /// from `passwd` (e.g. "/etc/passwd", "/host/etc/passwd").
    pub fn new(root: impl Into<PathBuf>, passwd: impl Into<PathBuf>) -> Self {
        let (root, passwd) = (root.into(), passwd.into());
        // The name service (LDAP, SSSD) only where it answers for the
        // processes read: the host's own `/proc` with the host's own
        // `/etc/passwd`. A container reading a mounted host tree would get
        // the container's users.
        let host = root == Path::new("/proc") && passwd == Path::new("/etc/passwd");
        let mut fs = ProcFs::on(Arc::new(DirTree::new(root, passwd)));
        fs.users.set_nss(host.then(|| NssNames::start(system_lookup())));
        fs
    }

    /// Reads `tree` (e.g. a simulated fleet's [`MemTree`](super::MemTree)),
    /// users from its passwd.
    pub fn on(tree: Arc<dyn ProcTree>) -> Self {
        ProcFs {
            tree,
            users: UserCache::new(),
            clock_ticks: clock_ticks(),
            boot_time: None,
            cache: IdentityCache::new(IDENTITY_REFRESH),
            buf: Vec::new(),
            aux: Vec::new(),
        }
    }

    /// Reads stat, status and cgroup (and cmdline when `opts.cmdline`);
    /// `Err(Gone)` when the process does not exist (any more). `now` is the
    /// caller's clock for the cache's refresh: a poll reads it once for all
    /// its processes, and a new clock value is a new poll (the cache sweeps then).
    pub fn read_at(&mut self, pid: u32, opts: &ReadOptions, now: Instant) -> Result<ProcessIdentity, ProcError> {
        self.cache.round(now);
        self.read_identity_at(pid, opts, now)
    }

    fn read_identity_at(&mut self, pid: u32, opts: &ReadOptions, now: Instant) -> Result<ProcessIdentity, ProcError> {
        // Taken, not borrowed: `self` is borrowed again below.
        let mut buf = std::mem::take(&mut self.buf);
        let read = self.identity_in(pid, opts, now, &mut buf);
        self.buf = buf;
        read
    }

    fn identity_in(
        &mut self,
        pid: u32,
        opts: &ReadOptions,
        now: Instant,
        buf: &mut Vec<u8>,
    ) -> Result<ProcessIdentity, ProcError> {
        read_required(&*self.tree, pid, PidFile::Stat, buf)?;
        let (stat, comm) = parse_stat_ref(buf).map_err(|e| stat_error(pid, e))?;
        // A zombie may lack what a live process has; never call it gone.
        let exited = stat.state.is_exited();
        let (mut who, cgroup) = match self.cache.hit(pid, stat.start_ticks, &comm, now) {
            Some(id) => id,
            None => self.read_identity(pid, stat.start_ticks, &comm, exited, now)?,
        };
        let tree = &*self.tree;
        // The name is looked up every time: the passwd cache notices edits.
        let renamed = match who.uid {
            Some(uid) => self.users.name_unless(uid, tree, now, &who.user),
            // No uid, no name: "", as `read_identity` cached it.
            None => (!who.user.is_empty()).then_some(ArcStr::new()),
        };
        if let Some(user) = renamed {
            who = self.cache.renamed(pid, &who, user);
        }
        let cmdline = if opts.cmdline {
            read_optional(tree, pid, PidFile::Cmdline, exited, CMDLINE_READ_MAX, buf)?
                .map(|cut| ArcStr::from(format_cmdline(whole_args(buf, cut), opts.cmdline_max_bytes)))
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
            who,
            state: stat.state,
            start_ticks: stat.start_ticks,
            start_time,
            cmdline,
            cgroup,
        })
    }

    /// Reads status and cgroup of `pid` and caches what they say.
    fn read_identity(
        &mut self,
        pid: u32,
        start_ticks: u64,
        comm: &str,
        exited: bool,
        now: Instant,
    ) -> Result<Identity, ProcError> {
        let tree = &*self.tree;
        let aux = &mut self.aux;
        read_required(tree, pid, PidFile::Status, aux)?;
        let uid = parse_status_uid(&String::from_utf8_lossy(aux));
        // Unreadable reads as empty: both are no workload.
        if read_optional(tree, pid, PidFile::Cgroup, exited, SMALL_FILE_MAX, aux)?.is_none() {
            aux.clear();
        }
        // Named now so the identity is cached under its name (the read
        // looks it up again: a hit in the passwd cache).
        let user = uid.map(|uid| self.users.name(uid, tree, now)).unwrap_or_default();
        Ok(self.cache.fill(pid, start_ticks, (uid, comm, user), aux, now))
    }

    /// Processes whose identity is cached (for the soak's retained-state check).
    pub fn cached_identities(&self) -> usize {
        self.cache.len()
    }

    /// `btime` of `<root>/stat` in Unix seconds, read once and cached.
    /// Errors carry pid 0: they are about the system, not a process.
    pub fn boot_time(&mut self) -> Result<f64, ProcError> {
        if let Some(btime) = self.boot_time {
            return Ok(btime);
        }
        let mut bytes = Vec::new();
        self.tree
            .read(TreeFile::SystemStat, SMALL_FILE_MAX, &mut bytes)
            .map_err(|source| ProcError::Unreadable {
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

/// Knobs and a clockless read only tests use.
#[cfg(test)]
impl ProcFs {
    /// Asks `lookup` for the uids passwd lacks (tests: a slow or fake
    /// directory); `None` turns the name service off.
    pub fn with_name_service(mut self, lookup: Option<super::nss::Lookup>) -> Self {
        self.users.set_nss(lookup.map(NssNames::start));
        self
    }

    /// How long a process's uid and cgroup are reused (default
    /// `IDENTITY_REFRESH`; zero reads them on every call).
    pub fn with_identity_refresh(mut self, every: Duration) -> Self {
        self.cache.set_refresh(every);
        self
    }

    /// How often passwd's mtime is checked (default 5 s).
    pub fn with_passwd_recheck(mut self, every: Duration) -> Self {
        self.users.set_recheck(every);
        self
    }

    /// USER_HZ other than the kernel's (tests); 0 keeps the kernel's.
    pub fn with_clock_ticks(mut self, hz: u64) -> Self {
        if hz != 0 {
            self.clock_ticks = hz;
        }
        self
    }

    /// [`ProcFs::read_at`] on its own clock, outside a poll.
    pub fn read(&mut self, pid: u32, opts: &ReadOptions) -> Result<ProcessIdentity, ProcError> {
        let now = Instant::now();
        // One read is not a round: only the periodic sweep applies.
        self.cache.single(now);
        self.read_identity_at(pid, opts, now)
    }
}
