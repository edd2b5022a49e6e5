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
use crate::attribution::ProcTree;

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
