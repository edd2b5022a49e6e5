//! Which NVML calls a poll makes, read from the stand-in's call
//! log: the memory every poll and the compute list only when the memory
//! changed (or every 10 polls) in steady state, a burst of new
//! processes listed in the poll it appears (grow and retry), a lost GPU
//! marked down in the poll its kept handle fails, and the count, handles
//! and UUIDs read again on schedule (every 30 polls) and after a failure.

use std::collections::BTreeMap;
use std::path::Path;

use super::harness::*;
use crate::common::wait_until;

/// The stand-in's re-read schedule as the daemon keeps it
/// (`src/collect/source/nvml/topology.rs`, `RECHECK_POLLS`).
const RECHECK: u64 = 30;

/// One logged call: function short name, device ("-", "0", "0/1"), return code.
type Call = (String, String, u32);

/// The call log by poll, once it has reached `poll` (so every poll before
/// it is complete).
async fn calls_until(log: &Path, poll: u64) -> BTreeMap<u64, Vec<Call>> {
    wait_until(WAIT, &format!("the call log reaching poll {poll}"), || async {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let mut by_poll: BTreeMap<u64, Vec<Call>> = BTreeMap::new();
        // Only whole lines: the daemon may be writing the last one.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        for line in whole.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let [p, func, dev, rc] = f[..] else {
                panic!("call log line {line:?}")
            };
            let call = (func.to_string(), dev.to_string(), rc.parse().unwrap());
            by_poll.entry(p.parse().unwrap()).or_default().push(call);
        }
        by_poll.keys().any(|&p| p >= poll).then_some(by_poll)
    })
    .await
}

/// The return codes of `func` about `dev` in one poll, in call order.
fn codes(calls: &[Call], func: &str, dev: &str) -> Vec<u32> {
    calls
        .iter()
        .filter(|(f, d, _)| f == func && d == dev)
        .map(|c| c.2)
        .collect()
}

fn count_of(calls: &[Call], func: &str) -> usize {
    calls.iter().filter(|(f, _, _)| f == func).count()
}

/// A scenario file and a call log in one temp dir.
pub fn setup(scenario: &str) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scenario.toml");
    std::fs::write(&path, scenario).unwrap();
    let log = dir.path().join("calls.log");
    (dir, path, log)
}

const TWO_GPUS: &str = r#"
[generate]
gpus = 2
processes_per_gpu = 3
first_pid = 31000
"#;

/// The process lists are read again at least this often when nothing
/// changes (`src/collect/source/nvml/gate.rs`, `REFRESH_POLLS`).
const LIST_REFRESH: u64 = 10;

/// Quiet graphics and MPS lists are read at most this often while nothing
/// changes (`src/collect/source/nvml/reads.rs`, `QUIET_REFRESH_POLLS`).
const QUIET_REFRESH: u64 = 30;

/// Polls with a compute-list call for `dev`.
fn list_reads(by_poll: &BTreeMap<u64, Vec<Call>>, dev: &str, upto: u64) -> Vec<u64> {
    (1..upto)
        .filter(|p| !codes(&by_poll[p], "compute_processes", dev).is_empty())
        .collect()
}

#[tokio::test]
async fn a_steady_poll_reads_memory_every_poll_the_lists_every_10_and_the_topology_every_30() {
    let (_dir, path, log) = setup(TWO_GPUS);
    let _d = Daemon::start(Opts {
        scenario_path: Some(&path),
        poll: "interval = \"50ms\"",
        call_log: Some(&log),
        ..Opts::default()
    });
    let last = 2 * RECHECK + 3;
    let by_poll = calls_until(&log, last).await;
    for poll in 1..last {
        let calls = &by_poll[&poll];
        let full = poll % RECHECK == 1;
        assert_eq!(count_of(calls, "count"), usize::from(full), "poll {poll}: {calls:?}");
        for dev in ["0", "1"] {
            let once = vec![0];
            let fresh = if full { once.clone() } else { vec![] };
            assert_eq!(codes(calls, "handle_by_index", dev), fresh, "poll {poll} GPU {dev}");
            assert_eq!(codes(calls, "uuid", dev), fresh, "poll {poll} GPU {dev}");
            assert_eq!(codes(calls, "memory_v2", dev), once, "poll {poll} GPU {dev}");
            assert!(
                codes(calls, "compute_processes", dev).len() <= 1,
                "poll {poll} GPU {dev}"
            );
        }
    }
    // The memory never changes here: the lists are read at the first poll,
    // at the second (the empty /proc of the test shows every listed process
    // exited, a departure) and then every 10 polls, never more often.
    for dev in ["0", "1"] {
        let reads = list_reads(&by_poll, dev, last);
        assert_eq!(reads[..2], [1, 2], "GPU {dev}: {reads:?}");
        for pair in reads[1..].windows(2) {
            assert_eq!(pair[1] - pair[0], LIST_REFRESH, "GPU {dev}: {reads:?}");
        }
        assert!(*reads.last().unwrap() + LIST_REFRESH >= last, "GPU {dev}: {reads:?}");
        // The graphics and MPS lists stay empty: read with the compute list
        // until that has been so three times, then, since nothing moves,
        // only every 30 polls (`reads::QUIET_REFRESH_POLLS`).
        for kind in ["graphics_processes", "mps_processes"] {
            let quiet: Vec<u64> = (1..last)
                .filter(|p| !codes(&by_poll[p], kind, dev).is_empty())
                .collect();
            assert_eq!(quiet[..3], reads[..3], "GPU {dev} {kind}: {quiet:?}");
            assert!(quiet.len() >= 4, "GPU {dev} {kind}: {quiet:?}");
            for pair in quiet[2..].windows(2) {
                assert_eq!(pair[1] - pair[0], QUIET_REFRESH, "GPU {dev} {kind}: {quiet:?}");
            }
        }
    }
}

