//! One test binary for the crate's code without a daemon: the default
//! alert rules on memory profiles, the golden expositions, leak detection
//! on synthetic shapes and real traces, reclaim on real child processes,
//! and the module graph read from `src/`.
//!
//! Owns only the module list. Must not hold tests itself: each lives in
//! `tests/library/`, where cargo does not take a file for a binary of its
//! own (each binary links the whole crate).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

mod common;

// An inline module in a root test file resolves its modules in the folder
// of its name: `library::golden` is tests/library/golden.rs.
mod library {
    mod alert_defaults;
    mod golden;
    mod golden_openmetrics;
    mod leak_shapes;
    mod module_graph;
    mod reclaim;
    mod traces;
}
