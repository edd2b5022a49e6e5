//! The NVML calls a poll skips while nothing changed, through
//! the stand-in's call log: the process lists are read again in the poll
//! after a listed process exits even when the GPU's memory does not move,
//! and the per-process utilisation call waits while the GPU's own
//! utilisation stays at 0, and comes back once a process is active.

use std::collections::BTreeMap;
use std::path::Path;

use super::calls::setup;
use super::harness::*;
use crate::common::wait_until;

/// The stand-in's call log by poll once it reached `poll`: (function, device).
async fn log_until(log: &Path, poll: u64) -> BTreeMap<u64, Vec<(String, String)>> {
    wait_until(WAIT, &format!("the call log reaching poll {poll}"), || async {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        let mut by_poll: BTreeMap<u64, Vec<(String, String)>> = BTreeMap::new();
        for line in whole.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let [p, func, dev, _rc] = f[..] else {
                panic!("call log line {line:?}")
            };
            by_poll
                .entry(p.parse().unwrap())
                .or_default()
                .push((func.to_string(), dev.to_string()));
        }
        by_poll.keys().any(|&p| p >= poll).then_some(by_poll)
    })
    .await
}

fn called(by_poll: &BTreeMap<u64, Vec<(String, String)>>, poll: u64, func: &str) -> bool {
    by_poll.get(&poll).is_some_and(|c| c.iter().any(|(f, _)| f == func))
}

/// The PIDs the latest snapshot lists on GPU 0, with its poll number.
async fn listed(d: &Daemon) -> (u64, Vec<(u64, String)>) {
    let snap = d.snapshot().await;
    let seq = snap["seq"].as_u64().unwrap_or(0);
    let procs = snap["devices"][0]["processes"].as_array().cloned().unwrap_or_default();
    let pids = procs
        .iter()
        .map(|p| {
            (
                p["pid"].as_u64().unwrap_or(0),
                p["holder"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    (seq, pids)
}

#[tokio::test]
async fn a_process_that_exits_while_its_memory_stays_is_read_out_of_the_lists_the_next_poll() {
    let mut child = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("spawn sleep");
    let pid = u64::from(child.id());
    // The driver drops the process from its list at poll 2 but its memory
    // stays used (a fixed figure): nothing in the memory says it left.
    let scenario = format!(
        "[[device]]\nuuid = \"GPU-31000000-0000-4000-8000-000000000001\"\nused = \"10GiB\"\n\
         [[device.process]]\npid = {pid}\nused = \"1GiB\"\n\
         [[step]]\npoll = 2\ndevice = 0\nremove = [{pid}]\n"
    );
    let (_dir, path, log) = setup(&scenario);
    let d = Daemon::start(Opts {
        scenario_path: Some(&path),
        poll: "interval = \"300ms\"",
        call_log: Some(&log),
        real_proc: true,
        ..Opts::default()
    });
    // Poll 3 lists it live from the kept lists (nothing changed that says
    // otherwise); then it exits.
    let (seq, pids) = wait_until(WAIT, "poll 3", || async {
        let (seq, pids) = listed(&d).await;
        (seq >= 3).then_some((seq, pids))
    })
    .await;
    assert!(seq < 8, "too slow a machine for this test's timing (poll {seq})");
    assert!(pids.contains(&(pid, "live".to_string())), "poll {seq}: {pids:?}");
    child.kill().expect("kill sleep");
    child.wait().expect("reap sleep");
    let gone_at = wait_until(WAIT, "the exited process leaving the lists", || async {
        let (seq, pids) = listed(&d).await;
        (!pids.iter().any(|(p, _)| *p == pid)).then_some(seq)
    })
    .await;
    // Exited at poll seq+1 at the latest, read out at the one after: before
    // the lists' 10-poll refresh (poll 11) would have done it.
    assert!(
        gone_at <= seq + 2,
        "listed until poll {gone_at}, killed after poll {seq}"
    );
    let by_poll = log_until(&log, gone_at).await;
    assert!(
        called(&by_poll, gone_at, "compute_processes"),
        "poll {gone_at} read the list"
    );
    assert!(
        gone_at < 11,
        "gone at poll {gone_at}: the departure, not the refresh, read it"
    );
}

#[tokio::test]
async fn the_per_process_utilisation_call_waits_while_the_gpu_is_idle_and_returns_with_activity() {
    // Idle until poll 10, when the process starts running kernels.
    let scenario = "[[device]]\nuuid = \"GPU-32000000-0000-4000-8000-000000000001\"\n\
         [[device.process]]\npid = 4100\nused = \"1GiB\"\nsm_util = 0\n\
         [[step]]\npoll = 10\ndevice = 0\n[[step.add]]\npid = 4100\nused = \"1GiB\"\nsm_util = 50\n";
    let (_dir, path, log) = setup(scenario);
    let d = Daemon::start(Opts {
        scenario_path: Some(&path),
        poll: "interval = \"50ms\"",
        processes: "utilization_interval = \"100ms\"",
        call_log: Some(&log),
        ..Opts::default()
    });
    let by_poll = log_until(&log, 16).await;
    assert!(
        called(&by_poll, 1, "process_utilization"),
        "the first sample is asked for"
    );
    for poll in 2..10 {
        assert!(
            !called(&by_poll, poll, "process_utilization"),
            "poll {poll}: idle, not asked"
        );
        assert!(
            called(&by_poll, poll, "utilization_rates"),
            "poll {poll}: the GPU's own reading"
        );
    }
    assert!(
        (10..16).any(|p| called(&by_poll, p, "process_utilization")),
        "activity from poll 10 brings the per-process call back"
    );
    let util = wait_until(WAIT, "the process's utilisation", || async {
        let snap = d.snapshot().await;
        snap["devices"][0]["processes"][0]["sm_util_percent"]
            .as_u64()
            .filter(|&u| u > 0)
    })
    .await;
    assert_eq!(util, 50);
}
