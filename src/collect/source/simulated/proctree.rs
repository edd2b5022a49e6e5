//! The simulated fleet's `/proc`: keeps a [`MemTree`] in step with the
//! scenario, so the pipeline attributes demo processes with the production
//! reader. A process that runs has an entry in its scenario `state` (default
//! sleeping; "disk-sleep" is D); one that exited as `zombie` is Z; an
//! `exited` holder (still listed by the simulated NVML) has no entry.
//!
//! Owns: turning a scenario process into what `/proc` would show (start
//! ticks from the poll clock, its cgroup from the workload fields, its
//! cmdline, a passwd of the scenario's users). Must not: render per-process
//! text (the tree renders on read), or parse anything back.

use std::collections::HashMap;
use std::sync::Arc;

use arcstr::ArcStr;

use crate::collect::attribution::{CgroupInfo, MemIdentity, MemTree, ProcState, Runtime, cgroup_path, clock_ticks};
use crate::collect::source::scenario::SimProcess;

/// The simulated host booted this long before poll 1.
const UPTIME_AT_EPOCH: u64 = 3600;

/// PID 1 is the parent of every simulated process (the scenario has no tree).
const PARENT_PID: u32 = 1;

/// A scenario process (by index) and the state the tree shows it in.
type Shown = (usize, ProcState);

/// One PID of the scenario: its processes are `order[from..to]`, in file
/// order (two may share a PID: a process with contexts on two GPUs), and
/// what the tree shows for it.
struct PidRow {
    pid: u32,
    from: usize,
    to: usize,
    shown: Option<Shown>,
}

/// The scenario's PIDs in order, and what the tree shows for each: one
/// vector walked once a poll, no lookup per PID.
pub(super) struct SimProcTree {
    tree: Arc<MemTree>,
    btime: u64,
    hz: f64,
    rows: Vec<PidRow>,
    /// Scenario process indices sorted by PID, then file order.
    order: Vec<usize>,
    /// One identity per distinct (command, user, workload, args): a
    /// thousand workers of one job share theirs, as they share one text.
    identities: HashMap<IdentityKey, Arc<MemIdentity>>,
    /// The loop cycle of the last sync.
    cycle: Option<u64>,
}

impl SimProcTree {
    /// An empty tree for `processes`, booted an hour before `epoch`.
    pub(super) fn new(processes: &[SimProcess], epoch: f64) -> Self {
        let btime = (epoch.max(0.0).floor() as u64).saturating_sub(UPTIME_AT_EPOCH);
        let tree = Arc::new(MemTree::new(btime));
        let mut users: Vec<(u32, &str)> = Vec::new();
        for p in processes {
            // The first name given for a uid wins, as in a passwd file.
            if !p.user.is_empty() && !users.iter().any(|(uid, _)| *uid == p.uid) {
                users.push((p.uid, &p.user));
            }
        }
        tree.update(|w| w.set_passwd(users));
        let mut order: Vec<usize> = (0..processes.len()).collect();
        // Stable: file order within a PID.
        order.sort_by_key(|&i| processes[i].pid);
        let mut rows: Vec<PidRow> = Vec::new();
        for (at, &i) in order.iter().enumerate() {
            match rows.last_mut() {
                Some(r) if r.pid == processes[i].pid => r.to = at + 1,
                _ => rows.push(PidRow {
                    pid: processes[i].pid,
                    from: at,
                    to: at + 1,
                    shown: None,
                }),
            }
        }
        SimProcTree {
            tree,
            btime,
            hz: clock_ticks() as f64,
            rows,
            order,
            identities: HashMap::new(),
            cycle: None,
        }
    }

    pub(super) fn tree(&self) -> Arc<MemTree> {
        self.tree.clone()
    }

    /// Brings the tree to loop `cycle`: `state(i)` says what `/proc` shows
    /// of process `i` now (`None`: no entry), `start(i)` its Unix start time
    /// in this cycle.
    pub(super) fn sync(
        &mut self,
        processes: &[SimProcess],
        cycle: u64,
        state: impl Fn(usize) -> Option<ProcState>,
        start: impl Fn(usize) -> f64,
    ) {
        // A new cycle restarts every process with new start times.
        let new_cycle = self.cycle.is_some_and(|c| c != cycle);
        self.cycle = Some(cycle);
        let mut changes = Vec::new();
        for (r, row) in self.rows.iter().enumerate() {
            // The first of a PID's scenario processes that is in /proc shows.
            let procs = &self.order[row.from..row.to];
            let want = procs.iter().find_map(|&i| state(i).map(|s| (i, s)));
            let was = row.shown;
            if want != was || (new_cycle && want.is_some()) {
                changes.push((r, if new_cycle { None } else { was }, want));
            }
        }
        if changes.is_empty() {
            return;
        }
        let (btime, hz) = (self.btime as f64, self.hz);
        let ticks = |i: usize| ((start(i) - btime) * hz).round().max(0.0) as u64;
        let rows = &mut self.rows;
        let identities = &mut self.identities;
        self.tree.update(|w| {
            for (r, was, want) in changes {
                let row = &mut rows[r];
                row.shown = want;
                let pid = row.pid;
                let Some((i, state)) = want else {
                    w.remove(pid);
                    continue;
                };
                // Same process, new state (running -> zombie): only its state changes.
                if was.is_some_and(|(j, _)| j == i) && w.set_state(pid, state) {
                    continue;
                }
                let p = &processes[i];
                let ident = identities
                    .entry(IdentityKey::of(p))
                    .or_insert_with(|| Arc::new(identity(p)))
                    .clone();
                w.insert_as(pid, state, ticks(i), ident);
            }
        });
    }
}

/// The fields [`identity`] reads.
#[derive(PartialEq, Eq, Hash)]
struct IdentityKey([ArcStr; 9], u32);

impl IdentityKey {
    fn of(p: &SimProcess) -> Self {
        let f = [
            &p.comm,
            &p.cmdline,
            &p.container,
            &p.container_runtime,
            &p.pod_uid,
            &p.qos_class,
            &p.unit,
            &p.slice,
            &p.job,
        ];
        IdentityKey(f.map(ArcStr::clone), p.uid)
    }
}

/// What the tree shows of a scenario process.
fn identity(who: &SimProcess) -> MemIdentity {
    MemIdentity {
        ppid: PARENT_PID,
        comm: who.comm.to_string(),
        uid: who.uid,
        cgroup: cgroup_path(&workload(who)),
        cmdline: MemIdentity::nul_args(&who.cmdline),
    }
}

/// The scenario's workload fields as the cgroup reader would report them.
fn workload(p: &SimProcess) -> CgroupInfo {
    let some = |s: &str| (!s.is_empty()).then(|| s.into());
    CgroupInfo {
        container_id: some(&p.container),
        container_runtime: Runtime::from_name(&p.container_runtime),
        pod_uid: some(&p.pod_uid),
        qos_class: some(&p.qos_class),
        unit: some(&p.unit),
        slice: some(&p.slice),
        job: some(&p.job),
        job_step: None,
    }
}
