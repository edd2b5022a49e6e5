//! End to end: NVML (the stand-in) lists a real child process of the test as
//! holding 40 GiB; a `terminate` rule fires on it; with reclaim enabled the
//! daemon SIGTERMs exactly that process and audits it, and in dry-run mode
//! it touches nothing. Attribution reads the machine's real /proc.

use std::path::Path;
use std::process::Command;

use super::harness::{Daemon, Opts, WAIT};
use crate::common::{wait_true, wait_until};

const RULE: &str =
    "[[rule]]\nname = \"IdleHog\"\nkind = \"process_used_bytes\"\nabove = \"30GiB\"\naction = \"terminate\"\n";

fn scenario_for(dir: &Path, pid: u32) -> std::path::PathBuf {
    let text = format!(
        "driver_version = \"550.54.15\"\nnvml_version = \"12.550.54.15\"\ncuda_driver_version = 12040\n\n[[device]]\nuuid = \"GPU-11111111-2222-3333-4444-555555555555\"\nname = \"NVIDIA H100 80GB HBM3\"\ntotal = \"81559MiB\"\nreserved = \"535MiB\"\n\n[[device.process]]\npid = {pid}\nused = \"40GiB\"\n"
    );
    let p = dir.join("scenario.toml");
    std::fs::write(&p, text).expect("write scenario");
    p
}

fn audit(d: &Daemon) -> Vec<serde_json::Value> {
    std::fs::read_to_string(d.state_dir().join("reclaim-audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

async fn run(dry_run: bool) {
    let mut victim = Command::new("sleep").arg("300").spawn().expect("spawn sleep");
    let dir = tempfile::tempdir().expect("tempdir");
    let sc = scenario_for(dir.path(), victim.id());
    let extra = format!(
        "{RULE}\n[reclaim]\nenabled = true\ndry_run = {dry_run}\ngrace = \"5s\"\nallow_all_users = true\ndeny_users = []\n"
    );
    let d = Daemon::start(Opts {
        scenario_path: Some(&sc),
        real_proc: true,
        extra: &extra,
        ..Opts::default()
    });
    d.ready().await;
    let want = if dry_run { "dry_run" } else { "signalled" };
    // A timeout fails the test, and the daemon's drop prints its last logs.
    let line = wait_until(WAIT, &format!("an audit line with result {want}"), || {
        std::future::ready(audit(&d).into_iter().find(|l| l["result"] == want))
    })
    .await;
    assert_eq!(line["pid"], victim.id());
    assert_eq!(line["rule"], "IdleHog");
    assert_eq!(line["comm"], "sleep");
    assert_eq!(line["used_bytes"], 40u64 << 30);
    let body = d.metrics().await;
    let counted = format!("gpumem_reclaim_actions_total{{action=\"terminate\",result=\"{want}\"}} 1");
    assert!(body.lines().any(|l| l == counted), "{counted} in\n{body}");
    if dry_run {
        assert!(
            victim.try_wait().expect("try_wait").is_none(),
            "dry run must not signal"
        );
        let _ = victim.kill();
        let _ = victim.wait();
    } else {
        wait_true(WAIT, "the victim to exit after SIGTERM", || {
            victim.try_wait().ok().flatten().is_some()
        })
        .await;
    }
}

#[tokio::test]
async fn a_terminate_rule_signals_the_real_process_holding_the_memory() {
    run(false).await;
}

#[tokio::test]
async fn in_dry_run_the_same_rule_only_audits() {
    run(true).await;
}
