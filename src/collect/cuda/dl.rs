//! [`LibCuda`]: the real driver, `libcuda.so.1` opened at run time with
//! libloading, so a host without the driver still builds, starts and
//! monitors (suspend is then refused).
//!
//! Owns: the C signatures and argument structs (declared from the CUDA
//! driver API reference; no binding crate covers the 12.x checkpoint calls
//! without also linking the CUDA toolkit), `cuInit(0)` and error names via
//! `cuGetErrorString`. Must not: call anything that creates a context
//! (`cuCtx*`, `cuDevicePrimaryCtx*`, `cuMem*`): the checkpoint calls act on
//! another process and need none.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::ptr;
use std::time::Duration;

use libloading::Library;

use super::{Call, Checkpointer, CudaError, CudaState, codes};

type CuResult = c_int;

/// `CUcheckpointLockArgs` (cuda.h, 12.8+): 64 bytes, reserved fields zero.
#[repr(C)]
struct LockArgs {
    timeout_ms: c_uint,
    reserved0: c_uint,
    reserved1: [u64; 7],
}

type InitFn = unsafe extern "C" fn(c_uint) -> CuResult;
type VersionFn = unsafe extern "C" fn(*mut c_int) -> CuResult;
type ErrorStringFn = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;
type GetStateFn = unsafe extern "C" fn(c_int, *mut c_int) -> CuResult;
type LockFn = unsafe extern "C" fn(c_int, *mut LockArgs) -> CuResult;
/// Checkpoint, restore and unlock: their argument structs are optional and
/// passed as NULL (the defaults), so their layout (which grew in 12.9 for
/// restore) does not matter here.
type PidFn = unsafe extern "C" fn(c_int, *mut c_void) -> CuResult;

/// The loaded driver. The `Library` stays open as long as the pointers live.
pub struct LibCuda {
    version: VersionFn,
    error_string: ErrorStringFn,
    get_state: GetStateFn,
    lock: LockFn,
    checkpoint: PidFn,
    restore: PidFn,
    unlock: PidFn,
    _lib: Library,
}

impl std::fmt::Debug for LibCuda {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LibCuda")
    }
}

impl LibCuda {
    /// Opens `library` (a name the loader resolves, or a path) and calls
    /// `cuInit(0)`. Blocking: call it on [`super::Guarded`]'s thread.
    ///
    /// # Errors
    /// `Unavailable` naming what is missing.
    pub fn open(library: &str) -> Result<LibCuda, CudaError> {
        let unavailable = |detail: String| CudaError::Unavailable {
            library: library.to_string(),
            detail,
        };
        // SAFETY: loading the NVIDIA driver (or its stand-in) runs only its
        // own initialisers; nothing of ours runs on load.
        let lib = unsafe { Library::new(library) }.map_err(|e| unavailable(e.to_string()))?;
        macro_rules! sym {
            ($t:ty, $name:literal) => {
                // SAFETY: the type is the symbol's documented C signature.
                *unsafe { lib.get::<$t>(concat!($name, "\0").as_bytes()) }.map_err(|e| {
                    unavailable(format!(
                        "{} is missing ({e}); the checkpoint API needs driver 550 or newer",
                        $name
                    ))
                })?
            };
        }
        let init: InitFn = sym!(InitFn, "cuInit");
        let cuda = LibCuda {
            version: sym!(VersionFn, "cuDriverGetVersion"),
            error_string: sym!(ErrorStringFn, "cuGetErrorString"),
            get_state: sym!(GetStateFn, "cuCheckpointProcessGetState"),
            lock: sym!(LockFn, "cuCheckpointProcessLock"),
            checkpoint: sym!(PidFn, "cuCheckpointProcessCheckpoint"),
            restore: sym!(PidFn, "cuCheckpointProcessRestore"),
            unlock: sym!(PidFn, "cuCheckpointProcessUnlock"),
            _lib: lib,
        };
        // SAFETY: cuInit takes flags by value; 0 is the only valid value.
        let rc = unsafe { init(0) };
        cuda.check(Call::Init, rc).map_err(|e| unavailable(e.to_string()))?;
        Ok(cuda)
    }

