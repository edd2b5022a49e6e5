//! [`SimulatedSignals`]: the [`Signaller`] of a simulated fleet. A signal
//! ends the simulated process (through the fleet's kill function), never a
//! real one: no pidfd is opened and no `kill(2)` is made.
//!
//! Owns: pinning a simulated process by (pid, start ticks) from the fleet's
//! `/proc` and asking the fleet to end it. Must not: read the host's `/proc`
//! or signal anything.

use std::sync::Arc;

use super::Action;
use super::procview::{ViewError, read_view_in};
use super::signal::{Pinned, SignalError, Signaller, signal_of};
use crate::collect::attribution::ProcTree;

/// Ends the simulated process with that PID (at the fleet's next poll).
pub type Kill = Arc<dyn Fn(u32) + Send + Sync>;

/// Signals that reach the simulated fleet only.
pub struct SimulatedSignals {
    tree: Arc<dyn ProcTree>,
    /// `None`: the fleet cannot end processes; every signal then fails.
    kill: Option<Kill>,
}

impl std::fmt::Debug for SimulatedSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedSignals")
            .field("kill", &self.kill.is_some())
            .finish()
    }
}

impl SimulatedSignals {
    pub fn new(tree: Arc<dyn ProcTree>, kill: Option<Kill>) -> Self {
        SimulatedSignals { tree, kill }
    }
}

/// The simulated tree's start ticks of `pid`, or why there are none.
fn ticks(tree: &dyn ProcTree, pid: u32) -> Result<u64, SignalError> {
    match read_view_in(tree, pid) {
        Ok(v) if !v.is_exited() => Ok(v.start_ticks),
        Ok(_) | Err(ViewError::Gone) => Err(SignalError::Gone),
        Err(ViewError::Unreadable(e)) => Err(SignalError::Failed(e)),
    }
}

impl Signaller for SimulatedSignals {
    fn open(&self, pid: u32) -> Result<Box<dyn Pinned>, SignalError> {
        let start_ticks = ticks(self.tree.as_ref(), pid)?;
        Ok(Box::new(SimPinned {
            tree: self.tree.clone(),
            kill: self.kill.clone(),
            pid,
            start_ticks,
        }))
    }
}

/// A simulated process pinned by its identity, as a pidfd pins a real one.
struct SimPinned {
    tree: Arc<dyn ProcTree>,
    kill: Option<Kill>,
    pid: u32,
    start_ticks: u64,
}

impl std::fmt::Debug for SimPinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimPinned({}, {})", self.pid, self.start_ticks)
    }
}

impl Pinned for SimPinned {
    fn send(&self, action: Action) -> Result<(), SignalError> {
        signal_of(action)?;
        // Another process under the same PID is not the one pinned.
        if ticks(self.tree.as_ref(), self.pid)? != self.start_ticks {
            return Err(SignalError::Gone);
        }
        let kill = self
            .kill
            .as_ref()
            .ok_or_else(|| SignalError::Failed("the simulated fleet cannot end processes".into()))?;
        kill(self.pid);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::collect::attribution::{MemIdentity, MemTree, ProcState};

    fn ident() -> Arc<MemIdentity> {
        Arc::new(MemIdentity {
            ppid: 1,
            comm: "python".into(),
            uid: 1000,
            cgroup: "/".into(),
            cmdline: MemIdentity::nul_args("python train.py"),
        })
    }

    #[test]
    fn a_signal_ends_the_pinned_simulated_process_and_nothing_else() {
        let tree = Arc::new(MemTree::new(0));
        tree.update(|w| w.insert_as(4101, ProcState::Sleeping, 500, ident()));
        let ended = Arc::new(Mutex::new(Vec::new()));
        let seen = ended.clone();
        let kill: Kill = Arc::new(move |pid| seen.lock().expect("lock").push(pid));
        let signals = SimulatedSignals::new(tree.clone(), Some(kill));
        assert!(matches!(signals.open(4202), Err(SignalError::Gone)), "not in the fleet");
        let pinned = signals.open(4101).expect("pinned");
        assert!(matches!(pinned.send(Action::Suspend), Err(SignalError::Failed(_))));
        pinned.send(Action::Term).expect("sent");
        assert_eq!(*ended.lock().expect("lock"), [4101]);
        // Another process under the PID is not the one pinned.
        tree.update(|w| w.insert_as(4101, ProcState::Sleeping, 900, ident()));
        assert!(matches!(pinned.send(Action::Kill), Err(SignalError::Gone)));
        let without = SimulatedSignals::new(tree, None);
        let pinned = without.open(4101).expect("pinned");
        assert!(matches!(pinned.send(Action::Term), Err(SignalError::Failed(_))));
        assert_eq!(ended.lock().expect("lock").len(), 1);
    }
}
