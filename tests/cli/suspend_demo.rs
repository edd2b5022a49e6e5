//! The demo shows suspend and resume on its simulated fleet,
//! through the same reclaim code as on a GPU: the idle notebook of the
//! default scenario is suspended by a `process_idle_holder` rule with
//! `action = "suspend"` and resumed when its GPU has room once it has been
//! suspended `resume_after`, both audited and counted; plain `--demo` stays
//! action-free and says how to see it. Runs the real binary with `--demo`; waits on the audit log with
//! a deadline, never sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn the_demo_suspends_and_resumes_its_idle_notebook() {
    let dir = tempfile::tempdir().expect("tempdir");
    let example = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/demo-suspend.toml"))
        .expect("config/demo-suspend.toml");
    let state = dir.path().join("state");
    let text = example
        .replace("dir = \"/tmp/gpumemd-demo\"", &format!("dir = \"{}\"", state.display()))
        .replace("for = \"30s\"", "for = \"3s\"")
        .replace("resume_after = \"60s\"", "resume_after = \"3s\"");
    assert!(
        text.contains("resume_after = \"3s\""),
        "the example keeps its resume_after"
    );
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
    let read = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let waited = std::panic::catch_unwind(|| {
        common::wait_blocking(Duration::from_secs(90), "a suspend and a resume audited", || {
            let lines = read();
            let has = |a: &str| lines.iter().any(|l| l["action"] == a && l["result"] == "done");
            (has("suspend") && has("resume")).then_some(lines)
        })
    });
    let _ = child.kill();
    let _ = child.wait();
    let lines = waited.unwrap_or_else(|_| panic!("audit: {:#?}", read()));
    let suspended = lines
        .iter()
        .find(|l| l["action"] == "suspend" && l["result"] == "done")
        .expect("suspend line");
    assert_eq!(suspended["rule"], "DemoIdleSuspend");
    let resumed = lines
        .iter()
        .find(|l| l["action"] == "resume" && l["rule"] == "when-free" && l["pid"] == suspended["pid"])
        .expect("the suspended process is resumed");
    let parked = resumed["ts"].as_f64().unwrap_or(0.0) - suspended["ts"].as_f64().unwrap_or(f64::MAX);
    assert!(
        parked >= 3.0,
        "suspended for resume_after (3 s) at least, not {parked} s: {lines:#?}"
    );
}

#[test]
fn plain_demo_suspends_nothing_and_says_how_to_see_it() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpumemd"))
        .args(["--demo", "--web.listen-address", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gpumemd");
    let mut log = common::Lines::new(child.stderr.take().expect("stderr"));
    let hint = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        log.wait_for("config/demo-suspend.toml", Duration::from_secs(30))
    }));
    let _ = child.kill();
    let _ = child.wait();
    assert!(hint.is_ok(), "a hint naming config/demo-suspend.toml");
    assert!(
        !log.seen
            .iter()
            .any(|l| l.contains("simulated CUDA driver, not on real processes")),
        "no 'acts on a simulated CUDA driver' claim with reclaim off: {:#?}",
        log.seen
    );
}
