//! The simulated fleet's `/proc`: keeps a [`MemTree`] in step with the
//! scenario, so the pipeline attributes demo processes with the production
//! reader. A process that runs has an entry in its scenario `state` (default
//! sleeping; "disk-sleep" is D); one that exited as `zombie` is Z; an
//! `exited` holder (still listed by the simulated NVML) has no entry.
//!
//! Owns: turning a scenario process into what `/proc` would show (start
//! ticks from the poll clock, its cgroup from the workload fields, its
//! cmdline, a passwd of the scenario's users). Must not: render a process
//! again when nothing about it changed (the `large` fleet polls 64k processes
//! a second), or parse anything back.

use std::collections::HashMap;
use std::sync::Arc;

use crate::attribution::{CgroupInfo, MemProcess, MemTree, MemWriter, ProcState, Runtime, cgroup_path, clock_ticks};
use crate::source::scenario::SimProcess;

/// The simulated host booted this long before poll 1.
const UPTIME_AT_EPOCH: u64 = 3600;

/// PID 1 is the parent of every simulated process (the scenario has no tree).
const PARENT_PID: u32 = 1;

/// What the tree shows for one PID: the scenario process it comes from,
/// its state and start ticks.
type Shown = (usize, ProcState, u64);

/// Scenario processes by PID (two entries may share one: a process with
/// contexts on two GPUs), and what the tree shows for each PID.
pub(super) struct SimProcTree {
    tree: Arc<MemTree>,
    btime: u64,
    hz: f64,
    /// (pid, indices into the scenario's processes in file order, shown).
    pids: Vec<(u32, Vec<usize>, Option<Shown>)>,
}

impl SimProcTree {
    /// An empty tree for `processes`, booted an hour before `epoch`.
    pub(super) fn new(processes: &[SimProcess], epoch: f64) -> Self {
        let btime = (epoch.max(0.0).floor() as u64).saturating_sub(UPTIME_AT_EPOCH);
        let tree = Arc::new(MemTree::new(btime));
        let mut at: HashMap<u32, usize> = HashMap::new();
        let mut pids: Vec<(u32, Vec<usize>, Option<Shown>)> = Vec::new();
        let mut users: Vec<(u32, &str)> = Vec::new();
        for (i, p) in processes.iter().enumerate() {
            match at.get(&p.pid) {
                Some(&k) => pids[k].1.push(i),
                None => {
                    at.insert(p.pid, pids.len());
                    pids.push((p.pid, vec![i], None));
                }
            }
            // The first name given for a uid wins, as in a passwd file.
            if !p.user.is_empty() && !users.iter().any(|(uid, _)| *uid == p.uid) {
                users.push((p.uid, &p.user));
            }
        }
        tree.update(|w| w.set_passwd(users));
        SimProcTree {
            tree,
            btime,
            hz: clock_ticks() as f64,
            pids,
        }
    }

    pub(super) fn tree(&self) -> Arc<MemTree> {
        self.tree.clone()
    }

    /// Brings the tree to scenario time: `state(i)` says what `/proc` shows
    /// of process `i` now (`None`: no entry), `start(i)` its Unix start time.
    pub(super) fn sync(
        &mut self,
        processes: &[SimProcess],
        state: impl Fn(usize) -> Option<ProcState>,
        start: impl Fn(usize) -> f64,
    ) {
        let (btime, hz) = (self.btime as f64, self.hz);
        let ticks = |i: usize| ((start(i) - btime) * hz).round().max(0.0) as u64;
        let mut changes: Vec<(u32, Option<Shown>, Option<Shown>)> = Vec::new();
        for (pid, idxs, shown) in &mut self.pids {
            // The first of a PID's scenario processes that is in /proc shows.
            let want = idxs
                .iter()
                .find_map(|&i| state(i).map(|s| (i, s)))
                .map(|(i, s)| (i, s, ticks(i)));
            if want != *shown {
                changes.push((*pid, *shown, want));
                *shown = want;
            }
        }
        if changes.is_empty() {
            return;
        }
        self.tree.update(|w| {
            for (pid, was, want) in changes {
                apply(w, processes, pid, was, want);
            }
        });
    }
}

fn apply(w: &mut MemWriter<'_>, processes: &[SimProcess], pid: u32, was: Option<Shown>, want: Option<Shown>) {
    let Some((i, state, start_ticks)) = want else {
        w.remove(pid);
        return;
    };
    // Same process, new state (running -> zombie): only stat changes.
    if was.is_some_and(|(j, _, t)| (j, t) == (i, start_ticks)) && w.set_state(pid, state) {
        return;
    }
    let p = &processes[i];
    w.insert(MemProcess {
        pid,
        ppid: PARENT_PID,
        comm: p.comm.clone(),
        state,
        start_ticks,
        uid: p.uid,
        cgroup: cgroup_path(&workload(p)),
        cmdline: MemProcess::nul_args(&p.cmdline),
    });
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
