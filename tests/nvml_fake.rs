//! Tier 3: the real NVML code path of the real `gpumemd` binary, loaded with
//! `--nvml-lib` against `tests/fake-nvml`'s `libfake_nvml.so` and driven by
//! its scenario files. Each test runs its own daemon process, because the
//! scenario variable and the stand-in's poll clock are process-wide; tests
//! talk to it over HTTP and assert exact exposition lines and JSON fields.
//! They never sleep to wait: they wait on conditions with deadlines.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

mod common;
// An inline module in a root test file resolves its modules in the folder
// of its name (`nvml_fake::scale` is tests/nvml_fake/scale.rs), where cargo
// does not take them for test binaries.
mod nvml_fake {
    mod allocator;
    mod calls;
    mod devices;
    mod driver;
    mod fields;
    mod gates;
    mod harness;
    mod health;
    mod ledger;
    mod reclaim_e2e;
    mod scale;
    mod suspend_e2e;
    mod suspend_faults;
}
