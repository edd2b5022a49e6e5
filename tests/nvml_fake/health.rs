//! Memory health through the real NVML code path (`health.toml`): every
//! health family with the stand-in's values, parts a GPU does not support
//! absent (not 0), ECC off and a single unsupported counter, a failed
//! remap, an Xid event that arrives between polls counted once and listed
//! in the snapshot and `/api/v1/events`, and a poll that never waits on
//! the event set.

use super::harness::*;
use crate::common::wait_until;

const HOPPER: &str = "GPU-11e0a1b2-c3d4-4e5f-8a6b-7c8d9e0f1a2b";
const SILENT: &str = "GPU-22e0a1b2-c3d4-4e5f-8a6b-7c8d9e0f1a2b";
const OLD: &str = "GPU-33e0a1b2-c3d4-4e5f-8a6b-7c8d9e0f1a2b";
const ECC_OFF: &str = "GPU-44e0a1b2-c3d4-4e5f-8a6b-7c8d9e0f1a2b";

const HEALTH_FAMILIES: &[&str] = &[
    "gpumem_device_ecc_enabled",
    "gpumem_device_ecc_errors_total",
    "gpumem_device_remapped_rows",
    "gpumem_device_row_remap_pending",
    "gpumem_device_row_remap_failed",
    "gpumem_device_retired_pages",
    "gpumem_device_retired_pages_pending",
    "gpumem_device_memory_temperature_celsius",
    "gpumem_device_xid_errors_total",
];

/// The health samples of one device.
fn health_series<'a>(body: &'a str, uuid: &str) -> Vec<&'a str> {
    series_of(body, uuid)
        .into_iter()
        .filter(|l| HEALTH_FAMILIES.iter().any(|f| lines_of(l, f).len() == 1))
        .collect()
}

/// Waits for a poll at or after `poll` and returns its exposition.
async fn metrics_from(d: &Daemon, poll: u64) -> String {
    wait_until(WAIT, "a later poll", || async {
        let body = d.metrics().await;
        (value(&body, "gpumem_polls_total", &[]) >= poll as f64).then_some(body)
    })
    .await
}

#[tokio::test]
async fn every_health_family_with_the_drivers_values() {
    let d = Daemon::scenario("health.toml", "interval = \"300ms\"");
    d.ready().await;
    let early = d.metrics().await;
    let line = |m: &str, labels: &str, v: u64| format!("{m}{{uuid=\"{HOPPER}\"{labels}}} {v}");
    // Before poll 3 the counters are still 0 (a slow start may miss it).
    if value(&early, "gpumem_polls_total", &[]) <= 2.0 {
        assert_lines(
            &early,
            &[
                line(
                    "gpumem_device_ecc_errors_total",
                    ",severity=\"corrected\",counter=\"volatile\"",
                    0,
                ),
                line("gpumem_device_row_remap_pending", "", 0),
                line("gpumem_device_memory_temperature_celsius", "", 41),
            ],
        );
    }
    let body = metrics_from(&d, 6).await;
    assert_lines(
        &body,
        &[
            line("gpumem_device_ecc_enabled", ",mode=\"current\"", 1),
            line("gpumem_device_ecc_enabled", ",mode=\"pending\"", 1),
            line(
                "gpumem_device_ecc_errors_total",
                ",severity=\"corrected\",counter=\"volatile\"",
                3,
            ),
            line(
                "gpumem_device_ecc_errors_total",
                ",severity=\"corrected\",counter=\"aggregate\"",
                11,
            ),
            line(
                "gpumem_device_ecc_errors_total",
                ",severity=\"uncorrected\",counter=\"volatile\"",
                1,
            ),
            line("gpumem_device_remapped_rows", ",severity=\"correctable\"", 0),
            line("gpumem_device_remapped_rows", ",severity=\"uncorrectable\"", 1),
            line("gpumem_device_row_remap_pending", "", 1),
            line("gpumem_device_row_remap_failed", "", 0),
            line("gpumem_device_memory_temperature_celsius", "", 44),
            line("gpumem_device_xid_errors_total", ",xid=\"48\"", 1),
            line("gpumem_device_xid_errors_total", ",xid=\"95\"", 0),
            format!("gpumem_device_retired_pages{{uuid=\"{OLD}\",cause=\"single_bit_ecc\"}} 2"),
            format!("gpumem_device_retired_pages{{uuid=\"{OLD}\",cause=\"double_bit_ecc\"}} 0"),
            format!("gpumem_device_retired_pages_pending{{uuid=\"{OLD}\"}} 1"),
            format!("gpumem_device_row_remap_failed{{uuid=\"{ECC_OFF}\"}} 1"),
            // Re-read every poll: the row remapped at poll 3 shows...
            format!("gpumem_device_remapped_rows{{uuid=\"{ECC_OFF}\",severity=\"correctable\"}} 3"),
            // ...while the ECC mode, turned pending-on at poll 3, is the
            // reading of poll 1 for 5 minutes (ECC_MODE_EVERY).
            format!("gpumem_device_ecc_enabled{{uuid=\"{ECC_OFF}\",mode=\"pending\"}} 0"),
        ],
    );
    let snap = d.snapshot().await;
    let errors = &device(&snap, HOPPER).expect("GPU 0")["errors"];
    assert_eq!(
        errors.as_array().map(Vec::len),
        Some(0),
        "NOT_SUPPORTED is not an error: {errors}"
    );
}

