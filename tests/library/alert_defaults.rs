//! The default alert rules judged on memory profiles, old set against new:
//! the real H200 traces, a vLLM-like server and a training job that reserve
//! almost all memory at start and hold it, a leak that runs into
//! out-of-memory, a long warm-up beside a sawtooth, and the `large`
//! simulated fleet. Each profile goes through the simulated source, the real
//! pipeline (leak detector and forecast) and the real rules engine; the
//! tests print which alerts fire, when, and how long before the GPU is full.
//!
//! Must not: sleep or read clocks (time is the replay's).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gpumemd::app::config::Config;
use gpumemd::collect::pipeline::Pipeline;
use gpumemd::collect::source::GpuSource;
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;
use gpumemd::data::snapshot::{PollOutcome, PollStats, Snapshot};
use gpumemd::judge::rules::eval::{EvalState, State, Transition, update};
use gpumemd::judge::rules::{DEFAULT_RULES, DEMO_RULES, Rule, parse_rule_set};

const EPOCH: f64 = 1.7e9;

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/rules")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rules(text: &str) -> Vec<Rule> {
    let set = parse_rule_set(text).unwrap_or_else(|e| panic!("{e}"));
    set.into_iter().map(|c| Rule::new(c).expect("valid rule")).collect()
}

/// One alert rule's record over a replay.
#[derive(Debug, Clone, Default)]
struct Fired {
    severity: String,
    /// Replay seconds of the first firing.
    first: Option<f64>,
    /// Most instances firing at once.
    most: usize,
    /// Transitions to firing: more than one per instance is a flap.
    fires: usize,
    /// The first firing alert's description.
    description: String,
}

/// What a replay saw under one rule set.
#[derive(Debug, Default)]
struct Outcome {
    fired: BTreeMap<String, Fired>,
    /// Replay seconds when a GPU first had no free memory.
    full_at: Option<f64>,
    /// Every process a forecast named as a grower, by pid.
    growers: std::collections::BTreeSet<u32>,
    /// The shortest forecast seen (seconds to full).
    min_full_in: Option<f64>,
}

impl Outcome {
    /// Rules that fired at warning or critical.
    fn paging(&self) -> Vec<&str> {
        self.fired
            .iter()
            .filter(|(_, f)| f.first.is_some() && f.severity != "info")
            .map(|(n, _)| n.as_str())
            .collect()
    }
}

/// Replays `sc` for `polls` polls of `step` seconds with `config` (TOML)
/// through the pipeline, evaluating each rule set on every snapshot.
fn replay(sc: Scenario, config: &str, step: f64, polls: usize, sets: &[&[Rule]]) -> Vec<Outcome> {
    let cfg = Config::from_toml(config, "test", false).expect("config");
    let mut src = SimulatedSource::new(sc, Duration::from_secs_f64(step), EPOCH);
    let mut pipe = Pipeline::for_source(&cfg.processes, &src);
    let mut states: Vec<EvalState> = sets.iter().map(|_| EvalState::new()).collect();
    let mut outs: Vec<Outcome> = sets.iter().map(|_| Outcome::default()).collect();
    let mut transitions: Vec<Transition> = Vec::new();
    for i in 0..polls {
        let t = i as f64 * step;
        let raw = src.poll(true).expect("poll");
        let outcome = PollOutcome {
            seq: i as u64 + 1,
            timestamp: EPOCH + t,
            monotonic: t,
            nvml: Ok(pipe.build(raw, EPOCH + t)),
        };
        let poll = PollStats {
            success: true,
            ..PollStats::default()
        };
        let snap = Snapshot::of_poll(outcome, None, poll);
        let full = snap
            .devices
            .iter()
            .any(|d| d.up && d.memory.is_some_and(|m| m.free_bytes == 0));
        for ((rules, st), out) in sets.iter().zip(&mut states).zip(&mut outs) {
            transitions.clear();
            update(rules, st, &snap, "host", &mut transitions);
            if full && out.full_at.is_none() {
                out.full_at = Some(t);
            }
            let soonest = snap.devices.iter().filter_map(|d| d.full_in_seconds).reduce(f64::min);
            out.min_full_in = match (out.min_full_in, soonest) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            out.growers
                .extend(snap.devices.iter().flat_map(|d| &d.growers).filter_map(|g| g.pid));
            for r in rules.iter() {
                let e = out.fired.entry(r.cfg.name.clone()).or_default();
                e.severity.clone_from(&r.cfg.severity);
            }
            let mut firing: BTreeMap<&str, usize> = BTreeMap::new();
            for a in st.values().filter(|a| a.state == State::Firing) {
                *firing.entry(a.rule.as_str()).or_default() += 1;
            }
            for (name, n) in firing {
                let e = out.fired.entry(name.to_string()).or_default();
                e.most = e.most.max(n);
            }
            for tr in transitions.iter().filter(|tr| tr.to == State::Firing) {
                let e = out.fired.entry(tr.alert.rule.to_string()).or_default();
                e.fires += 1;
                if e.first.is_none() {
                    e.first = Some(t);
                    e.description = tr.alert.annotation("description").unwrap_or_default();
                }
            }
        }
    }
    outs
}

