//! On a simulated fleet reclaim acts on the simulation only. Real child
//! processes (`sleep`) are given the PIDs of a scenario's processes; a
//! `terminate` rule with `dry_run = false` fires on those simulated
//! processes. The audit log must say they were signalled, the real children
//! must still run with their start ticks unchanged, and the simulated
//! processes must leave the snapshot. Runs the real binary with
//! `--demo FILE.toml`; waits on conditions with a deadline, never sleeps.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// `/proc/<pid>/stat` field 22, the process's identity with its PID.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(19)?.parse().ok()
}

/// Alive and not a zombie (a zombie child would mean it got a signal).
fn running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rfind(')').and_then(|i| stat.get(i + 2..i + 3));
    matches!(state, Some("S" | "R" | "D"))
}

fn scenario(pids: &[u32]) -> String {
    let mut s =
        String::from("name = \"real-pids\"\n[[gpu]]\nname = \"NVIDIA H100\"\nmemory = \"80GiB\"\nreserved = \"0B\"\n");
    for pid in pids {
        s.push_str(&format!(
            "\n[[process]]\npid = {pid}\ncomm = \"python\"\nuser = \"alice\"\nuid = 1000\n\
             cmdline = \"python train.py\"\nmemory = \"8GiB\"\nexit = \"released\"\n"
        ));
    }
    s
}

fn config(state: &Path) -> String {
    format!(
        "[poll]\ninterval = \"500ms\"\n\n[state]\ndir = \"{}\"\n\n\
         [[rule]]\nname = \"BigHolder\"\nkind = \"process_used_bytes\"\nabove = \"1GiB\"\naction = \"terminate\"\n\n\
         [reclaim]\nenabled = true\ndry_run = false\nallow_users = [\"alice\", \"bob\"]\ndeny_users = [\"root\"]\n\
         grace = \"60s\"\n",
        state.display()
    )
}

fn audit(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The PIDs the daemon's latest snapshot lists, `None` while it is not up.
fn listed(port: u16) -> Option<Vec<u64>> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /api/v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let body: Value = serde_json::from_str(text.split_once("\r\n\r\n")?.1).ok()?;
    let devices = body["devices"].as_array()?;
    Some(
        devices
            .iter()
            .flat_map(|d| d["processes"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p["pid"].as_u64())
            .collect(),
    )
}

/// Waits for `f` to give a value, up to 60 s; ends the daemon and panics
/// with `what` otherwise.
fn wait_for<T>(what: &str, daemon: &mut Child, f: impl FnMut() -> Option<T>) -> T {
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        common::wait_blocking(Duration::from_secs(60), what, f)
    }));
    match waited {
        Ok(v) => v,
        Err(panic) => {
            let _ = daemon.kill();
            std::panic::resume_unwind(panic)
        }
    }
}

#[test]
fn a_simulated_terminate_never_signals_the_real_process_with_that_pid() {
    let mut children: Vec<Child> = (0..2)
        .map(|_| Command::new("sleep").arg("600").spawn().expect("spawn sleep"))
        .collect();
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    let ticks: Vec<Option<u64>> = pids.iter().map(|&p| start_ticks(p)).collect();
    assert!(ticks.iter().all(Option::is_some), "children readable in /proc");
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let fleet = dir.path().join("fleet.toml");
    std::fs::write(&fleet, scenario(&pids)).expect("scenario");
    let cfg = dir.path().join("gpumemd.toml");
    std::fs::write(&cfg, config(&state)).expect("config");
    let port = common::alertmanager::free_port();
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_gpumemd"))
        .arg("--demo")
        .arg(&fleet)
        .args(["--web.listen-address", &format!("127.0.0.1:{port}"), "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gpumemd");
    let log = state.join("reclaim-audit.jsonl");
    let lines = wait_for("both simulated processes signalled", &mut daemon, || {
        let lines = audit(&log);
        let done = |pid: u32| {
            lines
                .iter()
                .any(|l| l["action"] == "terminate" && l["result"] == "signalled" && l["pid"] == pid)
        };
        pids.iter().all(|&p| done(p)).then_some(lines)
    });
    for (&pid, t) in pids.iter().zip(&ticks) {
        assert!(running(pid), "real process {pid} was signalled; audit: {lines:#?}");
        assert_eq!(start_ticks(pid), *t, "pid {pid} is still the same process");
    }
    wait_for("the simulated processes to leave the snapshot", &mut daemon, || {
        listed(port).filter(|l| !pids.iter().any(|p| l.contains(&u64::from(*p))))
    });
    let _ = daemon.kill();
    let _ = daemon.wait();
    for (c, (&pid, t)) in children.iter_mut().zip(pids.iter().zip(&ticks)) {
        assert!(
            running(pid) && start_ticks(pid) == *t,
            "real process {pid} survived the daemon"
        );
        let _ = c.kill();
        let _ = c.wait();
    }
}