#[tokio::test]
async fn a_jump_from_2_to_40_processes_is_listed_in_the_poll_it_happens() {
    let mut scenario = String::from(
        "[[device]]\nuuid = \"GPU-21000000-0000-4000-8000-000000000001\"\n\
         [[device.process]]\npid = 4100\nused = \"1GiB\"\n\
         [[device.process]]\npid = 4101\nused = \"1GiB\"\n\
         [[step]]\npoll = 6\ndevice = 0\n",
    );
    for pid in 4200..4238 {
        scenario.push_str(&format!("[[step.add]]\npid = {pid}\nused = \"100MiB\"\n"));
    }
    let (_dir, path, log) = setup(&scenario);
    let d = Daemon::start(Opts {
        scenario_path: Some(&path),
        call_log: Some(&log),
        ..Opts::default()
    });
    let by_poll = calls_until(&log, 8).await;
    // Room for 8 (2 processes listed last poll) is too little for 40: NVML
    // answers INSUFFICIENT_SIZE (7) with the count, and the second call, in
    // the same poll, gets all 40 (SUCCESS): no poll shows a partial list.
    // Polls 3-5 change nothing, so they read no list. Polls 2 and 7 do:
    // the empty /proc of the test shows the processes new at polls 1 and 6
    // exited, a departure.
    for poll in 2..8 {
        let want = match poll {
            6 => vec![7, 0],
            2 | 7 => vec![0],
            _ => vec![],
        };
        assert_eq!(codes(&by_poll[&poll], "compute_processes", "0"), want, "poll {poll}");
    }
    let snap = d.snapshot().await;
    let procs = snap["devices"][0]["processes"].as_array().expect("processes");
    assert_eq!(procs.len(), 40, "{procs:?}");
}

#[tokio::test]
async fn a_lost_gpu_is_down_in_the_poll_its_kept_handle_fails() {
    // GPU 1 is lost at polls 5-7. Poll 6 re-reads the list (after poll 5's
    // failure) and its count call hangs 2 s, so poll 5's snapshot stays
    // served (as stale, once poll 6 is past its deadline) long enough to
    // be read.
    let scenario = format!(
        "{TWO_GPUS}\n[[fault]]\nfunction = \"device\"\ndevice = 1\nfrom_poll = 5\nto_poll = 7\n\
         code = \"GPU_IS_LOST\"\n\n[[fault]]\nfunction = \"count\"\npoll = 6\nhang = \"2s\"\n"
    );
    let (_dir, path, log) = setup(&scenario);
    let d = Daemon::start(Opts {
        scenario_path: Some(&path),
        poll: "interval = \"100ms\"",
        call_log: Some(&log),
        ..Opts::default()
    });
    let snap = wait_until(WAIT, "the snapshot of poll 5", || async {
        let snap = d.snapshot().await;
        let seq = snap["seq"].as_u64().unwrap_or(0);
        assert!(seq <= 5, "poll 5's snapshot was missed (seq {seq})");
        (seq == 5).then_some(snap)
    })
    .await;
    let devices = snap["devices"].as_array().expect("devices");
    assert_eq!(devices[0]["up"], true);
    assert_eq!(devices[1]["up"], false, "{:?}", devices[1]);
    assert_eq!(
        devices[1]["errors"],
        serde_json::json!(["device: GPU is lost (fell off the bus)"])
    );
    let by_poll = calls_until(&log, 10).await;
    // Poll 5 used the kept handle: no list call, and memory failed (15).
    assert_eq!(count_of(&by_poll[&5], "count"), 0);
    assert_eq!(codes(&by_poll[&5], "memory_v2", "1"), vec![15]);
    // Polls 6-8 read the list again; the handle fails until poll 8.
    for (poll, rc) in [(6, 15), (7, 15), (8, 0)] {
        assert_eq!(count_of(&by_poll[&poll], "count"), 1, "poll {poll}");
        assert_eq!(codes(&by_poll[&poll], "handle_by_index", "1"), vec![rc], "poll {poll}");
    }
    // From poll 9 the list read at poll 8 is kept again.
    assert_eq!(count_of(&by_poll[&9], "count"), 0);
    assert_eq!(codes(&by_poll[&9], "memory_v2", "1"), vec![0]);
}
