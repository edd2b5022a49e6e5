//! The CUDA driver's process checkpoint API (driver 550+), behind one seam.
//!
//! Owns: the [`Checkpointer`] trait (the seam: `dl.rs` loads the real
//! `libcuda.so.1`, `sim.rs` is the demo's in-memory stand-in), the call
//! names, the process states and [`CudaError`], plus [`Guarded`], which runs
//! every call on one dedicated thread with a deadline. Must not: create a
//! CUDA context (gpumemd holds no GPU memory of its own: only `cuInit`,
//! `cuDriverGetVersion`, `cuGetErrorString` and `cuCheckpointProcess*` are
//! ever called), decide whom to suspend (reclaim does), or read `/proc`.

mod dl;
mod guard;
mod sim;

use std::time::Duration;

use thiserror::Error;

pub use dl::LibCuda;
pub use guard::{Guarded, Opener};
pub use sim::{SimHandle, SimulatedCuda};

/// The driver library loaded when none is configured.
pub const DEFAULT_LIBRARY: &str = "libcuda.so.1";

/// `CUresult` values gpumemd names (cuda.h).
pub mod codes {
    pub const SUCCESS: i32 = 0;
    pub const INVALID_VALUE: i32 = 1;
    pub const NOT_INITIALIZED: i32 = 3;
    pub const ILLEGAL_STATE: i32 = 401;
    /// What `cuCheckpointProcessLock` answers when the process's CUDA work
    /// did not drain within the lock timeout (driver 580 on an H200).
    pub const NOT_READY: i32 = 600;
    pub const NOT_SUPPORTED: i32 = 801;
    pub const TIMEOUT: i32 = 909;
}

/// `CUprocessState`: where a process is in the checkpoint state machine
/// running -> locked -> checkpointed -> locked -> running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaState {
    Running,
    Locked,
    Checkpointed,
    Failed,
    /// A value newer than this build knows.
    Other(i32),
}

impl CudaState {
    pub fn from_raw(v: i32) -> Self {
        match v {
            0 => CudaState::Running,
            1 => CudaState::Locked,
            2 => CudaState::Checkpointed,
            3 => CudaState::Failed,
            other => CudaState::Other(other),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CudaState::Running => "running",
            CudaState::Locked => "locked",
            CudaState::Checkpointed => "checkpointed",
            CudaState::Failed => "failed",
            CudaState::Other(_) => "unknown",
        }
    }
}

/// One driver call, by the name logs and errors use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Init,
    DriverVersion,
    GetState,
    Lock,
    Checkpoint,
    Restore,
    Unlock,
}

impl Call {
    pub fn symbol(self) -> &'static str {
        match self {
            Call::Init => "cuInit",
            Call::DriverVersion => "cuDriverGetVersion",
            Call::GetState => "cuCheckpointProcessGetState",
            Call::Lock => "cuCheckpointProcessLock",
            Call::Checkpoint => "cuCheckpointProcessCheckpoint",
            Call::Restore => "cuCheckpointProcessRestore",
            Call::Unlock => "cuCheckpointProcessUnlock",
        }
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.symbol())
    }
}

/// Why a checkpoint call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CudaError {
    /// No usable driver: the library, a symbol (driver older than 550) or
    /// `cuInit` failed. Suspend is refused; monitoring is not affected.
    #[error("CUDA driver {library} is not usable for checkpoints: {detail}")]
    Unavailable { library: String, detail: String },
    #[error("{call} failed: {name} ({code})")]
    Failed { call: Call, code: i32, name: String },
    /// The call did not return in time; it is still running on the CUDA
    /// thread and is never issued a second time.
    #[error("{call} did not return within {}", humantime::format_duration(*.after))]
    Hung { call: Call, after: Duration },
    /// An earlier call is still hung: nothing is sent to the driver until it returns.
    #[error("an earlier {0} call has not returned; no CUDA call is made until it does")]
    Stuck(Call),
    #[error("the CUDA call thread is gone")]
    ThreadGone,
}

/// The seam: the checkpoint calls for one process, blocking. Implementations
/// live on [`Guarded`]'s thread and are never called from async workers.
pub trait Checkpointer: Send {
    /// `cuDriverGetVersion`, e.g. 12080.
    fn driver_version(&mut self) -> Result<i32, CudaError>;
    fn state(&mut self, pid: u32) -> Result<CudaState, CudaError>;
    /// `timeout` is handed to the driver (`timeoutMs`); on its expiry the
    /// process stays running.
    fn lock(&mut self, pid: u32, timeout: Duration) -> Result<(), CudaError>;
    fn checkpoint(&mut self, pid: u32) -> Result<(), CudaError>;
    fn restore(&mut self, pid: u32) -> Result<(), CudaError>;
    fn unlock(&mut self, pid: u32) -> Result<(), CudaError>;
}
