//! Tests of the job-end reports: the tracker against scripted polls with
//! hand-computed figures, the replay of every recorded trace, the store
//! on disk and its bounds. Owns only tests; must not reach a real GPU or
//! the state directory of this machine.

use std::time::Duration;

use super::*;
use crate::app::config::Config;
use crate::collect::pipeline::Pipeline;
use crate::collect::source::GpuSource;
use crate::collect::source::scenario::Scenario;
use crate::collect::source::simulated::SimulatedSource;
use crate::data::snapshot::{AllocatorFigures, Device, Holder, Memory, Process, Snapshot, Who};

const GIB: u64 = 1 << 30;
const EPOCH: f64 = 1000.0;

/// An 80 GiB GPU. Job 77 (PID 100) steps from 8 to 76 GiB in four steps
/// over 40 s, stops computing at 30 s, ends at 42 s and its memory is
/// released 10 s later. Job 88 (PID 200) holds 3 GiB, ends at 20 s, and
/// NVML lists it as exited for 5 s more.
const SCRIPT: &str = r#"
name = "report-test"
overhead_per_process = "0MiB"

[[gpu]]
memory = "80GiB"

[[process]]
pid = 100
comm = "python"
user = "alice"
uid = 1000
job = "77"
memory = "8GiB"
ramp_to = "76GiB"
ramp = "40s"
steps = 4
stop = "42s"
exit = "released"
release_after = "10s"
sm_util = 50
busy_for = "30s"

[[process]]
pid = 200
comm = "python"
user = "bob"
uid = 1001
job = "88"
memory = "3GiB"
stop = "20s"
exit = "exited"
release_after = "5s"
sm_util = 10
"#;

/// Polls `scenario` every `step` seconds `polls` times through the real
/// pipeline into `reports`.
fn replay(scenario: Scenario, step: f64, polls: u64, reports: &Reports) {
    let cfg = Config::from_toml("[processes]\nidle_after = \"5s\"\n", "test", false).expect("config");
    let mut src = SimulatedSource::new(scenario, Duration::from_secs_f64(step), EPOCH);
    let mut pipe = Pipeline::for_source(&cfg.processes, &src);
    for i in 0..polls {
        let t = EPOCH + i as f64 * step;
        let (_, devices) = pipe.build(src.poll(true).expect("poll"), t);
        reports.observe(&snapshot(i + 1, t, devices));
    }
}

fn snapshot(seq: u64, t: f64, devices: Vec<Device>) -> Snapshot {
    Snapshot {
        seq,
        timestamp: t,
        nvml_up: true,
        devices,
        ..Snapshot::default()
    }
}

fn one(reports: &Reports, q: Query) -> Report {
    let found = reports.query(&q);
    assert_eq!(found.len(), 1, "{q:?}: {found:#?}");
    found.into_iter().next().expect("one")
}

fn job(id: &str) -> Query {
    Query {
        job: Some(id.into()),
        ..Query::default()
    }
}

