//! [`IdentityCache`]: what [`ProcFs`](super::ProcFs) remembers of each PID
//! between polls: who it is (uid, comm, user name and workload, as the
//! snapshot's shared [`Who`]) and its parsed cgroup, while its start time
//! holds.
//!
//! Owns: the per-PID entries, when they are read again and when the unused
//! are swept. Must not: read files (the caller hands it the bytes it read),
//! or keep a PID that no read asked about for a whole sweep period (PID
//! churn must not grow it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::cgroup::parse_cgroup;
use arcstr::ArcStr;

use super::{CgroupInfo, Who};

/// What the caller gets of a cached identity: who it is, and its cgroup.
/// Both are reference counted: a poll clones two pointers per process.
pub(super) type Identity = (Arc<Who>, Arc<CgroupInfo>);

/// One PID.
#[derive(Debug)]
struct Entry {
    start_ticks: u64,
    /// When status and cgroup were read.
    read: Instant,
    /// The last read that asked for it.
    used: Instant,
    who: Arc<Who>,
    cgroup: Arc<CgroupInfo>,
}

/// Per PID (see the module docs).
#[derive(Debug)]
pub(super) struct IdentityCache {
    /// By PID in order: a poll asks in the source's order, mostly rising
    /// PIDs, so consecutive lookups share tree leaves (docs/design.md).
    entries: BTreeMap<u32, Entry>,
    refresh: Duration,
    /// The clock of the current round of reads (see [`IdentityCache::round`]).
    round: Option<Instant>,
    last_sweep: Instant,
    shared: Shared,
}

/// Identities shared by PIDs that are alike: the workers of one job (same
/// cgroup, command and user) hold one `Who` and one parsed cgroup, not one
/// each. Swept with the entries: what only this table holds goes.
#[derive(Debug, Default)]
struct Shared {
    cgroups: FxHashMap<Box<[u8]>, Arc<CgroupInfo>>,
    comms: rustc_hash::FxHashSet<ArcStr>,
    /// By (cgroup's address, comm, user, uid); the value holds the cgroup,
    /// so that address is not reused while the key stands.
    whos: FxHashMap<(usize, ArcStr, ArcStr, Option<u32>), Identity>,
}

impl Shared {
    fn get(&mut self, (uid, comm, user): (Option<u32>, &str, ArcStr), cgroup: &[u8]) -> Identity {
        let info = match self.cgroups.get(cgroup) {
            Some(i) => i.clone(),
            None => {
                let i = Arc::new(parse_cgroup(&String::from_utf8_lossy(cgroup)));
                self.cgroups.insert(cgroup.into(), i.clone());
                i
            }
        };
        let comm = match self.comms.get(comm) {
            Some(c) => c.clone(),
            None => {
                let c = ArcStr::from(comm);
                self.comms.insert(c.clone());
                c
            }
        };
        let key = (Arc::as_ptr(&info) as usize, comm.clone(), user.clone(), uid);
        self.whos
            .entry(key)
            .or_insert_with(|| {
                let who = Arc::new(Who {
                    comm,
                    user,
                    uid,
                    placement: info.placement(),
                });
                (who, info)
            })
            .clone()
    }

    fn sweep(&mut self) {
        self.whos.retain(|_, (who, _)| Arc::strong_count(who) > 1);
        self.cgroups.retain(|_, c| Arc::strong_count(c) > 1);
        self.comms.retain(|c| ArcStr::strong_count(c).is_none_or(|n| n > 1));
    }
}

impl IdentityCache {
    pub(super) fn new(refresh: Duration) -> Self {
        IdentityCache {
            entries: BTreeMap::new(),
            refresh,
            round: None,
            last_sweep: Instant::now(),
            shared: Shared::default(),
        }
    }

    #[cfg(test)]
    pub(super) fn set_refresh(&mut self, every: Duration) {
        self.refresh = every;
    }

    /// How often the unused are swept: the refresh period, at least 1 s.
    fn sweep_period(&self) -> Duration {
        self.refresh.max(Duration::from_secs(1))
    }

    /// A read outside a poll's round: only the periodic sweep applies.
    #[cfg(test)]
    pub(super) fn single(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_sweep) >= self.sweep_period() {
            self.start_round(now);
        }
    }

    /// A read in the round of clock `now`: a poll passes one clock value for
    /// all its reads, so a new value starts a new round.
    pub(super) fn round(&mut self, now: Instant) {
        if self.round != Some(now) {
            self.start_round(now);
        }
    }

    /// At most once per sweep period forgets the entries not asked about
    /// since the last sweep.
    fn start_round(&mut self, now: Instant) {
        self.round = Some(now);
        if now.saturating_duration_since(self.last_sweep) < self.sweep_period() {
            return;
        }
        let since = std::mem::replace(&mut self.last_sweep, now);
        self.entries.retain(|_, e| e.used >= since);
        self.shared.sweep();
    }

    /// The identity of `pid` when it is the same process (same start) and
    /// was read within its refresh period; `comm` (what stat says now)
    /// replaces the cached one when it changed (exec, `PR_SET_NAME`).
    pub(super) fn hit(&mut self, pid: u32, start_ticks: u64, comm: &str, now: Instant) -> Option<Identity> {
        let e = self.entries.get_mut(&pid)?;
        if e.start_ticks != start_ticks || now.saturating_duration_since(e.read) >= self.refresh {
            return None;
        }
        e.used = now;
        if *e.who.comm != *comm {
            e.who = Arc::new(Who {
                comm: ArcStr::from(comm),
                ..Who::clone(&e.who)
            });
        }
        Some((e.who.clone(), e.cgroup.clone()))
    }

    /// Caches what status and cgroup (empty when unreadable: no workload)
    /// say of `pid`.
    pub(super) fn fill(
        &mut self,
        pid: u32,
        start_ticks: u64,
        (uid, comm, user): (Option<u32>, &str, ArcStr),
        cgroup: &[u8],
        now: Instant,
    ) -> Identity {
        let (who, cgroup) = self.shared.get((uid, comm, user), cgroup);
        let entry = Entry {
            start_ticks,
            read: now,
            used: now,
            who: who.clone(),
            cgroup: cgroup.clone(),
        };
        self.entries.insert(pid, entry);
        (who, cgroup)
    }

    /// `pid`'s identity `who` under the name passwd gives its uid now,
    /// `user` (passwd was edited since it was cached); cached so when `who`
    /// is the entry's.
    pub(super) fn renamed(&mut self, pid: u32, who: &Arc<Who>, user: ArcStr) -> Arc<Who> {
        let new = Arc::new(Who {
            user,
            ..Who::clone(who)
        });
        if let Some(e) = self.entries.get_mut(&pid).filter(|e| Arc::ptr_eq(&e.who, who)) {
            e.who = new.clone();
        }
        new
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}
