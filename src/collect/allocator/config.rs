//! The `[allocator]` config section: whether the receiver runs, where its
//! socket lives and who may write to it, and the limits it applies to
//! senders. Plain data with defaults and one check; it must not open the
//! socket or read anything.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::data::units::{ByteSize, PositiveDuration};

/// `[allocator]`: the allocator view reported by processes that opt in
/// with the Python package `gpumemd-torch` (see docs/design.md).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AllocatorConfig {
    /// Off by default: no socket is created.
    pub enabled: bool,
    /// The Unix datagram socket the jobs send to.
    pub socket: PathBuf,
    /// Permission bits of the socket, octal text ("0666"): a sender can
    /// only speak for its own PID (the kernel says who sent), so any local
    /// user may write by default.
    pub mode: String,
    /// A group name or numeric gid to own the socket (with `mode = "0660"`
    /// only that group's jobs can report); empty keeps the daemon's group.
    pub group: String,
    /// Datagrams longer than this are dropped (`result="oversize"`).
    pub max_message_bytes: ByteSize,
    /// Messages per second accepted from one PID on average; bursts of
    /// four times this pass (an OOM report right after a periodic one).
    pub rate_limit: f64,
    /// Figures older than this are not shown (the job stopped reporting).
    pub stale_after: PositiveDuration,
    /// How many out-of-memory events `GET /api/v1/events` keeps.
    pub events: usize,
    /// Arms the flight recorder of every reporting process on a GPU
    /// forecast to fill within this ("10m"); absent: armed on request only.
    pub record_when_full_in: Option<PositiveDuration>,
}

/// Largest accepted `max_message_bytes`: a report of 16 GPUs is ~5 KiB.
pub const MAX_MESSAGE_LIMIT: u64 = 64 * 1024;

impl Default for AllocatorConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            socket: PathBuf::from("/run/gpumemd/allocator.sock"),
            mode: "0666".into(),
            group: String::new(),
            max_message_bytes: ByteSize(8192),
            rate_limit: 2.0,
            stale_after: PositiveDuration::secs(30),
            events: 100,
            record_when_full_in: None,
        }
    }
}

/// A socket mode that is not octal permission bits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a permission mode; use octal like \"0660\"")]
pub struct BadMode(pub String);

impl AllocatorConfig {
    /// The socket's permission bits.
    ///
    /// # Errors
    /// The mode as written, when it is not octal permission bits.
    pub fn mode_bits(&self) -> Result<u32, BadMode> {
        let t = self.mode.trim().trim_start_matches("0o");
        match u32::from_str_radix(t, 8) {
            Ok(m) if m <= 0o777 => Ok(m),
            _ => Err(BadMode(self.mode.clone())),
        }
    }

    /// Validates the section: `(key, message)` of the first bad key.
    ///
    /// # Errors
    /// The key and what would be valid.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        self.mode_bits().map_err(|m| ("mode", m.to_string()))?;
        if self.max_message_bytes.0 < 256 || self.max_message_bytes.0 > MAX_MESSAGE_LIMIT {
            return Err((
                "max_message_bytes",
                format!("use a size from 256 bytes to {MAX_MESSAGE_LIMIT} bytes"),
            ));
        }
        if !(self.rate_limit.is_finite() && self.rate_limit > 0.0 && self.rate_limit <= 1000.0) {
            return Err(("rate_limit", "use messages per second above 0, at most 1000".into()));
        }
        if self.events == 0 || self.events > 10_000 {
            return Err(("events", "use a count from 1 to 10000".into()));
        }
        if self.enabled && !self.socket.is_absolute() {
            return Err(("socket", "use an absolute path".into()));
        }
        Ok(())
    }
}
