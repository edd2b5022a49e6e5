//! The `[health]` config section: whether and how often the memory-health
//! reads run, whether Xid events are watched, and how many recent events
//! are kept. Plain data; it must not read anything.

use serde::{Deserialize, Serialize};

use crate::data::units::PositiveDuration;

/// `[health]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// Read ECC, row remapping, retired pages and memory temperature.
    pub enabled: bool,
    /// At most one health read per device per `interval`; unset: every
    /// poll (about 40 us a poll on an H200, BENCHMARKS.md). The ECC mode
    /// is re-read every 5 minutes whatever this is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<PositiveDuration>,
    /// Register for NVML's critical Xid events and count them.
    pub xid_events: bool,
    /// Recent Xid events kept per device for the JSON API and snapshot
    /// (0: none listed). The memory-Xid rule keeps its own 15-minute window
    /// of memory-related events, whatever this is.
    pub recent_events: usize,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval: None,
            xid_events: true,
            recent_events: 16,
        }
    }
}
