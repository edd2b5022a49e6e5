//! [`SimKill`]: how a signal reaches a simulated process. Reclaim's
//! simulated signaller asks for a PID to end; the fleet ends it at its next
//! poll, as its scenario `exit` says (memory released, left listed, or a
//! zombie), exactly as if the scenario had stopped it then.
//!
//! Owns: the PIDs asked to end and when (scenario time) each ended. Must
//! not: touch a real process, or end one that has not started.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::collect::source::scenario::SimProcess;

/// A shared handle on the fleet's pending ends; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SimKill(Arc<Mutex<Vec<u32>>>);

impl SimKill {
    /// The simulated process `pid` ends at the fleet's next poll.
    pub fn kill(&self, pid: u32) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(pid);
    }

    fn take(&self) -> Vec<u32> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The fleet's side: the scenario time each ended PID ended at, in the
/// current loop cycle (a new cycle starts every process again).
#[derive(Debug, Default)]
pub(super) struct Ends {
    handle: SimKill,
    at: HashMap<u32, f64>,
    cycle: u64,
}

impl Ends {
    pub(super) fn handle(&self) -> SimKill {
        self.handle.clone()
    }

    /// Takes the PIDs asked to end since the last poll, as ended at `t`.
    pub(super) fn advance(&mut self, t: f64, cycle: u64) {
        if cycle != self.cycle {
            self.at.clear();
            self.cycle = cycle;
        }
        for pid in self.handle.take() {
            self.at.entry(pid).or_insert(t);
        }
    }

    /// When `p` ended, in seconds after its start; `None`: not ended.
    pub(super) fn stop_of(&self, p: &SimProcess) -> Option<f64> {
        self.at.get(&p.pid).map(|t| t - p.start.0).filter(|s| *s >= 0.0)
    }
}
