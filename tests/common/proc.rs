//! The daemon binary as a child process: started with a config and info
//! logs on a piped stderr, signalled, and waited for with a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed expectation is the failure

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};

pub const BIN: &str = env!("CARGO_BIN_EXE_gpumemd");

/// The binary with `args`, `--config path` and info logs on a piped stderr.
pub fn daemon(args: &[&str], path: &Path) -> Child {
    Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(path)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gpumemd")
}

pub fn signal(child: &Child, sig: Signal) {
    let pid = Pid::from_raw(child.id() as i32).expect("a child has a positive pid");
    kill_process(pid, sig).expect("signal the child");
}

/// Waits for the child to exit (on a thread, so the wait has a deadline);
/// kills it and fails when it does not exit in time.
pub fn wait_exit(child: Child, timeout: Duration) -> std::process::ExitStatus {
    let pid = Pid::from_raw(child.id() as i32).expect("a child has a positive pid");
    let (tx, rx) = std::sync::mpsc::channel();
    let mut child = child;
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    match rx.recv_timeout(timeout) {
        Ok(status) => status.expect("wait for gpumemd"),
        Err(_) => {
            let _ = kill_process(pid, Signal::KILL);
            panic!("gpumemd did not exit within {timeout:?}");
        }
    }
}
