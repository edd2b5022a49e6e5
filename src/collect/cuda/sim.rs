//! [`SimulatedCuda`]: the checkpoint state machine in memory, for the demo
//! (no GPU) and for reclaim's unit tests.
//!
//! Owns: per-PID states (running -> locked -> checkpointed -> locked ->
//! running) and one-shot failures a test queues. Must not: pretend to move
//! memory; what a suspended process stops holding is the GPU source's
//! business, read through [`SimHandle`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{Call, Checkpointer, CudaError, CudaState, codes};

#[derive(Debug, Default)]
struct Inner {
    states: HashMap<u32, CudaState>,
    /// Failures to answer, once each, by call (tests queue them).
    fail: Vec<(Call, i32)>,
}

impl Inner {
    /// The failure queued for `call`, taken.
    fn queued(&mut self, call: Call) -> Result<(), CudaError> {
        match self.fail.iter().position(|(c, _)| *c == call) {
            Some(i) => Err(failed(call, self.fail.remove(i).1)),
            None => Ok(()),
        }
    }
}

/// A shared view of the simulated driver: what a test or the demo's source
/// reads (which PIDs are checkpointed) and what a test sets up.
#[derive(Debug, Clone, Default)]
pub struct SimHandle(Arc<Mutex<Inner>>);

impl SimHandle {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// PIDs whose memory is parked in host memory now.
    pub fn checkpointed(&self) -> Vec<u32> {
        let inner = self.inner();
        let mut v: Vec<u32> = inner
            .states
            .iter()
            .filter(|(_, s)| **s == CudaState::Checkpointed)
            .map(|(p, _)| *p)
            .collect();
        v.sort_unstable();
        v
    }
}

/// The stand-in driver; every PID is taken for a CUDA process.
#[derive(Debug, Default)]
pub struct SimulatedCuda {
    handle: SimHandle,
}

impl SimulatedCuda {
    pub fn new(handle: SimHandle) -> Self {
        SimulatedCuda { handle }
    }

    fn step(&mut self, call: Call, pid: u32, from: CudaState, to: CudaState) -> Result<(), CudaError> {
        let mut inner = self.handle.inner();
        inner.queued(call)?;
        let now = inner.states.get(&pid).copied().unwrap_or(CudaState::Running);
        if now != from {
            return Err(failed(call, codes::ILLEGAL_STATE));
        }
        inner.states.insert(pid, to);
        Ok(())
    }
}

fn failed(call: Call, code: i32) -> CudaError {
    let name = match code {
        codes::NOT_INITIALIZED => "CUDA_ERROR_NOT_INITIALIZED",
        codes::ILLEGAL_STATE => "CUDA_ERROR_ILLEGAL_STATE",
        codes::NOT_SUPPORTED => "CUDA_ERROR_NOT_SUPPORTED",
        codes::TIMEOUT => "CUDA_ERROR_TIMEOUT",
        _ => "CUDA_ERROR_UNKNOWN",
    };
    CudaError::Failed {
        call,
        code,
        name: name.into(),
    }
}

impl Checkpointer for SimulatedCuda {
    fn driver_version(&mut self) -> Result<i32, CudaError> {
        Ok(12080)
    }

    fn state(&mut self, pid: u32) -> Result<CudaState, CudaError> {
        let mut inner = self.handle.inner();
        inner.queued(Call::GetState)?;
        Ok(inner.states.get(&pid).copied().unwrap_or(CudaState::Running))
    }

    fn lock(&mut self, pid: u32, _timeout: Duration) -> Result<(), CudaError> {
        self.step(Call::Lock, pid, CudaState::Running, CudaState::Locked)
    }

    fn checkpoint(&mut self, pid: u32) -> Result<(), CudaError> {
        self.step(Call::Checkpoint, pid, CudaState::Locked, CudaState::Checkpointed)
    }

    fn restore(&mut self, pid: u32) -> Result<(), CudaError> {
        self.step(Call::Restore, pid, CudaState::Checkpointed, CudaState::Locked)
    }

    fn unlock(&mut self, pid: u32) -> Result<(), CudaError> {
        self.step(Call::Unlock, pid, CudaState::Locked, CudaState::Running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl SimHandle {
        /// The next `call` answers `code` instead of acting.
        pub(crate) fn fail_next(&self, call: Call, code: i32) {
            self.inner().fail.push((call, code));
        }

        /// The state of `pid` (running when never touched).
        pub(crate) fn state_of(&self, pid: u32) -> CudaState {
            self.inner().states.get(&pid).copied().unwrap_or(CudaState::Running)
        }
    }

    /// The `CUresult` of a failed call.
    fn code(e: CudaError) -> Option<i32> {
        match e {
            CudaError::Failed { code, .. } => Some(code),
            _ => None,
        }
    }

    #[test]
    fn the_state_machine_goes_round_and_refuses_skips() {
        let h = SimHandle::default();
        let mut c = SimulatedCuda::new(h.clone());
        let t = Duration::from_secs(1);
        assert_eq!(c.checkpoint(5).map_err(code), Err(Some(codes::ILLEGAL_STATE)));
        c.lock(5, t).expect("lock");
        c.checkpoint(5).expect("checkpoint");
        assert_eq!(h.checkpointed(), [5]);
        assert_eq!(c.unlock(5).map_err(code), Err(Some(codes::ILLEGAL_STATE)));
        c.restore(5).expect("restore");
        c.unlock(5).expect("unlock");
        assert_eq!(h.state_of(5), CudaState::Running);
        h.fail_next(Call::Lock, codes::NOT_SUPPORTED);
        assert_eq!(c.lock(5, t).map_err(code), Err(Some(codes::NOT_SUPPORTED)));
        c.lock(5, t).expect("the failure was one-shot");
    }
}
