//! `Scenario::parse`: the simulated fleet's TOML format. A scenario that
//! parses is also run: a few polls of `SimulatedSource` through the
//! pipeline, the default rules and the metrics renderer, since a file that
//! is accepted and then panics the demo is the same bug one step later.

use std::path::PathBuf;
use std::time::Duration;

use gpumemd::act::alerts::AlertEngine;
use gpumemd::app::config::{Config, GroupBy};
use gpumemd::collect::pipeline::Pipeline;
use gpumemd::collect::source::GpuSource;
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;
use gpumemd::data::snapshot::{PollStats, Snapshot};
use gpumemd::serve::metrics::{DaemonState, Format, render};
use proptest::prelude::*;

use super::mutate;
use crate::{Seed, assert_one_line, bounded, cases, corpus, repo};

const SHIPPED: &[&str] = &[
    "src/collect/source/scenarios/default.toml",
    "src/collect/source/scenarios/gpu-lost.toml",
    "src/collect/source/scenarios/mig.toml",
    "tests/scenarios/traces.toml",
];

const DICT: &[&str] = &[
    "[[gpu]]",
    "[[process]]",
    "[driver]",
    "name",
    "description",
    "seed",
    "loop",
    "overhead_per_process",
    "memory",
    "reserved",
    "lost_from_poll",
    "lost_until_poll",
    "mig",
    "profile",
    "gpu",
    "instance",
    "pid",
    "comm",
    "user",
    "uid",
    "type",
    "state",
    "container",
    "start",
    "stop",
    "exit",
    "release_after",
    "ramp_to",
    "ramp",
    "steps",
    "leak",
    "sawtooth",
    "period",
    "jitter",
    "unavailable",
    "sm_util",
    "busy_for",
    "trace",
    "speed",
    "trace_pid",
    " = ",
    "\"",
    "[",
    "]",
    "{",
    "}",
    ",",
    "\n",
    "0",
    "1",
    "-1",
    "4294967295",
    "1e308",
    "nan",
    "true",
    "\"0s\"",
    "\"1ns\"",
    "\"80GiB\"",
    "\"1B\"",
    "\"zombie\"",
    "\"exited\"",
    "\"compute+graphics\"",
    "\"../traces/h200-pytorch/leak.csv\"",
];

/// Parses `text` (trace paths relative to `base`) and, when it is a valid
/// scenario, runs it.
fn check((text, base): (String, PathBuf)) -> Result<(), String> {
    let s = Scenario::parse(&text, "fuzz.toml", Some(&base)).map_err(|e| {
        let msg = e.to_string();
        assert_one_line("scenario", &msg);
        assert!(msg.contains("fuzz.toml"), "error does not name the file: {msg}");
        msg
    })?;
    simulate(s);
    Ok(())
}

/// Three polls of `s` through everything a demo daemon runs per poll.
fn simulate(s: Scenario) {
    let mut cfg = Config::defaults(true);
    // Every optional output on, so every code path sees the odd values.
    cfg.processes.cmdline = true;
    cfg.processes.group_by = vec![
        GroupBy::User,
        GroupBy::Container,
        GroupBy::Pod,
        GroupBy::Unit,
        GroupBy::Job,
    ];
    let epoch = 1_700_000_000.0;
    let mut src = SimulatedSource::new(s, Duration::from_secs(7), epoch);
    let mut pipeline = Pipeline::for_source(&cfg.processes, &src);
    let mut engine = AlertEngine::new(cfg.effective_rules(), "fuzz".into(), 10);
    let build = gpumemd::build_info();
    for n in 1..=3u64 {
        let Ok(raw) = src.poll(n != 2) else { continue };
        let now = epoch + 7.0 * n as f64;
        let (driver, devices) = pipeline.build(raw, now);
        let snap = Snapshot {
            seq: n,
            timestamp: now,
            monotonic: 7.0 * n as f64,
            nvml_up: true,
            driver,
            devices,
            poll: PollStats {
                polls_total: n,
                success: true,
                ..PollStats::default()
            },
            ..Snapshot::default()
        };
        engine.evaluate(&snap);
        let view = engine.view();
        let daemon = DaemonState {
            alerts: Some(&view),
            ..DaemonState::default()
        };
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let _ = render(&snap, &daemon, &cfg.processes, &build, format);
        }
        let _ = serde_json::to_string(&snap).expect("a snapshot is JSON");
    }
}

fn run(text: String) -> Result<(), String> {
    bounded("scenario", (text, repo("tests/scenarios")), check)
}

fn seeds() -> Vec<Seed> {
    corpus("scenario", SHIPPED)
}

fn trees() -> Vec<serde_json::Value> {
    crate::toml_trees(&seeds())
}

#[test]
fn every_seed_is_a_valid_scenario_and_runs() {
    for s in seeds() {
        let base = s.path.parent().expect("a seed is in a folder").to_path_buf();
        if let Err(e) = bounded("scenario", (s.text(), base), check) {
            panic!("seed {} does not parse: {e}", s.name);
        }
    }
}

/// Found by this file: both panicked (an overflow) or broke the one-line
/// rule before they were fixed.
#[test]
fn regressions() {
    let err =
        run("name = \"x\"\n[[gpu]]\nmemory = \"1GiB\"\nreserved = \"2GiB\"\n".into()).expect_err("reserved > memory");
    assert!(err.contains("reserved"), "{err}");
    let err = run("name = \"x\"\n[[gpu]]\nmemory = \"1GiB\"\n[[process]]\npid = 1\ntrace = \"a\\nb\"\n".into())
        .expect_err("no such trace");
    assert!(err.contains("a\\nb"), "the path is shown escaped: {err}");
}

format_properties!(scenario_tokens, 48, |t| toml::to_string(t).ok());
