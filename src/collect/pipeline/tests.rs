//! The pipeline's holder verdicts over time: a process in D is live until
//! it has stayed there `stuck_after`, then holder `zombie` with state
//! `stuck`, and live again once it leaves D; Z is zombie at once. Checked
//! on a fixture `/proc` directory (the real reader) and on the simulated
//! fleet's tree (the demo's path), which must agree. Also: a GPU down for a
//! poll keeps its Xid counts and its events reach the shared event list.

use std::time::Duration;

use super::Pipeline;
use crate::app::config::{Config, PositiveDuration};
use crate::collect::source::scenario::Scenario;
use crate::collect::source::simulated::SimulatedSource;
use crate::collect::source::{GpuSource, RawDevice, RawPoll, RawProcess};
use crate::data::snapshot::{Device, Holder, Memory};

const GIB: u64 = 1 << 30;

fn stat(state: char) -> String {
    format!(
        "77 (python) {state} 1 77 77 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5000 0 0 \
         18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    )
}

fn poll_of(pid: u32) -> RawPoll {
    RawPoll {
        devices: vec![RawDevice {
            device: Device {
                uuid: "GPU-0".into(),
                up: true,
                memory: Some(Memory {
                    total_bytes: 80 * GIB,
                    used_bytes: 5 * GIB,
                    free_bytes: 75 * GIB,
                    reserved_bytes: Some(0),
                }),
                ..Device::default()
            },
            processes: vec![RawProcess {
                pid,
                used_bytes: Some(4 * GIB),
                ..RawProcess::default()
            }],
            ..RawDevice::default()
        }],
        ..RawPoll::default()
    }
}

/// (holder, state, zombie bytes of the device).
fn verdict(devices: &[Device], pid: u32) -> (Option<Holder>, String, u64) {
    let d = &devices[0];
    let p = d.processes.iter().find(|p| p.pid == pid).expect("listed");
    (p.holder, p.state.to_string(), d.holders.map_or(0, |h| h.zombie))
}

#[test]
fn d_on_a_fixture_proc_is_live_until_stuck_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("stat"), "btime 1700000000\n").expect("stat");
    std::fs::create_dir_all(dir.path().join("77")).expect("mkdir");
    std::fs::write(dir.path().join("77/status"), "Uid:\t1000\t1000\t1000\t1000\n").expect("status");
    std::fs::write(dir.path().join("77/cgroup"), "0::/system.slice/train.service\n").expect("cgroup");
    let set = |state: char| std::fs::write(dir.path().join("77/stat"), stat(state)).expect("stat");
    let mut cfg = Config::defaults(false).processes;
    cfg.proc_root = dir.path().to_path_buf();
    cfg.stuck_after = PositiveDuration::secs(30);
    let mut pipe = Pipeline::new(&cfg);
    let live = |state: &str| (Some(Holder::Live), state.to_string(), 0);
    let stuck = (Some(Holder::Zombie), "stuck".to_string(), 4 * GIB);
    // (time, state letter, verdict)
    let steps = [
        (0.0, 'D', live("disk-sleep")),
        (29.0, 'D', live("disk-sleep")),
        (30.0, 'D', stuck.clone()),
        (45.0, 'D', stuck.clone()),
        (46.0, 'R', live("running")),
        (47.0, 'D', live("disk-sleep")),
        (76.0, 'D', live("disk-sleep")),
        (77.0, 'D', stuck.clone()),
        (78.0, 'Z', (Some(Holder::Zombie), "zombie".to_string(), 4 * GIB)),
        (79.0, 'D', live("disk-sleep")),
    ];
    for (now, state, want) in steps {
        set(state);
        let (_, devices) = pipe.build(poll_of(77), now);
        assert_eq!(verdict(&devices, 77), want, "at {now} in {state}");
    }
    let (_, devices) = pipe.build(RawPoll::default(), 80.0);
    assert!(devices.is_empty());
    assert_eq!(pipe.retained().dsleep_entries, 0, "a process not listed is forgotten");
}

