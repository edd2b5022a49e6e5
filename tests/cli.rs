//! One test binary for the `gpumemd` binary as a user or a Slurm epilog runs
//! it: commands, flags, exit codes and output, `gpumemd check`, and the
//! demo's suspend and resume.
//!
//! Owns only the module list. Must not hold tests itself: each lives in
//! `tests/cli/`, where cargo does not take a file for a binary of its own
//! (each binary links the whole crate).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

mod common;

// An inline module in a root test file resolves its modules in the folder
// of its name: `cli::check` is tests/cli/check.rs.
mod cli {
    mod bin;
    mod check;
    mod client;
    mod commands;
    mod reclaim_demo;
    mod report;
    mod slurm;
    mod snapshot;
    mod snapshot_scale;
    mod suspend_demo;
}
