//! The device list as NVML gave it at the last full read: the count and
//! each index's handle and UUID. NVML has no hot-plug without being
//! initialised again, so a steady poll reuses them and makes no count,
//! handle or UUID call; the list is read again every `RECHECK_POLLS` polls,
//! after any whole-device failure and after re-initialisation. Part of the
//! NVML source; it must not call NVML itself nor decide whether a device
//! is up (the poll does both).

use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::nvmlDevice_t;

/// Polls between full re-reads of the list, as for the MIG mode: the count
/// (34 us), handle (9.5 us) and UUID (20 us) calls cost about 64 us a GPU
/// on the H200 when made once a second (BENCHMARKS.md), and they cannot
/// change while NVML stays initialised. The re-read is a safety net for a
/// driver that does change them, not for freshness: processes are listed
/// every poll regardless.
pub(super) const RECHECK_POLLS: u64 = 30;

/// One GPU's NVML handle, kept between polls.
#[derive(Clone, Copy, Debug)]
pub(super) struct Handle(nvmlDevice_t);

// SAFETY: the handle is an opaque token NVML accepts from any thread; the
// source that keeps it is used by one thread at a time.
unsafe impl Send for Handle {}

impl Handle {
    pub(super) fn of(device: &Device<'_>) -> Self {
        // SAFETY: the raw handle is only kept and handed back to the same
        // `Nvml` (see `device`), never dereferenced here.
        Self(unsafe { device.handle() })
    }

    /// The device again, borrowing `nvml`.
    pub(super) fn device<'n>(self, nvml: &'n Nvml) -> Device<'n> {
        // SAFETY: the handle came from `nvml`'s own `device_by_index`, and
        // NVML handles stay valid while NVML stays initialised. `Topology`
        // is forgotten whenever the source drops or re-initialises its
        // `Nvml`, so a handle never outlives the library state it names.
        unsafe { Device::new(self.0, nvml) }
    }
}

/// The kept list; empty until the first full read.
#[derive(Debug, Default)]
pub(super) struct Topology {
    /// Handle and UUID per index.
    devices: Vec<(Handle, String)>,
    /// The poll of the last full read; `None`: read it at the next poll.
    read_at: Option<u64>,
}

impl Topology {
    /// The device count to use at `poll`, or `None` when the list must be
    /// read again first (never read, too old, or forgotten after a failure).
    pub(super) fn count(&self, poll: u64) -> Option<u32> {
        self.read_at.filter(|at| poll.saturating_sub(*at) < RECHECK_POLLS)?;
        u32::try_from(self.devices.len()).ok()
    }

    /// The kept handle and UUID of `index` (only meaningful when `count`
    /// answered).
    pub(super) fn get(&self, index: u32) -> Option<(Handle, &str)> {
        let (h, uuid) = self.devices.get(index as usize)?;
        Some((*h, uuid.as_str()))
    }

    /// Keeps a list read in full at `poll`, every index answering.
    pub(super) fn keep(&mut self, devices: Vec<(Handle, String)>, poll: u64) {
        self.devices = devices;
        self.read_at = Some(poll);
    }

    /// Reads the whole list again at the next poll: a device failed (a
    /// lost GPU is found by its handle call failing) or NVML went away.
    pub(super) fn forget(&mut self) {
        self.devices.clear();
        self.read_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_used_until_the_recheck_and_not_after_a_failure() {
        let mut t = Topology::default();
        assert_eq!(t.count(1), None, "never read");
        let h = Handle(std::ptr::null_mut());
        t.keep(vec![(h, "GPU-a".into()), (h, "GPU-b".into())], 1);
        assert_eq!(t.count(2), Some(2));
        assert_eq!(t.count(RECHECK_POLLS), Some(2));
        assert_eq!(t.count(RECHECK_POLLS + 1), None, "re-read every RECHECK_POLLS polls");
        assert_eq!(t.get(1).map(|(_, u)| u), Some("GPU-b"));
        assert!(t.get(2).is_none());
        t.forget();
        assert_eq!(t.count(2), None);
    }
}
