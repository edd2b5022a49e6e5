//! The CUDA driver's memory calls the stand-in exports, with the driver
//! API's C signatures, over one [`DevMem`] per loaded library (budget from
//! `FAKE_CUDA_MEMORY`): `cuMemAlloc_v2`, `cuMemAllocPitch_v2`,
//! `cuMemAllocManaged`, `cuMemAllocAsync`, `cuMemAllocFromPoolAsync`,
//! `cuMemFree_v2`, `cuMemFreeAsync`, `cuMemCreate`, `cuMemRelease`. What
//! gpumemd's driver-call ledger probes; no context or `cuInit` is needed.
//! Streams, pools and properties are accepted and ignored.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Mutex, PoisonError};

use crate::devmem::{DevMem, INVALID_VALUE};

static MEMORY: Mutex<Option<DevMem>> = Mutex::new(None);

fn with(body: impl FnOnce(&mut DevMem) -> Result<(), u32>) -> c_int {
    let mut g = MEMORY.lock().unwrap_or_else(PoisonError::into_inner);
    let m = g.get_or_insert_with(DevMem::from_env);
    match body(m) {
        Ok(()) => 0,
        Err(code) => c_int::try_from(code).unwrap_or(999),
    }
}

/// Writes through a caller's out-pointer; INVALID_VALUE for null.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, v: T) -> Result<(), u32> {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null, and valid by the caller's contract.
    unsafe { out.write(v) };
    Ok(())
}

fn alloc_into(dptr: *mut u64, size: usize) -> c_int {
    if dptr.is_null() {
        return c_int::try_from(INVALID_VALUE).unwrap_or(1);
    }
    // SAFETY: the caller's out-pointer, checked non-null above.
    with(|m| m.alloc(size as u64).and_then(|a| unsafe { put(dptr, a) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, bytesize: usize) -> c_int {
    alloc_into(dptr, bytesize)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(dptr: *mut u64, bytesize: usize, _flags: c_uint) -> c_int {
    alloc_into(dptr, bytesize)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync(dptr: *mut u64, bytesize: usize, _stream: *mut c_void) -> c_int {
    alloc_into(dptr, bytesize)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut u64,
    bytesize: usize,
    _pool: *mut c_void,
    _stream: *mut c_void,
) -> c_int {
    alloc_into(dptr, bytesize)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut u64,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element: c_uint,
) -> c_int {
    if dptr.is_null() || pitch.is_null() {
        return 1;
    }
    with(|m| {
        let (a, p) = m.alloc_pitch(width as u64, height as u64, element)?;
        // SAFETY: the caller's out-pointers, checked non-null above.
        unsafe {
            put(dptr, a)?;
            put(pitch, usize::try_from(p).unwrap_or(usize::MAX))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFree_v2(dptr: u64) -> c_int {
    with(|m| m.free(dptr))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: u64, _stream: *mut c_void) -> c_int {
    with(|m| m.free(dptr))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemCreate(handle: *mut u64, size: usize, _prop: *const c_void, _flags: u64) -> c_int {
    if handle.is_null() {
        return 1;
    }
    // SAFETY: the caller's out-pointer, checked non-null above.
    with(|m| m.create(size as u64).and_then(|h| unsafe { put(handle, h) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRelease(handle: u64) -> c_int {
    with(|m| m.release(handle))
}
