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
//! what was rendered is the point), allocate on a read, or keep text per
//! process.
//!
//! Layout: an ordered map from PID to its start, state and [`MemIdentity`] (names,
//! cgroup, cmdline), which the simulated fleet shares between processes
//! that look alike ([`MemWriter::insert_as`]). Files are rendered into the
//! reader's buffer when read; `stat`, read every poll, is written without
//! `fmt`.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::collections::BTreeMap;

use super::ProcState;
use super::tree::{PidFile, ProcTree, TreeFile, cap};

mod cgroup_path;
pub use cgroup_path::cgroup_path;

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

/// What a process shows that does not change while it lives, and that
/// processes which look alike may share (see [`MemWriter::insert_as`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MemIdentity {
    pub ppid: u32,
    /// Cut to 15 bytes when rendered, as the kernel does (TASK_COMM_LEN).
    pub comm: String,
    pub uid: u32,
    /// The cgroup v2 path, e.g. from [`cgroup_path`].
    pub cgroup: String,
    /// The args, each followed by a NUL, as `/proc/<pid>/cmdline` holds them.
    pub cmdline: Vec<u8>,
}

impl MemIdentity {
    /// `cmdline` from whitespace-separated args (an empty text: no args).
    pub fn nul_args(text: &str) -> Vec<u8> {
        text.split_whitespace().flat_map(|arg| arg.bytes().chain([0])).collect()
    }
}

/// One process.
#[derive(Debug)]
struct Entry {
    start_ticks: u64,
    ident: Arc<MemIdentity>,
    /// The letter `stat` shows ([`ProcState::code`]): all the tree needs
    /// of the state (status's name and cmdline's emptiness follow from it).
    code: char,
}

#[derive(Debug, Default)]
struct Inner {
    btime: u64,
    /// In PID order, as the identity cache and for its reason.
    procs: BTreeMap<u32, Entry>,
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
}

#[cfg(test)]
impl MemTree {
    /// Processes in the tree.
    pub(super) fn len(&self) -> usize {
        self.inner.read().unwrap_or_else(PoisonError::into_inner).procs.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl MemWriter<'_> {
    /// Adds or replaces a process.
    pub fn insert(&mut self, p: MemProcess) {
        let ident = Arc::new(MemIdentity {
            ppid: p.ppid,
            comm: p.comm,
            uid: p.uid,
            cgroup: p.cgroup,
            cmdline: p.cmdline,
        });
        self.insert_as(p.pid, p.state, p.start_ticks, ident);
    }

    /// Adds or replaces a process that shows `ident`, shared as it is (a
    /// caller with many processes and few identities keeps one `Arc` each).
    pub fn insert_as(&mut self, pid: u32, state: ProcState, start_ticks: u64, ident: Arc<MemIdentity>) {
        let entry = Entry {
            start_ticks,
            ident,
            code: state.code(),
        };
        self.inner.procs.insert(pid, entry);
    }

    /// Changes a process's state; false when it is not in the tree.
    pub fn set_state(&mut self, pid: u32, state: ProcState) -> bool {
        let found = self.inner.procs.get_mut(&pid);
        found.map(|e| e.code = state.code()).is_some()
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
                let _ = write!(buf, "cpu  0 0 0 0 0 0 0 0 0 0\nbtime {}\nprocesses 1\n", inner.btime);
            }
            TreeFile::Passwd => buf.extend_from_slice(&inner.passwd),
            TreeFile::Pid(pid, what) => {
                let e = inner
                    .procs
                    .get(&pid)
                    .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
                render_file(pid, e, what, buf);
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

fn render_file(pid: u32, e: &Entry, what: PidFile, buf: &mut Vec<u8>) {
    let id = &*e.ident;
    let state = ProcState::from_code(e.code);
    match what {
        PidFile::Stat => render_stat(pid, e, buf),
        PidFile::Status => {
            // Writing to a Vec cannot fail.
            let _ = write!(
                buf,
                "Name:\t{}\nUmask:\t0022\nState:\t{} ({})\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t{}\n\
                 TracerPid:\t0\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\nThreads:\t1\n",
                comm(&id.comm),
                e.code,
                state.kernel_name(),
                id.ppid,
                uid = id.uid
            );
        }
        PidFile::Cgroup => {
            buf.extend_from_slice(b"0::");
            buf.extend_from_slice(id.cgroup.as_bytes());
            buf.push(b'\n');
        }
        // A zombie's memory (and so its argv) is gone: the kernel shows none.
        PidFile::Cmdline if state.is_exited() => {}
        PidFile::Cmdline => buf.extend_from_slice(&id.cmdline),
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
/// Written piece by piece: it is read for every GPU process every poll,
/// and `fmt` cost as much as the rest of the read.
fn render_stat(pid: u32, e: &Entry, buf: &mut Vec<u8>) {
    let id = &*e.ident;
    // The PID shows three times (pid, pgrp, session): its digits once.
    let mut digits = [0; 20];
    let pid = decimal(pid.into(), &mut digits);
    buf.extend_from_slice(pid);
    buf.extend_from_slice(b" (");
    buf.extend_from_slice(comm(&id.comm).as_bytes());
    buf.extend_from_slice(b") ");
    let mut code = [0; 4];
    buf.extend_from_slice(e.code.encode_utf8(&mut code).as_bytes());
    buf.push(b' ');
    push_u64(buf, id.ppid.into());
    for _ in 0..2 {
        buf.push(b' ');
        buf.extend_from_slice(pid);
    }
    // flags 0x400100: a user task as Linux 6.x shows one (no PF_KTHREAD).
    buf.extend_from_slice(b" 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 ");
    push_u64(buf, e.start_ticks);
    buf.extend_from_slice(b" 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n");
}

/// `n` in decimal.
fn push_u64(buf: &mut Vec<u8>, n: u64) {
    let mut digits = [0; 20];
    buf.extend_from_slice(decimal(n, &mut digits));
}

/// `n`'s decimal digits, at the end of `digits`.
fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[at..]
}

#[cfg(test)]
mod tests;