#[test]
fn a_disk_sleep_scenario_process_is_live_until_stuck_after() {
    let text = "name = \"d\"\n[[gpu]]\nmemory = \"80GiB\"\n\
                [[process]]\npid = 9\nstate = \"disk-sleep\"\nmemory = \"4GiB\"\n\
                [[process]]\npid = 10\nmemory = \"1GiB\"\nstop = \"2s\"\nexit = \"zombie\"\n";
    let sc = Scenario::parse(text, "d.toml", None).unwrap_or_else(|e| panic!("{e}"));
    let mut src = SimulatedSource::new(sc, Duration::from_secs(1), 1_700_000_000.0);
    let mut cfg = Config::defaults(true).processes;
    cfg.stuck_after = PositiveDuration::secs(5);
    let mut pipe = Pipeline::for_source(&cfg, &src);
    for t in 0..8u32 {
        let raw = src.poll(false).expect("simulated poll");
        let (_, devices) = pipe.build(raw, 1_700_000_000.0 + f64::from(t));
        let (holder, state, _) = verdict(&devices, 9);
        let want = if t < 5 { "disk-sleep" } else { "stuck" };
        assert_eq!(state, want, "pid 9 at {t} s");
        assert_eq!(holder == Some(Holder::Zombie), t >= 5, "pid 9 at {t} s");
        let (holder, state, _) = verdict(&devices, 10);
        let want = if t < 2 { "sleeping" } else { "zombie" };
        assert_eq!(state, want, "pid 10 at {t} s");
        assert_eq!(holder == Some(Holder::Zombie), t >= 2, "pid 10 at {t} s");
    }
}

/// A 2-poll spike of device and process memory shows in `used_max_bytes`
/// for the peak window after it, then goes; the current value never does.
#[test]
fn a_spike_between_scrapes_stays_in_the_peaks_for_the_window() {
    let cfg = Config::defaults(false);
    let mut pipe = Pipeline::new(&cfg.processes).with_peak_window(12.0);
    let at = |t: u64, spike: bool| {
        let mut raw = poll_of(4242);
        let extra = if spike { 4 * GIB } else { 0 };
        if let Some(m) = raw.devices[0].device.memory.as_mut() {
            m.used_bytes += extra;
        }
        raw.devices[0].processes[0].used_bytes = Some(4 * GIB + extra);
        (raw, 1000.0 + t as f64)
    };
    let mut seen = Vec::new();
    for t in 0..30 {
        let (raw, now) = at(t, (5..7).contains(&t));
        let (_, devs) = pipe.build(raw, now);
        let d = &devs[0];
        seen.push((
            d.memory.map(|m| m.used_bytes),
            d.used_max_bytes,
            d.processes[0].used_max_bytes,
        ));
    }
    assert_eq!(seen[4], (Some(5 * GIB), Some(5 * GIB), Some(4 * GIB)));
    for (t, s) in seen.iter().enumerate().take(16).skip(7) {
        assert_eq!(*s, (Some(5 * GIB), Some(9 * GIB), Some(8 * GIB)), "poll {t}");
    }
    assert_eq!(seen[29], (Some(5 * GIB), Some(5 * GIB), Some(4 * GIB)));
    assert!(pipe.retained().peak_series == 2, "{:?}", pipe.retained());
}

/// One GPU, up with an empty health reading or down without one, and the
/// Xid codes NVML gave for it this poll.
fn health_poll(up: bool, xids: &[u64]) -> RawPoll {
    RawPoll {
        devices: vec![RawDevice {
            device: Device {
                uuid: "GPU-0".into(),
                up,
                health: up.then(crate::data::snapshot::health::Health::default),
                ..Device::default()
            },
            xid_events: xids.to_vec(),
            ..RawDevice::default()
        }],
        ..RawPoll::default()
    }
}

