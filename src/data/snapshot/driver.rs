//! A process's driver-call ledger figures in the snapshot: what libcuda's
//! allocation and free calls gave it, as the eBPF ledger saw them, and
//! NVML's figure split by them. Plain data; the ledger computes them.

use serde::{Deserialize, Serialize};

/// A failed driver allocation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DriverFailure {
    /// The driver call, e.g. "cuMemAlloc_v2".
    pub call: String,
    /// Its CUresult; 2 is CUDA_ERROR_OUT_OF_MEMORY.
    pub code: i32,
    pub requested_bytes: u64,
}

/// One process's driver allocations (per process: the ledger cannot tell
/// the device of a call, so a process on several GPUs shows them on its
/// first one, with `gpus` saying on how many it is listed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DriverFigures {
    /// Bytes the driver's allocation calls gave and no free returned yet.
    pub live_bytes: u64,
    /// Of `live_bytes`, managed (unified) memory, which NVML may not count.
    pub managed_bytes: u64,
    pub live_allocations: u64,
    pub largest_bytes: u64,
    pub allocations: u64,
    pub frees: u64,
    pub failures: u64,
    /// Allocations past `[ebpf] max_allocations`: while non-zero
    /// `live_bytes` is a lower bound.
    pub untracked: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<DriverFailure>,
    /// NVML's figure minus `live_bytes`: the CUDA context, libraries and
    /// anything not allocated through the probed calls. Absent when NVML
    /// gives no figure or the process is on several GPUs.
    pub other_bytes: Option<u64>,
    /// The probes were on before the process started, so every allocation
    /// it made is in the books; false for a process that was already
    /// running when the ledger attached (its earlier allocations are not).
    pub complete: bool,
    /// On how many GPUs NVML lists the process.
    pub gpus: u32,
    /// `live_bytes` minus the reporter's `reserved` when the process also
    /// reports its allocator (whose figures win): the two checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reporter_diff_bytes: Option<i64>,
    /// For a process that does not report its allocator, the leak verdict
    /// follows `live_bytes`: "allocations" when they grow, "other" when
    /// only NVML's figure does (context, libraries); absent when neither.
    /// A caching allocator's cache is in `live_bytes`, so it still looks
    /// like growth here.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::allocator::growth_verdict"
    )]
    pub growth: Option<super::allocator::Verdict>,
}
