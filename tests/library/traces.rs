//! The real PyTorch memory traces recorded on an H200, replayed through the
//! simulated source and the real pipeline: only the leaking process may ever
//! be flagged, and it must be flagged within the leak window, once, and stay
//! flagged.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gpumemd::app::config::Config;
use gpumemd::collect::pipeline::Pipeline;
use gpumemd::collect::source::GpuSource;
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;

const LEAK_PID: u32 = 731;

/// Per pid: the times its flag went up and down, and the growth estimate
/// of the leaking pid when first flagged.
#[derive(Default)]
struct Flags {
    raised: BTreeMap<u32, Vec<f64>>,
    cleared: BTreeMap<u32, Vec<f64>>,
    growth_at_flag: Option<f64>,
}

/// Replays every trace through the simulated source and the pipeline with
/// leak window `window` (seconds), polling at the traces' 0.2 s.
fn replay(window: u32) -> Flags {
    let toml = format!("[processes]\nleak_window = \"{window}s\"\n");
    let cfg = Config::from_toml(&toml, "test", false).expect("config");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/traces.toml");
    let sc = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let step = 0.2;
    let mut src = SimulatedSource::new(sc, Duration::from_secs_f64(step), 0.0);
    let mut pipe = Pipeline::for_source(&cfg.processes, &src);
    let mut flags = Flags::default();
    let mut on: BTreeMap<u32, bool> = BTreeMap::new();
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
        for p in devices.iter().flat_map(|d| &d.processes) {
            let was = on.insert(p.pid, p.leak_suspected).unwrap_or(false);
            match (was, p.leak_suspected) {
                (false, true) => flags.raised.entry(p.pid).or_default().push(t),
                (true, false) => flags.cleared.entry(p.pid).or_default().push(t),
                _ => {}
            }
            if p.leak_suspected && p.pid == LEAK_PID && flags.growth_at_flag.is_none() {
                flags.growth_at_flag = p.growth_bytes_per_second;
            }
        }
    }
    flags
}

/// Only leak.csv is flagged, within one window (its process is listed from
/// the start of the replay), once, and it stays flagged while it grows.
fn only_the_leak_is_flagged_once_within(window: u32) {
    let f = replay(window);
    let flagged: Vec<u32> = f.raised.keys().copied().collect();
    assert_eq!(flagged, vec![LEAK_PID], "only leak.csv may be flagged: {:?}", f.raised);
    let raised = &f.raised[&LEAK_PID];
    assert_eq!(raised.len(), 1, "leak.csv flagged once: {raised:?}");
    assert!(
        f.cleared.is_empty(),
        "leak.csv stays flagged: cleared at {:?}",
        f.cleared
    );
    let at = raised[0];
    assert!(
        at <= f64::from(window),
        "flagged {at} s into the replay, window is {window} s"
    );
    let rate = f.growth_at_flag.expect("growth estimate") / (1 << 20) as f64;
    assert!(
        (rate - 64.0).abs() < 64.0 * 0.2,
        "leak.csv grows ~64 MiB/s, estimated {rate:.1}"
    );
    eprintln!("window {window} s: leak.csv flagged after {at:.1} s at {rate:.1} MiB/s; no other trace flagged");
}

/// The demo's window.
#[test]
fn only_the_leak_is_flagged_and_within_its_window() {
    only_the_leak_is_flagged_once_within(30);
}

/// Issue 15's live run on the H200 used a 40 s window.
#[test]
fn only_the_leak_is_flagged_at_a_40_s_window() {
    only_the_leak_is_flagged_once_within(40);
}
