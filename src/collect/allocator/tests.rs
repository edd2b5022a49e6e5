//! Tests of the allocator view: the state's checks and counts (tables, no
//! clock: time is passed in); the socket with real kernel credentials is
//! tested in `tests/socket.rs`, with the helpers here.

use std::sync::Arc;
use std::time::Duration;

use super::config::AllocatorConfig;
use super::message::{DeviceReport, MessageError, parse};
use super::state::{AllocatorState, Outcome};
use crate::data::snapshot::{AllocPair, Device, Memory, Process, Who};

const GIB: u64 = 1 << 30;

pub(super) fn device(uuid: &str, procs: &[(u32, u64)]) -> Device {
    Device {
        uuid: uuid.into(),
        up: true,
        memory: Some(Memory {
            total_bytes: 80 * GIB,
            used_bytes: procs.iter().map(|p| p.1).sum(),
            free_bytes: 0,
            reserved_bytes: None,
        }),
        processes: procs
            .iter()
            .map(|&(pid, b)| Process {
                pid,
                used_bytes: Some(b),
                who: Who::shared(format!("p{pid}"), "", None),
                ..Process::default()
            })
            .collect(),
        ..Device::default()
    }
}

pub(super) fn report(uuid: &str, allocated: u64, reserved: u64, ooms: u64) -> String {
    format!(
        r#"{{"v":1,"devices":[{{"uuid":"{uuid}","allocated":{{"current":{allocated},"peak":{allocated}}},"reserved":{{"current":{reserved},"peak":{reserved}}},"active":{{"current":{allocated},"peak":{allocated}}},"inactive_split":{{"current":0,"peak":0}},"alloc_retries":0,"ooms":{ooms}}}]}}"#
    )
}

pub(super) fn state() -> AllocatorState {
    AllocatorState::new(&AllocatorConfig::default())
}

fn count(s: &AllocatorState, result: &str) -> u64 {
    s.counts().iter().find(|(r, _)| *r == result).map_or(0, |c| c.1)
}

pub(super) fn send(s: &AllocatorState, pid: u32, body: &str, now: f64) -> Outcome {
    s.receive(Some(pid), body.as_bytes(), body.len(), now)
}

#[test]
fn bad_input_is_dropped_and_counted_by_reason() {
    let s = state();
    s.join(
        &mut [device("GPU-a", &[(10, 4 * GIB)]), device("GPU-b", &[(11, GIB)])],
        0.0,
    );
    let ok = report("GPU-a", GIB, 2 * GIB, 0);
    let cases: Vec<(&str, Option<u32>, String, usize, Outcome)> = vec![
        ("good", Some(10), ok.clone(), ok.len(), Outcome::Accepted),
        ("no credentials", None, ok.clone(), ok.len(), Outcome::NoCredentials),
        ("pid 0", Some(0), ok.clone(), ok.len(), Outcome::NoCredentials),
        ("garbage", Some(10), "\u{1}\u{2}garbage".into(), 9, Outcome::Malformed),
        (
            "truncated",
            Some(10),
            ok[..ok.len() / 2].into(),
            ok.len() / 2,
            Outcome::Malformed,
        ),
        (
            "cut by the kernel",
            Some(10),
            ok[..100].into(),
            ok.len(),
            Outcome::Oversize,
        ),
        ("oversize", Some(10), "x".repeat(9000), 9000, Outcome::Oversize),
        (
            "newer version",
            Some(10),
            ok.replace("\"v\":1", "\"v\":2"),
            ok.len(),
            Outcome::Version,
        ),
        (
            "no version",
            Some(10),
            "{\"devices\":[]}".into(),
            14,
            Outcome::Malformed,
        ),
        (
            "negative bytes",
            Some(10),
            ok.replace("\"ooms\":0", "\"ooms\":-1"),
            ok.len() + 1,
            Outcome::Malformed,
        ),
        ("unlisted pid", Some(99), ok.clone(), ok.len(), Outcome::UnknownPid),
        (
            "a GPU it does not use",
            Some(11),
            ok.clone(),
            ok.len(),
            Outcome::ForeignGpu,
        ),
    ];
    for (i, (name, pid, body, len, want)) in cases.into_iter().enumerate() {
        let got = s.receive(pid, body.as_bytes(), len, 1.0 + i as f64);
        assert_eq!(got, want, "{name}");
    }
    let counts = s.counts();
    let total: u64 = counts.iter().map(|c| c.1).sum();
    assert_eq!(total, 12, "every datagram counted once: {counts:?}");
    assert_eq!(count(&s, "malformed"), 4);
    assert_eq!(count(&s, "oversize"), 2);
    assert_eq!(count(&s, "accepted"), 1);
}

