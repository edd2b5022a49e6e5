//! `gpumemd snapshot` as a user runs it: the table and JSON of the demo,
//! `--demo` before the subcommand, filters and colour, `--watch`
//! refreshing, `--url` reading a running daemon, and a closed pipe.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::bin::{BIN, gpumemd, stderr};
use crate::common;

#[test]
fn snapshot_of_the_demo_as_table_and_json() {
    let o = gpumemd(&["snapshot", "--demo"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("DEMO: simulated fleet \"default\""), "{out}");
    assert!(out.contains("GPU 0  NVIDIA H100 80GB HBM3"), "{out}");
    assert!(out.contains("holders: live"), "{out}");
    let o = gpumemd(&["snapshot", "--demo", "mig", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let devs = v["devices"].as_array().expect("devices");
    assert_eq!(devs.len(), 5, "2 GPUs and 3 MIG instances");
    assert!(
        devs.iter()
            .any(|d| d["mig_profile"] == "1g.10gb" && d["parent_uuid"] == devs[0]["uuid"])
    );
}

/// Where a daemon started with `--log-format json` on 127.0.0.1:0 listens,
/// read from its "listening" log line.
fn start_daemon(args: &[&str]) -> (std::process::Child, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .args(["--web.listen-address", "127.0.0.1:0", "--log-format", "json"])
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let listening = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("\"listening\""))
        .expect("a listening log line");
    // Keep draining the log so the daemon never blocks on a full pipe.
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    let v: serde_json::Value = serde_json::from_str(&listening).expect("JSON log line");
    let addr = v["address"].as_str().expect("address").to_string();
    (child, format!("http://{addr}"))
}

#[test]
fn snapshot_into_a_closed_pipe_ends_quietly_with_exit_0() {
    // `gpumemd snapshot --demo large | head -1`: the large table is far
    // bigger than a pipe buffer, so the writes after the reader left fail.
    let mut child = Command::new(BIN)
        .args(["snapshot", "--demo", "large"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("read");
    assert!(first.starts_with("DEMO"), "{first}");
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

#[test]
fn demo_before_snapshot_is_the_same_command() {
    let a = gpumemd(&["--demo", "snapshot", "--color", "never"]);
    let b = gpumemd(&["snapshot", "--demo", "--color", "never"]);
    assert!(a.status.success(), "{}", stderr(&a));
    let (a, b) = (String::from_utf8_lossy(&a.stdout), String::from_utf8_lossy(&b.stdout));
    assert!(a.starts_with("DEMO: simulated fleet \"default\""), "{a}");
    let gpus = |s: &str| {
        s.lines()
            .filter(|l| l.starts_with("GPU "))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(gpus(&a), gpus(&b));
    assert_eq!(gpus(&a).len(), 2, "{a}");
    // With a scenario, spelled both ways.
    for args in [
        &["--demo", "mig", "snapshot", "--json"][..],
        &["--demo=mig", "snapshot", "--json"],
    ] {
        let out = gpumemd(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["demo"], "mig", "{args:?}");
    }
}

#[test]
fn snapshot_filters_and_colour() {
    let all = gpumemd(&["snapshot", "--demo", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&all.stdout).expect("JSON");
    let d1 = &v["devices"][1];
    let p = &d1["processes"][0];
    let (uuid, user, pid) = (
        d1["uuid"].as_str().unwrap(),
        p["user"].as_str().unwrap(),
        p["pid"].as_u64().unwrap().to_string(),
    );
    let json = |args: &[&str]| -> serde_json::Value {
        let mut a = vec!["snapshot", "--demo", "--json"];
        a.extend_from_slice(args);
        let o = gpumemd(&a);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        serde_json::from_slice(&o.stdout).expect("JSON")
    };
    let uuids = |v: &serde_json::Value| -> Vec<String> {
        v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["uuid"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(uuids(&json(&["--gpu", "1"])), vec![uuid.to_string()]);
    assert_eq!(uuids(&json(&["--gpu", uuid])), vec![uuid.to_string()]);
    let by_user = json(&["--user", user]);
    for d in by_user["devices"].as_array().unwrap() {
        assert!(
            d["processes"].as_array().unwrap().iter().all(|p| p["user"] == user),
            "{d}"
        );
    }
    let by_pid = json(&["--pid", &pid]);
    let pids: Vec<u64> = by_pid["devices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| {
            d["processes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["pid"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(pids, vec![pid.parse::<u64>().unwrap()]);

    let always = gpumemd(&["snapshot", "--demo", "--color", "always"]);
    assert!(String::from_utf8_lossy(&always.stdout).contains("\x1b[1mGPU 0\x1b[0m"));
    for mode in ["never", "auto"] {
        // auto: stdout is a pipe here, so no colour.
        let o = gpumemd(&["snapshot", "--demo", "--color", mode]);
        assert!(o.status.success());
        assert!(!o.stdout.contains(&0x1b), "--color {mode} wrote escapes");
    }
    assert_eq!(
        gpumemd(&["snapshot", "--demo", "--color", "pink"]).status.code(),
        Some(2)
    );
}

#[test]
fn snapshot_watch_refreshes_until_stopped() {
    let mut child = Command::new(BIN)
        .args(["snapshot", "--demo", "--watch", "0.2"])
        .env_remove("COLUMNS")
        .env_remove("LINES")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut lines = common::Lines::new(child.stdout.take().expect("stdout"));
    let first = lines.wait_for("(refresh 1,", Duration::from_secs(20));
    assert!(first.starts_with("Every 200ms: gpumemd snapshot"), "{first}");
    lines.wait_for("(refresh 3,", Duration::from_secs(20));
    child.kill().expect("kill");
    let _ = child.wait();
    assert!(
        lines.seen.iter().filter(|l| l.starts_with("GPU 0 ")).count() >= 2,
        "{:?}",
        lines.seen
    );
}

#[test]
fn snapshot_url_reads_growth_from_the_running_daemon() {
    let (mut daemon, url) = start_daemon(&["--demo"]);
    // The demo's leaking process has a growth trend after a few polls.
    let growing = common::wait_blocking(Duration::from_secs(60), "growth from the daemon", || {
        let o = gpumemd(&["snapshot", "--url", &url, "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|d| d["processes"].as_array().unwrap().clone())
            .find(|p| p["growth_bytes_per_second"].as_f64().is_some_and(|g| g > 0.0))
    });
    let pid = growing["pid"].to_string();
    let o = gpumemd(&["snapshot", "--url", &url, "--pid", &pid]);
    let table = String::from_utf8_lossy(&o.stdout);
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with(&pid))
        .unwrap_or_else(|| panic!("{table}"));
    // USED and GROWTH/s are the two size columns: both filled.
    assert!(row.matches("iB").count() >= 2, "growth column empty: {row}");
    assert!(!stderr(&o).contains("GROWTH needs history"), "{}", stderr(&o));
    // The demo's PyTorch processes report allocator figures to the daemon:
    // `--url` keeps them, in JSON and as the table's split line.
    let all = gpumemd(&["snapshot", "--url", &url]);
    let table = String::from_utf8_lossy(&all.stdout);
    assert!(table.contains("= tensors ") && table.contains(" + cache "), "{table}");
    let json = gpumemd(&["snapshot", "--url", &url, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let figures = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["processes"].as_array().unwrap().clone())
        .filter(|p| p["allocator"]["tensors_bytes"].as_u64().is_some())
        .count();
    assert!(figures >= 3, "the demo's three reporting processes: {v}");
    let _ = daemon.kill();
    let _ = daemon.wait();

    let local = gpumemd(&["snapshot", "--demo"]);
    assert!(stderr(&local).contains("GROWTH needs history"), "{}", stderr(&local));
    assert!(
        stderr(&local).contains("tensors / cache / other split"),
        "{}",
        stderr(&local)
    );
    assert!(!String::from_utf8_lossy(&local.stdout).contains("= tensors "));
    let dead = gpumemd(&["snapshot", "--url", &url]);
    assert_eq!(dead.status.code(), Some(1));
    assert!(
        stderr(&dead).starts_with(&format!("gpumemd: cannot ask {url}/api/v1/snapshot: ")),
        "{}",
        stderr(&dead)
    );
}
