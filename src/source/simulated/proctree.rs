//! The simulated fleet's `/proc`: keeps a [`MemTree`] in step with the
//! scenario, so the pipeline attributes demo processes with the production
//! reader. A process that runs has an entry in its scenario `state` (default
//! sleeping; "disk-sleep" is D); one that exited as `zombie` is Z; an
//! `exited` holder (still listed by the simulated NVML) has no entry.
//!
//! Owns: turning a scenario process into what `/proc` would show (start
//! ticks from the poll clock, its cgroup from the workload fields, its
//! cmdline, a passwd of the scenario's users). Must not: look at a process
//! again before what it shows can change (the `large` fleet polls 64k
//! processes a second and they almost never change), render per-process
//! text (the tree renders on read), or parse anything back.

use std::collections::HashMap;
use std::sync::Arc;

use crate::attribution::{CgroupInfo, MemIdentity, MemTree, MemWriter, ProcState, Runtime, cgroup_path, clock_ticks};
use crate::source::scenario::{SimIdentity, SimProcess};

/// The simulated host booted this long before poll 1.
const UPTIME_AT_EPOCH: u64 = 3600;

/// PID 1 is the parent of every simulated process (the scenario has no tree).
const PARENT_PID: u32 = 1;

/// A scenario process (by index) and the state the tree shows it in.
type Shown = (u32, ProcState);

/// One PID: its scenario processes and what the tree shows for it. A plain
/// sorted vector, not a map: `large` has one per process, 64,000, and the
/// simulation's own memory is 8.5 MB (examples/footprint.rs bounds it).
#[derive(Debug, Clone)]
struct Slot {
    pid: u32,
    /// Where its scenario processes are in `order`.
    procs: std::ops::Range<u32>,
    shown: Option<Shown>,
    /// Scenario time before which what the PID shows cannot change,
    /// rounded down (skipping a PID early would miss a change; looking
    /// early only costs the look).
    until: f64,
}

/// Scenario processes by PID (two may share one: a process with contexts on
/// two GPUs), and what the tree shows for each PID.
pub(super) struct SimProcTree {
    tree: Arc<MemTree>,
    btime: u64,
    hz: f64,
    /// Indices of scenario processes, by PID and then in file order.
    order: Vec<u32>,
    slots: Vec<Slot>,
    /// The tree's identity of each scenario identity, by its address (the
    /// scenario keeps every `Arc<SimIdentity>` alive, so it is stable).
    idents: HashMap<usize, Arc<MemIdentity>>,
    /// The loop cycle and scenario time of the last sync.
    at: Option<(u64, f64)>,
}

impl SimProcTree {
    /// An empty tree for `processes`, booted an hour before `epoch`.
    pub(super) fn new(processes: &[SimProcess], epoch: f64) -> Self {
        let btime = (epoch.max(0.0).floor() as u64).saturating_sub(UPTIME_AT_EPOCH);
        let tree = Arc::new(MemTree::new(btime));
        let mut order: Vec<u32> = (0..processes.len() as u32).collect();
        // Stable: a PID's processes stay in file order.
        order.sort_by_key(|&i| processes[i as usize].pid);
        let mut slots: Vec<Slot> = Vec::new();
        for (k, &i) in order.iter().enumerate() {
            let (pid, k) = (processes[i as usize].pid, k as u32);
            match slots.last_mut() {
                Some(s) if s.pid == pid => s.procs.end = k + 1,
                _ => slots.push(Slot {
                    pid,
                    procs: k..k + 1,
                    shown: None,
                    until: f64::NEG_INFINITY,
                }),
            }
        }
        let mut users: Vec<(u32, &str)> = Vec::new();
        let mut idents = HashMap::new();
        for p in processes {
            // The first name given for a uid wins, as in a passwd file.
            let who = &p.who;
            if !who.user.is_empty() && !users.iter().any(|(uid, _)| *uid == who.uid) {
                users.push((who.uid, &who.user));
            }
            idents
                .entry(Arc::as_ptr(who) as usize)
                .or_insert_with(|| Arc::new(identity(who)));
        }
        tree.update(|w| w.set_passwd(users));
        SimProcTree {
            tree,
            btime,
            hz: clock_ticks() as f64,
            order,
            slots,
            idents,
            at: None,
        }
    }