#[tokio::test]
async fn unsupported_parts_are_absent_not_zero() {
    let d = Daemon::scenario("health.toml", "interval = \"100ms\"");
    let body = metrics_from(&d, 3).await;
    // GPU 1 supports none of the reads: only its Xid counters (events work).
    let silent = health_series(&body, SILENT);
    assert!(!silent.is_empty());
    assert!(
        silent.iter().all(|l| l.starts_with("gpumem_device_xid_errors_total{")),
        "{silent:#?}"
    );
    // Hopper: no retired pages. The old GPU: no remapping, temperature or Xid.
    let hopper = health_series(&body, HOPPER);
    assert!(
        !hopper.iter().any(|l| l.starts_with("gpumem_device_retired_pages")),
        "{hopper:#?}"
    );
    let old = health_series(&body, OLD);
    for absent in [
        "gpumem_device_remapped_rows",
        "gpumem_device_row_remap_",
        "gpumem_device_memory_temperature_celsius",
        "gpumem_device_xid_errors_total",
    ] {
        assert!(!old.iter().any(|l| l.starts_with(absent)), "{absent} on {old:#?}");
    }
    // One ECC counter NOT_SUPPORTED: that series is absent, the others are not.
    let ecc = |uuid: &str, sev: &str, counter: &str| {
        format!("gpumem_device_ecc_errors_total{{uuid=\"{uuid}\",severity=\"{sev}\",counter=\"{counter}\"}}")
    };
    assert!(
        old.iter().any(|l| l.starts_with(&ecc(OLD, "corrected", "volatile"))),
        "{old:#?}"
    );
    assert!(
        !old.iter().any(|l| l.starts_with(&ecc(OLD, "corrected", "aggregate"))),
        "{old:#?}"
    );
    // ECC off: the mode says 0 and no counter is exported, not even as 0.
    let off = health_series(&body, ECC_OFF);
    assert!(
        off.contains(&format!("gpumem_device_ecc_enabled{{uuid=\"{ECC_OFF}\",mode=\"current\"}} 0").as_str()),
        "{off:#?}"
    );
    assert!(
        !off.iter().any(|l| l.starts_with("gpumem_device_ecc_errors_total")),
        "{off:#?}"
    );
    let snap = d.snapshot().await;
    let old = device(&snap, OLD).expect("GPU 2");
    assert_eq!(old["health"]["remap"], serde_json::Value::Null);
    assert_eq!(old["health"]["xid_watched"], false);
    // Nor is an unsupported part an error worth reporting.
    assert_eq!(old["errors"].as_array().map(Vec::len), Some(0), "{}", old["errors"]);
}

