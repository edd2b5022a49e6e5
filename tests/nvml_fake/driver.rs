//! The library and driver as a whole: missing, not loaded at start, upgraded
//! under the running daemon, a failing device count, and a call that hangs
//! past the poll deadline.
//! The daemon must keep serving through all of them and recover without a
//! restart.

use std::cell::Cell;
use std::time::{Duration, Instant};

use super::harness::*;
use crate::common::wait_until;

/// The body of `/-/ready` while NVML is down.
const NOT_READY: &str = "Not ready: NVML is not available\n";

/// Waits until NVML is reported down (after the first poll) and checks what
/// the daemon serves meanwhile; returns the snapshot's `nvml_error`.
async fn assert_serving_without_nvml(d: &Daemon) -> String {
    let r = wait_until(WAIT, "/-/ready saying NVML is down", || async {
        let r = d.get("/-/ready").await;
        (r.body == NOT_READY).then_some(r)
    })
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(d.get("/-/healthy").await.status, 200);
    let body = d.metrics().await;
    assert_lines(&body, &["gpumem_nvml_up 0".into(), "gpumem_poll_success 0".into()]);
    assert!(value(&body, "gpumem_poll_errors_total", &["reason=\"nvml_unavailable\""]) >= 1.0);
    assert_eq!(lines_of(&body, "gpumem_device_up"), Vec::<&str>::new());
    let snap = d.snapshot().await;
    assert_eq!(snap["nvml_up"], false);
    snap["nvml_error"].as_str().expect("nvml_error").to_string()
}

/// Exactly one log line contains `fragment`. The daemon writes the line
/// before it publishes the state the caller saw, but the thread draining its
/// stderr may not have read it yet: wait (bounded) for the first hit.
async fn assert_logged_once(d: &Daemon, fragment: &str) {
    let hits = logged(d, fragment, 1).await;
    assert_eq!(hits.len(), 1, "one log line with {fragment:?}: {hits:#?}");
}

/// The log lines containing `fragment`, once at least `n` have been read.
async fn logged(d: &Daemon, fragment: &str, n: usize) -> Vec<String> {
    wait_until(WAIT, &format!("{n} log lines with {fragment:?}"), || {
        let hits: Vec<String> = d.logs().into_iter().filter(|l| l.contains(fragment)).collect();
        std::future::ready((hits.len() >= n).then_some(hits))
    })
    .await
}

#[tokio::test]
async fn without_the_library_the_daemon_serves_with_nvml_down() {
    let d = Daemon::start(Opts {
        lib: Some("/nonexistent/libnvidia-ml.so.1"),
        ..Opts::default()
    });
    let err = assert_serving_without_nvml(&d).await;
    assert_eq!(err, "/nonexistent/libnvidia-ml.so.1 not found");
    assert_logged_once(
        &d,
        "NVML not available: /nonexistent/libnvidia-ml.so.1 not found; retrying with backoff",
    )
    .await;
    assert_eq!(lines_of(&d.metrics().await, "gpumem_driver_info"), Vec::<&str>::new());
}

#[tokio::test]
async fn driver_not_loaded_at_start_then_recovers() {
    const UUID: &str = "GPU-4d5e6f7a-8b9c-4dae-9f01-3b4c5d6e7f8a";
    let d = Daemon::scenario("driver-not-loaded.toml", "interval = \"100ms\"");
    let err = assert_serving_without_nvml(&d).await;
    assert!(
        err.ends_with("libfake_nvml.so loaded but the NVIDIA driver is not loaded"),
        "{err}"
    );
    // Attempts at 0, 1 and 3 s fail (backoff 1, 2, 4 s); the one at 7 s works.
    let body = wait_until(WAIT, "nvml_up 1", || async {
        let body = d.metrics().await;
        has_line(&body, "gpumem_nvml_up 1").then_some(body)
    })
    .await;
    let reserved = 535 * MIB;
    let used = 700 * MIB;
    let mut want = memory_lines(UUID, H100_TOTAL, used, H100_TOTAL - reserved - used, Some(reserved));
    want.extend([
        format!("gpumem_device_up{{uuid=\"{UUID}\"}} 1"),
        process_memory_line(UUID, 8100, used),
        "gpumem_driver_info{driver_version=\"550.54.15\",nvml_version=\"12.550.54.15\",cuda_version=\"12.4\"} 1".into(),
        "gpumem_poll_success 1".into(),
    ]);
    assert_lines(&body, &want);
    assert_eq!(d.get("/-/ready").await.status, 200);
    assert_logged_once(&d, "NVML not available: ").await;
    assert_logged_once(&d, "GPU source answering").await;
}