#[test]
fn a_gpu_down_for_a_poll_keeps_its_xids_and_lists_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = Config::defaults(false).processes;
    cfg.proc_root = dir.path().to_path_buf();
    let log = crate::data::events::EventLog::shared();
    let mut pipe = Pipeline::new(&cfg).with_events(log.clone());
    pipe.build(health_poll(true, &[13]), 1.0);
    // The Xid that took it down arrives in the poll where it is down.
    let (_, down) = pipe.build(health_poll(false, &[79]), 2.0);
    assert!(down[0].health.is_none());
    let (_, back) = pipe.build(health_poll(true, &[]), 3.0);
    let h = back[0].health.as_ref().expect("health again");
    assert_eq!(h.xid_counts, [(13, 1), (79, 1)].into_iter().collect());
    let listed: Vec<(String, f64)> = log
        .list()
        .iter()
        .map(|e| (format!("{}:{}", e.kind, e.detail["xid"]), e.time))
        .collect();
    assert_eq!(listed, [("xid:13".to_string(), 1.0), ("xid:79".to_string(), 2.0)]);
}

/// `by_size` puts every list in the order a stable sort by (size
/// descending, PID) gives, ties in the list's order, whatever cycles the
/// permutation has: checked on lists with repeated sizes, repeated PIDs
/// and unknown sizes, shuffled by a small deterministic generator.
#[test]
fn by_size_matches_a_stable_sort_for_any_permutation() {
    use crate::data::snapshot::{Process, Who};
    use arcstr::ArcStr;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for n in [0usize, 1, 2, 3, 7, 64, 1000] {
        for _ in 0..20 {
            let list: Vec<Process> = (0..n)
                .map(|i| Process {
                    pid: (next() % 8) as u32,
                    used_bytes: (next() % 5 != 0).then(|| next() % 4),
                    // Tells values with equal keys apart.
                    who: Who::shared(ArcStr::from(format!("p{i}")), "", None),
                    ..Process::default()
                })
                .collect();
            let mut want = list.clone();
            want.sort_by_key(|p| (std::cmp::Reverse(p.used_bytes), p.pid));
            let mut got = list;
            super::by_size(&mut got);
            let names = |v: &[Process]| v.iter().map(|p| p.comm.to_string()).collect::<Vec<_>>();
            assert_eq!(names(&got), names(&want), "n = {n}");
        }
    }
}

/// An exited holder that still grows and memory no listed process accounts
/// for that grows are both forecast, and the JSON device says so.
#[test]
fn forecast_counts_exited_and_unattributed_growth() {
    let cfg = Config::from_toml("[processes]\nleak_window = \"30s\"\n", "test", false).expect("config");
    let mut pipe = Pipeline::new(&cfg.processes);
    let mib = 1u64 << 20;
    // A PID above any pid_max: gone from /proc, so an exited holder.
    let pid = 4_000_000;
    let mut last = None;
    for t in 0..80u64 {
        let mut raw = poll_of(pid);
        let (process, unattributed) = (4 * GIB + 4 * mib * t, GIB + 8 * mib * t);
        raw.devices[0].processes[0].used_bytes = Some(process);
        if let Some(m) = raw.devices[0].device.memory.as_mut() {
            m.used_bytes = process + unattributed;
            m.free_bytes = m.total_bytes - m.used_bytes;
        }
        let (_, devices) = pipe.build(raw, 1000.0 + t as f64);
        last = devices.into_iter().next();
    }
    let d = last.expect("a device");
    let free = d.memory.expect("memory").free_bytes as f64;
    let secs = d.full_in_seconds.expect("a forecast");
    // 4 + 8 MiB/s, within the estimate's noise.
    let rate = free / secs / mib as f64;
    assert!((rate - 12.0).abs() < 1.0, "forecast rate {rate:.2} MiB/s");
    let holders: Vec<Option<Holder>> = d.growers.iter().map(|g| g.holder).collect();
    assert_eq!(holders, [Some(Holder::Unattributed), Some(Holder::Exited)]);
    let json = serde_json::to_value(&d).expect("json");
    assert_eq!(json["growers"][1]["pid"], pid);
    assert!(json["growers"][0]["pid"].is_null());
    assert!(json["full_in_seconds"].as_f64().is_some_and(|s| s > 0.0));
}
