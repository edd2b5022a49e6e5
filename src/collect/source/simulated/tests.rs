//! Tests of the simulated fleet: determinism, lifecycles (exit, late
//! release, zombie), lost GPUs, MIG and trace replay.

use super::*;
use crate::collect::attribution::{ProcError, ProcFs, ProcessIdentity, ReadOptions};
use crate::collect::source::scenario::Scenario;

fn source(name: &str) -> SimulatedSource {
    let s = Scenario::resolve(name).unwrap_or_else(|e| panic!("{e}"));
    SimulatedSource::new(s, Duration::from_secs(1), 1_700_000_000.0)
}

/// Polls until scenario time `t` (poll N is at t = N-1) and returns that poll.
fn at(src: &mut SimulatedSource, t: u64) -> RawPoll {
    let mut last = None;
    while src.poll < t + 1 {
        last = Some(src.poll(true).expect("simulated polls never fail"));
    }
    last.expect("polled at least once")
}

/// What the source's /proc tree says of `pid` now, read as the pipeline does.
fn ident(src: &SimulatedSource, pid: u32) -> Result<ProcessIdentity, ProcError> {
    let tree = src.proc_tree().expect("a simulated source keeps a /proc tree");
    let opts = ReadOptions {
        cmdline: true,
        ..ReadOptions::default()
    };
    ProcFs::on(tree).read(pid, &opts)
}

fn find(p: &RawPoll, pid: u32) -> Option<&RawProcess> {
    p.devices.iter().flat_map(|d| &d.processes).find(|x| x.pid == pid)
}

#[test]
fn same_scenario_same_polls() {
    let (mut a, mut b) = (source("default"), source("default"));
    for _ in 0..50 {
        assert_eq!(a.poll(true), b.poll(true));
    }
}

#[test]
fn every_builtin_resolves() {
    for name in crate::collect::source::scenario::BUILTIN_NAMES {
        let mut s = source(name);
        let p = s.poll(false).expect("poll");
        assert!(!p.devices.is_empty(), "{name}");
    }
    let e = Scenario::resolve("nope")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("unknown scenario `nope`") && e.contains("default, gpu-lost, mig, large"),
        "{e}"
    );
}

#[test]
fn default_lifecycles() {
    let mut s = source("default");
    // 5303 exits at 15 s but stays listed, gone from /proc, until 45 s.
    let p = at(&mut s, 20);
    assert!(find(&p, 5303).is_some(), "5303 listed at 20s");
    assert!(ident(&s, 5303).is_err_and(|e| e.is_gone()), "exited: no /proc entry");
    // 5202 left the list at 20 s; its 12 GiB stays used until 60 s.
    assert!(find(&p, 5202).is_none());
    let gpu1 = &p.devices[1];
    let listed: u64 = gpu1.processes.iter().filter_map(|x| x.used_bytes).sum();
    let used = gpu1.device.memory.map(|m| m.used_bytes).unwrap_or(0);
    assert!(
        used >= listed + (12 << 30),
        "late release must stay in used: {used} vs {listed}"
    );
    // 5404 is a zombie from 5 s on.
    assert!(find(&p, 5404).is_some());
    assert_eq!(ident(&s, 5404).map(|i| i.state).ok(), Some(ProcState::Zombie));
    let p = at(&mut s, 61);
    assert!(find(&p, 5303).is_none());
    let used = p.devices[1].device.memory.map(|m| m.used_bytes).unwrap_or(0);
    assert!(used < 30 << 30, "released by 60 s: {used}");
}

#[test]
fn leak_grows_and_loop_restarts_with_new_start_time() {
    let mut s = source("default");
    let first = at(&mut s, 1);
    let later = at(&mut s, 100);
    let b = |p: &RawPoll| find(p, 4202).and_then(|x| x.used_bytes).unwrap_or(0);
    assert!(b(&later) > b(&first) + (4 << 30), "48 MiB/s over 99 s");
    let start = |s: &SimulatedSource| ident(s, 4202).ok().and_then(|i| i.start_time);
    let before = start(&s);
    let after_loop = at(&mut s, 301);
    assert!(find(&after_loop, 4202).is_some());
    assert_eq!(start(&s), before.map(|t| t + 300.0));
}

