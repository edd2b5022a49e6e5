//! [`Exits`]: a pidfd per watched process in one epoll set, so that one
//! `epoll_wait` a poll finds every watched process that exited (a pidfd
//! turns readable when its process exits: zombie or reaped), costing per
//! exit rather than per process.
//!
//! Owns: the pidfds, the epoll set and their budget of descriptors. Must
//! not: read or parse `/proc`, or decide what an exit means (the reader of
//! the tree does); it only says "this PID's process is not the one you
//! watched any more".
//!
//! Why: the only per-poll reason to read a known process's
//! stat was to see it exit while NVML still lists it; at 64 x 1000 that
//! read was most of a poll on a real host (1.5 us each in the kernel for a
//! PyTorch worker).

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;

use rustix::event::epoll;
use rustix::process::{Pid, PidfdFlags, pidfd_open};

/// At most this many pidfds, and never more than a quarter of the soft
/// RLIMIT_NOFILE (stat files may take another quarter): a process past the
/// budget is simply read every poll, as before.
const WATCH_MAX: usize = 1 << 17;

/// Events taken from the kernel per `epoll_wait` (it is called again while
/// full).
const BATCH: usize = 256;

#[derive(Debug)]
pub(super) struct Exits {
    epoll: OwnedFd,
    fds: HashMap<u32, OwnedFd>,
    max: usize,
}

impl Exits {
    /// A new, empty set; `None` where epoll is refused.
    pub(super) fn new() -> Option<Self> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).ok()?;
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let max = soft.map_or(WATCH_MAX, |n| {
            usize::try_from(n / 4).map_or(WATCH_MAX, |q| q.min(WATCH_MAX))
        });
        Some(Exits {
            epoll,
            fds: HashMap::new(),
            max,
        })
    }

    /// Watches the process that has `pid` now; true when it is watched
    /// (already, or from now on). False past the budget, for a PID that
    /// does not exist, or where pidfds are not supported (Linux < 5.3).
    pub(super) fn watch(&mut self, pid: u32) -> bool {
        if self.fds.contains_key(&pid) {
            return true;
        }
        if self.fds.len() >= self.max {
            return false;
        }
        let Some(fd) = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok())
        else {
            return false;
        };
        let data = epoll::EventData::new_u64(u64::from(pid));
        if epoll::add(&self.epoll, &fd, data, epoll::EventFlags::IN).is_err() {
            return false;
        }
        self.fds.insert(pid, fd);
        true
    }

    /// Stops watching `pid` (closing its pidfd takes it out of the set).
    pub(super) fn unwatch(&mut self, pid: u32) {
        self.fds.remove(&pid);
    }

    /// Appends the PIDs whose watched process exited since the last call,
    /// and stops watching them (a new process with that PID is watched
    /// anew when it is read). False when the set could not be asked: then
    /// every watched PID is dropped and must be read again.
    pub(super) fn exited(&mut self, out: &mut Vec<u32>) -> bool {
        let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        // On the stack: an epoll event holds a pointer-sized union, which
        // is not `Send`, and the tree is shared between threads.
        let mut events = [const { MaybeUninit::<epoll::Event>::uninit() }; BATCH];
        loop {
            let Ok((ready, _)) = epoll::wait(&self.epoll, &mut events, Some(&zero)) else {
                out.extend(self.fds.keys().copied());
                self.fds.clear();
                return false;
            };
            let full = ready.len() == BATCH;
            for e in ready.iter() {
                let pid = e.data.u64() as u32;
                if self.fds.remove(&pid).is_some() {
                    out.push(pid);
                }
            }
            if !full {
                return true;
            }
        }
    }
}
