//! The CUDA driver symbols the checkpoint stand-in exports (`cuInit`,
//! `cuDriverGetVersion`, `cuGetErrorString`, `cuCheckpointProcess*`), with
//! the driver API's C signatures, over `runtime` and `cuda.rs`. Argument
//! structs are accepted and ignored (their reserved fields must be zero on
//! a real driver; the lock timeout is the caller's to enforce here).

use std::ffi::{c_char, c_int, c_uint, c_void};

use nvml_wrapper_sys::bindings::nvmlReturn_t;

use super::put;
use crate::cuda::{self, INVALID_VALUE, SUCCESS};
use crate::funcs::Func;
use crate::runtime::{self, Global, cu_call};

/// CUresult is an int; every code the stand-in returns fits.
fn cu(code: nvmlReturn_t) -> c_int {
    c_int::try_from(code).unwrap_or(999)
}

fn pid_of(pid: c_int) -> Option<u32> {
    u32::try_from(pid).ok().filter(|p| *p > 0)
}

fn on_pid(func: Func, pid: c_int, body: impl FnOnce(&mut Global, u32) -> nvmlReturn_t) -> c_int {
    let Some(pid) = pid_of(pid) else {
        return cu(INVALID_VALUE);
    };
    cu(cu_call(func, |g| body(g, pid)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> c_int {
    if flags != 0 {
        return cu(INVALID_VALUE);
    }
    cu(runtime::cu_init())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> c_int {
    cu(cu_call(Func::CuVersion, |g| {
        let v = g.scenario().map_or(0, |s| s.cuda_driver_version);
        // SAFETY: the caller's out-pointer, or null (checked by put).
        let rc = unsafe { put(version, v) };
        if rc == SUCCESS { SUCCESS } else { INVALID_VALUE }
    }))
}

/// Works without init, as the driver's does; the string is static.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(error: c_int, text: *mut *const c_char) -> c_int {
    let known = u32::try_from(error).ok().and_then(cuda::message);
    match known {
        Some(m) if !text.is_null() => {
            // SAFETY: non-null out-pointer from the caller.
            unsafe { text.write(m.as_ptr()) };
            cu(SUCCESS)
        }
        _ => cu(INVALID_VALUE),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCheckpointProcessGetState(pid: c_int, state: *mut c_int) -> c_int {
    on_pid(Func::CuGetState, pid, |g, pid| match g.cuda.state(g.devices(), pid) {
        // SAFETY: the caller's out-pointer, or null (checked by put).
        Ok(s) => match unsafe { put(state, s as c_int) } {
            0 => SUCCESS,
            _ => INVALID_VALUE,
        },
        Err(code) => code,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCheckpointProcessLock(pid: c_int, _args: *mut c_void) -> c_int {
    on_pid(Func::CuLock, pid, |g, pid| {
        let devices = g.devices().to_vec();
        g.cuda.lock(&devices, pid)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCheckpointProcessCheckpoint(pid: c_int, _args: *mut c_void) -> c_int {
    on_pid(Func::CuCheckpoint, pid, |g, pid| {
        let mut cuda = std::mem::take(&mut g.cuda);
        let rc = cuda.checkpoint(g.devices_mut(), pid);
        g.cuda = cuda;
        rc
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCheckpointProcessRestore(pid: c_int, _args: *mut c_void) -> c_int {
    on_pid(Func::CuRestore, pid, |g, pid| {
        let mut cuda = std::mem::take(&mut g.cuda);
        let rc = cuda.restore(g.devices_mut(), pid);
        g.cuda = cuda;
        rc
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCheckpointProcessUnlock(pid: c_int, _args: *mut c_void) -> c_int {
    on_pid(Func::CuUnlock, pid, |g, pid| {
        let devices = g.devices().to_vec();
        g.cuda.unlock(&devices, pid)
    })
}
