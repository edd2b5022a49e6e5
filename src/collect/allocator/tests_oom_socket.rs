//! Tests of the allocator view's edges: an OOM in a process's first report
//! (no holder table yet), and the socket's group, an unbindable directory
//! and the file going at shutdown. Time is passed in; no sleeps.

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use super::config::AllocatorConfig;
use super::events::PER_PROCESS;
use super::receiver::{Receiver, ReceiverError};
use super::state::Outcome;
use super::tests::{device, report, send, state};

const GIB: u64 = 1 << 30;

#[test]
fn an_oom_in_the_first_report_gets_the_next_polls_table() {
    let s = state();
    let mut devs = [device("GPU-a", &[(10, 3 * GIB), (11, 40 * GIB), (12, 5 * GIB)])];
    std::sync::Arc::make_mut(&mut devs[0].processes[0].who).user = "ana".into();
    s.join(&mut devs, 0.0);
    // Nobody on GPU-a reported before: no table when the OOM comes.
    assert_eq!(send(&s, 10, &report("GPU-a", GIB, 2 * GIB, 1), 1.0), Outcome::Accepted);
    let ev = s.events();
    assert_eq!(ev.len(), 1);
    assert!(ev[0].gpu.processes.is_empty(), "no poll yet to take it from");
    assert_eq!((ev[0].comm.as_str(), ev[0].user.as_str()), ("p10", "ana"));
    s.join(&mut devs, 2.0);
    let ev = s.events();
    let rows: Vec<(u32, Option<u64>)> = ev[0].gpu.processes.iter().map(|r| (r.pid, r.used_bytes)).collect();
    assert_eq!(rows, [(10, Some(3 * GIB)), (11, Some(40 * GIB)), (12, Some(5 * GIB))]);
    assert_eq!(ev[0].gpu.polled_at, 2.0);
    assert_eq!(
        ev[0].gpu.biggest_except(ev[0].pid, 2),
        ["p11 (11) 40.0 GiB", "p12 (12) 5.0 GiB"]
    );
    // What the GpuOutOfMemory alert reads, already at that poll.
    let oom = devs[0].ooms.first().cloned().unwrap_or_default();
    assert_eq!((oom.pid, oom.comm.as_str(), oom.user.as_str()), (10, "p10", "ana"));
    assert_eq!(oom.others, "p11 (11) 40.0 GiB, p12 (12) 5.0 GiB");
    // Filled once: a later poll does not overwrite what the GPU held then.
    let mut later = [device("GPU-a", &[(10, 3 * GIB), (13, GIB)])];
    s.join(&mut later, 3.0);
    assert_eq!(s.events()[0].gpu.polled_at, 2.0);
}

#[test]
fn a_process_gone_by_the_next_poll_keeps_its_name_and_the_others_are_listed() {
    let s = state();
    let mut devs = [
        device("GPU-a", &[(10, 3 * GIB), (11, 40 * GIB)]),
        device("GPU-b", &[(20, GIB)]),
    ];
    s.join(&mut devs, 0.0);
    assert_eq!(send(&s, 10, &report("GPU-a", GIB, 2 * GIB, 1), 1.0), Outcome::Accepted);
    // The job died of its OOM before the next poll.
    let mut after = [device("GPU-a", &[(11, 40 * GIB)]), device("GPU-b", &[(20, GIB)])];
    s.join(&mut after, 2.0);
    let ev = s.events();
    assert_eq!(ev[0].comm, "p10");
    let pids: Vec<u32> = ev[0].gpu.processes.iter().map(|r| r.pid).collect();
    assert_eq!(pids, [11], "GPU-a's holders, not GPU-b's");
    assert_eq!(
        after[0].ooms.first().map(|o| o.others.clone()),
        Some("p11 (11) 40.0 GiB".into())
    );
    assert!(after[1].ooms.is_empty());
}

#[test]
fn one_process_cannot_flood_out_the_oom_events_of_another() {
    let s = state();
    let mut devs = [device("GPU-a", &[(10, GIB), (11, 40 * GIB)])];
    s.join(&mut devs, 0.0);
    assert_eq!(send(&s, 11, &report("GPU-a", GIB, 2 * GIB, 1), 1.0), Outcome::Accepted);
    // One GPU named many times, each with a higher count: refused whole.
    let entry = |n: u64| report("GPU-a", GIB, GIB, n)[18..].trim_end_matches("]}").to_string();
    let dup = format!(
        "{{\"v\":1,\"devices\":[{}]}}",
        (1..=8).map(entry).collect::<Vec<_>>().join(",")
    );
    assert_eq!(send(&s, 10, &dup, 2.0), Outcome::Malformed);
    assert_eq!(s.events().len(), 1);
    // Rising counts within its rate: the flooder drops its own oldest.
    for n in 1..=200 {
        let at = 2.0 + n as f64 * 0.5;
        assert_eq!(send(&s, 10, &report("GPU-a", GIB, GIB, n), at), Outcome::Accepted);
    }
    let ev = s.events();
    assert_eq!(ev.iter().filter(|e| e.pid == 10).count(), PER_PROCESS);
    assert_eq!(ev.iter().filter(|e| e.pid == 11).count(), 1, "the other's OOM is kept");
    s.join(&mut devs, 103.0);
    assert!(devs[0].ooms.iter().any(|o| o.pid == 11), "and its alert stays");
}

fn cfg_in(dir: &std::path::Path) -> AllocatorConfig {
    AllocatorConfig {
        enabled: true,
        socket: dir.join("a.sock"),
        ..AllocatorConfig::default()
    }
}

