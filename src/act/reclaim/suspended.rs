//! A process gpumemd suspended, as the reclaimer keeps it (with the target
//! it re-checks at resume) and as the snapshot shows it.
//!
//! Owns: the record and its view. Must not: act on the process.

use serde::Serialize;

use super::Target;

/// A process whose device memory is parked in host memory.
#[derive(Debug, Clone, Serialize)]
pub struct Suspended {
    pub pid: u32,
    pub gpu_uuid: String,
    /// GPU bytes it held when suspended (now in host memory).
    pub bytes: u64,
    /// Unix seconds.
    pub since: f64,
    pub comm: String,
    pub user: String,
    pub rule: String,
    /// Seconds the checkpoint took.
    pub checkpoint_seconds: f64,
    #[serde(skip)]
    pub target: Target,
}

impl Suspended {
    /// How the snapshot shows it under its device.
    pub fn view(&self) -> crate::data::snapshot::SuspendedProcess {
        crate::data::snapshot::SuspendedProcess {
            pid: self.pid,
            state: "suspended".into(),
            suspended_bytes: self.bytes,
            suspended_since: self.since,
            comm: self.comm.clone(),
            user: self.user.clone(),
            rule: self.rule.clone(),
            checkpoint_seconds: self.checkpoint_seconds,
        }
    }
}