    /// Every PID is looked at on the next sync: a simulated signal changed
    /// what some show before their `until`.
    pub(super) fn look_again(&mut self) {
        for s in &mut self.slots {
            s.until = f64::NEG_INFINITY;
        }
    }

    pub(super) fn tree(&self) -> Arc<MemTree> {
        self.tree.clone()
    }

    /// Brings the tree to scenario time `t` of loop `cycle`: `state(i)` says
    /// what `/proc` shows of process `i` now (`None`: no entry) and from
    /// when that may change, `start(i)` its Unix start time in this cycle.
    pub(super) fn sync(
        &mut self,
        processes: &[SimProcess],
        (t, cycle): (f64, u64),
        state: impl Fn(usize) -> (Option<ProcState>, f64),
        start: impl Fn(usize) -> f64,
    ) {
        // A new cycle restarts every process with new start times.
        let new_cycle = self.at.is_some_and(|(c, _)| c != cycle);
        let all = new_cycle || self.at.is_none_or(|(_, was)| t < was);
        self.at = Some((cycle, t));
        let mut changes: Vec<(u32, Option<Shown>, Option<Shown>)> = Vec::new();
        let order = &self.order;
        for slot in &mut self.slots {
            if !all && t < slot.until {
                continue;
            }
            let mut until = f64::INFINITY;
            let mut want = None;
            // The first of a PID's scenario processes that is in /proc shows.
            let procs = order.get(slot.procs.start as usize..slot.procs.end as usize);
            for &i in procs.unwrap_or_default() {
                let (s, next) = state(i as usize);
                until = until.min(next);
                if let Some(s) = s {
                    want = Some((i, s));
                    break;
                }
            }
            slot.until = round_down(until);
            let was = slot.shown;
            if want != was || (new_cycle && want.is_some()) {
                changes.push((slot.pid, if new_cycle { None } else { was }, want));
                slot.shown = want;
            }
        }
        if changes.is_empty() {
            return;
        }
        let (btime, hz) = (self.btime as f64, self.hz);
        let ticks = |i: usize| ((start(i) - btime) * hz).round().max(0.0) as u64;
        let idents = &self.idents;
        self.tree.update(|w| {
            for (pid, was, want) in changes {
                apply(
                    w,
                    processes,
                    idents,
                    pid,
                    was,
                    want.map(|(i, s)| (i, s, ticks(i as usize))),
                );
            }
        });
    }
}

/// A time before `t`: earlier by a relative 1e-6, more than any rounding
/// of the sums `t` came from.
fn round_down(t: f64) -> f64 {
    if t.is_infinite() {
        return t;
    }
    t - t.abs() * 1e-6 - 1e-6
}

fn apply(
    w: &mut MemWriter<'_>,
    processes: &[SimProcess],
    idents: &HashMap<usize, Arc<MemIdentity>>,
    pid: u32,
    was: Option<Shown>,
    want: Option<(u32, ProcState, u64)>,
) {
    let Some((i, state, start_ticks)) = want else {
        w.remove(pid);
        return;
    };
    // Same process, new state (running -> zombie): only its state changes.
    if was.is_some_and(|(j, _)| j == i) && w.set_state(pid, state) {
        return;
    }
    let who = &processes[i as usize].who;
    let ident = match idents.get(&(Arc::as_ptr(who) as usize)) {
        Some(x) => x.clone(),
        None => Arc::new(identity(who)),
    };
    w.insert_as(pid, state, start_ticks, ident);
}

/// What the tree shows of a scenario identity.
fn identity(who: &SimIdentity) -> MemIdentity {
    MemIdentity {
        ppid: PARENT_PID,
        comm: who.comm.clone(),
        uid: who.uid,
        cgroup: cgroup_path(&workload(who)),
        cmdline: MemIdentity::nul_args(&who.cmdline),
    }
}

/// The scenario's workload fields as the cgroup reader would report them.
fn workload(p: &SimIdentity) -> CgroupInfo {
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