#[test]
fn the_socket_gets_the_configured_group_and_mode() {
    let dir = tempfile::tempdir().unwrap();
    let mine = std::fs::metadata(dir.path()).unwrap();
    // Root may give the socket any group; anyone else only their own.
    let gid = if mine.uid() == 0 { 12345 } else { mine.gid() };
    let cfg = AllocatorConfig {
        mode: "0640".into(),
        group: gid.to_string(),
        ..cfg_in(dir.path())
    };
    let rx = Receiver::bind(&cfg).unwrap();
    let m = std::fs::metadata(&cfg.socket).unwrap();
    assert_eq!((m.gid(), m.mode() & 0o777), (gid, 0o640));
    drop(rx);
    let unknown = AllocatorConfig {
        group: "no-such-group-gpumemd".into(),
        ..cfg_in(dir.path())
    };
    let e = Receiver::bind(&unknown).unwrap_err();
    assert!(matches!(e, ReceiverError::Config { .. }), "{e}");
    assert!(e.to_string().contains("no group `no-such-group-gpumemd`"), "{e}");
}

#[test]
fn a_directory_that_cannot_take_a_socket_is_one_clear_error() {
    // /proc exists and refuses new files, even to root.
    let cfg = AllocatorConfig {
        enabled: true,
        socket: "/proc/gpumemd-test-allocator.sock".into(),
        ..AllocatorConfig::default()
    };
    let e = Receiver::bind(&cfg).unwrap_err();
    assert!(matches!(e, ReceiverError::Io { .. }), "{e}");
    assert!(
        e.to_string().contains("cannot bind (is the directory writable?)"),
        "{e}"
    );
    let (_tx, rx) = tokio::sync::watch::channel(false);
    assert!(super::receiver::start(&cfg, Arc::new(state()), rx).is_none());
}

#[test]
fn stopping_the_receiver_removes_the_socket_file_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = cfg_in(dir.path());
    let rx = Receiver::bind(&cfg).unwrap();
    let stop = rx.stopper().unwrap();
    assert!(cfg.socket.exists());
    // Before the receive thread ends (which may be never: the process can
    // exit first), the stop itself removes the file.
    stop.stop();
    assert!(!cfg.socket.exists());
    drop(rx);
}

/// `snapshot --url` reads the daemon's JSON back: the figures, the verdict
/// and the recent OOMs must survive the trip (they were skipped before).
#[test]
fn the_figures_and_recent_ooms_read_back_from_json() {
    use crate::data::snapshot::{AllocatorFigures, RecentOom};
    let mut d = device("GPU-a", &[(10, 3 * GIB)]);
    for verdict in [Some("tensors"), Some("cache"), None] {
        d.processes[0].allocator = Some(Box::new(AllocatorFigures {
            tensors_bytes: GIB,
            cache_bytes: 2 * GIB,
            other_bytes: Some(7),
            last_oom_at: Some(1.5),
            growth: verdict,
            ..AllocatorFigures::default()
        }));
        d.ooms = vec![RecentOom {
            time: 1.5,
            pid: 10,
            comm: "p10".into(),
            user: "ana".into(),
            others: "p11 (11) 40.0 GiB".into(),
        }];
        let back: crate::data::snapshot::Device = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back.processes[0].allocator, d.processes[0].allocator, "{verdict:?}");
        assert_eq!(back.ooms, d.ooms);
    }
    let odd = r#"{"uuid":"GPU-a","processes":[{"pid":1,"allocator":{"tensors_bytes":5,"growth":"weather"}}]}"#;
    let back: crate::data::snapshot::Device = serde_json::from_str(odd).unwrap();
    let a = back.processes[0].allocator.clone().unwrap_or_default();
    assert_eq!((a.tensors_bytes, a.growth), (5, None), "an unknown verdict is none");
}

/// A MIG job's torch gives the instance's UUID bare and the package writes
/// `GPU-` before it; NVML lists `MIG-`. The same UUID under the other
/// prefix, on a device the sender uses, is that device.
#[test]
fn a_mig_instance_is_found_whatever_the_prefix() {
    let s = state();
    let mut devs = [
        device("GPU-1111", &[(30, GIB)]),
        device("MIG-2222", &[(10, 3 * GIB)]),
        device("MIG-3333", &[(11, GIB)]),
    ];
    s.join(&mut devs, 0.0);
    assert_eq!(
        send(&s, 10, &report("GPU-2222", GIB, 2 * GIB, 1), 1.0),
        Outcome::Accepted
    );
    assert_eq!(s.events()[0].uuid, "MIG-2222", "stored under NVML's name");
    assert_eq!(send(&s, 10, &report("GPU-3333", 1, 1, 0), 1.1), Outcome::ForeignGpu);
    assert_eq!(send(&s, 10, &report("GPU-1111", 1, 1, 0), 1.2), Outcome::ForeignGpu);
    s.join(&mut devs, 2.0);
    let a = devs[1].processes[0].allocator.clone().unwrap_or_default();
    assert_eq!((a.tensors_bytes, a.cache_bytes), (GIB, GIB));
    assert_eq!(devs[1].ooms.len(), 1);
}

#[test]
fn the_daemons_guard_removes_the_socket_file_when_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = cfg_in(dir.path());
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let guard = super::receiver::start(&cfg, Arc::new(state()), rx);
    assert!(guard.is_some() && cfg.socket.exists());
    drop(guard);
    assert!(!cfg.socket.exists(), "gone when the daemon's run ends");
}
