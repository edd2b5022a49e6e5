//! The hardware seam: `GpuSource` and the plain data it returns. Two
//! implementations live beside this file, NVML (`nvml.rs`, the only code that
//! names the NVML crate) and the simulated fleet (`simulated.rs`). Nothing here
//! reads /proc or knows about metrics; attribution happens after the seam. A
//! simulated source also stands in for /proc: it hands out the in-memory tree
//! it keeps ([`GpuSource::proc_tree`]), and attribution reads that as it reads
//! the real one.

pub mod nvml;
pub mod parked;
pub mod scenario;
pub mod simulated;

pub use simulated::SimKill;

use thiserror::Error;

use std::sync::Arc;

use crate::collect::attribution::ProcTree;
use crate::data::snapshot::{Device, DriverInfo};

/// Which NVML process lists a PID appeared in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessKinds {
    pub compute: bool,
    pub graphics: bool,
    pub mps: bool,
}

impl From<ProcessKinds> for crate::data::snapshot::ProcessType {
    fn from(k: ProcessKinds) -> Self {
        crate::data::snapshot::ProcessType::of_lists(k.compute, k.graphics, k.mps)
    }
}

/// One process as a source reports it, before attribution.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawProcess {
    pub pid: u32,
    /// `None` when the source says the value is unavailable.
    pub used_bytes: Option<u64>,
    pub kinds: ProcessKinds,
}

/// One device (GPU or MIG instance) as a source reports it: the snapshot's
/// device with what the source reads (identity, `up`, memory, `errors`,
/// `processes_unreadable`, health without Xid counts) and the rest left
/// default for the pipeline to fill, beside the raw process lists and events
/// the pipeline attributes and counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawDevice {
    pub device: Device,
    pub processes: Vec<RawProcess>,
    /// Xid codes of the events read since the previous poll.
    pub xid_events: Vec<u64>,
}

/// Per-process SM utilisation samples (pid -> percent), per device UUID.
/// The inner map is FxHash: PIDs are the kernel's, not chosen to collide,
/// and SipHash of 64,000 of them costs 6 % of a 64 x 1000 poll.
pub type Utilization = std::collections::HashMap<String, rustc_hash::FxHashMap<u32, u32>>;

/// Everything one poll of a source returned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawPoll {
    pub driver: Option<DriverInfo>,
    pub devices: Vec<RawDevice>,
    /// Present only on polls where utilisation was sampled.
    pub utilization: Option<Utilization>,
}

/// The source as a whole could not be read this poll.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum SourceError {
    /// The library or driver is missing; `gpumem_nvml_up` goes to 0.
    #[error("NVML not available: {0}")]
    Unavailable(String),
    /// The library is loaded but the poll failed as a whole.
    #[error("{}: {message}", reason.as_str())]
    Failed { reason: PollErrorReason, message: String },
}

/// Why a poll or a device failed: the `reason` label of
/// `gpumem_poll_errors_total`, each always exposed (0 until seen) so
/// `rate()` works from the first scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollErrorReason {
    /// The poll overran its deadline (NVML hung).
    Timeout,
    /// The library or driver is missing.
    NvmlUnavailable,
    /// The library is loaded but the poll failed as a whole.
    Failed,
    /// One device was down in an otherwise good poll.
    Device,
    /// The poll panicked.
    Panic,
}

impl PollErrorReason {
    /// Every reason, in exposition order.
    pub const ALL: [Self; 5] = [
        Self::Timeout,
        Self::NvmlUnavailable,
        Self::Failed,
        Self::Device,
        Self::Panic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::NvmlUnavailable => "nvml_unavailable",
            Self::Failed => "failed",
            Self::Device => "device",
            Self::Panic => "panic",
        }
    }
}

/// A reader of GPU memory state. Called from the poller's dedicated thread
/// only; calls may block (NVML can hang), which the poller bounds.
pub trait GpuSource: Send {
    /// Reads every device once. `sample_utilization` asks for per-process SM
    /// utilisation this time (it is costly, so it is sampled less often).
    ///
    /// # Errors
    /// `SourceError` when nothing at all could be read.
    fn poll(&mut self, sample_utilization: bool) -> Result<RawPoll, SourceError>;

    /// The pipeline saw a process of the last poll's lists leave (exit,
    /// turn zombie, or be replaced under its PID): the next poll must read
    /// every list anew rather than trust a source's kept answer.
    fn note_departure(&mut self) {}

    /// Scenario name for a simulated source, `None` for real hardware.
    fn demo_name(&self) -> Option<String> {
        None
    }

    /// The `/proc` its processes live in when that is not the host's (a
    /// simulated fleet's in-memory tree); `None`: the configured `proc_root`.
    /// Asked once, when the pipeline is built.
    fn proc_tree(&self) -> Option<Arc<dyn ProcTree>> {
        None
    }

    /// The simulated CUDA driver whose checkpoints this source hides (the
    /// demo's [`parked::ParkedSource`]); `None`: a real driver, if any.
    fn simulated_cuda(&self) -> Option<crate::collect::cuda::SimHandle> {
        None
    }

    /// How a simulated fleet's processes are ended (reclaim's simulated
    /// signaller); `None`: real processes, which only real signals reach.
    fn simulated_kill(&self) -> Option<SimKill> {
        None
    }
}
