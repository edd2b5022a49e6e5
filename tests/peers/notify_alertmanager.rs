//! The Alertmanager notifier against a real Alertmanager (Debian package
//! `prometheus-alertmanager`, which CI installs): alerts arrive with our
//! fingerprint, are re-sent, resolve with their endsAt, a dead URL does not
//! hold up a live one, and nothing is lost when Alertmanager is down across a
//! daemon restart. Waits are polls on conditions with deadlines.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::alertmanager::{Alertmanager, free_port, wait_for};

use gpumemd::act::notify::{
    AlertPayload, AlertStatus, AlertmanagerConfig, NotifierStats, Notifiers, NotifyConfig, fingerprint,
};
use serde_json::Value;
use tokio::sync::watch;

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

fn alert(name: &str, status: AlertStatus) -> AlertPayload {
    AlertPayload {
        labels: BTreeMap::from([
            ("alertname".into(), name.into()),
            ("instance".into(), "node1:9947".into()),
            ("uuid".into(), "GPU-0".into()),
        ]),
        annotations: BTreeMap::from([("summary".into(), format!("{name} in a test"))]),
        status,
        starts_at: now() - 30.0,
        ends_at: (status == AlertStatus::Resolved).then(now),
        value: Some(1.0),
        generator_url: "http://node1:9947/".into(),
    }
}

fn config(urls: &[String], resend: Duration) -> NotifyConfig {
    NotifyConfig {
        alertmanager: Some(AlertmanagerConfig {
            urls: urls.to_vec(),
            resend,
            timeout: Duration::from_secs(2),
            ..AlertmanagerConfig::default()
        }),
        webhook: None,
    }
}

fn stats(n: &Notifiers) -> NotifierStats {
    n.stats()
        .into_iter()
        .find(|s| s.notifier == "alertmanager")
        .expect("stats")
}

