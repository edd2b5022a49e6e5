//! What the NVML source remembers per device between polls so that it can
//! skip costly calls: MIG mode, the sparse schedule of quiet process lists,
//! buffer sizes, the kept lists (`gate.rs`) and the idle watch (`idle.rs`).
//! Plain data and its one question; it must not call NVML.

use super::{gate, idle, reads};

/// What `read_device` remembers between polls to skip costly NVML calls.
#[derive(Debug, Clone, Default)]
pub(crate) struct Memo {
    /// MIG mode and the poll it was read at.
    pub(super) mig: Option<(bool, u64)>,
    /// Reads in a row the graphics and the MPS list had no process.
    pub(super) quiet: [u32; 2],
    /// Poll of the last read of a quiet list, and whether a read since then
    /// skipped one (so the lists changed while it was not looked at).
    pub(super) sparse_read_at: u64,
    pub(super) sparse_pending: bool,
    /// Entries the compute, graphics and MPS list held when last read:
    /// sizes the next read's buffer (`reads::read_list`).
    pub(super) room: [u32; 3],
    /// The lists as last read, while they still hold (`gate.rs`).
    pub(super) kept: Option<gate::Kept>,
    /// Whether the GPU stayed idle since the last utilisation sample.
    pub(super) idle: idle::IdleWatch,
}

impl Memo {
    /// A skipped quiet list is due for a read (`reads::SPARSE_EVERY`).
    pub(super) fn sparse_due(&self, poll: u64) -> bool {
        self.sparse_pending && poll.saturating_sub(self.sparse_read_at) >= reads::SPARSE_EVERY
    }
}
