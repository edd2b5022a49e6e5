//! [`MemTree`]: a `/proc` tree in memory, for the simulated fleet. Whoever
//! simulates processes writes them here ([`MemTree::update`]); attribution
//! reads them through [`ProcTree`] as it reads the real `/proc`, so the demo
//! runs the production parsing, cgroup classification, redaction and holder
//! logic.
//!
//! Owns: rendering a process as the kernel prints its `stat`, `status`,
//! `cgroup` and `cmdline`, `/proc/stat`'s btime, a passwd file, and a cgroup
//! path that [`parse_cgroup`](super::parse_cgroup) classifies back into the
//! same workload. Must not: parse (that is the reader's job, and reading
//! what was rendered is the point), or re-render a process that did not
//! change (`stat` is kept rendered: it is read every poll).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::sync::{PoisonError, RwLock, RwLockWriteGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::tree::{PidFile, ProcTree, TreeFile, cap};
use super::{CgroupInfo, ProcState, Runtime};

/// What a simulated process shows in `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemProcess {
    pub pid: u32,
    pub ppid: u32,
    /// Cut to 15 bytes when rendered, as the kernel does (TASK_COMM_LEN).
    pub comm: String,
    pub state: ProcState,
    pub start_ticks: u64,
    pub uid: u32,
    /// The cgroup v2 path, e.g. from [`cgroup_path`].
    pub cgroup: String,
    /// The args, each followed by a NUL, as `/proc/<pid>/cmdline` holds them.
    pub cmdline: Vec<u8>,
}

impl MemProcess {
    /// `cmdline` from whitespace-separated args (an empty text: no args).
    pub fn nul_args(text: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len() + 1);
        for arg in text.split_whitespace() {
            out.extend_from_slice(arg.as_bytes());
            out.push(0);
        }
        out
    }
}

#[derive(Debug)]
struct Entry {
    p: MemProcess,
    stat: String,
}

#[derive(Debug, Default)]
struct Inner {
    btime: u64,
    procs: HashMap<u32, Entry>,
    passwd: Vec<u8>,
    /// Bumped on each passwd change: the reader's cache notices it.
    passwd_generation: u64,
}

/// A shared in-memory `/proc` (see the module docs).
#[derive(Debug, Default)]
pub struct MemTree {
    inner: RwLock<Inner>,
}

/// Changes to a [`MemTree`] under one lock.
pub struct MemWriter<'a> {
    inner: RwLockWriteGuard<'a, Inner>,
}

impl MemTree {
    /// An empty tree whose `/proc/stat` says the system booted at `btime`.
    pub fn new(btime: u64) -> Self {
        MemTree {
            inner: RwLock::new(Inner {
                btime,
                ..Inner::default()
            }),
        }
    }

    /// Applies `f`'s changes under one write lock.
    pub fn update<R>(&self, f: impl FnOnce(&mut MemWriter<'_>) -> R) -> R {
        // A writer that panicked left whole entries (each is replaced whole).
        let inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        f(&mut MemWriter { inner })
    }

    /// Processes in the tree.
    pub fn len(&self) -> usize {
        self.inner.read().unwrap_or_else(PoisonError::into_inner).procs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl MemWriter<'_> {
    /// Adds or replaces a process.
    pub fn insert(&mut self, p: MemProcess) {
        let stat = render_stat(&p);
        self.inner.procs.insert(p.pid, Entry { p, stat });
    }

    /// Changes a process's state; false when it is not in the tree.
    pub fn set_state(&mut self, pid: u32, state: ProcState) -> bool {
        let Some(e) = self.inner.procs.get_mut(&pid) else {
            return false;
        };
        if e.p.state != state {
            e.p.state = state;
            e.stat = render_stat(&e.p);
        }
        true
    }

    /// The process exited and was reaped: its directory is gone.
    pub fn remove(&mut self, pid: u32) {
        self.inner.procs.remove(&pid);
    }

    /// Sets the passwd file to one line per (uid, name).
    pub fn set_passwd<'n>(&mut self, users: impl IntoIterator<Item = (u32, &'n str)>) {
        let mut text = String::from("root:x:0:0:root:/root:/bin/bash\n");
        for (uid, name) in users {
            let _ = writeln!(text, "{name}:x:{uid}:{uid}::/home/{name}:/bin/bash");
        }
        self.inner.passwd = text.into_bytes();
        self.inner.passwd_generation += 1;
    }
}

