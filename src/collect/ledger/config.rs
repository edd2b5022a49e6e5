//! The `[ebpf]` config section: whether the driver-call ledger attaches its
//! uprobes, which mapped libraries count as the CUDA driver, and the bounds
//! of its memory. Plain data with defaults and one check; it must not load
//! BPF or read /proc.

use serde::{Deserialize, Serialize};

use crate::data::units::ByteSize;

/// `[ebpf]`: the driver-call ledger (docs/ebpf.md).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EbpfConfig {
    /// Off by default: nothing is loaded into the kernel.
    pub enabled: bool,
    /// File names (as mapped, without directory) that count as the CUDA
    /// driver: a mapped file whose name starts with one of them is probed.
    pub libraries: Vec<String>,
    /// Live allocations remembered, all processes together; past it a new
    /// allocation is counted as untracked (its free cannot be matched).
    pub max_allocations: usize,
    /// Processes with books at once; past it a new process is not booked.
    pub max_processes: usize,
    /// The kernel-to-daemon ring buffer (a power of two, 4 KiB at least).
    pub ring_buffer: ByteSize,
}

impl Default for EbpfConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            libraries: vec!["libcuda.so".into()],
            max_allocations: 1_000_000,
            max_processes: 4096,
            ring_buffer: ByteSize(4 << 20),
        }
    }
}

impl EbpfConfig {
    /// Validates the section: `(key, message)` of the first bad key.
    ///
    /// # Errors
    /// The key and what would be valid.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.libraries.is_empty() || self.libraries.iter().any(|l| l.is_empty() || l.contains('/')) {
            return Err((
                "libraries",
                "list file names without a directory, e.g. [\"libcuda.so\"]".into(),
            ));
        }
        if self.max_allocations == 0 || self.max_allocations > 100_000_000 {
            return Err(("max_allocations", "use a count from 1 to 100000000".into()));
        }
        if self.max_processes == 0 || self.max_processes > 1_000_000 {
            return Err(("max_processes", "use a count from 1 to 1000000".into()));
        }
        let rb = self.ring_buffer.0;
        if !(4096..=(1 << 30)).contains(&rb) || !rb.is_power_of_two() {
            return Err((
                "ring_buffer",
                "use a power of two from 4KiB to 1GiB, e.g. \"4MiB\"".into(),
            ));
        }
        Ok(())
    }
}