#[tokio::test]
async fn an_xid_between_polls_is_counted_once_and_listed() {
    let d = Daemon::scenario("health.toml", "interval = \"100ms\"");
    let xid = |body: &str| value(body, "gpumem_device_xid_errors_total", &[HOPPER, "xid=\"48\""]);
    let before = metrics_from(&d, 2).await;
    let polls = value(&before, "gpumem_polls_total", &[]);
    if polls < 4.0 {
        assert_eq!(xid(&before), 0.0, "not before it arrives");
    }
    // Many polls after it arrived, it is still one event.
    let body = metrics_from(&d, 10).await;
    assert_eq!(xid(&body), 1.0);
    let snap = d.snapshot().await;
    let health = &device(&snap, HOPPER).expect("GPU 0")["health"];
    assert_eq!(health["xid_counts"]["48"], 1, "{health}");
    let recent = health["xid_recent"].as_array().expect("recent events");
    assert_eq!(recent.len(), 1, "{health}");
    assert_eq!(recent[0]["xid"], 48);
    assert!(recent[0]["time"].as_f64().is_some_and(|t| t > 1.0e9), "{health}");
    // Another GPU saw nothing.
    assert_eq!(
        value(&body, "gpumem_device_xid_errors_total", &[SILENT, "xid=\"48\""]),
        0.0
    );
    // The shared event list has it once, with its kind and the poll's time.
    let v: serde_json::Value = serde_json::from_str(&d.get("/api/v1/events").await.body).expect("events JSON");
    let xids: Vec<&serde_json::Value> = v["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "xid")
        .collect();
    assert_eq!(xids.len(), 1, "{v}");
    assert_eq!(
        (
            xids[0]["uuid"].as_str(),
            xids[0]["xid"].as_u64(),
            xids[0]["memory_related"].as_bool()
        ),
        (Some(HOPPER), Some(48), Some(true))
    );
    assert_eq!(xids[0]["time"], recent[0]["time"], "one time for one event");
}

#[tokio::test]
async fn a_poll_never_waits_on_the_event_set() {
    // The stand-in's wait sleeps for its timeout (up to 2 s) when nothing is
    // due, as NVML does: a daemon that waited would show slow polls here.
    let d = Daemon::scenario("health.toml", "interval = \"100ms\"");
    // A wait of T would make every poll at least T long (or time out at
    // 80 ms), so the fastest poll seen tells; one slow poll on a loaded
    // machine does not. (A poll given up on reports no source time: the
    // whole poll's duration is what is measured.)
    let mut fastest = f64::INFINITY;
    let mut seen = 0.0;
    while seen < 6.0 {
        let body = metrics_from(&d, seen as u64 + 1).await;
        seen = value(&body, "gpumem_polls_total", &[]);
        fastest = fastest.min(value(&body, "gpumem_poll_duration_seconds", &[]));
    }
    assert!(fastest < 0.05, "the fastest poll took {fastest} s");
}

#[tokio::test]
async fn the_health_section_throttles_or_turns_the_reads_off() {
    // Read once an hour: the first reading (poll 1: nothing yet) is served
    // while the stand-in's counters rise at polls 3 and 5.
    let slow = Daemon::start(Opts {
        scenario: Some("health.toml"),
        extra: "[health]\ninterval = \"1h\"",
        ..Opts::default()
    });
    let body = metrics_from(&slow, 7).await;
    let corrected =
        format!("gpumem_device_ecc_errors_total{{uuid=\"{HOPPER}\",severity=\"corrected\",counter=\"volatile\"}} 0");
    assert_lines(&body, &[corrected]);
    // Events are not throttled with the reads.
    assert_eq!(
        value(&body, "gpumem_device_xid_errors_total", &[HOPPER, "xid=\"48\""]),
        1.0
    );

    let off = Daemon::start(Opts {
        scenario: Some("health.toml"),
        extra: "[health]\nenabled = false\nxid_events = false",
        ..Opts::default()
    });
    let body = metrics_from(&off, 5).await;
    for uuid in [HOPPER, SILENT, OLD] {
        assert_eq!(health_series(&body, uuid), Vec::<&str>::new(), "{uuid}");
    }
    let snap = off.snapshot().await;
    assert_eq!(device(&snap, HOPPER).expect("GPU 0").get("health"), None);
}
