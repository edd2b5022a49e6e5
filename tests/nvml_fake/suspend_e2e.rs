//! End to end, `action = "suspend"`: the real binary loads the
//! stand-in as both `--nvml-lib` and (through `[reclaim.suspend] cuda_lib`)
//! the CUDA driver, so a checkpoint takes the process out of NVML's list and
//! the device's used memory drops, as on a GPU. The victim is a real child
//! process (`sleep`), attributed from the machine's /proc. Every path of
//! suspend that needs the daemon: success + manual resume, dry
//! run, missing driver, host-memory guard, lock timeout and hung lock,
//! failure after the lock, when-free resume, and the API's refusals. (PID
//! reuse between the decision and the lock is in src/act/reclaim/suspend/tests.rs,
//! where the reuse can be staged at the exact moment; injected driver errors
//! are in `suspend_faults`.)

use std::path::Path;
use std::process::{Child, Command};

use serde_json::Value;

use super::harness::{Daemon, MIB, Opts, WAIT, lib_path};
use crate::common::{self, wait_until};

const UUID: &str = "GPU-11111111-2222-3333-4444-555555555555";

pub(crate) struct Victim(pub Child);

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn victim() -> Victim {
    Victim(Command::new("sleep").arg("300").spawn().expect("spawn sleep"))
}

/// One 1 GiB GPU whose only process is `pid` with 256 MiB (small, so the
/// host-memory guard passes on any test machine), plus `more` TOML.
pub(crate) fn scenario(dir: &Path, pid: u32, more: &str) -> std::path::PathBuf {
    let text = format!(
        "[[device]]\nuuid = \"{UUID}\"\ntotal = \"1GiB\"\nreserved = \"0\"\n\n[[device.process]]\npid = {pid}\nused = \"256MiB\"\n\n{more}\n"
    );
    let p = dir.join("scenario.toml");
    std::fs::write(&p, text).expect("write scenario");
    p
}

/// `[reclaim]` enabled for everyone, `suspend` knobs appended; `rule` adds
/// the rule that suspends anything above 128 MiB.
pub(crate) fn config(dry_run: bool, rule: bool, suspend: &str) -> String {
    let lib = lib_path();
    let rule = if rule {
        "[[rule]]\nname = \"IdleHog\"\nkind = \"process_used_bytes\"\nabove = \"128MiB\"\naction = \"suspend\"\n"
    } else {
        ""
    };
    format!(
        "[server]\nenable_lifecycle = true\n\n{rule}\n[reclaim]\nenabled = true\ndry_run = {dry_run}\nallow_all_users = true\n\
         deny_users = []\n\n[reclaim.suspend]\ncuda_lib = \"{}\"\nlock_timeout = \"100ms\"\nhost_memory_margin = \"0\"\n{suspend}\n",
        lib.display()
    )
}

pub(crate) struct Run {
    pub d: Daemon,
    pub v: Victim,
    _dir: tempfile::TempDir,
}

pub(crate) async fn start(more_scenario: &str, extra: &str) -> Run {
    start_with(more_scenario, extra, "").await
}

/// As [`start`], with extra `[processes]` lines.
pub(crate) async fn start_with(more_scenario: &str, extra: &str, processes: &str) -> Run {
    let v = victim();
    let dir = tempfile::tempdir().expect("tempdir");
    let sc = scenario(dir.path(), v.0.id(), more_scenario);
    let d = Daemon::start(Opts {
        scenario_path: Some(&sc),
        real_proc: true,
        extra,
        processes,
        ..Opts::default()
    });
    d.ready().await;
    Run { d, v, _dir: dir }
}

