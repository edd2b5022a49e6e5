//! Table-driven tests of `snapshot`'s filters and `--watch` frames.

use super::*;
use crate::data::snapshot::{Device, Process, Unreleased, Who};

fn proc(pid: u32, user: &str) -> Process {
    Process {
        pid,
        who: Who::shared("", user, None),
        ..Process::default()
    }
}

fn fleet() -> Snapshot {
    let gpu = |i: u32, procs: Vec<Process>| Device {
        uuid: format!("GPU-{i}"),
        index: Some(i),
        processes: procs,
        ..Device::default()
    };
    let mut g1 = gpu(1, vec![proc(30, "carol")]);
    g1.unreleased.push(Unreleased {
        pid: 40,
        comm: "x".into(),
        user: "dave".into(),
        bytes: 1,
        since: 0.0,
    });
    g1.suspended.push(crate::data::snapshot::SuspendedProcess {
        pid: 60,
        user: "erin".into(),
        ..Default::default()
    });
    let mig = Device {
        uuid: "MIG-a".into(),
        parent_uuid: "GPU-0".into(),
        processes: vec![proc(50, "alice")],
        ..Device::default()
    };
    Snapshot {
        devices: vec![gpu(0, vec![proc(10, "alice"), proc(20, "bob")]), mig, g1],
        ..Snapshot::default()
    }
}

fn opts(gpu: &[&str], user: &[&str], pid: &[u32]) -> SnapshotOpts {
    SnapshotOpts {
        gpu: gpu.iter().map(|s| s.to_string()).collect(),
        user: user.iter().map(|s| s.to_string()).collect(),
        pid: pid.to_vec(),
        ..SnapshotOpts::default()
    }
}

/// (gpu, user, pid) filters -> the (uuid, pids) left.
#[test]
fn filters() {
    type Want = Vec<(&'static str, Vec<u32>)>;
    let cases: Vec<(SnapshotOpts, Want)> = vec![
        (
            opts(&[], &[], &[]),
            vec![("GPU-0", vec![10, 20]), ("MIG-a", vec![50]), ("GPU-1", vec![30])],
        ),
        (
            opts(&["0"], &[], &[]),
            vec![("GPU-0", vec![10, 20]), ("MIG-a", vec![50])],
        ),
        (opts(&["GPU-1"], &[], &[]), vec![("GPU-1", vec![30])]),
        (opts(&["MIG-a"], &[], &[]), vec![("MIG-a", vec![50])]),
        (
            opts(&[], &["alice"], &[]),
            vec![("GPU-0", vec![10]), ("MIG-a", vec![50])],
        ),
        (
            opts(&[], &[], &[20, 30]),
            vec![("GPU-0", vec![20]), ("GPU-1", vec![30])],
        ),
        (opts(&["1"], &["alice"], &[]), vec![]),
        // Unreleased memory of the user keeps its GPU in view.
        (opts(&[], &["dave"], &[]), vec![("GPU-1", vec![])]),
        // So does a suspended process (NVML no longer lists it).
        (opts(&[], &["erin"], &[]), vec![("GPU-1", vec![])]),
        (opts(&[], &[], &[60]), vec![("GPU-1", vec![])]),
        (opts(&["7"], &[], &[]), vec![]),
    ];
    for (o, want) in cases {
        let mut s = fleet();
        filter(&mut s, &o);
        let got: Vec<(&str, Vec<u32>)> = s
            .devices
            .iter()
            .map(|d| (d.uuid.as_str(), d.processes.iter().map(|p| p.pid).collect()))
            .collect();
        assert_eq!(got, want, "{o:?}");
    }
}

#[test]
fn watch_frames_redraw_in_place_on_a_terminal_only() {
    let every = std::time::Duration::from_secs(2);
    let tty = frame("a\nb\n", every, 0, true);
    assert!(
        tty.starts_with("\x1b[HEvery 2s: gpumemd snapshot (refresh 1"),
        "{tty:?}"
    );
    assert!(tty.contains("a\x1b[K\nb\x1b[K\n") && tty.ends_with("\x1b[J"), "{tty:?}");
    let piped = frame("a\n", every, 4, false);
    assert!(!piped.contains('\x1b'), "{piped:?}");
    assert!(piped.starts_with("Every 2s: gpumemd snapshot (refresh 5"), "{piped:?}");
}

#[test]
fn a_closed_pipe_is_a_quiet_end() {
    assert!(quiet_pipe(std::io::ErrorKind::BrokenPipe.into()).is_ok());
    assert!(quiet_pipe(std::io::ErrorKind::PermissionDenied.into()).is_err());
}
