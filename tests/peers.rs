//! One test binary for the notifiers and the alert path against their
//! peers: a real Alertmanager (`prometheus-alertmanager`; those tests are
//! ignored by `cargo test` and run by `.ci/run` with `--include-ignored`)
//! and a webhook receiver on 127.0.0.1.
//!
//! Owns only the module list. Must not hold tests itself: each lives in
//! `tests/peers/`, where cargo does not take a file for a binary of its own
//! (each binary links the whole crate).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

mod common;

// An inline module in a root test file resolves its modules in the folder
// of its name: `peers::notify_webhook` is tests/peers/notify_webhook.rs.
mod peers {
    mod alerting_e2e;
    mod notify_alertmanager;
    mod notify_webhook;
}
