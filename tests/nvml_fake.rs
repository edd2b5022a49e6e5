//! Tier 3: the real NVML code path of the real `gpumemd` binary, loaded with
//! `--nvml-lib` against `tests/fake-nvml`'s `libfake_nvml.so` and driven by
//! its scenario files. Each test runs its own daemon process, because the
//! scenario variable and the stand-in's poll clock are process-wide; tests
//! talk to it over HTTP and assert exact exposition lines and JSON fields.
//! They never sleep to wait: they wait on conditions with deadlines.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

mod common;
// A root test file resolves `mod x;` beside itself; the modules live in
// tests/nvml_fake/ so that cargo does not take them for test binaries.
#[path = "nvml_fake/allocator.rs"]
mod allocator;
#[path = "nvml_fake/calls.rs"]
mod calls;
#[path = "nvml_fake/devices.rs"]
mod devices;
#[path = "nvml_fake/driver.rs"]
mod driver;
#[path = "nvml_fake/fields.rs"]
mod fields;
#[path = "nvml_fake/gates.rs"]
mod gates;
#[path = "nvml_fake/harness.rs"]
mod harness;
#[path = "nvml_fake/health.rs"]
mod health;
#[path = "nvml_fake/ledger.rs"]
mod ledger;
#[path = "nvml_fake/reclaim_e2e.rs"]
mod reclaim_e2e;
#[path = "nvml_fake/scale.rs"]
mod scale;
#[path = "nvml_fake/suspend_e2e.rs"]
mod suspend_e2e;
#[path = "nvml_fake/suspend_faults.rs"]
mod suspend_faults;
