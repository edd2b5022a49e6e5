//! `gpumemd report` against a running demo daemon, as a user or a Slurm
//! epilog runs it: a job that ends and leaves its memory behind a while
//! gets a final report (human and JSON, kept in the state dir), a running
//! one is shown as running, the shipped epilog appends it to the job's
//! output, the exit codes say found (0), none (1) or cannot tell (2), and
//! `gpumemd record` names why a process cannot be asked to record.
//! Waits on conditions with deadlines, never sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use crate::common;

use super::bin::BIN;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Job 77 holds 2 GiB for 3 s, then its memory stays 2 s after it left
/// NVML's list; job 78 runs on.
const SCENARIO: &str = r#"
name = "report-cli"
overhead_per_process = "0MiB"

[[gpu]]
memory = "80GiB"

[[process]]
pid = 7001
comm = "python"
user = "alice"
uid = 1000
job = "77"
memory = "2GiB"
stop = "3s"
exit = "released"
release_after = "2s"
sm_util = 50

[[process]]
pid = 7002
comm = "python"
user = "bob"
uid = 1001
job = "78"
memory = "5GiB"
sm_util = 50
"#;

fn report(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(BIN)
        .arg("report")
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run gpumemd report");
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn a_finished_job_gets_its_report_and_the_exit_codes_tell_scripts_what_happened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("report.toml");
    std::fs::write(&scenario, SCENARIO).expect("scenario");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("state dir");
    let cfg = dir.path().join("gpumemd.toml");
    let text = format!(
        "[state]\ndir = \"{}\"\n[server]\nenable_lifecycle = true\n",
        state.display()
    );
    std::fs::write(&cfg, text).expect("config");
    let mut child = Command::new(BIN)
        .arg("--demo")
        .arg(&scenario)
        .args(["--web.listen-address", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gpumemd");
    let mut log = common::Lines::new(child.stderr.take().expect("stderr"));
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let line = log.wait_for("listening", Duration::from_secs(30));
        let addr = line
            .split("address=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        check_reports(&format!("http://{addr}"), &state);
    }));
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = checked {
        std::panic::resume_unwind(e);
    }
}

