//! Unit tests of the metrics renderer: cardinality limits, absent values,
//! group sums, label safety and the family tables' naming rules. Each test
//! renders a small snapshot built here and reads the exposition back;
//! `daemon.rs` covers the families beyond the snapshot.

mod allocator;
mod daemon;
mod ledger;
mod selfproc;

use std::collections::BTreeSet;

use super::*;
use crate::app::config::Config;
use crate::data::snapshot::{Device, DriverInfo, Holders, Memory, PollStats, Process, Unreleased, Who};

fn proc(pid: u32, bytes: Option<u64>, user: &str) -> Process {
    Process {
        pid,
        used_bytes: bytes,
        who: Who::shared(format!("p{pid}"), user, None),
        state: "running".into(),
        kind: "compute".into(),
        start_time: Some(1000.0 + f64::from(pid)),
        growth_bytes_per_second: Some(0.0),
        idle_seconds: Some(0.0),
        ..Process::default()
    }
}

/// An up device holding `procs` (largest first, as the pipeline sorts).
fn dev(uuid: &str, procs: Vec<Process>) -> Device {
    let used: u64 = procs
        .iter()
        .filter_map(|p| p.used_bytes)
        .fold(0, u64::saturating_add)
        .min(100 << 30);
    Device {
        uuid: uuid.into(),
        index: Some(0),
        name: "H200".into(),
        up: true,
        memory: Some(Memory {
            total_bytes: 100 << 30,
            used_bytes: used,
            free_bytes: (100 << 30) - used,
            reserved_bytes: Some(1 << 20),
        }),
        holders: Some(Holders {
            live: used,
            ..Holders::default()
        }),
        processes: procs,
        ..Device::default()
    }
}

fn snap(devices: Vec<Device>) -> Snapshot {
    Snapshot {
        nvml_up: true,
        devices,
        driver: Some(DriverInfo::default()),
        poll: PollStats {
            last_success_timestamp: Some(5.0),
            ..PollStats::default()
        },
        ..Snapshot::default()
    }
}

fn cfg() -> Processes {
    Config::defaults(false).processes
}

const BUILD: BuildInfo = BuildInfo {
    version: "v",
    revision: "r",
};

fn render_with(s: &Snapshot, d: &DaemonState<'_>, c: &Processes) -> String {
    super::render(s, d, c, &BUILD, Format::Prometheus)
}

fn render(s: &Snapshot, c: &Processes) -> String {
    render_with(s, &DaemonState::default(), c)
}

/// The sample lines of `family` (exactly that name).
fn samples<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.strip_prefix(family).is_some_and(|r| r.starts_with(['{', ' '])))
        .collect()
}

/// The value of the one sample of `family` whose labels contain `has`.
fn value(text: &str, family: &str, has: &str) -> Option<u64> {
    let hits: Vec<&str> = samples(text, family).into_iter().filter(|l| l.contains(has)).collect();
    assert!(hits.len() <= 1, "{family} {has}: {hits:?}");
    hits.first()?.rsplit(' ').next()?.parse().ok()
}

fn announced(text: &str, family: &str) -> bool {
    text.contains(&format!("# TYPE {family} "))
}

