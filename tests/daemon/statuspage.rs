//! The status page's data, as the page fetches it: `GET /api/v1/summary`
//! and `/api/v1/history?processes=false` on a live demo daemon, `/runbook`
//! and the page itself; and one refresh's bytes at the `large` scale
//! (64 GPUs x 1000 processes, an alert for every process), which must stay
//! under 200 KB. Chromium drawing it is `.ci/statuspage-check.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{spawn_app, test_config, wait_until};
use gpumemd::act::alerts::AlertsView;
use gpumemd::app::config::status_page::PageLinks;
use gpumemd::collect::history::{History, ViewOptions};
use gpumemd::collect::pipeline::Pipeline;
use gpumemd::collect::source::GpuSource;
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;
use gpumemd::data::snapshot::{PollOutcome, PollStats, Snapshot};
use gpumemd::judge::rules::eval::{Alert, Annotations, State};
use gpumemd::serve::statuspage;
use serde_json::Value;

/// What the issue allows one refresh of the page to download.
const REFRESH_BUDGET: usize = 200 * 1024;
/// The points the page asks for on a full history load.
const PAGE_POINTS: usize = 40;

fn large_snapshot() -> Snapshot {
    let cfg = test_config("1s");
    let mut src = SimulatedSource::new(Scenario::resolve("large").unwrap(), Duration::from_secs(1), 1.7e9);
    let mut pipeline = Pipeline::for_source(&cfg.processes, &src);
    let raw = src.poll(true).unwrap();
    let outcome = PollOutcome {
        seq: 1,
        timestamp: 1.7e9,
        monotonic: 0.0,
        nvml: Ok(pipeline.build(raw, 1.7e9)),
    };
    Snapshot::of_poll(outcome, Some("large".into()), PollStats::default())
}

/// An alert for every process: worse than the demo's 12,808.
fn alert_storm(s: &Snapshot) -> AlertsView {
    let alerts = s
        .devices
        .iter()
        .flat_map(|d| d.processes.iter().map(move |p| (d, p)))
        .enumerate()
        .map(|(i, (d, p))| Alert {
            rule: if i % 2 == 0 {
                "GpuIdleHolder"
            } else {
                "GpuMemoryLeakSuspected"
            }
            .into(),
            labels: BTreeMap::from([
                ("severity".into(), "warning".into()),
                ("uuid".into(), d.uuid.as_str().into()),
                ("pid".into(), p.pid.to_string().into()),
                ("comm".into(), p.comm.clone()),
            ]),
            notes: Annotations::fixed(BTreeMap::from([(
                "summary".into(),
                format!("pid {} holds memory", p.pid),
            )])),
            state: State::Firing,
            active_at: 1.7e9,
            fired_at: Some(1.7e9),
            resolved_at: None,
            value: 1.0,
            since_mono: 0.0,
            targets: Vec::new(),
            action: None,
        })
        .collect();
    AlertsView {
        alerts,
        transitions: Vec::new(),
        rules: vec!["GpuIdleHolder".into(), "GpuMemoryLeakSuspected".into()],
    }
}