#[test]
fn parse_refuses_shapes_it_does_not_know() {
    assert!(matches!(parse(b"{\"v\":7}"), Err(MessageError::Version(7))));
    let many = format!(
        "{{\"v\":1,\"devices\":[{}]}}",
        vec![report("GPU-a", 1, 1, 0)[21..].trim_end_matches("]}").to_string(); 65].join(",")
    );
    assert!(matches!(parse(many.as_bytes()), Err(MessageError::Malformed(_))));
    let d = parse(report("GPU-a", 5, 7, 1).as_bytes()).unwrap_or_default();
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].allocated.current, d[0].reserved.current, d[0].ooms), (5, 7, 1));
}

#[test]
fn a_flood_from_one_pid_is_rate_limited_and_others_still_pass() {
    let s = state();
    s.join(&mut [device("GPU-a", &[(10, GIB), (12, GIB)])], 0.0);
    let body = report("GPU-a", 1, 2, 0);
    let accepted = (0..1000)
        .filter(|_| send(&s, 10, &body, 5.0) == Outcome::Accepted)
        .count();
    // A burst of 4 x rate (2/s) passes, the rest is dropped.
    assert_eq!(accepted, 8);
    assert_eq!(count(&s, "rate_limited"), 992);
    assert_eq!(
        send(&s, 12, &body, 5.0),
        Outcome::Accepted,
        "another PID is not held up"
    );
    // Tokens come back with time: one more after half a second at 2/s.
    assert_eq!(send(&s, 10, &body, 5.5), Outcome::Accepted);
    assert_eq!(send(&s, 10, &body, 5.5), Outcome::RateLimited);
}

#[test]
fn figures_join_nvml_and_split_it_and_go_with_the_process() {
    let s = state();
    let mut devs = [device("GPU-a", &[(10, 10 * GIB), (11, GIB)])];
    s.join(&mut devs, 0.0);
    assert_eq!(
        send(&s, 10, &report("GPU-a", 6 * GIB, 9 * GIB, 0), 1.0),
        Outcome::Accepted
    );
    s.join(&mut devs, 2.0);
    let a = devs[0].processes[0].allocator.clone().unwrap_or_default();
    assert_eq!(
        (a.tensors_bytes, a.cache_bytes, a.other_bytes),
        (6 * GIB, 3 * GIB, Some(GIB))
    );
    assert_eq!(
        a.allocated,
        AllocPair {
            current: 6 * GIB,
            peak: 6 * GIB
        }
    );
    assert!(devs[0].processes[1].allocator.is_none(), "only the sender gets figures");
    // Stale after 30 s without a report: not shown, still held.
    s.join(&mut devs, 40.0);
    assert!(devs[0].processes[0].allocator.is_none());
    assert_eq!(s.tracked().0, 1);
    // The process leaves NVML's list: its report and rate bucket go.
    let mut after = [device("GPU-a", &[(11, GIB)])];
    s.join(&mut after, 41.0);
    assert_eq!(s.tracked(), (0, 0, 1));
    assert_eq!(send(&s, 10, &report("GPU-a", 1, 1, 0), 42.0), Outcome::UnknownPid);
}

#[test]
fn a_rising_oom_count_records_one_event_with_the_gpus_holders() {
    let s = state();
    let mut devs = [device("GPU-a", &[(10, 30 * GIB), (11, 40 * GIB), (12, 5 * GIB)])];
    s.join(&mut devs, 0.0);
    assert_eq!(send(&s, 10, &report("GPU-a", GIB, 2 * GIB, 0), 1.0), Outcome::Accepted);
    s.join(&mut devs, 1.5);
    assert!(s.events().is_empty());
    assert_eq!(send(&s, 10, &report("GPU-a", GIB, 2 * GIB, 1), 2.0), Outcome::Accepted);
    assert_eq!(send(&s, 10, &report("GPU-a", GIB, 2 * GIB, 1), 3.0), Outcome::Accepted);
    let ev = s.events();
    assert_eq!(ev.len(), 1, "the same count again is no new OOM");
    assert_eq!((ev[0].pid, ev[0].uuid.as_str(), ev[0].time), (10, "GPU-a", 2.0));
    let pids: Vec<u32> = ev[0].gpu.processes.iter().map(|r| r.pid).collect();
    assert_eq!(pids, [10, 11, 12], "the whole table, as polled");
    assert_eq!(ev[0].gpu.processes[1].used_bytes, Some(40 * GIB));
    assert_eq!(ev[0].gpu.biggest_except(ev[0].pid, 1), ["p11 (11) 40.0 GiB"]);
    s.join(&mut devs, 4.0);
    let a = devs[0].processes[0].allocator.clone().unwrap_or_default();
    assert_eq!((a.ooms, a.last_oom_at), (1, Some(2.0)));
}

