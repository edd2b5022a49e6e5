//! One test binary for the daemon on 127.0.0.1:0, in-process through
//! `gpumemd::run` on the simulated fleet or as the `gpumemd` binary, checked
//! over real HTTP: the API, compression, history, the status page's data,
//! reloads and signals, and faults of the running daemon.
//!
//! Owns only the module list. Must not hold tests itself: each lives in
//! `tests/daemon/`, where cargo does not take a file for a binary of its own
//! (each binary links the whole crate).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

mod common;

// An inline module in a root test file resolves its modules in the folder
// of its name: `daemon::api` is tests/daemon/api.rs.
mod daemon {
    mod api;
    mod compression;
    mod config_reload;
    mod history;
    mod robustness;
    mod statuspage;
}