    fn check(&self, call: Call, rc: CuResult) -> Result<(), CudaError> {
        if rc == codes::SUCCESS {
            return Ok(());
        }
        Err(CudaError::Failed {
            call,
            code: rc,
            name: self.error_name(rc),
        })
    }

    fn error_name(&self, rc: CuResult) -> String {
        let mut text: *const c_char = ptr::null();
        // SAFETY: the driver writes a pointer to a static string or leaves it.
        let ok = unsafe { (self.error_string)(rc, &mut text) } == codes::SUCCESS;
        if !ok || text.is_null() {
            return format!("CUresult {rc}");
        }
        // SAFETY: non-null, NUL-terminated static string owned by the driver.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }
}

/// PIDs beyond `c_int` cannot name a process to the driver.
fn c_pid(call: Call, pid: u32) -> Result<c_int, CudaError> {
    c_int::try_from(pid).map_err(|_| CudaError::Failed {
        call,
        code: codes::INVALID_VALUE,
        name: format!("pid {pid} is out of range"),
    })
}

impl Checkpointer for LibCuda {
    fn driver_version(&mut self) -> Result<i32, CudaError> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        let rc = unsafe { (self.version)(&mut v) };
        self.check(Call::DriverVersion, rc).map(|()| v)
    }

    fn state(&mut self, pid: u32) -> Result<CudaState, CudaError> {
        let mut s: c_int = -1;
        // SAFETY: writes one enum value (an int).
        let rc = unsafe { (self.get_state)(c_pid(Call::GetState, pid)?, &mut s) };
        self.check(Call::GetState, rc).map(|()| CudaState::from_raw(s))
    }

    fn lock(&mut self, pid: u32, timeout: Duration) -> Result<(), CudaError> {
        // At least 1 ms: 0 would mean "no timeout" to the driver.
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX).max(1);
        let mut args = LockArgs {
            timeout_ms: ms,
            reserved0: 0,
            reserved1: [0; 7],
        };
        // SAFETY: args is a valid, zeroed CUcheckpointLockArgs.
        let rc = unsafe { (self.lock)(c_pid(Call::Lock, pid)?, &mut args) };
        if rc == codes::NOT_READY {
            // The driver's word for a lock timeout; say what it means.
            return Err(CudaError::Failed {
                call: Call::Lock,
                code: rc,
                name: format!(
                    "{}: its CUDA work did not drain within the lock timeout of {}",
                    self.error_name(rc),
                    humantime::format_duration(timeout)
                ),
            });
        }
        self.check(Call::Lock, rc)
    }

    fn checkpoint(&mut self, pid: u32) -> Result<(), CudaError> {
        // SAFETY: NULL args are documented as "use the defaults".
        let rc = unsafe { (self.checkpoint)(c_pid(Call::Checkpoint, pid)?, ptr::null_mut()) };
        self.check(Call::Checkpoint, rc)
    }

    fn restore(&mut self, pid: u32) -> Result<(), CudaError> {
        // SAFETY: as above.
        let rc = unsafe { (self.restore)(c_pid(Call::Restore, pid)?, ptr::null_mut()) };
        self.check(Call::Restore, rc)
    }

    fn unlock(&mut self, pid: u32) -> Result<(), CudaError> {
        // SAFETY: as above.
        let rc = unsafe { (self.unlock)(c_pid(Call::Unlock, pid)?, ptr::null_mut()) };
        self.check(Call::Unlock, rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_unavailable_not_a_panic() {
        let err = LibCuda::open("/nonexistent/libcuda.so.1").expect_err("no such file");
        assert!(matches!(err, CudaError::Unavailable { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/libcuda.so.1"), "{err}");
    }

    #[test]
    fn a_library_without_the_symbols_is_unavailable() {
        // libc is loadable everywhere and has no cu* symbols.
        let err = LibCuda::open("libc.so.6").expect_err("not a CUDA driver");
        assert!(err.to_string().contains("cuInit"), "{err}");
    }

    #[test]
    fn lock_args_have_the_documented_size() {
        assert_eq!(std::mem::size_of::<LockArgs>(), 64);
    }
}