#[test]
fn the_event_store_is_bounded() {
    let cfg = AllocatorConfig {
        events: 3,
        rate_limit: 1000.0,
        ..AllocatorConfig::default()
    };
    let s = AllocatorState::new(&cfg);
    s.join(&mut [device("GPU-a", &[(10, GIB)])], 0.0);
    for n in 1..=10 {
        assert_eq!(send(&s, 10, &report("GPU-a", 1, 1, n), n as f64), Outcome::Accepted);
    }
    let times: Vec<f64> = s.events().iter().map(|e| e.time).collect();
    assert_eq!(times, [8.0, 9.0, 10.0]);
}

#[test]
fn config_checks_name_the_key() {
    let bad = |f: fn(&mut AllocatorConfig)| {
        let mut c = AllocatorConfig::default();
        f(&mut c);
        c.check().err().map(|e| e.0)
    };
    assert_eq!(bad(|_| {}), None);
    assert_eq!(bad(|c| c.mode = "rw".into()), Some("mode"));
    assert_eq!(bad(|c| c.mode = "01777".into()), Some("mode"));
    assert_eq!(bad(|c| c.max_message_bytes.0 = 10), Some("max_message_bytes"));
    assert_eq!(bad(|c| c.rate_limit = 0.0), Some("rate_limit"));
    assert_eq!(bad(|c| c.events = 0), Some("events"));
    assert_eq!(
        bad(|c| {
            c.enabled = true;
            c.socket = "rel.sock".into();
        }),
        Some("socket")
    );
    let _unused: Option<DeviceReport> = None;
}

/// Through the pipeline, as the daemon runs it: two processes whose NVML
/// figure grows alike; one's tensors grow (a leak), the other's do not
/// (its cache grows).
#[test]
fn the_pipeline_tells_a_tensor_leak_from_a_growing_cache() {
    use crate::collect::pipeline::Pipeline;
    use crate::collect::source::{RawDevice, RawPoll, RawProcess};
    let proc_root = tempfile::tempdir().unwrap();
    let mut cfg = crate::app::config::Config::defaults(false).processes;
    cfg.proc_root = proc_root.path().to_path_buf();
    cfg.leak_window = crate::data::units::PositiveDuration::new(Duration::from_secs(60)).unwrap();
    let st = Arc::new(state());
    let mut pipe = Pipeline::new(&cfg).with_allocator(st.clone());
    let mib = 1u64 << 20;
    let mut last = Vec::new();
    for s in 0..180u64 {
        let used = 2 * GIB + s * 4 * mib;
        let raw = RawPoll {
            devices: vec![RawDevice {
                device: Device {
                    uuid: "GPU-a".into(),
                    up: true,
                    memory: Some(Memory {
                        total_bytes: 80 * GIB,
                        used_bytes: 2 * used,
                        free_bytes: 80 * GIB - 2 * used,
                        reserved_bytes: Some(0),
                    }),
                    ..Device::default()
                },
                processes: [1, 2]
                    .map(|pid| RawProcess {
                        pid,
                        used_bytes: Some(used),
                        ..RawProcess::default()
                    })
                    .to_vec(),
                ..RawDevice::default()
            }],
            ..RawPoll::default()
        };
        let (_, devs) = pipe.build(raw, s as f64);
        last = devs;
        for (pid, allocated) in [(1, GIB + s * 4 * mib), (2, GIB)] {
            let dev = DeviceReport {
                uuid: "GPU-a".into(),
                allocated: AllocPair {
                    current: allocated,
                    peak: allocated,
                },
                reserved: AllocPair {
                    current: used - GIB / 2,
                    peak: used,
                },
                ..DeviceReport::default()
            };
            assert_eq!(st.record(pid, vec![dev], s as f64), Outcome::Accepted);
        }
    }
    let verdict = |pid: u32| {
        let p = last[0].processes.iter().find(|p| p.pid == pid).unwrap();
        (p.leak_suspected, p.allocator.as_ref().and_then(|a| a.growth))
    };
    assert_eq!(verdict(1), (true, Some("tensors")));
    assert_eq!(verdict(2), (false, Some("cache")));
}

mod socket;

#[test]
fn a_simulated_fleet_is_listed_whatever_its_order() {
    use crate::collect::source::GpuSource;
    use crate::collect::source::scenario::large;
    use crate::collect::source::simulated::SimulatedSource;
    let mut src = SimulatedSource::new(large(4, 50), Duration::from_secs(1), 1.0e9);
    let s = Arc::new(state());
    let mut pipe = crate::collect::pipeline::Pipeline::for_source(&crate::app::config::Processes::default(), &src)
        .with_allocator(Arc::clone(&s));
    for i in 0..5 {
        let now = 1.0e9 + f64::from(i);
        let raw = src.poll(true).expect("simulated poll");
        let (_, mut devices) = pipe.build(raw, now);
        // The same listing in another order (sizes change the order).
        devices.iter_mut().for_each(|d| d.processes.reverse());
        s.join(&mut devices, now);
    }
    assert_eq!(s.tracked().2, 200);
}
