//! Unauthenticated clients that try to hold the server or its disk: refused
//! lifecycle requests cannot append audit lines at their own pace.

use super::*;

/// Hundreds of refused resumes a second, as anyone who reaches the
/// lifecycle API can send: the audit log gets the burst, then a summary
/// line with the count of the rest, not one fsynced line each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_lifecycle_requests_cannot_flood_the_audit_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[poll]\ninterval = \"100ms\"\n[server]\nenable_lifecycle = true\n[reclaim]\nenabled = true\n\
         allow_users = [\"alice\"]\n[state]\ndir = \"{}\"\n",
        dir.path().display()
    );
    let cfg = gpumemd::config::Config::from_toml(&text, "test", false).expect("config");
    let src = SimulatedSource::new(
        Scenario::resolve("default").expect("scenario"),
        Duration::from_millis(100),
        1_700_000_000.0,
    );
    let app = spawn_app(cfg, Box::new(src)).await;
    let audit = dir.path().join(gpumemd::reclaim::AUDIT_FILE);
    let lines = || {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
            .collect::<Vec<_>>()
    };
    const SENT: usize = 300;
    let started = Instant::now();
    for i in 0..SENT {
        let r = common::request(
            app.addr,
            "POST",
            &format!("/api/v1/processes/{}/resume", 90_000 + i),
            &[],
        )
        .await;
        assert_eq!(r.status, 404, "{}", r.body);
    }
    let took = started.elapsed();
    let written = lines().len();
    eprintln!("{SENT} refused resumes in {took:?}: {written} audit lines");
    // One token comes back a second: the burst and one per second at most.
    let bound = gpumemd::reclaim::AUDIT_BURST as usize + took.as_secs() as usize + 1;
    assert!(
        written <= bound,
        "{written} audit lines for {SENT} refusals (bound {bound})"
    );
    // The rest is counted: the next line written carries the count.
    let summary = wait_until(WAIT, "a summary line", || async {
        let _ = common::request(app.addr, "POST", "/api/v1/processes/1/resume", &[]).await;
        lines().into_iter().find(|l| l["result"] == "suppressed")
    })
    .await;
    assert_eq!(summary["action"], "audit");
    let held_back = summary["suppressed"].as_u64().expect("a count");
    assert!(held_back as usize + written >= SENT, "{summary}: {written} written");
    app.stop().await.expect("clean stop");
}
