//! Reload and signal handling of the running daemon: a config file swapped
//! for a FIFO fails the reload at once while the daemon keeps serving and can
//! still stop, and `check-config` of a FIFO exits at once; reloads keep the
//! command-line overrides; a SIGHUP that arrives while the daemon is still
//! starting does not kill it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use crate::common;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::proc::{daemon, signal, wait_exit};
use common::{Lines, get, request, sample, spawn_app, wait_true};
use gpumemd::app::config::Config;
use gpumemd::app::reload::RELOAD_DEADLINE;
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;
use rustix::process::Signal;

const WAIT: Duration = Duration::from_secs(20);

fn config_text(state: &Path) -> String {
    format!(
        "[poll]\ninterval = \"100ms\"\n[server]\nenable_lifecycle = true\n[alerting]\ndefault_rules = false\n\
         [state]\ndir = \"{}\"\n",
        state.display()
    )
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// Opening the FIFO for writing releases a reader blocked in open(2). Only
/// for a reader that is there: with none, the open would block the test.
fn unblock(fifo: &Path, text: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(fifo) {
        let _ = f.write_all(text.as_bytes());
    }
}

/// A config file swapped for a FIFO fails the reload at once (it is not a
/// regular file), the daemon keeps serving, and the next reload of a
/// regular file goes through: nothing is left stuck on the FIFO.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_config_fails_the_reload_at_once_and_a_later_reload_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gpumemd.toml");
    std::fs::write(&path, config_text(dir.path())).expect("write config");
    let cfg = Config::load(&path, false).expect("config");
    let source = SimulatedSource::new(
        Scenario::resolve("default").expect("scenario"),
        Duration::from_millis(100),
        1.7e9,
    );
    let app = spawn_app(cfg, Box::new(source)).await;
    mkfifo(&path);

    let started = Instant::now();
    let r = request(app.addr, "POST", "/-/reload", &[]).await;
    let took = started.elapsed();
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("is a FIFO, not a regular file"), "{}", r.body);
    assert!(took < RELOAD_DEADLINE, "answered after {took:?}");
    let m = app.get("/metrics").await.body;
    assert_eq!(sample(&m, "gpumem_config_last_reload_successful", &[]), Some(0.0));
    assert_eq!(app.get("/-/healthy").await.status, 200);

    std::fs::remove_file(&path).expect("rm FIFO");
    std::fs::write(&path, config_text(dir.path())).expect("write config");
    let r = request(app.addr, "POST", "/-/reload", &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = app.get("/metrics").await.body;
    assert_eq!(sample(&m, "gpumem_config_last_reload_successful", &[]), Some(1.0));
    app.stop().await.expect("clean stop");
}

/// `check-config` on a FIFO nobody writes exits 1 at once and says why,
/// instead of hanging in open(2).
#[test]
fn check_config_of_a_fifo_exits_1_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gpumemd.toml");
    mkfifo(&path);
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpumemd"))
        .arg("check-config")
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gpumemd runs");
    let stderr = child.stderr.take();
    // Waited for first: a hang fails the test instead of blocking its read.
    let status = wait_exit(child, WAIT);
    let mut err = String::new();
    if let Some(mut e) = stderr {
        std::io::Read::read_to_string(&mut e, &mut err).expect("stderr");
    }
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("is a FIFO, not a regular file"), "{err}");
    assert!(started.elapsed() < WAIT, "took {:?}", started.elapsed());
}

/// The binary stops on SIGTERM, promptly, after a SIGHUP reload of a FIFO.
#[test]
fn sigterm_ends_the_daemon_while_a_reload_is_stuck() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gpumemd.toml");
    std::fs::write(&path, config_text(dir.path())).expect("write config");
    let mut child = daemon(&["--demo", "--web.listen-address", "127.0.0.1:0"], &path);
    let mut log = Lines::new(child.stderr.take().expect("stderr"));
    log.wait_for("listening", WAIT);
    mkfifo(&path);
    signal(&child, Signal::HUP);
    log.wait_for("SIGHUP received", WAIT);
    signal(&child, Signal::TERM);
    let status = wait_exit(child, WAIT);
    assert!(status.success(), "{status:?}\n{}", log.seen.join("\n"));
}

