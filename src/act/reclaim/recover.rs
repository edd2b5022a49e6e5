//! Recovery after a CUDA call outlived its deadline: the process must end
//! up running whatever state the late call leaves it in.
//!
//! Owns: the waiting thread. Must not: issue a call while the late one is
//! still running (`Guarded` would refuse it anyway).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::collect::cuda::{CudaState, Guarded};

/// After a call outlived its deadline: waits (on a thread of its own) for
/// it to return, then leaves the process running: a locked one is
/// unlocked, a checkpointed one restored and unlocked.
pub(super) fn recover_later(cuda: Arc<Guarded>, pid: u32) {
    let spawned = std::thread::Builder::new()
        .name("gpumemd-cuda-recover".into())
        .spawn(move || {
            let give_up = Instant::now() + Duration::from_secs(3600);
            while cuda.stuck().is_some() {
                if Instant::now() > give_up {
                    tracing::error!(pid, "CUDA call still hung after an hour; process state unknown");
                    return;
                }
                std::thread::park_timeout(Duration::from_millis(100));
            }
            let deadline = Duration::from_secs(300);
            let result = match cuda.state(pid, deadline) {
                Ok(CudaState::Checkpointed) => cuda.restore(pid, deadline).and_then(|()| cuda.unlock(pid, deadline)),
                Ok(CudaState::Locked) => cuda.unlock(pid, deadline),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => tracing::info!(pid, "the late CUDA call returned; the process is running"),
                Err(e) => tracing::error!(pid, error = %e, "cannot bring the process back after a late CUDA call"),
            }
        });
    if let Err(e) = spawned {
        tracing::error!(pid, error = %e, "cannot start the recovery thread after a hung CUDA call");
    }
}
