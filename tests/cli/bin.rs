//! The `gpumemd` binary under test and the one way the cli tests run it
//! to completion. Owns nothing else; a test that needs the child process
//! itself (signals, a running daemon) spawns `BIN` on its own.

use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_gpumemd");

/// Runs `gpumemd args` to its end, with no `RUST_LOG`, password or terminal
/// size from the test's environment, so output does not depend on who runs it.
pub fn gpumemd(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("COLUMNS")
        .env_remove("LINES")
        .env_remove("GPUMEMD_PASSWORD")
        .output()
        .expect("run gpumemd")
}

/// What it wrote on stderr, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