impl ProcTree for MemTree {
    fn read(&self, file: TreeFile, limit: u64, buf: &mut Vec<u8>) -> io::Result<bool> {
        buf.clear();
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        match file {
            TreeFile::SystemStat => {
                let text = format!("cpu  0 0 0 0 0 0 0 0 0 0\nbtime {}\nprocesses 1\n", inner.btime);
                buf.extend_from_slice(text.as_bytes());
            }
            TreeFile::Passwd => buf.extend_from_slice(&inner.passwd),
            TreeFile::Pid(pid, what) => {
                let e = inner
                    .procs
                    .get(&pid)
                    .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
                render_file(e, what, buf);
            }
        }
        Ok(cap(buf, limit))
    }

    fn stamp(&self, file: TreeFile) -> Option<(SystemTime, u64)> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        match file {
            TreeFile::Passwd => Some((
                UNIX_EPOCH + Duration::from_secs(inner.passwd_generation),
                inner.passwd.len() as u64,
            )),
            _ => None,
        }
    }
}

fn render_file(e: &Entry, what: PidFile, buf: &mut Vec<u8>) {
    let p = &e.p;
    match what {
        PidFile::Stat => buf.extend_from_slice(e.stat.as_bytes()),
        PidFile::Status => {
            let mut s = String::with_capacity(256);
            let _ = write!(
                s,
                "Name:\t{}\nUmask:\t0022\nState:\t{} ({})\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t{}\n\
                 TracerPid:\t0\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\nThreads:\t1\n",
                comm(&p.comm),
                p.state.code(),
                p.state.kernel_name(),
                p.ppid,
                pid = p.pid,
                uid = p.uid
            );
            buf.extend_from_slice(s.as_bytes());
        }
        PidFile::Cgroup => {
            buf.extend_from_slice(b"0::");
            buf.extend_from_slice(p.cgroup.as_bytes());
            buf.push(b'\n');
        }
        // A zombie's memory (and so its argv) is gone: the kernel shows none.
        PidFile::Cmdline if p.state.is_exited() => {}
        PidFile::Cmdline => buf.extend_from_slice(&p.cmdline),
    }
}

/// TASK_COMM_LEN - 1 bytes, cut on a char boundary.
fn comm(name: &str) -> &str {
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// The 52 fields of Linux 6.x, zero where attribution reads nothing.
fn render_stat(p: &MemProcess) -> String {
    // flags 0x400100: a user task as Linux 6.x shows one (no PF_KTHREAD).
    format!(
        "{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0 \
         18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        pid = p.pid,
        comm = comm(&p.comm),
        state = p.state.code(),
        ppid = p.ppid,
        start = p.start_ticks,
    )
}

/// A cgroup v2 path that [`parse_cgroup`](super::parse_cgroup) reads back as
/// `info` (fields it cannot name, such as a container id that is not 64 hex
/// digits, come back `None`): `/<slice>/slurm/job_<id>/step_<s>`, then
/// `/kubepods/<qos>/pod<uid>` (cgroupfs driver, so no slice is added), then
/// the container as its runtime names it, then the unit.
pub fn cgroup_path(info: &CgroupInfo) -> String {
    let mut path = String::new();
    if let Some(slice) = &info.slice {
        let _ = write!(path, "/{slice}");
    }
    if let Some(job) = &info.job {
        let _ = write!(path, "/slurm/job_{job}");
        if let Some(step) = &info.job_step {
            let _ = write!(path, "/step_{step}");
        }
    }
    if let Some(pod) = &info.pod_uid {
        path.push_str("/kubepods");
        if let Some(q @ ("burstable" | "besteffort")) = info.qos_class.as_deref() {
            let _ = write!(path, "/{q}");
        }
        let _ = write!(path, "/pod{pod}");
    }
    if let Some(id) = &info.container_id {
        let prefix = match info.container_runtime {
            Some(Runtime::Docker) => "docker-",
            Some(Runtime::Containerd) => "cri-containerd-",
            Some(Runtime::CriO) => "crio-",
            Some(Runtime::Podman) => "libpod-",
            None => "",
        };
        let _ = write!(path, "/{prefix}{id}");
    }
    if let Some(unit) = &info.unit {
        let _ = write!(path, "/{unit}");
    }
    if path.is_empty() {
        path.push('/');
    }
    path
}