#[test]
fn the_tree_shows_the_scenario_identities() {
    let mut s = source("default");
    at(&mut s, 2);
    let train = ident(&s, 4101).expect("4101 runs");
    assert_eq!(
        (train.who.comm.as_str(), train.who.user.as_str(), train.who.uid),
        ("python", "alice", Some(1000))
    );
    assert_eq!(train.state, ProcState::Sleeping);
    assert_eq!(train.start_time, Some(1_700_000_000.0));
    assert_eq!(
        (train.cgroup.job.as_deref(), train.cgroup.slice.as_deref()),
        (Some("4242"), Some("system.slice"))
    );
    assert_eq!(
        train.cmdline.as_deref(),
        Some("python train.py --epochs 90 --wandb-api-key=<redacted>")
    );
    let pod = ident(&s, 5101).expect("5101 runs");
    assert_eq!(
        pod.cgroup.pod_uid.as_deref(),
        Some("6b1f0c2e-8d4a-4f3b-9e2d-7c1a5b0e4f93")
    );
    assert_eq!(pod.cgroup.qos_class.as_deref(), Some("burstable"));
    assert_eq!(
        pod.cgroup.container_runtime.map(|r| r.as_str()),
        Some(arcstr::literal!("containerd"))
    );
    assert_eq!(pod.cgroup.unit, None);
    let notebook = ident(&s, 4303).expect("4303 runs");
    assert_eq!(notebook.cgroup.unit.as_deref(), Some("jupyter.service"));
    assert!(ident(&s, 5202).is_ok(), "5202 runs until 20 s");
    at(&mut s, 21);
    assert!(ident(&s, 5202).is_err_and(|e| e.is_gone()), "released: reaped");
}

#[test]
fn disk_sleep_and_unknown_states() {
    let text = "name = \"d\"\n[[gpu]]\nmemory = \"1GiB\"\n[[process]]\npid = 9\nstate = \"disk-sleep\"\n";
    let sc = Scenario::parse(text, "d.toml", None).unwrap_or_else(|e| panic!("{e}"));
    let mut s = SimulatedSource::new(sc, Duration::from_secs(1), 0.0);
    at(&mut s, 0);
    assert_eq!(ident(&s, 9).map(|i| i.state).ok(), Some(ProcState::DiskSleep));
    let e = Scenario::parse(&text.replace("disk-sleep", "napping"), "d.toml", None)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("state `napping`"), "{e}");
}

#[test]
fn gpu_lost_from_poll_5() {
    let mut s = source("gpu-lost");
    let p = at(&mut s, 3);
    assert!(p.devices.iter().all(|d| d.device.up));
    let p = at(&mut s, 4);
    assert_eq!(p.devices.len(), 8);
    assert!(!p.devices[3].device.up && p.devices[3].device.memory.is_none());
    assert!(p.devices.iter().enumerate().all(|(i, d)| i == 3 || d.device.up));
}

#[test]
fn mig_instances_are_devices_with_a_parent() {
    let mut s = source("mig");
    let p = s.poll(false).expect("poll");
    let parent = &p.devices[0];
    assert!(parent.processes.is_empty() && parent.device.parent_uuid.is_empty());
    let inst: Vec<_> = p
        .devices
        .iter()
        .filter(|d| d.device.parent_uuid == parent.device.uuid)
        .collect();
    assert_eq!(inst.len(), 3);
    assert_eq!(inst[0].device.mig_profile, "3g.40gb");
    assert!(inst[0].device.uuid.starts_with("MIG-"));
    let sum: u64 = inst.iter().filter_map(|d| d.device.memory).map(|m| m.used_bytes).sum();
    assert_eq!(parent.device.memory.map(|m| m.used_bytes), Some(sum));
}

#[test]
fn trace_replay_follows_the_csv_and_ends_after_the_last_row() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let sc = Scenario::load(&dir.join("traces.toml")).unwrap_or_else(|e| panic!("{e}"));
    let leak_rows = sc
        .processes
        .iter()
        .find(|p| p.pid == 731)
        .map(|p| p.trace_rows.clone())
        .unwrap_or_default();
    assert!(leak_rows.len() > 400);
    let mut s = SimulatedSource::new(sc, Duration::from_secs(1), 0.0);
    let p = at(&mut s, 10);
    // At 10 s of replay the value is the last row at or before 10 s.
    let want = leak_rows.iter().take_while(|r| r.0 <= 10.0).last().map(|r| r.1);
    assert_eq!(find(&p, 731).and_then(|x| x.used_bytes), want);
    let p = at(&mut s, 200);
    assert!(find(&p, 731).is_none(), "gone after the last row");
}

