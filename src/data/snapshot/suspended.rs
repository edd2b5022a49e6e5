//! A process gpumemd suspended (CUDA checkpoint), as the snapshot shows it
//! under its device: NVML no longer lists it, so it is not in `processes`
//! and is neither exited nor a late release. Part of the snapshot leaf:
//! plain data, it must not use the reclaimer or talk to hardware (the HTTP
//! layer fills it from the reclaimer's set).

use serde::{Deserialize, Serialize};

/// One suspended process; the JSON field names are the API's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SuspendedProcess {
    pub pid: u32,
    /// Always `"suspended"`: the state the table and the status page show.
    pub state: String,
    /// GPU bytes it held, now parked in host memory.
    pub suspended_bytes: u64,
    /// Unix seconds.
    pub suspended_since: f64,
    pub comm: String,
    pub user: String,
    /// The rule that suspended it, or "api".
    pub rule: String,
    /// Seconds the checkpoint took.
    pub checkpoint_seconds: f64,
}
