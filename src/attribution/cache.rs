//! [`IdentityCache`]: what [`ProcFs`](super::ProcFs) remembers of each PID
//! between polls (uid, comm and workload, while its start time holds), and
//! the one shared copy of each that the PIDs alike hold.
//!
//! Owns: the per-PID entries, when they are refreshed and swept, and the
//! interning of the parsed cgroup (keyed by the cgroup file's bytes) and of
//! the identity (uid, comm, user name, workload), which it hands out as the
//! snapshot's shared [`Who`]. Must not: read files (the caller hands
//! it the bytes it read), or grow without bound: both interning tables are
//! capped and lose what no entry holds at each sweep.
//!
//! Why shared: many PIDs share one pod, job or unit, so an entry holds one
//! pointer to its identity, and the shared identity carries the `Arc<Who>`
//! the snapshot's processes hold: a poll pays one reference count per
//! process for comm, user and placement.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcstr::ArcStr;
use rustc_hash::FxHashMap;

use super::cgroup::parse_cgroup;
use super::{CgroupInfo, Placement, Who};

/// Distinct workloads, and distinct identities, shared at most. A host has
/// far fewer cgroups with GPU processes; past the cap a new one is still
/// parsed and cached, only not shared, until a sweep makes room.
pub(super) const SHARED_MAX: usize = 4096;

/// A cgroup file longer than this is parsed for its process alone: keys
/// stay small whatever a container nests (real files are 30 bytes to 1 KiB,
/// cgroup v1 with a line per hierarchy), so the table holds at most 8 MiB.
pub(super) const KEY_MAX: usize = 2048;

/// The parsed cgroup of the processes in one cgroup, and how the snapshot
/// shows it.
#[derive(Debug, Clone)]
pub(super) struct Workload {
    pub(super) cgroup: Arc<CgroupInfo>,
    pub(super) placement: Arc<Placement>,
}

/// A PID's slow-changing identity; processes alike share one.
#[derive(Debug)]
pub(super) struct Ident {
    pub(super) workload: Workload,
    /// Comm, uid, the user's name when it was cached, and the workload's
    /// placement, as the snapshot shows them.
    pub(super) who: Arc<Who>,
}

/// One PID.
#[derive(Debug, Clone)]
struct Entry {
    start_ticks: u64,
    /// When status and cgroup are read again, in nanoseconds from `epoch`.
    due: u64,
    ident: Arc<Ident>,
    /// The sweep period it was last used in.
    used_in: u32,
}

/// The cgroup file's bytes to its parsed workload. An unreadable file is
/// keyed as an empty one: both parse to no workload.
type Workloads = HashMap<Box<[u8]>, Workload>;

/// What the caller gets of a cached identity: who it is, and its cgroup.
pub(super) type Identity = (Arc<Who>, Arc<CgroupInfo>);

/// Per PID, plus the shared parts.
#[derive(Debug, Clone)]
pub(super) struct IdentityCache {
    entries: FxHashMap<u32, Entry>,
    workloads: Workloads,
    /// By (uid, address of the workload's cgroup): the comms seen with them (almost always one).
    idents: HashMap<(Option<u32>, usize), Vec<Arc<Ident>>>,
    ident_count: usize,
    epoch: Instant,
    refresh: Duration,
    /// The clock of the current round of reads (see [`IdentityCache::round`]).
    round: Option<Instant>,
    last_sweep: Instant,
    /// Sweep periods so far: an entry used in this one is kept.
    period: u32,
}

impl IdentityCache {
    pub(super) fn new(refresh: Duration) -> Self {
        let now = Instant::now();
        IdentityCache {
            entries: FxHashMap::default(),
            workloads: HashMap::new(),
            idents: HashMap::new(),
            ident_count: 0,
            epoch: now,
            refresh,
            round: None,
            last_sweep: now,
            period: 0,
        }
    }

    pub(super) fn set_refresh(&mut self, every: Duration) {
        self.refresh = every;
    }

    /// How often the unused is swept: the refresh period, at least 1 s.
    fn sweep_period(&self) -> Duration {
        self.refresh.max(Duration::from_secs(1))
    }

    /// A read outside a poll's round: only the periodic sweep applies.
    pub(super) fn single(&mut self, now: Instant) {
        if now.duration_since(self.last_sweep) >= self.sweep_period() {
            self.start_round(now);
        }
    }

    /// A read in the round of clock `now`: a poll passes one clock value for
    /// all its reads, so a new value starts a new round.
    /// True when `now` started a new round.
    pub(super) fn round(&mut self, now: Instant) -> bool {
        let new = self.round != Some(now);
        if new {
            self.start_round(now);
        }
        new
    }