#[test]
fn bad_scenarios_say_what_is_wrong() {
    let cases = [
        ("name = \"x\"\ngpu = []", "needs at least one [[gpu]]"),
        (
            "name = \"x\"\n[[gpu]]\nmemory = \"1GiB\"\n[[process]]\ngpu = 2\npid = 1",
            "process 1 is on gpu 2, but there are 1 GPUs",
        ),
        ("name = \"x\"\n[[gpu]]\nmemory = \"lots\"", "line 3"),
        (
            "name = \"x\"\n[[gpu]]\nmemory = \"1GiB\"\ncolour = 1",
            "unknown field `colour`",
        ),
        (
            "name = \"x\"\n[[gpu]]\nmemory = \"1GiB\"\n[[process]]\npid = 4\nsm_util = 101",
            "process 4: sm_util 101 is not a percent from 0 to 100",
        ),
        (
            "name = \"x\"\n[[gpu]]\nmemory = \"1GiB\"\n[[process]]\npid = 4\ninstance = 70000",
            "process 4: instance 70000 is not a MIG instance number",
        ),
    ];
    for (text, want) in cases {
        let e = Scenario::parse(text, "t.toml", None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

/// The tree follows the scenario (`proctree.rs`):
/// at every poll, off the whole-second grid and across two loop wraps, it
/// must still show what the scenario says of every PID now.
#[test]
fn the_tree_matches_the_scenario_at_every_poll() {
    let sc = Scenario::resolve("default").unwrap_or_else(|e| panic!("{e}"));
    let epoch = 1_700_000_000.0;
    let mut s = SimulatedSource::new(sc, Duration::from_millis(700), epoch);
    let mut pids: Vec<u32> = s.scenario().processes.iter().map(|p| p.pid).collect();
    pids.dedup();
    let mut fs = ProcFs::on(s.proc_tree().expect("tree")).with_identity_refresh(Duration::ZERO);
    let (mut shown, mut gone) = (0, 0);
    for n in 1..=1000u64 {
        s.poll(false).expect("poll");
        let t = (n - 1) as f64 * 0.7;
        let cycle = (t / 300.0).floor();
        let t = t - cycle * 300.0;
        for &pid in &pids {
            let want = s
                .scenario()
                .processes
                .iter()
                .filter(|p| p.pid == pid)
                .find_map(|p| proc_state(p, t, None).map(|st| (st, epoch + cycle * 300.0 + p.start.0)));
            let got = fs.read(pid, &ReadOptions::default());
            match (want, got) {
                (Some((st, start)), Ok(id)) => {
                    assert_eq!((id.state, id.start_time), (st, Some(start)), "pid {pid} at poll {n}");
                    shown += 1;
                }
                (None, Err(e)) if e.is_gone() => gone += 1,
                (want, got) => panic!("pid {pid} at poll {n}: want {want:?}, got {got:?}"),
            }
        }
    }
    assert!(
        shown > 1000 && gone > 100,
        "both cases seen: {shown} shown, {gone} gone"
    );
}

#[test]
fn granularity_rounds_processes_down_to_whole_units() {
    let text = "name = \"g\"\nseed = 3\n[[gpu]]\nmemory = \"1GiB\"\n[[process]]\npid = 9\nmemory = \"100MiB\"\njitter = \"1MiB\"\n";
    let bytes = |text: &str| {
        let sc = Scenario::parse(text, "g.toml", None).unwrap_or_else(|e| panic!("{e}"));
        let mut s = SimulatedSource::new(sc, Duration::from_secs(1), 0.0);
        (0..20)
            .map(|t| find(&at(&mut s, t), 9).and_then(|p| p.used_bytes).unwrap_or(0))
            .collect::<Vec<u64>>()
    };
    let exact = bytes(text);
    assert!(
        exact.iter().any(|b| b % (1 << 20) != 0),
        "jitter gives odd bytes: {exact:?}"
    );
    let whole = bytes(&text.replace("seed = 3", "seed = 3\ngranularity = \"1MiB\""));
    let want: Vec<u64> = exact.iter().map(|b| b - b % (1 << 20)).collect();
    assert_eq!(whole, want);
    // The large fleet reports whole MiB, as NVML does.
    let mut large = source("large");
    let p = large.poll(false).expect("poll");
    let listed: Vec<u64> = p
        .devices
        .iter()
        .flat_map(|d| &d.processes)
        .filter_map(|p| p.used_bytes)
        .collect();
    assert_eq!(listed.len(), 64_000);
    assert!(listed.iter().all(|b| b % (1 << 20) == 0));
}

/// A simulated signal ends the process at the next poll, per its `exit`
/// (here the default, released): it leaves the list and `/proc`; the
/// others stay.
#[test]
fn a_simulated_kill_ends_the_process_at_the_next_poll() {
    let mut src = source("default");
    let p = at(&mut src, 5);
    assert!(find(&p, 4101).is_some() && ident(&src, 4101).is_ok());
    let others = p.devices.iter().flat_map(|d| &d.processes).count();
    src.simulated_kill()
        .expect("a simulated fleet can be signalled")
        .kill(4101);
    let p = src.poll(true).expect("poll");
    assert!(find(&p, 4101).is_none(), "still listed");
    assert!(ident(&src, 4101).is_err(), "still in /proc");
    assert_eq!(p.devices.iter().flat_map(|d| &d.processes).count(), others - 1);
}
