//! The golden exposition: the demo fleet stepped 40 polls on a fixed clock
//! through the real pipeline and renderer must render byte for byte as
//! `tests/golden/demo.prom`. Run with `UPDATE_GOLDEN=1` to rewrite it after
//! an intended change, and review the diff.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::path::Path;
use std::time::Duration;

use gpumemd::act::alerts::AlertEngine;
use gpumemd::app::config::Config;
use gpumemd::app::reload::ReloadStatus;
use gpumemd::collect::allocator::AllocatorState;
use gpumemd::collect::pipeline::Pipeline;
use gpumemd::collect::source::GpuSource;
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;
use gpumemd::data::snapshot::{PollStats, Snapshot};
use gpumemd::judge::report::Reports;
use gpumemd::serve::metrics::{self, Format};

const EPOCH: f64 = 1_767_225_600.0; // 2026-01-01T00:00:00Z
const POLLS: u64 = 40;

/// The demo after `POLLS` one-second polls, with fixed poll statistics,
/// the demo rules evaluated on every poll and every poll followed by the
/// job-end reports (for their per-user idle counter).
fn demo_snapshot(cfg: &Config) -> (Snapshot, AlertEngine, Reports) {
    let sc = Scenario::resolve("default").expect("built-in");
    let mut src = SimulatedSource::new(sc, Duration::from_secs(1), EPOCH);
    // The demo's allocator view, fed as the daemon feeds it (after each poll).
    let alloc = std::sync::Arc::new(AllocatorState::new(&cfg.allocator));
    let mut pipe = Pipeline::for_source(&cfg.processes, &src).with_allocator(alloc.clone());
    let mut engine = AlertEngine::new(cfg.effective_rules(), "demo-host".into(), 100);
    let reports = Reports::in_memory();
    let mut last = None;
    for i in 0..POLLS {
        let raw = src.poll(i % 2 == 0).expect("simulated poll");
        let (driver, devices) = pipe.build(raw, EPOCH + i as f64);
        let now = EPOCH + i as f64;
        gpumemd::collect::allocator::demo::feed(&alloc, &devices, i as f64, now);
        let snap = Snapshot {
            seq: i + 1,
            timestamp: now,
            monotonic: i as f64,
            demo: Some("default".into()),
            nvml_up: true,
            driver,
            devices,
            poll: PollStats {
                polls_total: i + 1,
                success: true,
                duration_seconds: 0.000125,
                source_seconds: 0.000075,
                last_success_timestamp: Some(now),
                ..PollStats::default()
            },
            ..Snapshot::default()
        };
        engine.evaluate(&snap);
        reports.observe(&snap);
        last = Some(snap);
    }
    (last.expect("polled"), engine, reports)
}

fn check(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).expect("write golden");
        return;
    }
    let want =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1", path.display()));
    if got != want {
        let first = got.lines().zip(want.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "{name} differs at line {}:\n got: {}\nwant: {}\n(UPDATE_GOLDEN=1 rewrites it)",
            first + 1,
            got.lines().nth(first).unwrap_or("<end>"),
            want.lines().nth(first).unwrap_or("<end>")
        );
    }
}

#[test]
fn demo_exposition_matches_golden() {
    let cfg = Config::defaults(true);
    let (snap, engine, reports) = demo_snapshot(&cfg);
    let counters = metrics::Counters {
        reports: Some(std::sync::Arc::new(reports)),
        ..Default::default()
    };
    let build = metrics::BuildInfo {
        version: "0.0.0-test",
        revision: "golden",
    };
    let view = engine.view();
    let daemon = metrics::DaemonState {
        alerts: Some(&view),
        reload: Some(ReloadStatus {
            successful: true,
            last_success: EPOCH,
        }),
        // The daemon reads these from /proc/self at each scrape; fixed
        // here, so the golden holds the families but no changing value.
        process: Some(metrics::SelfStats {
            cpu_seconds: Some(1.5),
            resident_bytes: Some(12 << 20),
            virtual_bytes: Some(300 << 20),
            open_fds: Some(17),
            max_fds: Some(1024),
            start_time_seconds: Some(EPOCH - 2.0),
        }),
        counters: Some(&counters),
    };
    check(
        "demo.prom",
        &metrics::render(&snap, &daemon, &cfg.processes, &build, Format::Prometheus),
    );
    check(
        "demo.om.txt",
        &metrics::render(&snap, &daemon, &cfg.processes, &build, Format::OpenMetrics),
    );
}