    /// At most once per sweep period forgets the entries not asked about in
    /// a whole period (so PID churn cannot grow the cache) and the shared
    /// parts none holds.
    fn start_round(&mut self, now: Instant) {
        self.round = Some(now);
        if now.duration_since(self.last_sweep) < self.sweep_period() {
            return;
        }
        self.last_sweep = now;
        let period = self.period;
        self.entries.retain(|_, e| e.used_in == period);
        self.period = period.wrapping_add(1);
        // Identities first: each holds its workload.
        self.idents.retain(|_, same| {
            same.retain(|i| Arc::strong_count(i) > 1);
            !same.is_empty()
        });
        self.ident_count = self.idents.values().map(Vec::len).sum();
        self.workloads.retain(|_, w| Arc::strong_count(&w.cgroup) > 1);
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The identity of `pid` when it is the same process (same start) and
    /// was read within its refresh period; `comm` (what stat says now)
    /// replaces the cached one when it changed (exec, `PR_SET_NAME`).
    pub(super) fn hit(&mut self, pid: u32, start_ticks: u64, comm: &str, now: Instant) -> Option<Identity> {
        let now_ns = self.nanos(now);
        let period = self.period;
        let e = self.entries.get_mut(&pid)?;
        if e.start_ticks != start_ticks || now_ns >= e.due {
            return None;
        }
        e.used_in = period;
        if *e.ident.who.comm != *comm {
            let workload = e.ident.workload.clone();
            let (uid, user) = (e.ident.who.uid, e.ident.who.user.clone());
            e.ident = intern_ident(&mut self.idents, &mut self.ident_count, (uid, comm, user), workload);
        }
        Some(view(&e.ident))
    }

    /// Caches what status and cgroup (empty when unreadable) say of `pid`.
    pub(super) fn fill(
        &mut self,
        pid: u32,
        start_ticks: u64,
        (uid, comm, user): (Option<u32>, &str, ArcStr),
        cgroup: &[u8],
        now: Instant,
    ) -> Identity {
        let workload = intern_workload(&mut self.workloads, cgroup);
        let ident = intern_ident(&mut self.idents, &mut self.ident_count, (uid, comm, user), workload);
        let out = view(&ident);
        let now_ns = self.nanos(now);
        let refresh = u64::try_from(self.refresh.as_nanos()).unwrap_or(u64::MAX);
        let period = self.period;
        // A process seen for the first time is first refreshed after 1/2 to
        // 1 period, by its PID: processes that start together (a whole fleet
        // at the daemon's start) are then not all read again in one poll.
        let first = self.entries.get(&pid).is_none_or(|e| e.start_ticks != start_ticks);
        let stagger = if first {
            refresh / 2 / 64 * u64::from(spread(pid))
        } else {
            0
        };
        let entry = Entry {
            start_ticks,
            due: now_ns.saturating_add(refresh - stagger),
            ident,
            used_in: period,
        };
        self.entries.insert(pid, entry);
        out
    }

    /// `pid`'s identity `who` under the name passwd gives its uid now,
    /// `user` (passwd was edited since it was cached): shared again under
    /// that name; the old one is swept once no entry holds it.
    pub(super) fn renamed(&mut self, pid: u32, who: &Arc<Who>, user: ArcStr) -> Arc<Who> {
        match self.entries.get_mut(&pid) {
            Some(e) if Arc::ptr_eq(&e.ident.who, who) => {
                let workload = e.ident.workload.clone();
                let id = (who.uid, &*who.comm, user);
                e.ident = intern_ident(&mut self.idents, &mut self.ident_count, id, workload);
                e.ident.who.clone()
            }
            // Not `pid`'s cached identity: renamed for this read only.
            _ => Arc::new(Who {
                user,
                ..Who::clone(who)
            }),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Shared workloads and identities (tests: they are bounded and swept).
    #[cfg(test)]
    pub(super) fn shared(&self) -> (usize, usize) {
        (self.workloads.len(), self.ident_count)
    }
}

/// The shared workload of a cgroup file's bytes, parsed on first sight.
fn intern_workload(workloads: &mut Workloads, cgroup: &[u8]) -> Workload {
    if let Some(w) = workloads.get(cgroup) {
        return w.clone();
    }
    let info = parse_cgroup(&String::from_utf8_lossy(cgroup));
    let w = Workload {
        placement: Arc::new(info.placement()),
        cgroup: Arc::new(info),
    };
    if workloads.len() < SHARED_MAX && cgroup.len() <= KEY_MAX {
        workloads.insert(Box::from(cgroup), w.clone());
    }
    w
}

fn view(i: &Ident) -> Identity {
    (i.who.clone(), i.workload.cgroup.clone())
}

/// The shared identity of (uid, comm, user name) in `workload`.
fn intern_ident(
    idents: &mut HashMap<(Option<u32>, usize), Vec<Arc<Ident>>>,
    count: &mut usize,
    (uid, comm, user): (Option<u32>, &str, ArcStr),
    workload: Workload,
) -> Arc<Ident> {
    let key = (uid, Arc::as_ptr(&workload.cgroup) as usize);
    let alike = |i: &&Arc<Ident>| *i.who.comm == *comm && i.who.user == user;
    if let Some(same) = idents.get(&key).and_then(|v| v.iter().find(alike)) {
        return same.clone();
    }
    let who = Who {
        comm: ArcStr::from(comm),
        user,
        uid,
        placement: Placement::clone(&workload.placement),
    };
    let ident = Arc::new(Ident {
        who: Arc::new(who),
        workload,
    });
    if *count < SHARED_MAX {
        idents.entry(key).or_default().push(ident.clone());
        *count += 1;
    }
    ident
}

/// 0..64 from a PID, scattered so that consecutive PIDs differ.
fn spread(pid: u32) -> u32 {
    pid.wrapping_mul(0x9E37_79B9) >> 26
}
