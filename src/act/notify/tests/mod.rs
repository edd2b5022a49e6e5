//! Unit tests of the notify module: pure logic (fingerprints, wire shapes,
//! signatures, config checks, backoff) and the outbox against a temp dir.
//! Network delivery is covered by tests/peers/notify_webhook.rs and
//! tests/peers/notify_alertmanager.rs.

mod config;
mod open;
mod outbox;
mod wire;

use std::collections::BTreeMap;

use super::{AlertPayload, AlertStatus, fingerprint};

pub(super) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

pub(super) fn alert(name: &str, status: AlertStatus) -> AlertPayload {
    AlertPayload {
        labels: labels(&[("alertname", name), ("instance", "node1:9947"), ("uuid", "GPU-1")]),
        annotations: labels(&[("summary", "GPU memory high")]),
        status,
        starts_at: 1_700_000_000.0,
        ends_at: (status == AlertStatus::Resolved).then_some(1_700_000_300.5),
        value: Some(0.95),
        generator_url: "http://node1:9947/api/v1/alerts".into(),
    }
}

#[test]
fn fingerprint_is_prometheus_fnv1a_of_sorted_labels() {
    // Expected values computed independently (FNV-1a 64 in Python).
    let l = labels(&[
        ("uuid", "GPU-1"),
        ("alertname", "GpuMemoryHigh"),
        ("instance", "node1:9947"),
    ]);
    assert_eq!(fingerprint(&l), "9cc2feebb78e64e1");
    assert_eq!(fingerprint(&BTreeMap::new()), "cbf29ce484222325");
}

#[test]
fn fingerprint_is_stable_and_ignores_empty_values() {
    let a = labels(&[("alertname", "A")]);
    let b = labels(&[("alertname", "A"), ("pid", "")]);
    assert_eq!(fingerprint(&a), "d2c6efc389df0927");
    assert_eq!(fingerprint(&a), fingerprint(&b));
    assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
    assert_ne!(fingerprint(&a), fingerprint(&labels(&[("alertname", "B")])));
    // A name/value split must not collide with another split.
    assert_ne!(
        fingerprint(&labels(&[("ab", "c")])),
        fingerprint(&labels(&[("a", "bc")]))
    );
}

#[test]
fn alert_payload_round_trips_with_lowercase_status() {
    let a = alert("X", AlertStatus::Resolved);
    let json = serde_json::to_string(&a).expect("serialize");
    assert!(json.contains(r#""status":"resolved""#), "{json}");
    let back: AlertPayload = serde_json::from_str(&json).expect("parse");
    assert_eq!(back, a);
}

#[test]
fn backoff_grows_with_jitter_and_caps() {
    use std::time::Duration;
    let mut b = super::http::Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
    let steps = [100, 200, 400, 800, 800, 800];
    for step in steps {
        let d = b.next_delay();
        let step = Duration::from_millis(step);
        assert!(d >= step / 2 && d <= step, "{d:?} not in [{:?}, {step:?}]", step / 2);
    }
    b.reset();
    assert!(b.next_delay() <= Duration::from_millis(100));
}

#[test]
fn backoffs_started_together_differ() {
    use std::time::Duration;
    let mut a = super::http::Backoff::new(Duration::from_secs(10), Duration::from_secs(10));
    let mut b = super::http::Backoff::new(Duration::from_secs(10), Duration::from_secs(10));
    let da: Vec<_> = (0..4).map(|_| a.next_delay()).collect();
    let db: Vec<_> = (0..4).map(|_| b.next_delay()).collect();
    assert_ne!(da, db);
}

#[test]
fn urls_in_logs_lose_path_query_and_never_have_credentials() {
    use super::http::redact_url;
    assert_eq!(
        redact_url("https://hooks.example.com/services/T0/B0/SECRET?token=x"),
        "https://hooks.example.com:443"
    );
    assert_eq!(redact_url("http://am:9093"), "http://am:9093");
    assert_eq!(redact_url("not a url"), "<url>");
}

#[test]
fn start_outside_a_runtime_is_an_error_not_a_panic() {
    use super::{Notifiers, NotifyConfig, NotifyError, WebhookConfig};
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let cfg = NotifyConfig {
        alertmanager: None,
        webhook: Some(WebhookConfig {
            url: "http://127.0.0.1:9/hook".into(),
            ..WebhookConfig::default()
        }),
    };
    assert!(matches!(
        Notifiers::start(&cfg, tmp.path(), rx.clone()),
        Err(NotifyError::NoRuntime)
    ));
    let bad = NotifyConfig {
        webhook: Some(WebhookConfig::default()),
        ..cfg
    };
    match Notifiers::start(&bad, tmp.path(), rx) {
        Err(NotifyError::Config(msg)) => assert_eq!(msg.key, "notify.webhook.url", "{msg}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("started with an empty URL"),
    }
    assert!(
        !tmp.path().join("outbox").exists(),
        "nothing is created before the config is valid"
    );
}
