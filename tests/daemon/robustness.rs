//! Fault handling of the running daemon.
//!
//! Here: (a) a state dir that cannot be written (its parent is a regular
//! file; the tests run as root, so permissions would not stop them) with
//! the webhook configured: the daemon keeps running, rules still fire into
//! `/api/v1/alerts` and `gpumem_alerts`, notifications are delivered from
//! memory, and the problem shows as an error log line naming the path, as
//! `gpumem_state_dir_writable 0` and as outbox write errors; once the dir
//! can be written (the file removed, as a full disk freed) the metric says
//! so.
//!
//! Covered elsewhere, where the fault can be made exactly:
//! - (b) a corrupt outbox entry is moved aside, counted as dropped and the
//!   rest delivered: `src/act/notify/tests/outbox.rs`
//!   `corrupt_entry_is_moved_aside_counted_and_the_rest_loaded`, and the
//!   delivery of what a previous run left in `tests/peers/notify_webhook.rs`
//!   `the_outbox_delivers_after_a_restart_while_the_receiver_was_down`;
//! - (c) clock jumps: rule durations run on the monotonic clock,
//!   `src/judge/rules/tests.rs` `wall_clock_jumps_do_not_shorten_for`;
//! - (d) /proc entries that vanish or cannot be read:
//!   `src/collect/attribution/tests/procfs.rs` (`missing_process_is_gone`,
//!   `empty_stat_is_gone`, `vanishing_between_reads_is_gone`,
//!   `unreadable_cgroup_and_cmdline_leave_parts_empty`,
//!   `permission_denied_cgroup_is_not_fatal`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Lines, get, http_sink, sample, spawn_app, wait_until};
use gpumemd::app::config::Config;
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;

const BIN: &str = env!("CARGO_BIN_EXE_gpumemd");
const WAIT: Duration = Duration::from_secs(20);
const RULE: &str = "RobustnessAlwaysFiring";

/// Fast polls, the webhook to `sink`, the state under `state`, and a rule
/// that fires on the first poll of the demo fleet.
fn config_text(state: &Path, sink: SocketAddr) -> String {
    format!(
        r#"[poll]
interval = "100ms"

[state]
dir = "{}"

[notify.webhook]
url = "http://{sink}/hook"
retry_initial = "100ms"

[[rule]]
name = "{RULE}"
kind = "device_used_bytes"
above = "0"
severity = "warning"
"#,
        state.display()
    )
}

/// A child process that is killed when the test ends, pass or fail.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The alert `RULE` from `/api/v1/alerts` once it fires.
async fn firing(addr: SocketAddr) -> serde_json::Value {
    wait_until(WAIT, "the rule to fire", || async {
        let r = get(addr, "/api/v1/alerts", &[]).await;
        let v: serde_json::Value = serde_json::from_str(&r.body).ok()?;
        v["alerts"]
            .as_array()?
            .iter()
            .find(|a| a["rule"] == RULE && a["state"] == "firing")
            .cloned()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_state_dir_is_logged_and_exported_and_alerts_still_work() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, b"").expect("write a plain file");
    let state = file.join("state");
    let (sink, received) = http_sink();
    let cfg = tmp.path().join("gpumemd.toml");
    std::fs::write(&cfg, config_text(&state, sink)).expect("write the config");

    let mut child = Child(
        Command::new(BIN)
            .args(["--demo", "--web.listen-address", "127.0.0.1:0", "--log-format", "json"])
            .arg("--config")
            .arg(&cfg)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gpumemd"),
    );
    let mut log = Lines::new(child.0.stderr.take().expect("stderr"));
    let listening: serde_json::Value =
        serde_json::from_str(&log.wait_for("\"listening\"", WAIT)).expect("a JSON log line");
    let addr: SocketAddr = listening["address"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {listening}"));

    // The log says what is wrong, and where.
    let line = log.wait_for("outbox unusable", WAIT);
    assert!(line.contains("\"level\":\"error\""), "{line}");
    assert!(
        line.contains(&file.display().to_string()),
        "the error names the path: {line}"
    );

    // The daemon runs on: rules still fire and are served.
    let alert = firing(addr).await;
    assert_eq!(alert["labels"]["severity"], "warning", "{alert}");
    let m = get(addr, "/metrics", &[]).await;
    assert_eq!(m.status, 200);
    assert_eq!(
        sample(&m.body, "gpumem_state_dir_writable", &[]),
        Some(0.0),
        "{}",
        m.body
    );
    assert_eq!(
        sample(
            &m.body,
            "gpumem_alerts",
            &[&format!("alertname=\"{RULE}\""), "alertstate=\"firing\""]
        ),
        Some(1.0)
    );
    assert!(
        sample(
            &m.body,
            "gpumem_notification_outbox_write_errors_total",
            &["notifier=\"webhook\""]
        )
        .is_some_and(|n| n > 0.0),
        "{}",
        m.body
    );
    assert_eq!(get(addr, "/-/healthy", &[]).await.status, 200);
    // Without an outbox notifications still go out, from memory.
    wait_until(WAIT, "the webhook to be called", || async {
        (received.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    // Space is freed: the probe sees it.
    std::fs::remove_file(&file).expect("unblock the state dir");
    wait_until(WAIT, "gpumem_state_dir_writable 1", || async {
        let m = get(addr, "/metrics", &[]).await;
        (sample(&m.body, "gpumem_state_dir_writable", &[]) == Some(1.0)).then_some(())
    })
    .await;
    assert!(
        child.0.try_wait().expect("try_wait").is_none(),
        "the daemon is still running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writable_state_dir_is_exported_and_notifications_flow() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (sink, received) = http_sink();
    let cfg = Config::from_toml(&config_text(&tmp.path().join("state"), sink), "test", false)
        .unwrap_or_else(|e| panic!("{e}"));
    let src = SimulatedSource::new(
        Scenario::resolve("default").expect("built-in scenario"),
        Duration::from_millis(100),
        1_700_000_000.0,
    );
    let app = spawn_app(cfg, Box::new(src)).await;
    firing(app.addr).await;
    let m = app.get("/metrics").await;
    assert_eq!(
        sample(&m.body, "gpumem_state_dir_writable", &[]),
        Some(1.0),
        "{}",
        m.body
    );
    wait_until(WAIT, "the webhook to be called", || async {
        (received.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    app.stop().await.expect("clean stop");
}