#[test]
fn one_refresh_at_the_large_scale_stays_under_200_kb() {
    let snap = large_snapshot();
    assert_eq!(snap.devices.len(), 64);
    let alerts = alert_storm(&snap);
    assert_eq!(alerts.alerts.len(), 64_000);
    // A full window of history (more points than the page asks for).
    let mut history = History::new(900, 50);
    for seq in 1..=(PAGE_POINTS as u64 + 20) {
        let mut s = snap.clone();
        s.seq = seq;
        s.timestamp = 1.7e9 + seq as f64;
        history.record(&s);
    }
    let links = PageLinks::default();
    let summary = statuspage::summarize(&snap, &alerts, &links, statuspage::default_top(64), None);
    let summary = serde_json::to_vec(&summary).unwrap();
    let full = ViewOptions {
        points: Some(PAGE_POINTS),
        processes: false,
        ..ViewOptions::default()
    };
    let full = serde_json::to_vec(&history.view_with(&full)).unwrap();
    let since = ViewOptions {
        since: Some(1.7e9 + (PAGE_POINTS + 18) as f64),
        processes: false,
        ..ViewOptions::default()
    };
    let incremental = serde_json::to_vec(&history.view_with(&since)).unwrap();
    let snapshot = serde_json::to_vec(&snap).unwrap().len();
    eprintln!(
        "large: summary {} B, history (first load, {PAGE_POINTS} points) {} B, history (2 new points) {} B; \
         the whole snapshot is {snapshot} B",
        summary.len(),
        full.len(),
        incremental.len()
    );
    assert!(
        summary.len() + full.len() < REFRESH_BUDGET,
        "first load: {} + {}",
        summary.len(),
        full.len()
    );
    assert!(summary.len() + incremental.len() < REFRESH_BUDGET / 2);
    assert!(snapshot > 20 * REFRESH_BUDGET, "the budget is a real cut: {snapshot}");
    let v: Value = serde_json::from_slice(&summary).unwrap();
    assert_eq!(v["alerts"]["firing"], 64_000);
    assert_eq!(v["alerts"]["groups"].as_array().unwrap().len(), 2, "grouped by rule");
    assert_eq!(v["devices"][0]["process_count"], 1000);
    assert_eq!(v["devices"][0]["processes"].as_array().unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_reads_summary_history_and_runbook_from_the_daemon() {
    let src = SimulatedSource::new(Scenario::resolve("default").unwrap(), Duration::from_millis(50), 1.7e9);
    let app = spawn_app(test_config("50ms"), Box::new(src)).await;
    let summary: Value = wait_until(Duration::from_secs(20), "a summary with history", || async {
        let h: Value = serde_json::from_str(&app.get("/api/v1/history?processes=false").await.body).ok()?;
        if h["timestamps"].as_array()?.len() < 5 {
            return None;
        }
        serde_json::from_str(&app.get("/api/v1/summary").await.body).ok()
    })
    .await;
    let devices = summary["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(summary["totals"]["devices"], 2);
    assert!(devices[0]["holders"]["live"].as_u64().unwrap() > 0, "{summary}");
    assert_eq!(summary["grafana_url"], "");
    assert_eq!(summary["metrics_path"], "/metrics", "the page's metrics link");
    assert_eq!(summary["runbook_url"], "/runbook", "the runbook this daemon serves");

    let top1: Value = serde_json::from_str(&app.get("/api/v1/summary?top=1").await.body).unwrap();
    for d in top1["devices"].as_array().unwrap() {
        assert!(d["processes"].as_array().unwrap().len() <= 1, "{d}");
        assert!(d["process_count"].as_u64().unwrap() >= 1);
    }
    let uuid = devices[1]["uuid"].as_str().unwrap();
    let one: Value = serde_json::from_str(&app.get(&format!("/api/v1/summary?gpu={uuid}")).await.body).unwrap();
    assert_eq!(one["devices"].as_array().unwrap().len(), 1);
    assert_eq!(app.get("/api/v1/summary?top=many").await.status, 400);
    assert_eq!(app.get("/api/v1/summary?colour=1").await.status, 400);

    let h: Value = serde_json::from_str(&app.get("/api/v1/history?processes=false&points=3").await.body).unwrap();
    assert_eq!(h["timestamps"].as_array().unwrap().len(), 3);
    assert!(h["processes"].as_array().unwrap().is_empty());
    assert_eq!(h["devices"][0]["used_bytes"].as_array().unwrap().len(), 3);
    let with: Value = serde_json::from_str(&app.get("/api/v1/history?points=3").await.body).unwrap();
    assert!(
        !with["processes"].as_array().unwrap().is_empty(),
        "processes by default"
    );

    let page = app.get("/").await;
    assert!(page.body.contains("/api/v1/summary") && !page.body.contains("getJSON(\"/api/v1/snapshot\")"));
    let runbook = app.get("/runbook").await;
    assert_eq!(runbook.status, 200);
    assert!(
        runbook.body.contains("<h2 id=\"gpumemoryleaksuspected\">"),
        "{}",
        &runbook.body[..200]
    );
    app.stop().await.unwrap();
}

/// The page is served by the daemon alone: no script, style, font or image
/// from anywhere else (air-gapped nodes, and no third party sees who looks).
#[test]
fn the_page_loads_no_external_assets() {
    let page = include_str!("../../src/serve/http/status_page.html");
    assert!(page.len() > 1000 && page.contains("<script"), "the page itself");
    // The SVG namespace is an identifier, never fetched.
    let without_ns = page.replace("\"http://www.w3.org/2000/svg\"", "");
    for needle in [
        "http://",
        "https://",
        "//cdn",
        "@import",
        "url(",
        "src=",
        "<link rel=\"stylesheet",
    ] {
        assert!(!without_ns.contains(needle), "the page references `{needle}`");
    }
    assert!(
        page.contains("<link rel=\"icon\" href=\"data:,\">"),
        "no favicon fetch either"
    );
}