/// Prints, per rule, when it first fired under each set (and how long
/// before the GPU was full), one line per rule.
fn table(profile: &str, before: &Outcome, after: &Outcome) {
    let when = |o: &Outcome, name: &str| -> String {
        let Some(f) = o.fired.get(name) else { return "-".into() };
        let Some(t) = f.first else {
            return format!("no ({})", f.severity);
        };
        let lead = o
            .full_at
            .map(|full| format!(", {:.0} s before full", full - t))
            .unwrap_or_default();
        format!("{} at {t:.0} s{lead}, {} at once", f.severity, f.most)
    };
    let names: std::collections::BTreeSet<&str> = before
        .fired
        .keys()
        .chain(after.fired.keys())
        .map(String::as_str)
        .collect();
    eprintln!(
        "--- {profile} (full at: {:?} s; shortest forecast: {:?} s; growers: {:?})",
        after.full_at.or(before.full_at),
        after.min_full_in.map(f64::round),
        after.growers
    );
    eprintln!("{:<30} | {:<48} | after", "alert", "before");
    for n in names {
        let (b, a) = (when(before, n), when(after, n));
        let quiet = |s: &str| s == "-" || s.starts_with("no");
        if quiet(&b) && quiet(&a) {
            continue;
        }
        eprintln!("{n:<30} | {b:<48} | {a}");
    }
}

fn defaults() -> (Vec<Rule>, Vec<Rule>) {
    (rules(&fixture("defaults-before.toml")), rules(DEFAULT_RULES))
}

/// A vLLM-like server that reserves 90 % of an H100 at start
/// (`gpu_memory_utilization` 0.9) and a training job whose caching
/// allocator warms up to 78 GiB in a minute; both hold it for two hours.
const RESERVED_UP_FRONT: &str = r#"
name = "reserved-up-front"
overhead_per_process = "500MiB"
[[gpu]]
name = "NVIDIA H100 80GB HBM3"
memory = "80GiB"
reserved = "512MiB"
[[gpu]]
name = "NVIDIA H100 80GB HBM3"
memory = "80GiB"
reserved = "512MiB"
[[process]]
gpu = 0
pid = 5001
comm = "vllm"
user = "serve"
uid = 1100
memory = "72GiB"
jitter = "2MiB"
sm_util = 30
[[process]]
gpu = 1
pid = 5002
comm = "python"
user = "alice"
uid = 1000
memory = "2GiB"
ramp_to = "78GiB"
ramp = "60s"
steps = 8
jitter = "4MiB"
sm_util = 95
"#;

/// A server holding 10 GiB beside a worker that keeps references to
/// 16 MiB a second from 20 GiB, into out-of-memory.
const LEAK_TO_OOM: &str = r#"
name = "leak-to-oom"
overhead_per_process = "500MiB"
[[gpu]]
name = "NVIDIA H100 80GB HBM3"
memory = "80GiB"
reserved = "512MiB"
[[process]]
pid = 6001
comm = "python"
user = "bob"
uid = 1001
memory = "20GiB"
leak = "16MiB"
jitter = "4MiB"
sm_util = 60
[[process]]
pid = 6002
comm = "server"
user = "carol"
uid = 1002
memory = "10GiB"
jitter = "4MiB"
sm_util = 20
"#;

/// A caching allocator warming up over half a leak window beside a job that
/// allocates and frees 16 GiB every minute, for an hour.
const WARMUP_AND_SAWTOOTH: &str = r#"
name = "warm-up-and-sawtooth"
overhead_per_process = "500MiB"
[[gpu]]
name = "NVIDIA H100 80GB HBM3"
memory = "80GiB"
reserved = "512MiB"
[[process]]
pid = 7001
comm = "python"
user = "alice"
uid = 1000
memory = "2GiB"
ramp_to = "40GiB"
ramp = "300s"
steps = 12
jitter = "8MiB"
sm_util = 90
[[process]]
pid = 7002
comm = "python"
user = "bob"
uid = 1001
memory = "8GiB"
sawtooth = "16GiB"
period = "60s"
jitter = "8MiB"
sm_util = 90
"#;

