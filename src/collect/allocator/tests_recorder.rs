//! The flight recorder's part of the allocator view: a report that names a
//! snapshot links it to its OOM event, and the receiver learns a reporting
//! process's reply address from the socket, so a request reaches it.
//! Waits on conditions with deadlines, never sleeps.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::time::Duration;

use super::config::AllocatorConfig;
use super::recorder::{Ask, RecordError};
use super::state::Outcome;
use super::tests::{device, report, send, state};

const GIB: u64 = 1 << 30;

fn with_snapshot(body: &str, path: &str) -> String {
    format!("{},\"snapshot\":\"{path}\"}}", body.trim_end_matches('}'))
}

#[test]
fn a_report_naming_a_snapshot_links_it_to_its_oom() {
    let s = state();
    s.join(&mut [device("GPU-a", &[(10, 3 * GIB), (11, GIB)])], 0.0);
    let body = with_snapshot(
        &report("GPU-a", GIB, 2 * GIB, 1),
        "/var/lib/gpumemd/spool/1000/10-1-oom.pickle",
    );
    assert_eq!(send(&s, 10, &body, 1.0), Outcome::Accepted);
    let ev = s.events();
    assert_eq!(
        ev[0].snapshot.as_deref(),
        Some("/var/lib/gpumemd/spool/1000/10-1-oom.pickle")
    );
    let json = serde_json::to_value(&ev[0]).expect("json");
    assert_eq!(json["snapshot"], "/var/lib/gpumemd/spool/1000/10-1-oom.pickle");
    // A relative or climbing path is not linked; the report still counts.
    let odd = with_snapshot(&report("GPU-a", GIB, 2 * GIB, 2), "../../etc/passwd");
    assert_eq!(send(&s, 10, &odd, 2.0), Outcome::Accepted);
    assert_eq!(s.events()[1].snapshot, None);
    assert_eq!(send(&s, 11, &report("GPU-a", 1, 1, 1), 3.0), Outcome::Accepted);
    assert_eq!(s.events()[2].snapshot, None, "no snapshot named, none linked");
}

#[test]
fn the_receiver_learns_where_to_ask_a_reporting_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = AllocatorConfig {
        enabled: true,
        socket: dir.path().join("allocator.sock"),
        ..AllocatorConfig::default()
    };
    let st = Arc::new(state());
    let me = std::process::id();
    st.join(&mut [device("GPU-a", &[(me, GIB)])], 0.0);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let _guard = super::receiver::start(&cfg, st.clone(), rx).expect("receiver");
    let name = format!("gpumemd-test-reporter-{me}");
    let client =
        UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).expect("addr")).expect("bind");
    client.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let uid = rustix::process::getuid().as_raw();
    let spool = dir.path().join("spool");
    assert!(matches!(
        st.recorder.ask(me, uid, Ask::Record, &spool),
        Err(RecordError::NotReporting(_))
    ));
    client
        .send_to(report("GPU-a", GIB, GIB, 0).as_bytes(), &cfg.socket)
        .expect("report");
    let asked = crate::tests::wait_for("the reporter's address", || {
        st.recorder.ask(me, uid, Ask::Record, &spool)
    });
    let mut buf = [0u8; 512];
    let n = client.recv(&mut buf).expect("the request");
    let v: serde_json::Value = serde_json::from_slice(&buf[..n]).expect("json");
    assert_eq!(v["cmd"], "record");
    assert_eq!(v["spool"].as_str(), asked.to_str());
}

#[test]
fn the_forecast_arms_a_reporting_process_and_stops_it_when_the_danger_passes() {
    use crate::data::snapshot::{AllocatorFigures, Device, Process, Snapshot, Who};
    let dir = tempfile::tempdir().expect("tempdir");
    let st = Arc::new(state());
    let me = std::process::id();
    let name = format!("gpumemd-test-armed-{me}");
    let client =
        UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).expect("addr")).expect("bind");
    client.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    st.recorder.note(me, name.as_bytes());
    let uid = rustix::process::getuid().as_raw();
    let snap = |full_in: Option<f64>| Snapshot {
        seq: 5,
        nvml_up: true,
        devices: vec![Device {
            uuid: "GPU-a".into(),
            up: true,
            full_in_seconds: full_in,
            processes: vec![Process {
                pid: me,
                who: Who::shared("python3", "me", Some(uid)),
                allocator: Some(Box::new(AllocatorFigures::default())),
                ..Process::default()
            }],
            ..Device::default()
        }],
        ..Snapshot::default()
    };
    let mut follow = super::arm::follower(st.clone(), 600.0, dir.path().join("spool"));
    let mut buf = [0u8; 512];
    let mut next = || {
        let n = client.recv(&mut buf).expect("a request");
        serde_json::from_slice::<serde_json::Value>(&buf[..n]).expect("json")["cmd"].clone()
    };
    follow(&snap(Some(120.0)));
    assert_eq!(next(), "record");
    follow(&snap(Some(100.0)));
    follow(&snap(None));
    assert_eq!(next(), "stop", "one record, then the stop: nothing asked twice");
    assert!(dir.path().join("spool").join(uid.to_string()).is_dir());
}
