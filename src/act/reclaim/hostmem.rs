//! The host-memory guard's seam: `MemAvailable`, from `/proc/meminfo` on a
//! host, fixed in the demo and in tests.
//!
//! Owns: reading one number. Must not: decide (suspend.rs compares it with
//! the process's bytes plus the margin).

use std::fmt;
use std::path::PathBuf;

/// `MemAvailable`, the seam the host-memory guard reads through.
pub trait HostMemory: Send + fmt::Debug {
    /// Bytes; `None` when it cannot be read (the guard then refuses).
    fn available(&self) -> Option<u64>;
}

/// `<proc_root>/meminfo`.
#[derive(Debug)]
pub struct Meminfo(pub PathBuf);

impl HostMemory for Meminfo {
    fn available(&self) -> Option<u64> {
        let text = std::fs::read_to_string(&self.0).ok()?;
        let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    }
}

/// A host with this many bytes available (the demo's).
#[derive(Debug)]
pub struct FixedHostMemory(pub u64);

impl HostMemory for FixedHostMemory {
    fn available(&self) -> Option<u64> {
        Some(self.0)
    }
}