fn scenario(text: &str) -> Scenario {
    Scenario::parse(text, "test", None).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn reserved_up_front_pages_nobody_after() {
    let (old, new) = defaults();
    let o = replay(scenario(RESERVED_UP_FRONT), "", 10.0, 720, &[&old, &new]);
    table("vLLM 0.9 and a training job holding 78 GiB, 2 h", &o[0], &o[1]);
    assert!(
        o[0].paging().contains(&"GpuMemoryHigh") && o[0].paging().contains(&"GpuMemoryHeadroomLow"),
        "the old defaults page on GPUs full by design: {:?}",
        o[0].paging()
    );
    assert_eq!(o[1].paging(), Vec::<&str>::new(), "the new defaults page nobody");
    assert!(
        o[1].growers.is_empty(),
        "nothing is forecast to grow: {:?}",
        o[1].growers
    );
}

#[test]
fn leak_to_oom_pages_well_before_full() {
    let (old, new) = defaults();
    // 5 s polls for an hour: the leak fills the GPU in about 53 minutes.
    let o = replay(scenario(LEAK_TO_OOM), "", 5.0, 720, &[&old, &new]);
    table("a 16 MiB/s leak into out-of-memory", &o[0], &o[1]);
    let full = o[1].full_at.expect("the leak fills the GPU within the hour");
    let f = &o[1].fired["GpuMemoryFillingUp"];
    let at = f.first.expect("GpuMemoryFillingUp fires");
    let lead = full - at;
    eprintln!(
        "GpuMemoryFillingUp: fired {at:.0} s in, {lead:.0} s ({:.1} min) before full",
        lead / 60.0
    );
    assert_eq!(f.severity, "critical");
    assert_eq!(f.fires, 1, "fires once and stays firing up to full");
    assert!(
        lead >= 20.0 * 60.0,
        "fires at least 20 minutes before full: {lead:.0} s"
    );
    assert!(
        f.description.contains("pid 6001 (python, bob) +16.0 MiB/s"),
        "names who grows: {}",
        f.description
    );
    assert_eq!(
        o[1].growers.iter().copied().collect::<Vec<_>>(),
        [6001],
        "only the leak grows"
    );
    // The old critical alert comes with (almost) no time left to act.
    let old_lead = o[0].fired["GpuMemoryHeadroomLow"].first.map_or(0.0, |t| full - t);
    assert!(old_lead < lead / 5.0, "old headroom alert: {old_lead:.0} s before full");
}

#[test]
fn forecast_stays_silent_on_warm_up_and_sawtooth() {
    let (old, new) = defaults();
    let o = replay(scenario(WARMUP_AND_SAWTOOTH), "", 5.0, 720, &[&old, &new]);
    table("a 5 min warm-up beside a 1 min sawtooth of 16 GiB, 1 h", &o[0], &o[1]);
    assert!(o[1].growers.is_empty(), "forecast named {:?}", o[1].growers);
    assert_eq!(o[1].fired["GpuMemoryFillingUp"].first, None);
    assert_eq!(o[1].paging(), Vec::<&str>::new());
}

#[test]
fn h200_traces_forecast_only_the_leak() {
    let (old, new) = defaults();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/traces.toml");
    let sc = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    // The traces are 90 s long: the demo's 30 s leak window.
    let cfg = "[processes]\nleak_window = \"30s\"\n";
    // The demo's rules too: their windows are short enough for 90 s.
    let (old_demo, new_demo) = (rules(&fixture("demo-before.toml")), rules(DEMO_RULES));
    let o = replay(sc, cfg, 0.2, 450, &[&old, &new, &old_demo, &new_demo]);
    table("the H200 PyTorch traces, 90 s, default rules", &o[0], &o[1]);
    table("the H200 PyTorch traces, 90 s, demo rules", &o[2], &o[3]);
    assert_eq!(o[3].growers, o[1].growers);
    assert_eq!(
        o[1].growers.iter().copied().collect::<Vec<_>>(),
        [731],
        "warm-ups (train, varlen), the sawtooth, the orphan and the exit never grow"
    );
    assert_eq!(o[1].paging(), Vec::<&str>::new());
}

#[test]
fn large_fleet_alerts_are_bounded_by_gpus() {
    let old = rules(&fixture("demo-before.toml"));
    let new = rules(DEMO_RULES);
    let sc = Scenario::resolve("large").expect("large");
    let gpus = sc.gpus.len();
    // The demo's idle-holder rule fires after 20 s idle: 4 polls of 10 s.
    let cfg = "[processes]\nleak_window = \"30s\"\n";
    let o = replay(sc, cfg, 10.0, 4, &[&old, &new]);
    table("--demo large: 64 GPUs x 1000 processes", &o[0], &o[1]);
    let idle_before = o[0].fired["GpuIdleHolder"].most;
    let idle_after = o[1].fired["GpuIdleHolder"].most;
    eprintln!("GpuIdleHolder at once: {idle_before} before, {idle_after} after");
    assert!(idle_before > 10 * gpus, "the storm is there before: {idle_before}");
    assert!(
        idle_after > 0 && idle_after <= gpus,
        "one per GPU at most: {idle_after}"
    );
    for (name, f) in &o[1].fired {
        assert!(f.most <= gpus, "{name}: {} alerts at once for {gpus} GPUs", f.most);
    }
}
