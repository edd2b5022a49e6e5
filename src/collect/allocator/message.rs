//! The wire format of an allocator report (docs/design.md, "Allocator
//! reports"): one small versioned JSON object per datagram. Owns parsing and
//! the shape checks; it must not decide who sent it (the kernel says) or
//! whether the sender may speak for a GPU (the state does).

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::data::snapshot::AllocPair as Pair;

/// The only version this daemon reads.
pub const VERSION: u32 = 1;

/// More devices than any node has: a report naming more is refused.
pub const MAX_DEVICES: usize = 64;

/// Why a datagram is not a report.
#[derive(Debug, Error, PartialEq)]
pub enum MessageError {
    #[error("not a report: {0}")]
    Malformed(String),
    #[error("unsupported version {0} (this daemon reads {VERSION})")]
    Version(u64),
}

/// The figures of one device as the job's allocator sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// NVML's UUID, `GPU-` prefix included.
    pub uuid: String,
    /// Bytes in live tensors.
    pub allocated: Pair,
    /// Bytes the caching allocator holds from the driver (tensors + cache).
    pub reserved: Pair,
    /// Bytes in blocks in use (tensors, rounded up to block sizes).
    pub active: Pair,
    /// Free bytes inside partly used blocks: fragmentation.
    pub inactive_split: Pair,
    /// cudaMalloc calls that failed and were retried after freeing the cache.
    pub alloc_retries: u64,
    /// Out-of-memory errors the allocator raised.
    pub ooms: u64,
}

/// A whole report.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Wire {
    v: u64,
    devices: Vec<DeviceReport>,
}

/// Parses one datagram.
///
/// # Errors
/// Not UTF-8 JSON of the expected shape, a version this daemon does not
/// read, too many devices, a UUID that is empty or too long, or one GPU
/// named twice (each entry could record an OOM of its own).
pub fn parse(bytes: &[u8]) -> Result<Vec<DeviceReport>, MessageError> {
    // The version first, so a newer sender gets "version" and not a shape
    // complaint about fields this daemon does not know.
    #[derive(Deserialize)]
    struct V {
        v: Option<u64>,
    }
    let v: V = serde_json::from_slice(bytes).map_err(|e| MessageError::Malformed(e.to_string()))?;
    match v.v {
        Some(v) if v == u64::from(VERSION) => {}
        Some(other) => return Err(MessageError::Version(other)),
        None => return Err(MessageError::Malformed("no version field `v`".into())),
    }
    let w: Wire = serde_json::from_slice(bytes).map_err(|e| MessageError::Malformed(e.to_string()))?;
    debug_assert_eq!(w.v, u64::from(VERSION));
    if w.devices.len() > MAX_DEVICES {
        return Err(MessageError::Malformed(format!("{} devices", w.devices.len())));
    }
    for (i, d) in w.devices.iter().enumerate() {
        if d.uuid.is_empty() || d.uuid.len() > 96 {
            return Err(MessageError::Malformed("bad device uuid".into()));
        }
        // By the bare UUID: `GPU-x` and `MIG-x` are one device to the state.
        if w.devices[..i].iter().any(|p| bare(&p.uuid) == bare(&d.uuid)) {
            return Err(MessageError::Malformed(format!("device {} named twice", d.uuid)));
        }
    }
    Ok(w.devices)
}

/// The flight recorder's snapshot a report names (`"snapshot"`: where the
/// process dumped its memory history on its OOM), when it is an absolute
/// path of plain characters and at most 1024 bytes; anything else is
/// ignored (the report itself stands).
pub fn snapshot(bytes: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct S {
        snapshot: Option<String>,
    }
    let s: S = serde_json::from_slice(bytes).ok()?;
    s.snapshot
        .filter(|p| p.starts_with('/') && p.len() <= 1024 && !p.chars().any(char::is_control) && !p.contains("/../"))
}

/// A UUID without its `GPU-` or `MIG-` prefix.
pub(super) fn bare(u: &str) -> &str {
    u.strip_prefix("GPU-").or_else(|| u.strip_prefix("MIG-")).unwrap_or(u)
}
