//! How the NVML source words and sorts NVML errors: the operator-facing
//! description of each, which ones need NVML initialised again, which make
//! a whole device unreadable, the message of a failed initialisation, and
//! the error of a symbol the loaded library lacks. Part of the NVML source;
//! it must not call NVML.

use std::ffi::OsString;

use nvml_wrapper::error::NvmlError;

/// Errors after which the handle is useless until NVML is initialised again
/// (driver unloaded or upgraded under the daemon).
pub(super) fn needs_reinit(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::Uninitialized | NvmlError::LibRmVersionMismatch | NvmlError::DriverNotLoaded
    )
}

/// Errors that make the whole device unreadable this poll.
pub(super) fn is_device_fatal(e: &NvmlError) -> bool {
    needs_reinit(e) || matches!(e, NvmlError::GpuLost | NvmlError::ResetRequired | NvmlError::Timeout)
}

/// A short operator-facing description of an NVML error.
pub(super) fn describe(e: &NvmlError) -> String {
    match e {
        NvmlError::GpuLost => "GPU is lost (fell off the bus)".into(),
        NvmlError::NotSupported => "not supported by this GPU".into(),
        NvmlError::NoPermission => "no permission".into(),
        // nvml-wrapper's own text names its Rust API, not the driver.
        NvmlError::Uninitialized => "NVML is not initialised".into(),
        NvmlError::LibRmVersionMismatch => "NVML library and kernel driver versions differ".into(),
        other => other.to_string(),
    }
}

pub(super) fn init_error(library: &OsString, e: &NvmlError) -> String {
    let lib = library.to_string_lossy();
    match e {
        NvmlError::LibloadingError(_) => format!("{lib} not found"),
        NvmlError::DriverNotLoaded => format!("{lib} loaded but the NVIDIA driver is not loaded"),
        NvmlError::NoPermission => format!("{lib}: no permission to open the GPU devices"),
        other => format!("{lib}: {other}"),
    }
}

/// A symbol of the loaded library, or `FailedToLoadSymbol` when this
/// driver lacks it (as nvml-wrapper's own calls report it).
pub(super) fn symbol<T>(sym: &Result<T, libloading::Error>) -> Result<&T, NvmlError> {
    sym.as_ref().map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))
}