fn rfc3339_secs(v: &Value) -> f64 {
    let text = v.as_str().expect("timestamp string");
    let t = humantime::parse_rfc3339_weak(text.trim_end_matches('Z')).expect("rfc3339");
    t.duration_since(UNIX_EPOCH).expect("after epoch").as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs prometheus-alertmanager; CI runs them with --include-ignored"]
async fn alerts_arrive_with_our_fingerprint_and_are_resent() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let _am = Alertmanager::start(port, &tmp.path().join("am")).await;
    let (_stop_tx, stop) = watch::channel(false);

    // A dead URL first: it must not hold up the live one.
    let urls = [
        format!("http://127.0.0.1:{}", free_port()),
        format!("http://127.0.0.1:{port}/"),
    ];
    let n = Notifiers::start(&config(&urls, Duration::from_secs(1)), &tmp.path().join("state"), stop).expect("start");
    let x = alert("GpuMemoryHigh", AlertStatus::Firing);
    n.submit(std::slice::from_ref(&x), std::slice::from_ref(&x));
    let seen = wait_for(port, "the firing alert", Duration::from_secs(10), |a| {
        a.contains_key("GpuMemoryHigh")
    })
    .await;
    let got = &seen["GpuMemoryHigh"];
    assert_eq!(got["labels"], serde_json::to_value(&x.labels).expect("labels"));
    assert_eq!(got["annotations"]["summary"], "GpuMemoryHigh in a test");
    assert_eq!(
        got["fingerprint"],
        fingerprint(&x.labels),
        "our fingerprint is Alertmanager's"
    );
    let ends_in = rfc3339_secs(&got["endsAt"]) - now();
    assert!(
        ends_in > 0.0 && ends_in <= 4.5,
        "firing endsAt is 4 x resend ahead, got {ends_in}s"
    );

    let first_update = got["updatedAt"].clone();
    wait_for(port, "a resend", Duration::from_secs(10), |a| {
        a.get("GpuMemoryHigh").is_some_and(|g| g["updatedAt"] != first_update)
    })
    .await;
    let s = stats(&n);
    assert!(
        s.sent_ok >= 2 && s.failed >= 1 && s.queue_length >= 1,
        "dead URL keeps its queue: {s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs prometheus-alertmanager; CI runs them with --include-ignored"]
async fn resolved_alerts_leave_and_unseen_firing_ones_go_out_at_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let _am = Alertmanager::start(port, &tmp.path().join("am")).await;
    let (_stop_tx, stop) = watch::channel(false);
    // A long resend: only our resolve can make the alert leave before it.
    let cfg = config(&[format!("http://127.0.0.1:{port}")], Duration::from_secs(3600));
    let n = Notifiers::start(&cfg, &tmp.path().join("state"), stop).expect("start");
    let y = alert("ProcessLeak", AlertStatus::Firing);
    n.submit(std::slice::from_ref(&y), std::slice::from_ref(&y));
    let seen = wait_for(port, "the second alert", Duration::from_secs(10), |a| {
        a.contains_key("ProcessLeak")
    })
    .await;
    let ends_in = rfc3339_secs(&seen["ProcessLeak"]["endsAt"]) - now();
    assert!(
        ends_in > 3.0 * 3600.0 && ends_in <= 4.0 * 3600.0,
        "endsAt is 4 x resend ahead, got {ends_in}s"
    );
    let mut resolved = y.clone();
    resolved.status = AlertStatus::Resolved;
    resolved.ends_at = Some(now());
    n.submit(&[resolved], &[]);
    wait_for(
        port,
        "the resolved alert to leave the active list",
        Duration::from_secs(10),
        |a| !a.contains_key("ProcessLeak"),
    )
    .await;
    // A firing alert that is no transition but new to this process (the rule
    // engine's first evaluation after a restart) goes out at once.
    let z = alert("ZombieHolder", AlertStatus::Firing);
    n.submit(&[], std::slice::from_ref(&z));
    wait_for(port, "the firing-set-only alert", Duration::from_secs(10), |a| {
        a.contains_key("ZombieHolder")
    })
    .await;
    // Alertmanager lists the alert as soon as it has the POST; the sender
    // counts it once it has read the answer, a moment later.
    common::wait_true(Duration::from_secs(5), "three sends counted, none queued", || {
        let s = stats(&n);
        (s.sent_ok, s.failed, s.dropped, s.queue_length) == (3, 0, 0, 0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs prometheus-alertmanager; CI runs them with --include-ignored"]
async fn nothing_is_lost_when_alertmanager_is_down_across_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let state = tmp.path().join("state");
    let cfg = config(&[format!("http://127.0.0.1:{port}")], Duration::from_secs(10));
    let (_stop_tx, stop) = watch::channel(false);

    // Up once, so the test also covers a receiver going away.
    let am = Alertmanager::start(port, &tmp.path().join("am1")).await;
    drop(am);
    let first = Notifiers::start(&cfg, &state, stop.clone()).expect("start");
    let names: Vec<String> = (0..5).map(|i| format!("Lost{i}")).collect();
    let fired: Vec<AlertPayload> = names.iter().map(|n| alert(n, AlertStatus::Firing)).collect();
    first.submit(&fired, &fired);
    common::wait_true(
        Duration::from_secs(10),
        "a failed attempt against a stopped Alertmanager",
        || stats(&first).failed > 0,
    )
    .await;
    assert_eq!(stats(&first).queue_length, 5);
    drop(first); // the daemon "restarts" before Alertmanager is back

    let second = Notifiers::start(&cfg, &state, stop).expect("restart");
    assert_eq!(
        stats(&second).queue_length,
        5,
        "the new run loads what the old one left"
    );
    let _am = Alertmanager::start(port, &tmp.path().join("am2")).await;
    wait_for(port, "every alert", Duration::from_secs(30), |a| {
        names.iter().all(|n| a.contains_key(n))
    })
    .await;
    common::wait_true(Duration::from_secs(5), "an empty outbox", || {
        stats(&second).queue_length == 0
    })
    .await;
    let s = stats(&second);
    assert!(s.sent_ok >= 5 && s.dropped == 0, "{s:?}");
}
