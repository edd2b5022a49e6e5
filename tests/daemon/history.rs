//! `GET /api/v1/history` on the demo fleet: bounded to `[poll] history`,
//! every series aligned to the shared timestamps, holder parts adding up
//! to used memory at every point, and the `gpu` and `since` filters.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use crate::common;

use std::time::Duration;

use common::{spawn_app, wait_until};
use gpumemd::app::config::Config;
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_bounded_aligned_and_filtered() {
    let text = "[poll]\ninterval = \"50ms\"\nhistory = \"500ms\"\n[state]\ndir = \"/nonexistent-gpumemd-test\"\n";
    let cfg = Config::from_toml(text, "test", false).unwrap();
    let src = SimulatedSource::new(
        Scenario::resolve("default").unwrap(),
        Duration::from_millis(50),
        1_700_000_000.0,
    );
    let app = spawn_app(cfg, Box::new(src)).await;
    // 500 ms at 50 ms polls is 10 points: wait until the ring has rolled over.
    let h: Value = wait_until(WAIT, "a full history window", || async {
        let r = app.get("/api/v1/history").await;
        let v: Value = serde_json::from_str(&r.body).ok()?;
        let snap: Value = serde_json::from_str(&app.get("/api/v1/snapshot").await.body).ok()?;
        (snap["seq"].as_u64()? > 15 && v["timestamps"].as_array()?.len() == 10).then_some(v)
    })
    .await;
    let times = h["timestamps"].as_array().unwrap();
    assert!(times.windows(2).all(|w| w[0].as_f64() < w[1].as_f64()), "{times:?}");
    let devices = h["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "both demo GPUs");
    for d in devices {
        let used = d["used_bytes"].as_array().unwrap();
        assert_eq!(used.len(), times.len());
        for (i, u) in used.iter().enumerate() {
            let parts: u64 = ["live", "zombie", "exited", "unattributed"]
                .iter()
                .map(|c| d["held_bytes"][c][i].as_u64().unwrap())
                .sum();
            assert_eq!(Some(parts), u.as_u64(), "holders add up at point {i} of {}", d["uuid"]);
        }
    }
    let procs = h["processes"].as_array().unwrap();
    assert!(!procs.is_empty());
    assert!(
        procs
            .iter()
            .all(|p| p["used_bytes"].as_array().unwrap().len() == times.len())
    );

    let gpu = devices[1]["uuid"].as_str().unwrap();
    // Halfway between two points: serde_json's default float parsing may be
    // one ULP off the value the server holds, so `times[6]` itself could
    // read back as not after itself.
    let since = (times[5].as_f64().unwrap() + times[6].as_f64().unwrap()) / 2.0;
    let r = app.get(&format!("/api/v1/history?gpu={gpu}&since={since}")).await;
    assert_eq!(r.status, 200);
    let f: Value = serde_json::from_str(&r.body).unwrap();
    assert!(
        f["timestamps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.as_f64().unwrap() > since)
    );
    assert_eq!(f["devices"].as_array().unwrap().len(), 1);
    assert!(f["processes"].as_array().unwrap().iter().all(|p| p["uuid"] == gpu));

    let bad = app.get("/api/v1/history?since=yesterday").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("since"), "{}", bad.body);
    app.stop().await.unwrap();
}
