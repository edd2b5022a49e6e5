//! The whole alert path: the daemon (simulated fleet) evaluates a rule, and a
//! real Alertmanager receives the alert with the identifying labels, keeps
//! receiving it while it fires, and the delivery is counted in the metrics.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use crate::common;

use std::time::Duration;

use common::alertmanager::{Alertmanager, free_port, wait_for};
use common::{sample, spawn_app, wait_until};
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs prometheus-alertmanager; CI runs them with --include-ignored"]
async fn a_firing_rule_reaches_a_real_alertmanager_with_its_labels() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let _am = Alertmanager::start(port, &dir.path().join("am")).await;
    let text = format!(
        "[poll]\ninterval = \"100ms\"\n[state]\ndir = \"{state}\"\n[alerting]\ndefault_rules = false\ninstance = \"node-7\"\n\
         [notify.alertmanager]\nurls = [\"http://127.0.0.1:{port}\"]\nresend = \"1s\"\n\
         [[rule]]\nname = \"BigHolder\"\nkind = \"process_used_bytes\"\nabove = \"8GiB\"\nseverity = \"page\"\nmatch = {{ gpu = [0] }}\n\
         annotations = {{ summary = \"{{{{ comm }}}} holds {{{{ value_human }}}}\" }}\n",
        state = dir.path().join("state").display()
    );
    let cfg = gpumemd::app::config::Config::from_toml(&text, "test", false).unwrap_or_else(|e| panic!("{e}"));
    let src = SimulatedSource::new(
        Scenario::resolve("default").expect("scenario"),
        Duration::from_millis(100),
        0.0,
    );
    let app = spawn_app(cfg, Box::new(src)).await;

    let alerts = wait_for(port, "BigHolder in Alertmanager", Duration::from_secs(30), |a| {
        a.contains_key("BigHolder")
    })
    .await;
    let a = &alerts["BigHolder"];
    let labels = &a["labels"];
    assert_eq!(labels["instance"], "node-7");
    assert_eq!(labels["pid"], "4303");
    assert_eq!(labels["severity"], "page");
    assert_eq!(labels["uuid"], "GPU-5f3c9a1e-2b7d-4c1e-9a0f-6d2e8b4c7a11");
    assert_eq!(a["annotations"]["summary"], "jupyter-kernel holds 9.0 GiB");
    let first = a["updatedAt"].as_str().unwrap_or("").to_string();
    // Re-sent while it fires (resend = 1s): Alertmanager's updatedAt moves.
    wait_for(port, "a resend", Duration::from_secs(20), |a| {
        a.get("BigHolder")
            .and_then(|x| x["updatedAt"].as_str())
            .is_some_and(|u| u != first)
    })
    .await;
    wait_until(Duration::from_secs(10), "a counted delivery", || async {
        let m = app.get("/metrics").await.body;
        (sample(
            &m,
            "gpumem_notifications_total",
            &["notifier=\"alertmanager\"", "result=\"success\""],
        ) >= Some(2.0))
        .then_some(())
    })
    .await;
    app.stop().await.expect("clean stop");
}
