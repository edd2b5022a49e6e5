//! Arms the flight recorder from the forecast: when a GPU is forecast to
//! fill within `[allocator] record_when_full_in`, every reporting PyTorch
//! process on it is asked to start its memory history, so that its OOM
//! dumps a snapshot; when the danger passes (no forecast, or more than
//! twice the threshold away) it is asked to stop.
//!
//! Owns: which PIDs it armed, and the decision. Must not: arm a process
//! that does not report (it could not be asked), ask twice, or act when the
//! setting is absent (off by default, like every action on processes).

use std::path::PathBuf;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::recorder::Ask;
use super::state::AllocatorState;
use crate::data::snapshot::Snapshot;

/// One request: ask `pid` (running as `uid`) to `ask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub pid: u32,
    pub uid: u32,
    pub ask: Ask,
}

/// The PIDs armed, each with the uid it runs as.
#[derive(Debug, Default)]
pub struct Arming {
    below: f64,
    armed: FxHashMap<u32, u32>,
}

impl Arming {
    pub fn new(below_seconds: f64) -> Self {
        Self {
            below: below_seconds,
            ..Self::default()
        }
    }

    /// What to ask after `snap`: `Record` for reporters on a GPU forecast
    /// to fill within the threshold, `Stop` for armed ones whose GPU is
    /// past twice it. Armed PIDs that left are forgotten without asking.
    pub fn plan(&mut self, snap: &Snapshot) -> Vec<Request> {
        let mut out = Vec::new();
        let mut seen = FxHashMap::default();
        for d in &snap.devices {
            let danger = d.full_in_seconds.is_some_and(|s| s < self.below);
            let passed = d.full_in_seconds.is_none_or(|s| s > 2.0 * self.below);
            for p in d.processes.iter().filter(|p| p.allocator.is_some()) {
                let Some(uid) = p.who.uid else { continue };
                seen.insert(p.pid, ());
                let armed = self.armed.contains_key(&p.pid);
                let ask = if danger && !armed {
                    self.armed.insert(p.pid, uid);
                    Ask::Record
                } else if passed && armed {
                    self.armed.remove(&p.pid);
                    Ask::Stop
                } else {
                    continue;
                };
                out.push(Request { pid: p.pid, uid, ask });
            }
        }
        self.armed.retain(|pid, _| seen.contains_key(pid));
        out
    }
}

/// A snapshot follower that arms and stops the recorder; snapshots go to
/// `spool`.
pub fn follower(state: Arc<AllocatorState>, below_seconds: f64, spool: PathBuf) -> impl FnMut(&Snapshot) + Send {
    let mut arming = Arming::new(below_seconds);
    move |snap| {
        if !snap.has_polled() || snap.stale {
            return;
        }
        for r in arming.plan(snap) {
            match state.recorder.ask(r.pid, r.uid, r.ask, &spool) {
                Ok(_) => tracing::info!(
                    pid = r.pid,
                    action = r.ask.as_str(),
                    "flight recorder asked by the forecast"
                ),
                Err(e) => tracing::warn!(pid = r.pid, error = %e, "flight recorder request from the forecast failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::snapshot::{AllocatorFigures, Device, Process, Who};

    fn proc(pid: u32, reports: bool) -> Process {
        Process {
            pid,
            who: Who::shared("python3", "ana", Some(1000)),
            allocator: reports.then(|| Box::new(AllocatorFigures::default())),
            ..Process::default()
        }
    }

    fn snap(full_in: [Option<f64>; 2]) -> Snapshot {
        let dev = |i: usize, f| Device {
            uuid: format!("GPU-{i}"),
            up: true,
            full_in_seconds: f,
            processes: vec![proc(10 + i as u32, true), proc(20 + i as u32, false)],
            ..Device::default()
        };
        Snapshot {
            seq: 1,
            devices: vec![dev(0, full_in[0]), dev(1, full_in[1])],
            ..Snapshot::default()
        }
    }

    fn asks(v: &[Request]) -> Vec<(u32, Ask)> {
        v.iter().map(|r| (r.pid, r.ask)).collect()
    }

    #[test]
    fn reporters_on_a_gpu_about_to_fill_are_armed_once_and_stopped_when_it_passes() {
        let mut a = Arming::new(600.0);
        assert!(a.plan(&snap([None, Some(3000.0)])).is_empty(), "nothing near full");
        let first = a.plan(&snap([None, Some(300.0)]));
        assert_eq!(asks(&first), [(11, Ask::Record)], "only the reporter on GPU 1");
        assert_eq!(first[0].uid, 1000);
        assert!(a.plan(&snap([None, Some(200.0)])).is_empty(), "asked once");
        assert!(a.plan(&snap([None, Some(900.0)])).is_empty(), "within the hysteresis");
        assert_eq!(asks(&a.plan(&snap([None, None]))), [(11, Ask::Stop)]);
        assert!(a.plan(&snap([None, None])).is_empty());
    }

    #[test]
    fn a_pid_that_left_while_armed_is_forgotten_without_asking() {
        let mut a = Arming::new(600.0);
        assert_eq!(asks(&a.plan(&snap([Some(10.0), None]))), [(10, Ask::Record)]);
        let mut gone = snap([Some(10.0), None]);
        gone.devices[0].processes.clear();
        assert!(a.plan(&gone).is_empty());
        // Back with the same PID (reused): armed anew.
        assert_eq!(asks(&a.plan(&snap([Some(10.0), None]))), [(10, Ask::Record)]);
    }
}
