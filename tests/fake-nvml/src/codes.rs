//! NVML return codes by name: parsing the names a scenario uses and the
//! static messages `nvmlErrorString` hands out. Values come from
//! `nvml-wrapper-sys`, never re-declared.

use std::ffi::CStr;

use nvml_wrapper_sys::bindings::*;

pub const SUCCESS: nvmlReturn_t = nvmlReturn_enum_NVML_SUCCESS;
pub const UNINITIALIZED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
pub const INVALID_ARGUMENT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub const NOT_SUPPORTED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
pub const NOT_FOUND: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
pub const INSUFFICIENT_SIZE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
pub const ARGUMENT_VERSION_MISMATCH: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
pub const UNKNOWN: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// (value, name without the `NVML_ERROR_` prefix, message as NVML words it).
const TABLE: &[(nvmlReturn_t, &str, &CStr)] = &[
    (SUCCESS, "SUCCESS", c"Success"),
    (UNINITIALIZED, "UNINITIALIZED", c"Uninitialized"),
    (INVALID_ARGUMENT, "INVALID_ARGUMENT", c"Invalid Argument"),
    (NOT_SUPPORTED, "NOT_SUPPORTED", c"Not Supported"),
    (
        nvmlReturn_enum_NVML_ERROR_NO_PERMISSION,
        "NO_PERMISSION",
        c"Insufficient Permissions",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_ALREADY_INITIALIZED,
        "ALREADY_INITIALIZED",
        c"Already Initialized",
    ),
    (NOT_FOUND, "NOT_FOUND", c"Not Found"),
    (INSUFFICIENT_SIZE, "INSUFFICIENT_SIZE", c"Insufficient Size"),
    (
        nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_POWER,
        "INSUFFICIENT_POWER",
        c"Insufficient External Power",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
        "DRIVER_NOT_LOADED",
        c"Driver Not Loaded",
    ),
    (nvmlReturn_enum_NVML_ERROR_TIMEOUT, "TIMEOUT", c"Timeout"),
    (
        nvmlReturn_enum_NVML_ERROR_IRQ_ISSUE,
        "IRQ_ISSUE",
        c"Interrupt request issue",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND,
        "LIBRARY_NOT_FOUND",
        c"NVML Shared Library Not Found",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND,
        "FUNCTION_NOT_FOUND",
        c"Function Not Found",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_CORRUPTED_INFOROM,
        "CORRUPTED_INFOROM",
        c"Corrupted infoROM",
    ),
    (nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST, "GPU_IS_LOST", c"GPU is lost"),
    (
        nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED,
        "RESET_REQUIRED",
        c"GPU requires restart",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_OPERATING_SYSTEM,
        "OPERATING_SYSTEM",
        c"The operating system has blocked the request.",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        "LIB_RM_VERSION_MISMATCH",
        c"RM has detected an NVML/RM version mismatch.",
    ),
    (nvmlReturn_enum_NVML_ERROR_IN_USE, "IN_USE", c"In use by another client"),
    (nvmlReturn_enum_NVML_ERROR_MEMORY, "MEMORY", c"Insufficient Memory"),
    (nvmlReturn_enum_NVML_ERROR_NO_DATA, "NO_DATA", c"No data"),
    (
        nvmlReturn_enum_NVML_ERROR_VGPU_ECC_NOT_SUPPORTED,
        "VGPU_ECC_NOT_SUPPORTED",
        c"The requested vgpu operation is not available on target device, because ECC is enabled",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES,
        "INSUFFICIENT_RESOURCES",
        c"Ran out of critical resources, other than memory",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_FREQ_NOT_SUPPORTED,
        "FREQ_NOT_SUPPORTED",
        c"Frequency not supported",
    ),
    (
        ARGUMENT_VERSION_MISMATCH,
        "ARGUMENT_VERSION_MISMATCH",
        c"Version mismatch",
    ),
    (nvmlReturn_enum_NVML_ERROR_DEPRECATED, "DEPRECATED", c"Deprecated"),
    (nvmlReturn_enum_NVML_ERROR_NOT_READY, "NOT_READY", c"Not Ready"),
    (
        nvmlReturn_enum_NVML_ERROR_GPU_NOT_FOUND,
        "GPU_NOT_FOUND",
        c"GPU not found",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_INVALID_STATE,
        "INVALID_STATE",
        c"Invalid state",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_RESET_TYPE_NOT_SUPPORTED,
        "RESET_TYPE_NOT_SUPPORTED",
        c"Reset type not supported",
    ),
    (UNKNOWN, "UNKNOWN", c"Unknown Error"),
];

/// `CUDA_ERROR_*` names are CUDA driver codes (for faults on `cu*` calls).
/// Accepts "GPU_IS_LOST", "NVML_ERROR_GPU_IS_LOST" or "gpu_is_lost" so a
/// scenario can copy names straight from nvml.h or from nvml-wrapper docs.
pub fn parse_code(name: &str) -> Result<nvmlReturn_t, String> {
    let upper = name.trim().to_ascii_uppercase();
    if upper.starts_with("CUDA_") {
        // A CUresult for the CUDA stand-in; both are plain integers.
        return crate::cuda::parse_code(&upper);
    }
    let bare = upper
        .strip_prefix("NVML_ERROR_")
        .or_else(|| upper.strip_prefix("NVML_"))
        .unwrap_or(&upper);
    TABLE
        .iter()
        .find(|(_, known, _)| *known == bare)
        .map(|(value, _, _)| *value)
        .ok_or_else(|| format!("unknown NVML return code {name:?}"))
}

/// Message for `nvmlErrorString`; static so the pointer outlives the call.
pub fn message(code: nvmlReturn_t) -> &'static CStr {
    TABLE
        .iter()
        .find(|(value, _, _)| *value == code)
        .map_or(c"Unknown Error", |(_, _, text)| text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_with_or_without_prefix() {
        let lost = nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
        assert_eq!(parse_code("GPU_IS_LOST"), Ok(lost));
        assert_eq!(parse_code("NVML_ERROR_GPU_IS_LOST"), Ok(lost));
        assert_eq!(parse_code("gpu_is_lost"), Ok(lost));
        assert_eq!(parse_code("NVML_SUCCESS"), Ok(SUCCESS));
        assert!(parse_code("GPU_ON_FIRE").is_err());
    }

    #[test]
    fn every_code_has_a_message() {
        for (value, _, text) in TABLE {
            assert_eq!(message(*value), *text);
        }
        assert_eq!(message(12345), c"Unknown Error");
    }
}
