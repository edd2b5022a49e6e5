//! The C ABI of libnvidia-ml.so.1 that nvml-wrapper 0.13 calls for gpumemd,
//! as `#[unsafe(no_mangle)] extern "C"` functions over `runtime`. This
//! module holds the pieces they share: device handle encoding and the
//! checked writes through caller pointers.
//!
//! The functions take the exact signatures of `nvml_wrapper_sys::NvmlLib`'s
//! fields (checked by a test), with NVML's own names and safety contract.

#![allow(
    non_snake_case,
    clippy::missing_safety_doc,
    reason = "the exports are NVML's C API: its names, its documented pointer contract"
)]

#[cfg(test)]
mod abi_check;
mod cuda;
mod device;
mod health;
mod memory;
mod processes;
mod system;

pub use cuda::*;
pub use device::*;
pub use health::*;
pub use memory::*;
pub use processes::*;
pub use system::*;

use std::ffi::c_char;

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_t};

use crate::codes::{INSUFFICIENT_SIZE, INVALID_ARGUMENT, SUCCESS};
use crate::model::{DevRef, Device};
use crate::runtime::Global;

/// Handles are tagged integers, never dereferenced by anyone: the tag makes
/// a stray or stale pointer decode as invalid instead of as device 0.
const HANDLE_TAG: usize = 0x6e76_0000_0000;
const HANDLE_TAG_MASK: usize = !0xffff_ffff;

/// GPU `dev` is `TAG | (dev + 1) << 8`; its MIG slot `s` adds `s + 1`.
pub fn encode(at: DevRef) -> nvmlDevice_t {
    let slot = at.slot.map_or(0, |s| s as usize + 1);
    std::ptr::without_provenance_mut(HANDLE_TAG | ((at.dev + 1) << 8) | slot)
}

/// The device a handle names, if it names one that exists right now.
pub fn decode(devices: &[Device], handle: nvmlDevice_t) -> Option<DevRef> {
    let raw = handle.addr();
    if raw & HANDLE_TAG_MASK != HANDLE_TAG || (raw >> 8) & 0xff_ffff == 0 {
        return None;
    }
    let dev = ((raw >> 8) & 0xff_ffff) - 1;
    let slot = match raw & 0xff {
        0 => None,
        s => Some(s as u32 - 1),
    };
    let device = devices.get(dev)?;
    if let Some(s) = slot {
        device.instance(s)?;
    }
    Some(DevRef { dev, slot })
}

/// The `resolve` step of device calls: unknown handles are INVALID_ARGUMENT.
pub fn by_handle(handle: nvmlDevice_t) -> impl Fn(&Global) -> Result<Option<DevRef>, nvmlReturn_t> {
    move |global| decode(global.devices(), handle).map(Some).ok_or(INVALID_ARGUMENT)
}

/// Writes one value through a caller's out-pointer; null is NVML's
/// INVALID_ARGUMENT rather than a crash.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
pub unsafe fn put<T>(out: *mut T, value: T) -> nvmlReturn_t {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: non-null, and the caller vouches for the rest.
    unsafe { out.write(value) };
    SUCCESS
}

/// Copies a string and its NUL into a caller buffer of `length` bytes; too
/// small is INSUFFICIENT_SIZE, as NVML answers.
///
/// # Safety
/// `buffer` is null or valid for `length` bytes of writes.
pub unsafe fn put_str(buffer: *mut c_char, length: u32, text: &str) -> nvmlReturn_t {
    if buffer.is_null() {
        return INVALID_ARGUMENT;
    }
    let bytes = text.as_bytes();
    if bytes.len() >= length as usize {
        return INSUFFICIENT_SIZE;
    }
    // SAFETY: bytes.len() + 1 <= length, and the caller vouches for the buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buffer, bytes.len());
        buffer.add(bytes.len()).write(0);
    }
    SUCCESS
}
