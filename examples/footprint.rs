//! Memory gate: what the daemon's per-process and per-alert state costs on
//! the heap at fleet scale (64 GPUs x 1000 processes, `--demo large`'s
//! shape), counted by a global allocator that tracks live and peak bytes,
//! so the figures are the same in debug and release.
//!
//! ```sh
//! cargo run --release --example footprint
//! ```
//!
//! Prints four figures and exits 1 when one is over its budget: the
//! simulated fleet with its `/proc` tree, attribution's identity cache per
//! process, the pipeline's records per process, and the alert engine with
//! its published view per firing alert. The budgets are ceilings a few
//! times above today's figures: a new field passes, a copy per PID where
//! one per pod is shared, or state that is never dropped, does not.
//!
//! Owns the budgets; the counting allocator is `benches/common/counting.rs`.
//! Must not run in the unit or integration tests: the allocator counts
//! every thread of the process, so the measurements run one after another
//! in this binary alone.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a failed step ends the run

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpumemd::act::alerts::AlertEngine;
use gpumemd::app::config::{Config, Processes};
use gpumemd::collect::attribution::{PidFile, ProcFs, ReadOptions, TreeFile};
use gpumemd::collect::pipeline::Pipeline;
use gpumemd::collect::source::GpuSource;
use gpumemd::collect::source::scenario::large;
use gpumemd::collect::source::simulated::SimulatedSource;
use gpumemd::data::snapshot::{Device, Holder, Holders, Memory, PollStats, Process, Snapshot, Who};

#[path = "../benches/common/counting.rs"]
mod counting;
use counting::{Counting, live, reset_peak};

#[global_allocator]
static GLOBAL: Counting = Counting;

const GPUS: usize = 64;
const PER_GPU: usize = 1000;
const PROCESSES: usize = GPUS * PER_GPU;
const EPOCH: f64 = 1_767_225_600.0;
const MB: f64 = 1e6;

/// The simulated fleet and its tree: a fraction of the daemon's 64 MiB.
const SIM_BUDGET_BYTES: f64 = 80e6;
/// Identity cache: each PID's own entry, `Who` and parsed cgroup (about
/// 354 bytes a PID).
const IDENTITY_BUDGET_PER_PROCESS: f64 = 530.0;
/// Peak window, leak history (60 exact bucket minima, 480 bytes), idle time
/// and late-release entry: about 1030 bytes.
const RECORD_BUDGET_PER_PROCESS: f64 = 1536.0;
/// Engine and view per firing alert (about 910): label values shared
/// with the snapshot, annotations rendered when read.
const ALERT_BUDGET_PER_ALERT: f64 = 1400.0;

/// One measured figure against its budget.
struct Figure {
    name: &'static str,
    value: f64,
    budget: f64,
    unit: &'static str,
    note: String,
}

/// The `large` scenario, its source and the `/proc` tree after poll 1.
fn simulation() -> Figure {
    let base = reset_peak();
    let mut src = SimulatedSource::new(large(GPUS, PER_GPU), Duration::from_secs(1), EPOCH);
    let poll = src.poll(true).expect("simulated poll");
    let tree = src.proc_tree().expect("a simulated source keeps a /proc tree");
    let polled: usize = poll.devices.iter().map(|d| d.processes.len()).sum();
    assert_eq!(polled, PROCESSES, "every process is listed on poll 1");
    drop(poll);
    let held = live() - base;
    let peak = counting::peak() - base;
    let mut buf = Vec::new();
    let read = tree.read(TreeFile::Pid(163_999, PidFile::Stat), 4096, &mut buf);
    assert!(
        read.is_ok() && buf.starts_with(b"163999 (worker-7) S "),
        "the last process is in the tree"
    );
    drop(src);
    Figure {
        name: "simulated large(64, 1000) and its /proc tree",
        value: held as f64,
        budget: SIM_BUDGET_BYTES,
        unit: "B",
        note: format!("peak {:.2} MB", peak as f64 / MB),
    }
}

/// Attribution's identity cache over the simulated tree, after three polls.
fn identity_cache() -> Figure {
    let mut src = SimulatedSource::new(large(GPUS, PER_GPU), Duration::from_secs(10), EPOCH);
    let raw = src.poll(true).expect("simulated poll");
    let pids: Vec<u32> = raw
        .devices
        .iter()
        .flat_map(|d| d.processes.iter().map(|p| p.pid))
        .collect();
    drop(raw);
    let tree = src.proc_tree().expect("the simulated fleet's /proc");
    let before = live();
    let mut procfs = ProcFs::on(tree);
    let opts = ReadOptions::default();
    let mut gone = 0;
    // The first poll fills the cache, the others hit it.
    for _ in 0..3 {
        let now = Instant::now();
        for &pid in &pids {
            match procfs.read_at(pid, &opts, now) {
                Ok(id) => assert_eq!(id.pid, pid),
                Err(e) if e.is_gone() => gone += 1,
                Err(e) => panic!("pid {pid}: {e}"),
            }
        }
    }
    let cached = procfs.cached_identities();
    assert!(cached + gone / 3 >= pids.len() * 9 / 10, "{cached} cached, {gone} gone");
    let held = live() - before;
    drop(procfs);
    Figure {
        name: "identity cache",
        value: held as f64 / cached.max(1) as f64,
        budget: IDENTITY_BUDGET_PER_PROCESS,
        unit: "B per process",
        note: format!("{cached} processes, {:.2} MB", held as f64 / MB),
    }
}