fn check_reports(url: &str, state: &std::path::Path) {
    // Job 78 runs on: found, as running.
    let (code, out) = common::wait_blocking(Duration::from_secs(30), "job 78's report", || {
        let (code, out) = report(&["--url", url, "--job", "78"]);
        (code == Some(0)).then_some((code, out))
    });
    assert_eq!(code, Some(0));
    assert!(
        out.contains("Slurm job 78 (bob, python; PIDs 7002): still running"),
        "{out}"
    );
    assert!(out.contains("peak 5.0 GiB of 80.0 GiB"), "{out}");

    // Job 77 ends at 3 s and its memory is released at 5 s.
    let json = common::wait_blocking(Duration::from_secs(60), "job 77's final report", || {
        let (code, out) = report(&["--url", url, "--job", "77", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        (code == Some(0) && v["reports"][0]["state"] == "ended").then_some(v)
    });
    let r = &json["reports"][0];
    assert_eq!(
        (r["subject"].as_str(), r["user"].as_str()),
        (Some("job"), Some("alice"))
    );
    let g = &r["gpus"][0];
    assert_eq!(g["peak_bytes"].as_u64(), Some(2 << 30));
    assert_eq!(g["left_behind_bytes"].as_u64(), Some(2 << 30));
    let left = g["left_behind_seconds"].as_f64().unwrap_or(0.0);
    assert!((1.0..=4.0).contains(&left), "left behind ~2 s, not {left}");
    assert_eq!(
        r["suggested"]["gres_gpumem"].as_str(),
        Some("3G"),
        "2 GiB and a 1 GiB margin: {r}"
    );

    let (code, out) = report(&["--url", url, "--job", "77"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("Slurm job 77 (alice, python; PIDs 7001): ended"), "{out}");
    assert!(out.contains("left behind after exit: 2.0 GiB"), "{out}");
    assert!(out.contains("--gres=gpumem:3G"), "{out}");
    let (code, out) = report(&["--url", url, "--pid", "7001"]);
    assert!(code == Some(0) && out.contains("process 7001"), "{out}");

    // Kept in the state dir.
    let kept = std::fs::read_to_string(state.join("reports.jsonl")).expect("reports.jsonl");
    assert!(kept.lines().any(|l| l.contains("\"id\":\"77\"")), "{kept}");

    the_epilog_appends_the_report_to_the_jobs_output(url);
    the_recorder_needs_a_reporting_process(url);

    // None: exit 1 and a line that says so.
    let (code, out) = report(&["--url", url, "--job", "nope"]);
    assert_eq!((code, out.trim()), (Some(1), "no GPU memory report for job nope"));
}

#[test]
fn no_subject_or_no_daemon_is_exit_2() {
    let (code, _) = report(&["--url", "http://127.0.0.1:9"]);
    assert_eq!(code, Some(2), "a subject flag is required");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let (code, out) = report(&["--url", &url, "--job", "1", "--timeout", "2s"]);
    assert_eq!((code, out.as_str()), (Some(2), ""));
}

/// The shipped Slurm epilog, with stand-ins for the Slurm and syslog tools
/// (each logs its arguments) and for `runuser` (runs the command as is):
/// the job's report is logged and appended to the output file `scontrol`
/// names, as the job's user.
fn the_epilog_appends_the_report_to_the_jobs_output(url: &str) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let calls = dir.path().join("calls");
    let output = dir.path().join("slurm-77.out");
    std::fs::write(&output, "training done\n").expect("job output");
    std::os::unix::fs::symlink(BIN, dir.path().join("gpumemd")).expect("symlink");
    let log = |name: &str| format!("echo \"{name} $*\" >> '{}'\n", calls.display());
    for (name, body) in [
        ("logger", String::new()),
        (
            "scontrol",
            format!(
                "[ \"$1\" = show ] && echo \"JobId=77 JobName=train StdOut={}\"\n",
                output.display()
            ),
        ),
        ("runuser", "shift 3\nexec \"$@\"\n".to_string()),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{}{body}", log(name))).expect("stub");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    // The epilog sets its own PATH (slurmd gives none); its settings file
    // puts the stand-ins first, as an operator's would a Slurm under /opt.
    let settings = dir.path().join("settings");
    std::fs::write(
        &settings,
        format!("PATH='{}':\"$PATH\"\nGPUMEMD_URL='{url}'\n", dir.path().display()),
    )
    .expect("settings");
    let o = Command::new("sh")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/slurm/epilog-gpumemd.sh"))
        .env("GPUMEMD_SLURM_SETTINGS", &settings)
        .env("SLURM_JOB_ID", "77")
        .env("SLURM_JOB_USER", "alice")
        .env_remove("RUST_LOG")
        .output()
        .expect("run the epilog");
    assert_eq!(o.status.code(), Some(0), "an epilog never fails itself");
    let calls = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(calls.contains("logger -t gpumemd-epilog job 77: OK"), "{calls}");
    assert!(
        calls.contains("logger -t gpumemd-epilog job 77 report: GPU memory report for Slurm job 77"),
        "{calls}"
    );
    assert!(
        calls.contains("runuser -u alice --"),
        "written as the job's user: {calls}"
    );
    let out = std::fs::read_to_string(&output).expect("job output");
    assert!(out.starts_with("training done\n"), "appended, not replaced: {out}");
    assert!(
        out.contains("GPU memory report for Slurm job 77") && out.contains("--gres=gpumem:3G"),
        "{out}"
    );
}

/// `gpumemd record`: the demo's processes do not report over the allocator
/// socket, so the daemon says so (404: exit 1 with its reason), and a PID
/// that holds no GPU memory is named as such.
fn the_recorder_needs_a_reporting_process(url: &str) {
    let record = |pid: &str| {
        let o = Command::new(BIN)
            .args(["record", pid, "--url", url])
            .env_remove("RUST_LOG")
            .output()
            .expect("run gpumemd record");
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (code, err) = record("7002");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("404") && err.contains("has not reported over the allocator socket"),
        "{err}"
    );
    let (code, err) = record("999999");
    assert!(
        code == Some(1) && err.contains("PID 999999 holds no GPU memory"),
        "{err}"
    );
}
