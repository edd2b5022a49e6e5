//! fake-nvml: a stand-in for libnvidia-ml.so.1, built as `libfake_nvml.so`,
//! that answers the NVML calls gpumemd makes through nvml-wrapper from a
//! TOML scenario named by `FAKE_NVML_SCENARIO` (see README.md), and the
//! CUDA driver's checkpoint calls over the same state (`cuda.rs`). It owns
//! the exported C symbols and the scenario model; it must never panic
//! across the FFI boundary nor block other callers while a call hangs.

pub mod codes;
pub mod cuda;
pub mod devmem;
pub mod exports;
pub mod funcs;
pub mod generate;
pub mod health;
pub mod model;
pub mod runtime;
pub mod scenario;
pub mod timeline;
pub mod units;