#[test]
fn a_scripted_job_gets_the_hand_computed_report() {
    let reports = Reports::in_memory();
    let sc = Scenario::parse(SCRIPT, "test", None).expect("scenario");
    replay(sc, 1.0, 60, &reports);
    let r = one(&reports, job("77"));
    assert_eq!(
        (r.state, r.user.as_str(), r.pids.as_slice()),
        (ReportState::Ended, "alice", &[100][..])
    );
    // Live at t = 0..41, first seen gone at 42, released at 52.
    assert_eq!(
        (r.started, r.ended, r.closed),
        (EPOCH, Some(EPOCH + 42.0), Some(EPOCH + 52.0))
    );
    let g = &r.gpus[0];
    assert_eq!((g.peak_bytes, g.polls), (76 * GIB, 42));
    // 42 polls: 10 each at 8, 25, 42 and 59 GiB, 2 at 76. The 40th of 42
    // is 59 GiB (73.75 %), reported as its percent's upper edge, 74 %.
    assert_eq!(g.p95_bytes, Some((0.74 * (80 * GIB) as f64) as u64));
    assert_eq!(g.above_90_seconds, 2.0, "76 GiB at t = 40 and 41");
    // Quiet from 30 s, flagged idle 5 s later: t = 34..41, six polls at
    // 59 GiB and two at 76.
    assert_eq!(g.idle_seconds, 8.0);
    let gib_s = 6.0 * 59.0 + 2.0 * 76.0;
    assert!((g.idle_gib_hours - gib_s / 3600.0).abs() < 1e-9, "{}", g.idle_gib_hours);
    assert_eq!((g.left_behind_bytes, g.left_behind_seconds), (76 * GIB, 10.0));
    assert!(!g.left_behind_ongoing);
    let s = r.suggested.expect("suggestion");
    assert_eq!(
        (s.gres_gpumem.as_str(), s.gpu_fraction, s.vllm_gpu_memory_utilization),
        ("80G", 1.0, 1.0)
    );
    let p = one(
        &reports,
        Query {
            pid: Some(100),
            ..Query::default()
        },
    );
    assert_eq!(
        (p.subject, p.gpus[0].peak_bytes, p.gpus[0].above_90_seconds),
        (Subject::Process, 76 * GIB, 2.0)
    );

    let small = one(&reports, job("88"));
    let g = &small.gpus[0];
    assert_eq!((g.peak_bytes, g.p95_bytes, g.polls), (3 * GIB, Some(3 * GIB), 20));
    assert_eq!((g.above_90_seconds, g.idle_seconds), (0.0, 0.0));
    // Listed as exited at t = 20..24, gone at 25.
    assert_eq!((g.left_behind_bytes, g.left_behind_seconds), (3 * GIB, 5.0));
    let s = small.suggested.expect("suggestion");
    assert_eq!(
        (s.gres_gpumem.as_str(), s.gpu_fraction, s.vllm_gpu_memory_utilization),
        ("4G", 0.05, 0.05)
    );
    let idle = reports.idle_by_user();
    assert_eq!(idle, vec![("alice".to_string(), gib_s * GIB as f64)]);
}

#[test]
fn an_open_job_is_served_as_running_then_ending() {
    let reports = Reports::in_memory();
    let sc = Scenario::parse(SCRIPT, "test", None).expect("scenario");
    replay(sc.clone(), 1.0, 10, &reports);
    let r = one(&reports, job("77"));
    assert_eq!((r.state, r.closed), (ReportState::Running, None));
    let reports = Reports::in_memory();
    replay(sc, 1.0, 45, &reports);
    let r = one(&reports, job("77"));
    assert_eq!((r.state, r.ended), (ReportState::Ending, Some(EPOCH + 42.0)));
    assert!(r.gpus[0].left_behind_ongoing);
}

#[test]
fn every_recorded_trace_reports_its_own_peak() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/traces.toml");
    let sc = Scenario::load(&path).expect("traces");
    let peaks: Vec<(u32, u64, u64)> = sc
        .processes
        .iter()
        .map(|p| {
            let max = p.trace_rows.iter().map(|r| r.1).max().unwrap_or(0);
            let last = p.trace_rows.last().map_or(0, |r| r.1);
            (p.pid, max, last)
        })
        .collect();
    let reports = Reports::in_memory();
    // 0.2 s polls as recorded, 120 s: every trace ends and is released.
    replay(sc, 0.2, 600, &reports);
    for (pid, max, last) in peaks {
        let r = one(
            &reports,
            Query {
                pid: Some(pid),
                ..Query::default()
            },
        );
        assert_eq!((r.state, r.peak_bytes), (ReportState::Ended, max), "pid {pid}");
        if pid == 735 {
            // exit.csv's memory stays 10 s after it leaves the list; the
            // 6 MiB of its context overhead leave with it.
            let g = &r.gpus[0];
            assert!((g.left_behind_seconds - 10.0).abs() < 0.21, "{}", g.left_behind_seconds);
            assert_eq!(g.left_behind_bytes, last - (6 << 20));
        }
    }
}