pub(crate) fn audit(d: &Daemon) -> Vec<Value> {
    std::fs::read_to_string(d.state_dir().join("reclaim-audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits for an audit line of `action` with `result`.
pub(crate) async fn audited(d: &Daemon, action: &str, result: &str) -> Value {
    wait_until(WAIT, &format!("audit {action}/{result}"), || async {
        audit(d)
            .into_iter()
            .find(|l| l["action"] == action && l["result"] == result)
    })
    .await
}

pub(crate) fn listed(snap: &Value, pid: u32) -> bool {
    snap["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| d["processes"].as_array().into_iter().flatten())
        .any(|p| p["pid"] == pid)
}

pub(crate) fn used(snap: &Value) -> u64 {
    super::harness::device(snap, UUID)
        .and_then(|d| d["memory"]["used_bytes"].as_u64())
        .unwrap_or(0)
}

pub(crate) async fn post(d: &Daemon, pid: &str, action: &str) -> common::Response {
    common::request(d.addr, "POST", &format!("/api/v1/processes/{pid}/{action}"), &[]).await
}

#[tokio::test]
async fn a_rule_suspends_the_holder_and_the_api_resumes_it() {
    // Late releases are judged after 1 s: a suspended process must not be one.
    let mut r = start_with("", &config(false, true, ""), "late_release_after = \"1s\"").await;
    let pid = r.v.0.id();
    let line = audited(&r.d, "suspend", "done").await;
    assert_eq!(
        (line["pid"].as_u64(), line["rule"].as_str()),
        (Some(u64::from(pid)), Some("IdleHog"))
    );
    let snap = wait_until(WAIT, "the process leaves NVML's list", || async {
        let s = r.d.snapshot().await;
        (!listed(&s, pid)).then_some(s)
    })
    .await;
    assert_eq!(used(&snap), 0, "device used drops by the 256 MiB");
    let dev = super::harness::device(&snap, UUID).expect("device");
    assert_eq!(dev["suspended"][0]["pid"], pid, "{dev}");
    assert_eq!(dev["suspended"][0]["state"], "suspended");
    assert_eq!(dev["suspended"][0]["suspended_bytes"], 256 * MIB);
    let since = line["ts"].as_f64().expect("ts");
    let later = wait_until(
        WAIT,
        "a poll 2.5 s after the suspend (past late_release_after)",
        || async {
            let s = r.d.snapshot().await;
            (s["timestamp"].as_f64().unwrap_or(0.0) > since + 2.5).then_some(s)
        },
    )
    .await;
    let dev = super::harness::device(&later, UUID).expect("device");
    assert_eq!(dev["unreleased"], serde_json::json!([]), "not a late release: {dev}");
    assert_eq!(dev["holders"]["exited"], 0, "not an exited holder: {dev}");
    assert_eq!(dev["suspended"][0]["pid"], pid, "still suspended: {dev}");
    // `gpumemd snapshot --url` shows it too, as JSON and in the table.
    let url = format!("http://{}", r.d.addr);
    let cli = |json: bool| {
        let mut c = std::process::Command::new(super::harness::BIN);
        c.args(["snapshot", "--url", &url, "--color", "never"]);
        if json {
            c.arg("--json");
        }
        c.output().expect("run gpumemd snapshot")
    };
    let out = cli(true);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).expect("snapshot --json");
    let cdev = super::harness::device(&json, UUID).expect("device in snapshot --json");
    assert_eq!(cdev["suspended"][0]["pid"], pid, "{cdev}");
    assert_eq!(cdev["suspended"][0]["suspended_bytes"], 256 * MIB);
    let table = String::from_utf8_lossy(&cli(false).stdout).to_string();
    let want = format!("SUSPENDED: 256.0 MiB parked in host memory by pid {pid} (sleep,");
    assert!(table.contains(&want), "{want} in\n{table}");
    // The status page's summary lists it under its GPU too.
    let summary: serde_json::Value =
        serde_json::from_str(&r.d.get("/api/v1/summary").await.body).expect("summary JSON");
    let sdev = summary["devices"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["uuid"] == UUID))
        .expect("the GPU in the summary");
    assert_eq!(sdev["suspended"][0]["pid"], pid, "{sdev}");
    assert_eq!(sdev["suspended"][0]["suspended_bytes"], 256 * MIB);
    let body = r.d.metrics().await;
    let want = format!("gpumem_process_suspended{{uuid=\"{UUID}\",pid=\"{pid}\"}} 1");
    assert!(body.lines().any(|l| l == want), "{want} in\n{body}");
    let parked = format!("gpumem_device_memory_suspended_bytes{{uuid=\"{UUID}\"}} {}", 256 * MIB);
    assert!(body.lines().any(|l| l == parked), "{parked}");
    assert!(r.v.0.try_wait().expect("try_wait").is_none(), "suspend never kills");
    let resp = post(&r.d, &pid.to_string(), "resume").await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(resp.body.contains("\"result\":\"done\""), "{}", resp.body);
    wait_until(WAIT, "the process is listed again", || async {
        listed(&r.d.snapshot().await, pid).then_some(())
    })
    .await;
    // GET /api/v1/events lists the suspend and the resume, in that order.
    let events: Value = serde_json::from_str(&r.d.get("/api/v1/events").await.body).expect("events JSON");
    let mine: Vec<(String, String)> = events["events"]
        .as_array()
        .expect("an events list")
        .iter()
        .filter(|e| e["pid"] == pid)
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or("").to_string(),
                e["result"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    // The holder is still idle after the resume, so the rule may suspend
    // it again at once: the list starts with the two, and may go on.
    let want = [("suspend", "done"), ("resume", "done")].map(|(k, r)| (k.to_string(), r.to_string()));
    assert!(mine.starts_with(&want), "{events}");
}

#[tokio::test]
async fn dry_run_audits_and_touches_nothing() {
    let mut r = start("", &config(true, true, "")).await;
    let pid = r.v.0.id();
    audited(&r.d, "suspend", "dry_run").await;
    assert!(listed(&r.d.snapshot().await, pid));
    assert!(r.v.0.try_wait().expect("try_wait").is_none());
}

#[tokio::test]
async fn a_missing_cuda_driver_refuses_suspend_and_monitoring_goes_on() {
    let extra = config(false, true, "").replace(&lib_path().display().to_string(), "/nonexistent/libcuda.so.1");
    let r = start("", &extra).await;
    let line = audited(&r.d, "suspend", "refused").await;
    assert_eq!(line["reason"], "cuda_unavailable");
    r.d.logged("the missing-driver warning", |l| l.contains("no usable CUDA driver"))
        .await;
    let body = r.d.metrics().await;
    assert!(
        body.contains("gpumem_reclaim_actions_total{action=\"suspend\",result=\"refused\"} 1"),
        "{body}"
    );
    assert!(listed(&r.d.snapshot().await, r.v.0.id()), "monitoring goes on");
}

#[tokio::test]
async fn the_host_memory_guard_refuses_what_ram_cannot_hold() {
    let extra = config(false, true, "").replace("host_memory_margin = \"0\"", "host_memory_margin = \"1000TiB\"");
    let r = start("", &extra).await;
    let line = audited(&r.d, "suspend", "refused").await;
    assert_eq!(line["reason"], "host_memory");
    assert!(listed(&r.d.snapshot().await, r.v.0.id()));
}

#[tokio::test]
async fn lock_timeouts_and_failures_after_the_lock_leave_it_running() {
    // The driver's own timeout, then a checkpoint that fails once.
    let faults = "[[fault]]\nfunction = \"cu_lock\"\ncode = \"CUDA_ERROR_TIMEOUT\"\ntimes = 1\n\n\
                  [[fault]]\nfunction = \"cu_checkpoint\"\ncode = \"CUDA_ERROR_NOT_SUPPORTED\"\ntimes = 1\n";
    let r = start(faults, &config(false, false, "")).await;
    let pid = r.v.0.id().to_string();
    let first = post(&r.d, &pid, "suspend").await;
    assert_eq!(first.status, 500, "{}", first.body);
    let second = post(&r.d, &pid, "suspend").await;
    assert_eq!(second.status, 500, "{}", second.body);
    let failed: Vec<String> = audit(&r.d)
        .iter()
        .filter(|l| l["result"] == "failed")
        .map(|l| l["reason"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        failed[0].contains("CUDA_ERROR_TIMEOUT") || failed[0].contains("timed out"),
        "{failed:?}"
    );
    assert!(failed[1].contains("unlocked"), "{failed:?}");
    assert!(listed(&r.d.snapshot().await, r.v.0.id()), "still on the GPU");
    // Unlocked indeed: the next suspend goes through.
    let third = post(&r.d, &pid, "suspend").await;
    assert_eq!(third.status, 200, "{}", third.body);
}

#[tokio::test]
async fn a_hung_lock_is_reported_and_the_process_unlocked_when_it_returns() {
    let faults = "[[fault]]\nfunction = \"cu_lock\"\nhang = \"3s\"\ntimes = 1\n";
    let r = start(faults, &config(false, false, "")).await;
    let pid = r.v.0.id().to_string();
    let resp = post(&r.d, &pid, "suspend").await;
    assert_eq!(resp.status, 500, "{}", resp.body);
    let line = audited(&r.d, "suspend", "failed").await;
    assert!(
        line["reason"].as_str().unwrap_or("").contains("did not return"),
        "{line}"
    );
    r.d.logged("the late lock is undone", |l| l.contains("the late CUDA call returned"))
        .await;
    let after = post(&r.d, &pid, "suspend").await;
    assert_eq!(
        after.status, 200,
        "running again, so it can be suspended: {}",
        after.body
    );
}

#[tokio::test]
async fn when_free_resumes_once_the_device_has_room() {
    // A 600 MiB neighbour (no process here, so never suspended) leaves
    // 424 MiB free while the victim is suspended, short of its 256 MiB plus
    // the 256 MiB margin, and leaves at poll 30.
    let neighbour = "[[device.process]]\npid = 999999\nused = \"600MiB\"\n\n\
                     [[step]]\npoll = 30\ndevice = 0\nremove = [999999]\n";
    let r = start(
        neighbour,
        &config(false, true, "resume = \"when-free\"\nresume_margin = \"256MiB\""),
    )
    .await;
    audited(&r.d, "suspend", "done").await;
    // 424 MiB free is room for the 256 MiB but not for the margin: nothing
    // may resume before the neighbour leaves (poll 30; one poll per seq).
    wait_until(WAIT, "poll 15", || async {
        (r.d.snapshot().await["seq"].as_u64().unwrap_or(0) >= 15).then_some(())
    })
    .await;
    assert!(
        !audit(&r.d).iter().any(|l| l["action"] == "resume"),
        "resumed without room for the margin: {:?}",
        audit(&r.d)
    );
    assert!(!listed(&r.d.snapshot().await, r.v.0.id()), "still suspended at poll 15");
    let line = audited(&r.d, "resume", "done").await;
    assert_eq!(line["rule"], "when-free");
    let fired_first = audit(&r.d)
        .iter()
        .position(|l| l["action"] == "suspend" && l["result"] == "done")
        .expect("suspended");
    let resumed = audit(&r.d)
        .iter()
        .position(|l| l["action"] == "resume")
        .expect("resumed");
    assert!(fired_first < resumed);
}

#[tokio::test]
async fn the_api_answers_bad_requests_clearly() {
    let r = start("", &config(false, false, "")).await;
    for (pid, action, status) in [
        ("abc", "resume", 400),
        ("-1", "suspend", 400),
        ("12345678", "resume", 404),
        ("12345678", "suspend", 404),
    ] {
        let resp = post(&r.d, pid, action).await;
        assert_eq!(resp.status, status, "{pid}/{action}: {}", resp.body);
    }
    // A suspend of a PID NVML does not list is audited and counted.
    let line = audited(&r.d, "suspend", "refused").await;
    assert_eq!(
        (line["pid"].as_u64(), line["reason"].as_str()),
        (Some(12345678), Some("not_listed"))
    );
    let body = r.d.metrics().await;
    assert!(
        body.contains("gpumem_reclaim_actions_total{action=\"suspend\",result=\"refused\"} 1"),
        "{body}"
    );
    let off = config(false, false, "").replace("enable_lifecycle = true", "enable_lifecycle = false");
    let r2 = start("", &off).await;
    for action in ["suspend", "resume"] {
        let resp = post(&r2.d, &r2.v.0.id().to_string(), action).await;
        assert_eq!(resp.status, 403, "{action}: {}", resp.body);
    }
}
