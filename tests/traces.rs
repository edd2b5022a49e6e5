//! The real PyTorch memory traces recorded on an H200, replayed through the
//! simulated source and the real pipeline: only the leaking process may ever
//! be flagged, and it must be flagged within the leak window.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gpumemd::config::Config;
use gpumemd::pipeline::Pipeline;
use gpumemd::source::GpuSource;
use gpumemd::source::scenario::Scenario;
use gpumemd::source::simulated::SimulatedSource;

const LEAK_PID: u32 = 731;

#[test]
fn only_the_leak_is_flagged_and_within_its_window() {
    let cfg = Config::from_toml("[processes]\nleak_window = \"30s\"\n", "test", false).expect("config");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/traces.toml");
    let sc = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    // The traces are sampled every 0.2 s; poll at that rate.
    let step = 0.2;
    let mut src = SimulatedSource::new(sc, Duration::from_secs_f64(step), 0.0);
    let mut pipe = Pipeline::new(&cfg.processes);
    let mut first_flag: BTreeMap<u32, f64> = BTreeMap::new();
    let mut growth_at_flag = None;
    for i in 0..450 {
        let t = i as f64 * step;
        let raw = src.poll(false).expect("poll");
        let (_, devices) = pipe.build(raw, t);
        let holders = devices[0].holders.expect("holders");
        let used = devices[0].memory.expect("memory").used_bytes;
        assert_eq!(
            holders.live + holders.zombie + holders.exited + holders.unattributed,
            used
        );
        for p in devices.iter().flat_map(|d| &d.processes).filter(|p| p.leak_suspected) {
            first_flag.entry(p.pid).or_insert(t);
            if p.pid == LEAK_PID && growth_at_flag.is_none() {
                growth_at_flag = p.growth_bytes_per_second;
            }
        }
    }
    let flagged: Vec<u32> = first_flag.keys().copied().collect();
    assert_eq!(flagged, vec![LEAK_PID], "only leak.csv may be flagged: {first_flag:?}");
    let at = first_flag[&LEAK_PID];
    assert!(at <= 30.0, "flagged {at} s into the replay, window is 30 s");
    let rate = growth_at_flag.expect("growth estimate") / (1 << 20) as f64;
    assert!(
        (rate - 64.0).abs() < 64.0 * 0.2,
        "leak.csv grows ~64 MiB/s, estimated {rate:.1}"
    );
    eprintln!("leak.csv flagged after {at:.1} s at {rate:.1} MiB/s; no other trace flagged");
}
