//! Table tests of the rules that name several processes: the forecast kind
//! (duration thresholds, hysteresis, who grows) and `per = "gpu"` (one
//! alert per GPU counting its processes, naming the largest).

use super::eval::{EvalState, evaluate};
use super::*;
use crate::data::snapshot::{Device, Grower, Holder, Memory, PollStats, Process, Snapshot, Who};

fn rule(text: &str) -> Result<Rule, RuleError> {
    let cfg: RuleConfig = toml::from_str(text).map_err(|e| RuleError::Toml(e.message().to_string()))?;
    Rule::new(cfg)
}

fn device(uuid: &str, full_in: Option<f64>, processes: Vec<Process>) -> Device {
    Device {
        uuid: uuid.into(),
        index: Some(0),
        name: "NVIDIA H100".into(),
        up: true,
        memory: Some(Memory {
            total_bytes: 80 << 30,
            used_bytes: 60 << 30,
            free_bytes: 20 << 30,
            reserved_bytes: None,
        }),
        processes,
        full_in_seconds: full_in,
        growers: vec![Grower {
            pid: Some(731),
            comm: "python".into(),
            user: "alice".into(),
            holder: Some(Holder::Live),
            bytes_per_second: 64.0 * f64::from(1 << 20),
        }],
        ..Device::default()
    }
}

fn snap(t: f64, devices: Vec<Device>) -> Snapshot {
    Snapshot {
        seq: 1,
        timestamp: 1_000_000.0 + t,
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

const FORECAST: &str = "name = \"FillingUp\"\nkind = \"device_full_forecast\"\nbelow = \"30m\"\nclear = \"45m\"\nfor = \"2m\"\nannotations = { summary = \"full in {{ value_human }}: {{ top }}\" }";

#[test]
fn forecast_thresholds_are_durations() {
    let r = rule(FORECAST).expect("valid");
    assert_eq!(
        (r.cfg.below, r.cfg.clear),
        (
            Some(Threshold(1800.0, Some(1800.0))),
            Some(Threshold(2700.0, Some(2700.0)))
        )
    );
    let bad = rule("name = \"F\"\nkind = \"device_full_forecast\"\nbelow = \"90%\"");
    assert!(matches!(bad, Err(RuleError::NotADuration(_))), "{bad:?}");
    let bad = rule("name = \"F\"\nkind = \"device_free_bytes\"\nbelow = \"30min\"");
    assert!(
        matches!(bad, Err(RuleError::NotASize(s)) if s == 1800.0),
        "a size rule names the duration"
    );
    // A size rule still reads "5m" as 5 MiB.
    let size = rule("name = \"F\"\nkind = \"device_free_bytes\"\nbelow = \"5m\"").expect("valid");
    assert_eq!(size.cfg.below.map(|t| t.0), Some(5.0 * f64::from(1 << 20)));
}

#[test]
fn forecast_fires_after_for_names_who_grows_and_clears_with_hysteresis() {
    let rules = [rule(FORECAST).expect("valid")];
    let mut st = EvalState::new();
    let mut states = Vec::new();
    let mut summary = String::new();
    for (t, full_in) in [
        (0.0, None),
        (10.0, Some(1700.0)),
        (100.0, Some(1650.0)),
        (140.0, Some(1600.0)),
        (150.0, Some(2000.0)),
        (160.0, Some(3000.0)),
        (170.0, None),
    ] {
        st = evaluate(&rules, &st, &snap(t, vec![device("GPU-a", full_in, vec![])]), "h").0;
        let a = st.values().next();
        if let Some(a) = a.filter(|a| a.state == eval::State::Firing && summary.is_empty()) {
            summary = a.annotation("summary").unwrap_or_default();
        }
        states.push(a.map_or("-", |a| a.state.as_str()));
    }
    // Pending at 10 s, fires 2 min later, holds inside the 30..45 min band.
    assert_eq!(states, ["-", "pending", "pending", "firing", "firing", "-", "-"]);
    assert_eq!(summary, "full in 26m 40s: pid 731 (python, alice) +64.0 MiB/s");
}

fn idle(pid: u32, used: u64, idle: f64) -> Process {
    Process {
        pid,
        used_bytes: Some(used),
        holder: Some(Holder::Live),
        who: Who::shared("worker", "bob", None),
        idle_seconds: Some(idle),
        ..Process::default()
    }
}

const IDLE: &str = "name = \"Idle\"\nkind = \"process_idle_holder\"\nfor = \"20s\"\nper = \"gpu\"\nannotations = { summary = \"{{ value_human }} idle holders on GPU {{ gpu }}: {{ top }}\" }";

#[test]
fn per_gpu_counts_processes_and_names_the_largest() {
    let rules = [rule(IDLE).expect("valid")];
    let mib = 1u64 << 20;
    let procs: Vec<Process> = (1..=5)
        .map(|i| idle(i, u64::from(i) * 100 * mib, 30.0))
        .chain([idle(9, 900 * mib, 5.0)])
        .collect();
    let devices = vec![
        device("GPU-a", None, procs),
        device("GPU-b", None, vec![idle(7, mib, 1.0)]),
    ];
    let (st, _) = evaluate(&rules, &EvalState::new(), &snap(0.0, devices), "h");
    let alerts: Vec<_> = st.values().collect();
    assert_eq!(alerts.len(), 1, "one alert for GPU-a, none for GPU-b");
    let a = alerts[0];
    assert_eq!(a.value, 5.0);
    assert_eq!(a.labels.get("uuid").map(|v| v.as_str()), Some("GPU-a"));
    assert!(!a.labels.contains_key("pid"));
    assert_eq!(
        a.annotation("summary").as_deref(),
        Some(
            "5 idle holders on GPU 0: pid 5 (worker, bob) 500.0 MiB, pid 4 (worker, bob) 400.0 MiB, pid 3 (worker, bob) 300.0 MiB and 2 more"
        )
    );
}

#[test]
fn per_needs_a_process_rule_without_an_action() {
    let bad = rule("name = \"F\"\nkind = \"device_free_bytes\"\nbelow = \"1GiB\"\nper = \"gpu\"");
    assert_eq!(bad.err(), Some(RuleError::PerWithoutProcess));
    let bad = rule("name = \"F\"\nkind = \"process_idle_holder\"\nper = \"gpu\"\naction = \"terminate\"");
    assert_eq!(bad.err(), Some(RuleError::PerWithAction));
    let bad = rule("name = \"F\"\nkind = \"process_idle_holder\"\nper = \"pod\"");
    assert!(matches!(bad, Err(RuleError::Toml(m)) if m.contains("gpu")));
}
