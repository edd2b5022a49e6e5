//! Golden wire shapes and the signature vector.

use std::time::Duration;

use super::super::AlertStatus;
use super::super::webhook::signature;
use super::super::wire::{alertmanager_body, rfc3339, webhook_body};
use super::alert;

const NOW: f64 = 1_700_000_100.0;

fn text(b: Vec<u8>) -> String {
    String::from_utf8(b).expect("utf-8")
}

#[test]
fn alertmanager_firing_alert_ends_four_resends_ahead() {
    let body = text(alertmanager_body(
        &[alert("GpuMemoryHigh", AlertStatus::Firing)],
        NOW,
        Duration::from_secs(60),
    ));
    let golden = concat!(
        r#"[{"labels":{"alertname":"GpuMemoryHigh","instance":"node1:9947","uuid":"GPU-1"},"#,
        r#""annotations":{"summary":"GPU memory high"},"#,
        r#""startsAt":"2023-11-14T22:13:20.000Z","endsAt":"2023-11-14T22:19:00.000Z","#,
        r#""generatorURL":"http://node1:9947/api/v1/alerts"}]"#
    );
    assert_eq!(body, golden);
}

#[test]
fn alertmanager_resolved_alert_carries_its_end() {
    let mut a = alert("GpuMemoryHigh", AlertStatus::Resolved);
    a.generator_url.clear();
    a.labels.insert("pid".into(), String::new());
    let body = text(alertmanager_body(&[a], NOW, Duration::from_secs(60)));
    let golden = concat!(
        r#"[{"labels":{"alertname":"GpuMemoryHigh","instance":"node1:9947","uuid":"GPU-1"},"#,
        r#""annotations":{"summary":"GPU memory high"},"#,
        r#""startsAt":"2023-11-14T22:13:20.000Z","endsAt":"2023-11-14T22:18:20.500Z"}]"#
    );
    assert_eq!(body, golden, "empty labels and an empty generatorURL are left out");
}

#[test]
fn alertmanager_end_never_precedes_start() {
    let mut a = alert("A", AlertStatus::Resolved);
    a.ends_at = Some(a.starts_at - 10.0);
    let body = text(alertmanager_body(&[a], NOW, Duration::from_secs(60)));
    assert!(
        body.contains(r#""startsAt":"2023-11-14T22:13:20.000Z","endsAt":"2023-11-14T22:13:20.000Z""#),
        "{body}"
    );
}

#[test]
fn webhook_body_schema() {
    let mut fired = alert("GpuMemoryHigh", AlertStatus::Firing);
    fired.value = Some(f64::NAN);
    let alerts = [fired, alert("ProcessLeak", AlertStatus::Resolved)];
    let body = text(webhook_body(1_700_000_100_000_000, &alerts, NOW));
    let golden = concat!(
        r#"{"version":"1","id":"1700000100000000","status":"firing","sentAt":"2023-11-14T22:15:00.000Z","alerts":["#,
        r#"{"status":"firing","labels":{"alertname":"GpuMemoryHigh","instance":"node1:9947","uuid":"GPU-1"},"#,
        r#""annotations":{"summary":"GPU memory high"},"startsAt":"2023-11-14T22:13:20.000Z","endsAt":null,"#,
        r#""value":null,"fingerprint":"9cc2feebb78e64e1","generatorURL":"http://node1:9947/api/v1/alerts"},"#,
        r#"{"status":"resolved","labels":{"alertname":"ProcessLeak","instance":"node1:9947","uuid":"GPU-1"},"#,
        r#""annotations":{"summary":"GPU memory high"},"startsAt":"2023-11-14T22:13:20.000Z","#,
        r#""endsAt":"2023-11-14T22:18:20.500Z","value":0.95,"fingerprint":"#
    );
    assert!(body.starts_with(golden), "{body}");
    let resolved_only = text(webhook_body(7, &alerts[1..], NOW));
    assert!(
        resolved_only.contains(r#""status":"resolved","sentAt""#),
        "{resolved_only}"
    );
}

#[test]
fn rfc3339_clamps_what_cannot_be_printed() {
    assert_eq!(rfc3339(0.0, NOW), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(f64::NAN, NOW), "2023-11-14T22:15:00.000Z");
    assert_eq!(rfc3339(-5.0, NOW), "2023-11-14T22:15:00.000Z");
    assert_eq!(rfc3339(1e300, f64::INFINITY), "1970-01-01T00:00:00.000Z");
}

#[test]
fn signature_matches_rfc4231_vector() {
    // RFC 4231 test case 2.
    assert_eq!(
        signature("Jefe", b"what do ya want for nothing?"),
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
}