#[tokio::test]
async fn a_driver_upgrade_mid_run_reinitialises_without_a_restart() {
    const A: &str = "GPU-5e6f7a8b-9c0d-4ebf-a012-4c5d6e7f8a9b";
    const B: &str = "GPU-6f7a8b9c-0d1e-4fc0-b123-5d6e7f8a9b0c";
    let mut d = Daemon::scenario("driver-upgrade.toml", "interval = \"100ms\"");
    d.ready().await;
    let before = d.metrics().await;
    assert_lines(&before, &["gpumem_nvml_up 1".into()]);
    // Polls 4-5 LIB_RM_VERSION_MISMATCH, 6 UNINITIALIZED: each drops the
    // handle and re-initialises a backoff (1 s) later.
    let err = assert_serving_without_nvml(&d).await;
    let mismatch = "the driver went away (NVML library and kernel driver versions differ); re-initialising";
    let uninit = "the driver went away (NVML is not initialised); re-initialising";
    assert!(err == mismatch || err == uninit, "{err}");
    let after = wait_until(WAIT, "nvml_up 1 again", || async {
        let body = d.metrics().await;
        has_line(&body, "gpumem_nvml_up 1").then_some(body)
    })
    .await;
    let reserved = 535 * MIB;
    let mut want = memory_lines(A, H100_TOTAL, 9 * GIB, H100_TOTAL - reserved - 9 * GIB, Some(reserved));
    want.extend(memory_lines(B, H100_TOTAL, 0, H100_TOTAL - reserved, Some(reserved)));
    want.extend([
        format!("gpumem_device_up{{uuid=\"{A}\"}} 1"),
        format!("gpumem_device_up{{uuid=\"{B}\"}} 1"),
        process_memory_line(A, 9100, 9 * GIB),
        "gpumem_poll_success 1".into(),
    ]);
    assert_lines(&after, &want);
    // Three failed re-initialisations, at least one poll each.
    assert!(value(&after, "gpumem_poll_errors_total", &["reason=\"nvml_unavailable\""]) >= 3.0);
    assert_eq!(d.get("/-/ready").await.status, 200);
    assert!(d.running(), "no restart");
    assert_logged_once(&d, "\"listening\"").await;
    assert_logged_once(&d, &format!("NVML not available: {mismatch}; retrying")).await;
}

#[tokio::test]
async fn a_failing_device_count_is_a_counted_poll_failure() {
    const UUID: &str = "GPU-0a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d";
    let d = Daemon::scenario("count-fails.toml", "interval = \"100ms\"");
    // Polls 3-4: UNKNOWN fails the poll as a whole; poll 6: UNINITIALIZED
    // drops the handle until it is re-initialised.
    let err = assert_serving_without_nvml(&d).await;
    assert_eq!(err, "the driver went away (NVML is not initialised); re-initialising");
    let body = wait_until(WAIT, "nvml_up 1 again", || async {
        let body = d.metrics().await;
        has_line(&body, "gpumem_nvml_up 1").then_some(body)
    })
    .await;
    let reserved = 535 * MIB;
    let used = 5 * GIB;
    let mut want = memory_lines(UUID, H100_TOTAL, used, H100_TOTAL - reserved - used, Some(reserved));
    want.extend([
        format!("gpumem_device_up{{uuid=\"{UUID}\"}} 1"),
        process_memory_line(UUID, 2600, used),
        "gpumem_poll_errors_total{reason=\"failed\"} 2".into(),
        "gpumem_poll_success 1".into(),
    ]);
    assert_lines(&body, &want);
    let fragment = "\"reason\":\"failed\",\"error\":\"device count: an internal driver error occurred\"";
    assert_eq!(logged(&d, fragment, 2).await.len(), 2, "{:#?}", d.logs());
}

#[tokio::test]
async fn a_hung_call_fails_the_poll_without_stalling_http_or_stacking_polls() {
    const GPU0: &str = "GPU-7a8b9c0d-1e2f-4ad1-8234-6e7f8a9b0c1d";
    // Poll 3's memory call on GPU 0 sleeps 3 s; the deadline is 200 ms.
    let d = Daemon::scenario("hang.toml", "interval = \"250ms\"\ntimeout = \"200ms\"");
    let body = wait_until(WAIT, "a poll timeout", || async {
        let body = d.metrics().await;
        (value(&body, "gpumem_poll_errors_total", &["reason=\"timeout\""]) >= 1.0).then_some(body)
    })
    .await;
    assert_lines(
        &body,
        &[
            "gpumem_poll_errors_total{reason=\"timeout\"} 1".into(),
            "gpumem_poll_success 0".into(),
            "gpumem_polls_total 3".into(),
        ],
    );
    // While stuck: quick answers, the last data served as stale, no new
    // poll started, overruns counted. It stays stuck for ~2.8 s.
    let slowest = Cell::new(Duration::ZERO);
    let overruns = wait_until(WAIT, "overruns while stuck", || async {
        for path in ["/metrics", "/api/v1/snapshot", "/-/ready"] {
            let t = Instant::now();
            assert_eq!(d.get(path).await.status, 200, "{path}");
            slowest.set(slowest.get().max(t.elapsed()));
        }
        let body = d.metrics().await;
        if value(&body, "gpumem_poll_success", &[]) == 1.0 {
            return Some(None);
        }
        let polls = value(&body, "gpumem_polls_total", &[]);
        assert!(polls <= 4.0, "no poll stacked on the stuck one: {polls}");
        let overruns = value(&body, "gpumem_poll_overruns_total", &[]);
        (overruns >= 3.0).then_some(Some(overruns))
    })
    .await;
    assert!(overruns.is_some(), "the hang ended before 3 overruns were seen");
    let slowest = slowest.get();
    assert!(
        slowest < Duration::from_millis(250),
        "slowest answer while stuck: {slowest:?}"
    );
    let snap = d.snapshot().await;
    assert_eq!(snap["stale"], true);
    assert_eq!(snap["poll"]["success"], false);
    // The call returns after 3 s; polling resumes.
    let body = wait_until(WAIT, "polling resumed", || async {
        let body = d.metrics().await;
        (value(&body, "gpumem_poll_success", &[]) == 1.0).then_some(body)
    })
    .await;
    assert_lines(
        &body,
        &[
            format!("gpumem_device_up{{uuid=\"{GPU0}\"}} 1"),
            process_memory_line(GPU0, 1300, 2 * GIB),
            "gpumem_poll_errors_total{reason=\"timeout\"} 1".into(),
        ],
    );
    assert!(value(&body, "gpumem_poll_overruns_total", &[]) >= 3.0);
    assert_eq!(d.snapshot().await["stale"], false);
}