fn held(pid: u32, job: &str, used: u64, holder: Holder) -> Process {
    let mut who = (*Who::shared("python", "alice", Some(1000))).clone();
    who.placement.job = job.into();
    Process {
        pid,
        used_bytes: Some(used),
        holder: Some(holder),
        who: std::sync::Arc::new(who),
        ..Process::default()
    }
}

fn gpu(processes: Vec<Process>) -> Device {
    let used = processes.iter().filter_map(|p| p.used_bytes).sum();
    Device {
        uuid: "GPU-a".into(),
        up: true,
        memory: Some(Memory {
            total_bytes: 80 * GIB,
            used_bytes: used,
            free_bytes: 80 * GIB - used,
            reserved_bytes: Some(0),
        }),
        holders: Some(crate::data::snapshot::Holders::default()),
        processes,
        ..Device::default()
    }
}

#[test]
fn allocator_peaks_ooms_and_retries_come_from_the_reporter() {
    let reports = Reports::in_memory();
    let mut p = held(7, "9", 10 * GIB, Holder::Live);
    p.allocator = Some(Box::new(AllocatorFigures {
        reserved: crate::data::snapshot::AllocPair {
            current: 8 * GIB,
            peak: 9 * GIB,
        },
        allocated: crate::data::snapshot::AllocPair {
            current: 6 * GIB,
            peak: 7 * GIB,
        },
        ooms: 1,
        alloc_retries: 3,
        ..AllocatorFigures::default()
    }));
    reports.observe(&snapshot(1, 1.0, vec![gpu(vec![p])]));
    reports.observe(&snapshot(2, 2.0, vec![gpu(Vec::new())]));
    let r = one(&reports, job("9"));
    let g = &r.gpus[0];
    assert_eq!(
        (g.allocator_reserved_peak_bytes, g.allocator_allocated_peak_bytes),
        (Some(9 * GIB), Some(7 * GIB))
    );
    assert_eq!((r.ooms, r.alloc_retries, r.state), (1, 3, ReportState::Ended));
}

#[test]
fn a_failed_poll_ends_nothing() {
    let reports = Reports::in_memory();
    reports.observe(&snapshot(1, 1.0, vec![gpu(vec![held(7, "9", GIB, Holder::Live)])]));
    let down = Snapshot {
        nvml_up: false,
        ..snapshot(2, 2.0, Vec::new())
    };
    reports.observe(&down);
    let mut lost = gpu(Vec::new());
    lost.up = false;
    reports.observe(&snapshot(3, 3.0, vec![lost]));
    assert_eq!(one(&reports, job("9")).state, ReportState::Running);
    reports.observe(&snapshot(4, 4.0, vec![gpu(Vec::new())]));
    assert_eq!(one(&reports, job("9")).state, ReportState::Ended);
}

#[test]
fn a_job_names_its_pids_in_order_on_every_gpu_even_one_without_figures() {
    let reports = Reports::in_memory();
    let (a, mut b) = (
        gpu(vec![held(7, "9", GIB, Holder::Live), held(8, "9", GIB, Holder::Live)]),
        gpu(vec![held(5, "9", GIB, Holder::Live), held(7, "9", GIB, Holder::Live)]),
    );
    b.uuid = "GPU-b".into();
    // GPU b lists its processes, but its memory could not be read: the job
    // gets no figures there, and its PID there is remembered all the same.
    b.memory = None;
    reports.observe(&snapshot(1, 1.0, vec![a, b]));
    let r = one(&reports, job("9"));
    assert_eq!((r.pids.as_slice(), r.gpus.len()), ([7, 8, 5].as_slice(), 1));
    // A PID seen again is not named twice; a new one joins the end.
    let again = gpu(vec![held(8, "9", GIB, Holder::Live), held(6, "9", GIB, Holder::Live)]);
    reports.observe(&snapshot(2, 2.0, vec![again]));
    assert_eq!(one(&reports, job("9")).pids, [7, 8, 5, 6]);
}

