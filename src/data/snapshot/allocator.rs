//! A process's allocator figures in the snapshot (`torch.cuda.memory_stats()`
//! as reported to the allocator view, and NVML's figure split by them).
//! Plain data, like the rest of the snapshot; computing them is the
//! pipeline's and the allocator view's work, not this file's.

use serde::{Deserialize, Serialize};

/// One current/peak pair of `torch.cuda.memory_stats()`, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocPair {
    pub current: u64,
    pub peak: u64,
}

/// A process's allocator figures for one GPU, and NVML's figure split by
/// them: `tensors` (allocated), `cache` (reserved minus allocated) and
/// `other` (NVML's figure minus reserved: CUDA context, NCCL, libraries).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatorFigures {
    pub allocated: AllocPair,
    pub reserved: AllocPair,
    pub active: AllocPair,
    pub inactive_split: AllocPair,
    pub alloc_retries: u64,
    pub ooms: u64,
    /// Unix seconds of the report these figures come from.
    pub reported_at: f64,
    /// Unix seconds of the latest out-of-memory error this daemon saw
    /// reported (the OOM count rose), if any.
    pub last_oom_at: Option<f64>,
    /// Unix seconds of the latest report whose retry count rose.
    pub last_retry_at: Option<f64>,
    pub tensors_bytes: u64,
    pub cache_bytes: u64,
    /// Absent when NVML's own figure is.
    pub other_bytes: Option<u64>,
    /// With the inside view the leak verdict judges `allocated`: "tensors"
    /// when live tensors grow, "cache" when only NVML's figure (the cache)
    /// grows; absent when neither.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "growth_verdict")]
    pub growth: Option<Verdict>,
}

/// A fixed verdict word. Named so serde's derive does not take the field
/// for text borrowed from the input (`'de: 'static`): `growth_verdict`
/// reads it back as the same static word.
pub type Verdict = &'static str;

/// Reads a `growth` verdict back (`snapshot --url`) as the same static
/// text the daemon wrote; an unknown word is no verdict.
pub(crate) fn growth_verdict<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Verdict>, D::Error> {
    let word: Option<String> = Option::deserialize(d)?;
    Ok(["tensors", "cache", "allocations", "other"]
        .into_iter()
        .find(|w| word.as_deref() == Some(*w)))
}
