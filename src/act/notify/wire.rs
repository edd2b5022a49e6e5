//! The JSON bodies on the wire: Alertmanager's API v2 alert list and the
//! webhook message (schema in docs/notifications.md). Pure functions of their
//! inputs and `now`, so golden tests pin them. Must not do I/O.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use super::{AlertPayload, AlertStatus, fingerprint};

/// Version of the webhook body schema; bumped on incompatible changes.
pub const WEBHOOK_SCHEMA_VERSION: &str = "1";

#[derive(Serialize)]
struct AmAlert<'a> {
    labels: BTreeMap<&'a str, &'a str>,
    annotations: &'a BTreeMap<String, String>,
    #[serde(rename = "startsAt")]
    starts_at: String,
    #[serde(rename = "endsAt")]
    ends_at: String,
    #[serde(rename = "generatorURL", skip_serializing_if = "str::is_empty")]
    generator_url: &'a str,
}

/// The body of `POST /api/v2/alerts`. A firing alert gets `endsAt = now +
/// 4 x resend`, as Prometheus sends: Alertmanager then resolves it by itself
/// if we stop resending (daemon dead). A resolved one gets its own `endsAt`.
pub(crate) fn alertmanager_body(alerts: &[AlertPayload], now: f64, resend: Duration) -> Vec<u8> {
    let list: Vec<AmAlert<'_>> = alerts
        .iter()
        .map(|a| {
            let ends = match a.status {
                AlertStatus::Firing => now + 4.0 * resend.as_secs_f64(),
                AlertStatus::Resolved => a.ends_at.unwrap_or(now),
            };
            // Alertmanager rejects the whole batch (400) for an end before the
            // start, which a clock step could produce.
            let ends = if ends < a.starts_at { a.starts_at } else { ends };
            AmAlert {
                // Empty means absent in Prometheus' model; Alertmanager
                // would store the label otherwise and change the identity.
                labels: a
                    .labels
                    .iter()
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect(),
                annotations: &a.annotations,
                starts_at: rfc3339(a.starts_at, now),
                ends_at: rfc3339(ends, now),
                generator_url: &a.generator_url,
            }
        })
        .collect();
    to_json(&list)
}

#[derive(Serialize)]
struct WebhookBody<'a> {
    version: &'static str,
    id: String,
    status: &'static str,
    #[serde(rename = "sentAt")]
    sent_at: String,
    alerts: Vec<WebhookAlert<'a>>,
}

#[derive(Serialize)]
struct WebhookAlert<'a> {
    status: &'static str,
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
    #[serde(rename = "startsAt")]
    starts_at: String,
    #[serde(rename = "endsAt")]
    ends_at: Option<String>,
    value: Option<f64>,
    fingerprint: String,
    #[serde(rename = "generatorURL")]
    generator_url: &'a str,
}

/// One webhook message: the transitions of one evaluation, in order. The
/// group is `firing` while any alert in it fires.
pub(crate) fn webhook_body(id: u64, alerts: &[AlertPayload], now: f64) -> Vec<u8> {
    let firing = alerts.iter().any(|a| a.status == AlertStatus::Firing);
    let body = WebhookBody {
        version: WEBHOOK_SCHEMA_VERSION,
        id: id.to_string(),
        status: if firing { "firing" } else { "resolved" },
        sent_at: rfc3339(now, now),
        alerts: alerts
            .iter()
            .map(|a| WebhookAlert {
                status: a.status.as_str(),
                labels: &a.labels,
                annotations: &a.annotations,
                starts_at: rfc3339(a.starts_at, now),
                ends_at: a.ends_at.map(|e| rfc3339(e, now)),
                value: a.value.filter(|v| v.is_finite()),
                fingerprint: fingerprint(&a.labels),
                generator_url: &a.generator_url,
            })
            .collect(),
    };
    to_json(&body)
}

fn to_json<T: Serialize>(v: &T) -> Vec<u8> {
    // Maps of strings, strings and finite floats cannot fail to serialize;
    // an empty array keeps the signature of this function honest anyway.
    serde_json::to_vec(v).unwrap_or_else(|_| b"[]".to_vec())
}

/// Unix seconds as RFC 3339 UTC with milliseconds. Values a formatter cannot
/// print (NaN, before 1970, past year 9999) become `fallback`, then the epoch.
pub(crate) fn rfc3339(unix: f64, fallback: f64) -> String {
    const MAX: f64 = 253_402_300_799.0; // 9999-12-31T23:59:59Z
    let secs = if (0.0..=MAX).contains(&unix) {
        unix
    } else if (0.0..=MAX).contains(&fallback) {
        fallback
    } else {
        0.0
    };
    let t = UNIX_EPOCH + Duration::from_secs_f64(secs);
    humantime::format_rfc3339_millis(t).to_string()
}