#[test]
fn demo_shows_every_diagnosis_and_fires_alerts_within_40_seconds() {
    let cfg = Config::defaults(true);
    let (snap, engine, _) = demo_snapshot(&cfg);
    let firing: Vec<&str> = engine.firing().map(|a| &*a.rule).collect();
    for want in [
        "GpuMemoryLeakSuspected",
        "GpuMemoryHeldByExitedProcess",
        "GpuUserQuotaExceeded",
        "GpuIdleHolder",
        "GpuOutOfMemory",
        "GpuMemoryFragmented",
        "GpuMemoryFillingUp",
    ] {
        assert!(
            firing.contains(&want),
            "{want} fires within 40 s of the demo: {firing:?}"
        );
    }
    let procs: Vec<_> = snap.devices.iter().flat_map(|d| &d.processes).collect();
    let leak = procs.iter().find(|p| p.pid == 4202).expect("leaking worker");
    assert!(leak.leak_suspected, "the leaking worker is flagged: {leak:?}");
    let growth = |p: &gpumemd::data::snapshot::Process| p.allocator.as_ref().map(|a| a.growth);
    assert_eq!(growth(leak), Some(Some("tensors")), "as a tensor leak");
    let cacher = procs.iter().find(|p| p.pid == 5101).expect("warming-up pod");
    assert!(!cacher.leak_suspected && cacher.allocator.as_ref().is_some_and(|a| a.cache_bytes > 20 << 30));
    let oom = &snap.devices[0].ooms;
    assert_eq!(
        oom.iter().map(|o| o.pid).collect::<Vec<_>>(),
        [4303],
        "the notebook's OOM"
    );
    assert!(
        oom[0].others.contains("(4101)"),
        "names the training job: {}",
        oom[0].others
    );
    let train = procs.iter().find(|p| p.pid == 4101).expect("training job");
    assert!(!train.leak_suspected, "a warm-up is not a leak");
    assert!(procs.iter().any(|p| p.pid == 5303 && p.state == "exited"));
    assert!(procs.iter().any(|p| p.pid == 5404 && p.state == "zombie"));
    assert!(
        procs.iter().any(|p| p.pid == 4303 && p.idle),
        "the notebook is an idle holder"
    );
    let gpu1 = &snap.devices[1];
    assert_eq!(gpu1.unreleased.len(), 1, "eval.py's 12 GiB not released");
    assert_eq!(gpu1.unreleased[0].pid, 5202);
    let h = gpu1.holders.expect("holders");
    assert!(h.exited > 0 && h.zombie > 0 && h.unattributed >= 12 << 30);
    // Only the leaking worker is forecast to fill GPU 0; the snapshot's
    // JSON (`/api/v1/snapshot`) names it.
    let gpu0 = serde_json::to_value(&snap.devices[0]).expect("json");
    let growers = gpu0["growers"].as_array().expect("growers on GPU 0");
    assert_eq!(growers.len(), 1, "{growers:?}");
    assert_eq!(growers[0]["pid"], 4202);
    assert!(
        growers[0]["bytes_per_second"]
            .as_f64()
            .is_some_and(|r| r > 40.0 * 1048576.0)
    );
    assert!(gpu0["full_in_seconds"].as_f64().is_some_and(|s| s > 0.0));
    assert!(snap.devices[1].full_in_seconds.is_none(), "nothing grows on GPU 1");
}