#[test]
fn reports_survive_a_restart_and_a_bad_line_is_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reports = Reports::persisted(dir.path(), 1.0);
    reports.observe(&snapshot(1, 1.0, vec![gpu(vec![held(7, "9", GIB, Holder::Live)])]));
    reports.observe(&snapshot(2, 2.0, vec![gpu(Vec::new())]));
    // Written on the writer's thread: wait for both, with a deadline.
    crate::tests::wait_true("both reports written", || reports.written() >= 2);
    let file = dir.path().join(FILE);
    let mut text = std::fs::read_to_string(&file).expect("written");
    assert_eq!(text.lines().count(), 2, "the job and its process");
    text.push_str("{not json\n");
    std::fs::write(&file, text).expect("write");
    let again = Reports::persisted(dir.path(), 3.0);
    assert_eq!(again.sizes(), (0, 2));
    assert_eq!(one(&again, job("9")).gpus[0].peak_bytes, GIB);
    let rewritten = std::fs::read_to_string(&file).expect("rewritten");
    assert_eq!(rewritten.lines().count(), 2, "the bad line is gone");
    // Past retention, nothing is read back; a missing dir is not made.
    let missing = dir.path().join("missing");
    assert_eq!(Reports::persisted(&missing, 3.0).sizes(), (0, 0));
    assert!(!missing.exists());
    let later = Reports::persisted(dir.path(), 3.0 + RETENTION_SECONDS + 10.0);
    assert_eq!(later.sizes(), (0, 0));
}

#[test]
fn kept_reports_stay_bounded_per_subject_and_processes_never_push_a_job_out() {
    let reports = Reports::in_memory();
    reports.observe(&snapshot(1, 0.0, vec![gpu(vec![held(9, "42", GIB, Holder::Live)])]));
    reports.observe(&snapshot(2, 1.0, vec![gpu(Vec::new())]));
    for i in 0..(KEEP_PER_SUBJECT as u64 + 50) {
        let t = (2 * i + 2) as f64;
        let pid = 1000 + i as u32;
        reports.observe(&snapshot(
            2 * i + 3,
            t,
            vec![gpu(vec![held(pid, "", GIB, Holder::Live)])],
        ));
        reports.observe(&snapshot(2 * i + 4, t + 1.0, vec![gpu(Vec::new())]));
    }
    assert_eq!(reports.sizes(), (0, KEEP_PER_SUBJECT + 1), "500 processes and the job");
    assert_eq!(one(&reports, job("42")).state, ReportState::Ended);
    let all = reports.query(&Query::default());
    assert_eq!(all.len(), KEEP_PER_SUBJECT + 1);
    assert_eq!(
        all[0].id,
        (1000 + KEEP_PER_SUBJECT as u64 + 49).to_string(),
        "newest first"
    );
}

#[test]
fn subjects_past_the_cap_are_not_followed_and_room_is_reused() {
    let mut t = Tracker::default();
    let many = u32::try_from(MAX_OPEN).expect("cap fits") + 10;
    let procs = |skip: u32| -> Vec<Process> {
        (skip..many)
            .map(|pid| Process {
                pid,
                used_bytes: Some(1 << 20),
                holder: Some(Holder::Live),
                ..Process::default()
            })
            .collect()
    };
    t.observe(&snapshot(1, 1.0, vec![gpu(procs(0))]));
    assert_eq!(t.open_len(), MAX_OPEN);
    let followed: std::collections::BTreeSet<String> = t.open_reports(1.0).into_iter().map(|r| r.id).collect();
    t.observe(&snapshot(2, 2.0, vec![gpu(procs(0))]));
    let again: std::collections::BTreeSet<String> = t.open_reports(2.0).into_iter().map(|r| r.id).collect();
    assert_eq!(followed, again, "the followed stay followed; no newcomer displaces one");
    // The first 20 PIDs leave and free their memory: that room goes to
    // those not followed before.
    let (closed, _) = t.observe(&snapshot(3, 3.0, vec![gpu(procs(20))]));
    let freed = closed.len();
    assert!(freed > 0 && freed <= 20, "{freed}");
    t.observe(&snapshot(4, 4.0, vec![gpu(procs(20))]));
    assert_eq!(t.open_len(), MAX_OPEN.min(usize::try_from(many - 20).expect("fits")));
}