/// What the pipeline keeps per process between polls. Attribution reads a
/// /proc root that does not exist, so its caches stay empty.
fn pipeline_records() -> Figure {
    let mut src = SimulatedSource::new(large(GPUS, PER_GPU), Duration::from_secs(10), EPOCH);
    let cfg = Processes {
        proc_root: "/nonexistent/gpumemd-footprint".into(),
        ..Processes::default()
    };
    let mut pipe = Pipeline::new(&cfg);
    // Three polls 10 s apart: the second and third close a leak bucket.
    for i in 0..3 {
        let raw = src.poll(true).expect("simulated poll");
        drop(pipe.build(raw, EPOCH + 10.0 * f64::from(i)));
    }
    let retained = pipe.retained();
    assert_eq!(retained.leak_series, PROCESSES, "every process has a leak history");
    let with = live();
    drop(pipe);
    let held = with - live();
    Figure {
        name: "pipeline records",
        value: held as f64 / PROCESSES as f64,
        budget: RECORD_BUDGET_PER_PROCESS,
        unit: "B per process",
        note: format!("{:.2} MB", held as f64 / MB),
    }
}

/// `large(64, 1000)` as the pipeline publishes it, `t` seconds in: one
/// process in five is an idle holder.
fn fleet_snapshot(t: f64) -> Snapshot {
    let devices = (0..GPUS)
        .map(|g| {
            let processes: Vec<Process> = (0..PER_GPU)
                .map(|i| {
                    let used = (64 + (i as u64 * 37) % 128 + (t as u64 + i as u64) % 2) << 20;
                    let idle = i % 5 == 0;
                    Process {
                        pid: 100_000 + (g * PER_GPU + i) as u32,
                        used_bytes: Some(used),
                        kind: "compute".into(),
                        who: Who::shared(
                            format!("worker-{}", i % 16),
                            format!("user{}", i % 8),
                            Some(2000 + (i % 8) as u32),
                        ),
                        state: "running".into(),
                        holder: Some(Holder::Live),
                        start_time: Some(1_767_225_000.0 + i as f64),
                        sm_util_percent: Some((i % 5) as u8 * 20),
                        idle_seconds: idle.then_some(t),
                        idle,
                        ..Process::default()
                    }
                })
                .collect();
            let used: u64 = processes.iter().filter_map(|p| p.used_bytes).sum();
            Device {
                uuid: format!("GPU-{g:08x}-5a1e-4c3b-9d2e-00000000{g:04x}"),
                index: Some(g as u32),
                name: "NVIDIA H200".into(),
                up: true,
                memory: Some(Memory {
                    total_bytes: 141 << 30,
                    used_bytes: used,
                    free_bytes: (141 << 30) - used,
                    reserved_bytes: Some(600 << 20),
                }),
                holders: Some(Holders {
                    live: used,
                    ..Holders::default()
                }),
                processes,
                ..Device::default()
            }
        })
        .collect();
    Snapshot {
        seq: t as u64,
        timestamp: EPOCH + t,
        monotonic: t,
        nvml_up: true,
        devices,
        poll: PollStats {
            success: true,
            ..PollStats::default()
        },
        ..Snapshot::default()
    }
}

/// The demo rules firing `GpuIdleHolder` for 12,800 idle holders: the
/// demo's rule counts them per GPU, so it is taken here one alert per
/// process, as a site may write it, for the engine's largest load.
fn firing_alerts() -> Figure {
    let rules = Config::defaults(true)
        .effective_rules()
        .into_iter()
        .map(|r| {
            if r.cfg.name != "GpuIdleHolder" {
                return r;
            }
            let mut cfg = r.cfg;
            cfg.per = None;
            gpumemd::judge::rules::Rule::new(cfg).expect("the demo's idle rule, one per process")
        })
        .collect();
    let mut engine = AlertEngine::new(rules, "demo-host".into(), 100);
    let mut view = Arc::new(engine.view());
    let mut peak = 0;
    // Past the demo's 20 s `for`, then steady polls whose values move, as
    // the daemon's do (annotations carry the value).
    for t in [25.0, 26.0, 27.0, 28.0] {
        let snap = fleet_snapshot(t);
        let before = reset_peak();
        engine.evaluate(&snap);
        view = Arc::new(engine.view());
        peak = counting::peak() - before;
    }
    let firing = view.alerts.iter().filter(|a| a.state.as_str() == "firing").count();
    assert_eq!(firing, PROCESSES / 5, "every idle holder fires");
    let with = live();
    drop(view);
    drop(engine);
    let held = with - live();
    Figure {
        name: "firing alerts (engine + view)",
        value: held as f64 / firing as f64,
        budget: ALERT_BUDGET_PER_ALERT,
        unit: "B per alert",
        note: format!(
            "{firing} alerts, {:.2} MB; an evaluation and publish peak {:.2} MB above it",
            held as f64 / MB,
            peak as f64 / MB
        ),
    }
}

fn main() -> ExitCode {
    let figures = [simulation(), identity_cache(), pipeline_records(), firing_alerts()];
    let mut over = 0;
    for f in &figures {
        let verdict = if f.value <= f.budget { "ok" } else { "OVER" };
        if f.value > f.budget {
            over += 1;
        }
        println!(
            "{verdict:4} {}: {:.1} {} (budget {:.0}); {}",
            f.name, f.value, f.unit, f.budget, f.note
        );
    }
    if over > 0 {
        eprintln!("footprint: {over} figure(s) over budget");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