#[test]
fn top_n_keeps_the_largest_and_counts_the_rest() {
    let procs = (1..=5).rev().map(|i| proc(i, Some(u64::from(i) << 30), "u")).collect();
    let s = snap(vec![dev("GPU-a", procs), dev("GPU-b", vec![proc(9, Some(1), "u")])]);
    let mut c = cfg();
    c.top_n = 2;
    let out = render(&s, &c);
    let pids: BTreeSet<&str> = samples(&out, "gpumem_process_memory_used_bytes")
        .iter()
        .filter_map(|l| l.split("pid=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(pids, BTreeSet::from(["5", "4", "9"]));
    assert_eq!(value(&out, "gpumem_processes_not_exported", "GPU-a"), Some(3));
    assert_eq!(value(&out, "gpumem_processes_not_exported", "GPU-b"), Some(0));
    // Every per-process family is cut the same way.
    assert_eq!(samples(&out, "gpumem_process_info").len(), 3);
    assert_eq!(samples(&out, "gpumem_process_start_time_seconds").len(), 3);
}

#[test]
fn min_bytes_leaves_out_small_processes_but_not_unknown_ones() {
    let procs = vec![
        proc(1, Some(8 << 20), "u"),
        proc(2, Some(1 << 20), "u"),
        proc(3, Some((1 << 20) - 1), "u"),
        proc(4, None, "u"),
    ];
    let s = snap(vec![dev("GPU-a", procs)]);
    let mut c = cfg();
    c.min_bytes.0 = 1 << 20;
    let out = render(&s, &c);
    assert!(value(&out, "gpumem_process_memory_used_bytes", "pid=\"1\"").is_some());
    assert!(value(&out, "gpumem_process_memory_used_bytes", "pid=\"2\"").is_some());
    assert_eq!(value(&out, "gpumem_process_memory_used_bytes", "pid=\"3\""), None);
    assert_eq!(value(&out, "gpumem_process_info", "pid=\"3\""), None);
    // Unknown memory is not known to be small: the process keeps its series.
    assert_eq!(value(&out, "gpumem_process_info", "pid=\"4\""), Some(1));
    assert_eq!(value(&out, "gpumem_processes_not_exported", "GPU-a"), Some(1));
}

/// A change that makes one value unknown, and the family that must then
/// have no sample (while still announced, or left out whole).
type Unknown = (&'static str, fn(&mut Snapshot), &'static str, bool);

const UNKNOWN: &[Unknown] = &[
    (
        "reserved",
        |s| set_mem(s, |m| m.reserved_bytes = None),
        "gpumem_device_memory_reserved_bytes",
        true,
    ),
    (
        "no memory",
        |s| s.devices[0].memory = None,
        "gpumem_device_memory_total_bytes",
        true,
    ),
    (
        "down",
        |s| s.devices[0].up = false,
        "gpumem_device_memory_used_bytes",
        true,
    ),
    (
        "down",
        |s| s.devices[0].up = false,
        "gpumem_device_memory_held_bytes",
        true,
    ),
    (
        "down",
        |s| s.devices[0].up = false,
        "gpumem_process_memory_used_bytes",
        true,
    ),
    (
        "no holders",
        |s| s.devices[0].holders = None,
        "gpumem_device_memory_held_bytes",
        true,
    ),
    (
        "no holders",
        |s| s.devices[0].holders = None,
        "gpumem_device_memory_unreleased_bytes",
        true,
    ),
    ("unreadable", unreadable, "gpumem_device_processes", true),
    ("unreadable", unreadable, "gpumem_processes_not_exported", true),
    (
        "used",
        |s| s.devices[0].processes[0].used_bytes = None,
        "gpumem_process_memory_used_bytes",
        true,
    ),
    (
        "start",
        |s| s.devices[0].processes[0].start_time = None,
        "gpumem_process_start_time_seconds",
        true,
    ),
    (
        "growth",
        no_growth,
        "gpumem_process_memory_growth_bytes_per_second",
        true,
    ),
    ("growth", no_growth, "gpumem_process_leak_suspected", true),
    (
        "idle",
        |s| s.devices[0].processes[0].idle_seconds = None,
        "gpumem_process_idle_seconds",
        true,
    ),
    ("driver", |s| s.driver = None, "gpumem_driver_info", false),
    (
        "last poll",
        |s| s.poll.last_success_timestamp = None,
        "gpumem_last_poll_timestamp_seconds",
        false,
    ),
];

fn set_mem(s: &mut Snapshot, f: fn(&mut Memory)) {
    if let Some(m) = s.devices[0].memory.as_mut() {
        f(m);
    }
}

fn unreadable(s: &mut Snapshot) {
    let d = &mut s.devices[0];
    (d.processes_unreadable, d.holders) = (true, None);
    d.processes.clear();
}

fn no_growth(s: &mut Snapshot) {
    s.devices[0].processes[0].growth_bytes_per_second = None;
}

#[test]
fn an_unknown_value_has_no_sample_not_a_zero() {
    let c = cfg();
    for (what, change, family, still_announced) in UNKNOWN {
        let mut s = snap(vec![dev("GPU-a", vec![proc(7, Some(1 << 30), "u")])]);
        s.devices[0].unreleased.push(Unreleased {
            pid: 3,
            comm: "x".into(),
            user: "u".into(),
            bytes: 5,
            since: 0.0,
        });
        assert_eq!(samples(&render(&s, &c), family).len().min(1), 1, "{family} known");
        change(&mut s);
        let out = render(&s, &c);
        assert!(
            samples(&out, family).is_empty(),
            "{what}: {family} has no sample\n{out}"
        );
        assert_eq!(announced(&out, family), *still_announced, "{what}: {family} announced");
    }
}

#[test]
fn group_sums_count_every_process_of_the_group_per_device() {
    let a = vec![
        proc(1, Some(300), "alice"),
        proc(2, Some(200), "bob"),
        proc(3, Some(100), "alice"),
        proc(4, None, "alice"),
        proc(5, Some(50), ""),
    ];
    let s = snap(vec![dev("GPU-a", a), dev("GPU-b", vec![proc(6, Some(7), "alice")])]);
    let mut c = cfg();
    c.top_n = 1; // the sums still count the processes left out
    let out = render(&s, &c);
    let g = "gpumem_group_memory_used_bytes";
    assert_eq!(
        value(&out, g, r#"uuid="GPU-a",group_by="user",group="alice""#),
        Some(400)
    );
    assert_eq!(value(&out, g, r#"uuid="GPU-a",group_by="user",group="bob""#), Some(200));
    assert_eq!(value(&out, g, r#"uuid="GPU-b",group_by="user",group="alice""#), Some(7));
    // A process without a group is in no group.
    assert_eq!(samples(&out, g).len(), 3, "{out}");
    c.group_by.clear();
    assert!(!announced(&render(&s, &c), g));
}

/// Found by tests/fuzz (scenario mutations): two absurd NVML figures of
/// one user overflowed the group sum, a panic in the scrape handler.
#[test]
fn group_sums_saturate_on_absurd_figures() {
    let a = vec![
        proc(1, Some(u64::MAX - 1), "alice"),
        proc(2, Some(u64::MAX / 2), "alice"),
    ];
    let out = render(&snap(vec![dev("GPU-a", a)]), &cfg());
    let g = "gpumem_group_memory_used_bytes";
    assert_eq!(
        value(&out, g, r#"uuid="GPU-a",group_by="user",group="alice""#),
        Some(u64::MAX)
    );
}

#[test]
fn label_values_are_cut_to_label_max_bytes_on_a_char_boundary() {
    let mut p = proc(1, Some(1), "u");
    std::sync::Arc::make_mut(&mut p.who).comm = "ééééé-long-command".into();
    let s = snap(vec![dev("GPU-a", vec![p])]);
    let mut c = cfg();
    c.label_max_bytes = 5;
    let out = render(&s, &c);
    let line = samples(&out, "gpumem_process_info").concat();
    assert!(line.contains(r#"comm="éé""#), "{line}");
}

/// build.rs bakes in git's short HEAD when built from a checkout (cargo
/// reruns it when HEAD moves, so it is this checkout's HEAD), and a date.
#[test]
fn build_info_revision_is_the_checkouts_git_head() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let head = std::process::Command::new("git")
        .args(["-C", dir, "rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok());
    let info = crate::build_info();
    match head {
        Some(h) if std::env::var_os("GPUMEMD_REVISION").is_none() => assert_eq!(info.revision, h.trim()),
        _ => assert!(!info.revision.is_empty()),
    }
    let date = env!("GPUMEMD_BUILD_DATE").as_bytes();
    assert!(
        date.len() == 10 && date[4] == b'-' && date[7] == b'-',
        "{:?}",
        env!("GPUMEMD_BUILD_DATE")
    );
}

#[test]
fn full_in_seconds_only_while_something_grows() {
    let c = cfg();
    let mut s = snap(vec![dev("GPU-a", vec![proc(7, Some(1 << 30), "u")])]);
    let family = "gpumem_device_memory_full_in_seconds";
    assert!(samples(&render(&s, &c), family).is_empty(), "nothing grows: no sample");
    s.devices[0].full_in_seconds = Some(1799.6);
    assert_eq!(value(&render(&s, &c), family, "GPU-a"), Some(1800));
    s.devices[0].up = false;
    assert!(
        samples(&render(&s, &c), family).is_empty(),
        "a lost GPU forecasts nothing"
    );
}
