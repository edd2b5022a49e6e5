//! End-to-end checks of every scenario in `scenarios/`: the built
//! `libfake_nvml.so` is loaded through nvml-wrapper itself, exactly as
//! gpumemd loads libnvidia-ml, each scenario in its own child process
//! (the scenario variable and the poll clock are process-wide).

#[macro_use]
mod harness;
mod basic;
mod faults;
mod mig_scale;
