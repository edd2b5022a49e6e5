//! The demo shows suspend and resume (issue 16) on its simulated fleet,
//! through the same reclaim code as on a GPU: the idle notebook of the
//! default scenario is suspended by a `process_idle_holder` rule with
//! `action = "suspend"` and resumed when its GPU has room, both audited and
//! counted. Runs the real binary with `--demo`; waits on the audit log with
//! a deadline, never sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_demo_suspends_and_resumes_its_idle_notebook() {
    let dir = tempfile::tempdir().expect("tempdir");
    let example = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/demo-suspend.toml"))
        .expect("config/demo-suspend.toml");
    let state = dir.path().join("state");
    let text = example
        .replace("dir = \"/tmp/gpumemd-demo\"", &format!("dir = \"{}\"", state.display()))
        .replace("for = \"30s\"", "for = \"3s\"");
    let cfg = dir.path().join("demo.toml");
    std::fs::write(&cfg, text).expect("write config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpumemd"))
        .args(["--demo", "--web.listen-address", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gpumemd");
    let audit = state.join("reclaim-audit.jsonl");
    let deadline = Instant::now() + Duration::from_secs(90);
    let lines = loop {
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let has = |a: &str| lines.iter().any(|l| l["action"] == a && l["result"] == "done");
        if has("suspend") && has("resume") {
            break lines;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("no suspend and resume within 90 s; audit: {lines:#?}");
        }
        std::thread::park_timeout(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    let suspended = lines
        .iter()
        .find(|l| l["action"] == "suspend" && l["result"] == "done")
        .expect("suspend line");
    assert_eq!(suspended["rule"], "DemoIdleSuspend");
    assert!(
        lines
            .iter()
            .any(|l| l["action"] == "resume" && l["rule"] == "when-free" && l["pid"] == suspended["pid"]),
        "the suspended process is resumed: {lines:#?}"
    );
}
