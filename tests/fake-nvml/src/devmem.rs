//! The device memory of the CUDA stand-in: the driver API's allocation and
//! free calls over a budget, with addresses and handles that look like a
//! real driver's (2 MiB-aligned device addresses, pitches rounded to 512
//! bytes, small integer handles). A call past the budget fails with
//! CUDA_ERROR_OUT_OF_MEMORY (2), an unknown pointer with
//! CUDA_ERROR_INVALID_VALUE (1). No FFI and no globals: exports/memory.rs
//! holds one of these.

use std::collections::HashMap;

pub const OUT_OF_MEMORY: u32 = 2;
pub const INVALID_VALUE: u32 = 1;

/// Allocation granularity of device addresses and of `cuMemCreate` sizes.
pub const GRANULE: u64 = 2 << 20;
/// Row alignment of pitched allocations.
pub const PITCH_ALIGN: u64 = 512;
/// The budget without `FAKE_CUDA_MEMORY`: an 80 GiB card.
pub const DEFAULT_BUDGET: u64 = 80 << 30;

#[derive(Debug)]
pub struct DevMem {
    budget: u64,
    used: u64,
    next_addr: u64,
    next_handle: u64,
    /// (is a handle, address or handle) to size.
    live: HashMap<(bool, u64), u64>,
}

impl DevMem {
    pub fn new(budget: u64) -> Self {
        DevMem {
            budget,
            used: 0,
            next_addr: 0x7f00_0000_0000,
            next_handle: 1,
            live: HashMap::new(),
        }
    }

    /// The budget from `FAKE_CUDA_MEMORY` (a size like "1GiB"), else
    /// [`DEFAULT_BUDGET`].
    pub fn from_env() -> Self {
        let budget = std::env::var("FAKE_CUDA_MEMORY")
            .ok()
            .and_then(|t| crate::units::parse_size(&t).ok())
            .unwrap_or(DEFAULT_BUDGET);
        Self::new(budget)
    }

    fn take(&mut self, size: u64) -> Result<(), u32> {
        if size == 0 {
            return Err(INVALID_VALUE);
        }
        match self.used.checked_add(size) {
            Some(u) if u <= self.budget => {
                self.used = u;
                Ok(())
            }
            _ => Err(OUT_OF_MEMORY),
        }
    }

    /// A device address for `size` bytes.
    pub fn alloc(&mut self, size: u64) -> Result<u64, u32> {
        self.take(size)?;
        let addr = self.next_addr;
        self.next_addr += size.div_ceil(GRANULE) * GRANULE;
        self.live.insert((false, addr), size);
        Ok(addr)
    }

    /// (address, pitch) for `height` rows of `width` bytes.
    pub fn alloc_pitch(&mut self, width: u64, height: u64, element: u32) -> Result<(u64, u64), u32> {
        if ![4, 8, 16].contains(&element) || width == 0 || height == 0 {
            return Err(INVALID_VALUE);
        }
        let pitch = width.div_ceil(PITCH_ALIGN) * PITCH_ALIGN;
        let size = pitch.checked_mul(height).ok_or(OUT_OF_MEMORY)?;
        Ok((self.alloc(size)?, pitch))
    }

    pub fn free(&mut self, addr: u64) -> Result<(), u32> {
        let size = self.live.remove(&(false, addr)).ok_or(INVALID_VALUE)?;
        self.used -= size;
        Ok(())
    }

    /// A generic allocation handle (`cuMemCreate`): sizes are whole granules.
    pub fn create(&mut self, size: u64) -> Result<u64, u32> {
        if !size.is_multiple_of(GRANULE) {
            return Err(INVALID_VALUE);
        }
        self.take(size)?;
        let h = self.next_handle;
        self.next_handle += 1;
        self.live.insert((true, h), size);
        Ok(h)
    }

    pub fn release(&mut self, handle: u64) -> Result<(), u32> {
        let size = self.live.remove(&(true, handle)).ok_or(INVALID_VALUE)?;
        self.used -= size;
        Ok(())
    }

    pub fn used(&self) -> u64 {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_fail_past_the_budget_and_frees_give_it_back() {
        let mut m = DevMem::new(10 << 20);
        let a = m.alloc(6 << 20).expect("fits");
        assert_eq!(a % GRANULE, 0);
        assert_eq!(m.alloc(5 << 20), Err(OUT_OF_MEMORY));
        assert_eq!(m.alloc(0), Err(INVALID_VALUE));
        let (p, pitch) = m.alloc_pitch(1000, 100, 4).expect("pitched");
        assert_eq!(pitch, 1024);
        assert_ne!(p, a);
        assert_eq!(m.used(), (6 << 20) + 102_400);
        assert_eq!(m.free(a), Ok(()));
        assert_eq!(m.free(a), Err(INVALID_VALUE), "twice");
        let h = m.create(2 << 20).expect("handle");
        assert_eq!(m.create(3 << 20), Err(INVALID_VALUE), "not a granule");
        assert_eq!(m.free(h), Err(INVALID_VALUE), "a handle is not an address");
        assert_eq!(m.release(h), Ok(()));
        assert_eq!(m.used(), 102_400);
    }
}