/// Started with --nvml-lib and --web.listen-address, a SIGHUP reload keeps
/// both and reports no setting as needing a restart.
#[test]
fn sighup_reload_keeps_the_command_line_and_reports_no_false_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gpumemd.toml");
    std::fs::write(&path, config_text(dir.path())).expect("write config");
    let mut child = daemon(
        &[
            "--demo",
            "--nvml-lib",
            "/nonexistent/libnvidia-ml.so",
            "--web.listen-address",
            "127.0.0.1:0",
        ],
        &path,
    );
    let mut log = Lines::new(child.stderr.take().expect("stderr"));
    log.wait_for("listening", WAIT);
    std::fs::write(&path, config_text(dir.path()) + "[processes]\ntop_n = 3\n").expect("rewrite");
    signal(&child, Signal::HUP);
    log.wait_for("config reloaded", WAIT);
    signal(&child, Signal::TERM);
    log.wait_for("stopped", WAIT);
    let status = wait_exit(child, WAIT);
    assert!(status.success(), "{status:?}");
    let restart: Vec<&String> = log.seen.iter().filter(|l| l.contains("after a restart")).collect();
    assert!(restart.is_empty(), "false restart warning: {restart:?}");

    // A restart-only setting really changed is still reported.
    let mut child = daemon(&["--demo", "--web.listen-address", "127.0.0.1:0"], &path);
    let mut log = Lines::new(child.stderr.take().expect("stderr"));
    log.wait_for("listening", WAIT);
    std::fs::write(&path, config_text(dir.path()) + "[processes]\nlabel_max_bytes = 64\n").expect("rewrite");
    signal(&child, Signal::HUP);
    let line = log.wait_for("after a restart", WAIT);
    assert!(line.contains("processes.label_max_bytes"), "{line}");
    signal(&child, Signal::TERM);
    assert!(wait_exit(child, WAIT).success());
}

/// Whether `pid` catches SIGHUP (bit 0 of SigCgt in /proc/PID/status).
fn catches_sighup(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let hex = s.lines().find_map(|l| l.strip_prefix("SigCgt:"))?.trim().to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|mask| mask & 1 == 1)
}

/// A SIGHUP sent while the daemon is still starting (here: still reading its
/// config from a FIFO) is caught, not the default "terminate". Before the
/// fix the handler came after config load, bind and outbox setup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_sighup_does_not_kill_the_daemon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gpumemd.toml");
    mkfifo(&path);
    let mut child = daemon(&["--demo", "--web.listen-address", "127.0.0.1:0"], &path);
    let pid = child.id();
    wait_true(WAIT, "the SIGHUP handler", || catches_sighup(pid)).await;
    signal(&child, Signal::HUP);
    unblock(&path, &config_text(dir.path()));
    let mut log = Lines::new(child.stderr.take().expect("stderr"));
    let line = log.wait_for("listening", WAIT);
    assert!(child.try_wait().expect("try_wait").is_none(), "gpumemd died");
    let addr: std::net::SocketAddr = line
        .split("address=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    assert_eq!(get(addr, "/-/healthy", &[]).await.status, 200);
    // The SIGHUP was kept, not dropped: it becomes a reload after start.
    log.wait_for("SIGHUP received", WAIT);
    signal(&child, Signal::TERM);
    assert!(wait_exit(child, WAIT).success());
}

/// `pid`'s signal mask `field` ("SigIgn", "SigBlk", "SigCgt") from
/// /proc/PID/status.
fn sig_field(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hex = s
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .to_string();
    u64::from_str_radix(&hex, 16).ok()
}

/// A SIGHUP as soon as the process runs Rust code at all (std ignores
/// SIGPIPE, bit 12 of SigIgn, just before it calls `main`), long before any
/// handler could be installed: held back from the loader's constructors on,
/// it becomes a reload, not a death. Before the fix the argument parsing and runtime
/// start left a window of milliseconds; ten tries, none may die.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighup_right_after_exec_does_not_kill_the_daemon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gpumemd.toml");
    std::fs::write(&path, config_text(dir.path())).expect("write config");
    for attempt in 0..10 {
        let mut child = daemon(&["--demo", "--web.listen-address", "127.0.0.1:0"], &path);
        let pid = child.id();
        let t = Instant::now();
        // A tight loop, not a sleep: the window is milliseconds wide.
        while sig_field(pid, "SigIgn").is_none_or(|m| m & (1 << 12) == 0) {
            assert!(t.elapsed() < WAIT, "attempt {attempt}: gpumemd never reached main");
            std::hint::spin_loop();
        }
        signal(&child, Signal::HUP);
        let mut log = Lines::new(child.stderr.take().expect("stderr"));
        log.wait_for("listening", WAIT);
        log.wait_for("SIGHUP received", WAIT);
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "attempt {attempt}: gpumemd died"
        );
        signal(&child, Signal::TERM);
        assert!(wait_exit(child, WAIT).success(), "attempt {attempt}");
    }
}

/// Issue 22 (D2): a FIFO nobody writes as the web config held the start in
/// open(2) for good, and SIGTERM could not end it (caught, but nothing
/// polled it yet). Now the read has a deadline: the start fails, in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_web_config_fails_the_start_in_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gpumemd.toml");
    std::fs::write(&path, config_text(dir.path())).expect("write config");
    let web = dir.path().join("web.yml");
    mkfifo(&web);
    let web_arg = web.to_str().expect("utf-8 path");
    let t = Instant::now();
    let child = daemon(
        &[
            "--demo",
            "--web.listen-address",
            "127.0.0.1:0",
            "--web.config.file",
            web_arg,
        ],
        &path,
    );
    let status = wait_exit(child, RELOAD_DEADLINE * 3);
    assert!(!status.success(), "started with a web config nobody wrote");
    assert!(t.elapsed() < RELOAD_DEADLINE * 2, "failed only after {:?}", t.elapsed());
}
