//! Table tests of rule validation and of the evaluation state machine:
//! fire after `for`, hysteresis, resolve, stale data, PID reuse, clock jumps.

use super::eval::{EvalState, State, Transition, evaluate};
use super::*;
use crate::data::snapshot::{Device, Holder, Memory, PollStats, Process, Snapshot, Who};

fn rule(text: &str) -> Rule {
    let cfg: RuleConfig = toml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
    Rule::new(cfg).unwrap_or_else(|e| panic!("{e}"))
}

fn snap(mono: f64, used_ratio: f64, procs: Vec<Process>) -> Snapshot {
    let total = 100u64 << 30;
    let used = (total as f64 * used_ratio) as u64;
    Snapshot {
        seq: 1,
        timestamp: 1_000_000.0 + mono,
        monotonic: mono,
        nvml_up: true,
        devices: vec![Device {
            uuid: "GPU-a".into(),
            index: Some(0),
            name: "NVIDIA H100".into(),
            up: true,
            memory: Some(Memory {
                total_bytes: total,
                used_bytes: used,
                free_bytes: total - used,
                reserved_bytes: Some(0),
            }),
            processes: procs,
            ..Device::default()
        }],
        poll: PollStats {
            success: true,
            ..PollStats::default()
        },
        ..Snapshot::default()
    }
}

/// Runs `rules` over (monotonic time, used ratio) steps; returns the state of
/// the single alert after each step ("-" when inactive).
fn run(rules: &[Rule], steps: &[(f64, f64)]) -> Vec<&'static str> {
    let mut st = EvalState::new();
    steps
        .iter()
        .map(|&(t, v)| {
            let (next, _) = evaluate(rules, &st, &snap(t, v, vec![]), "host");
            st = next;
            st.values().next().map(|a| a.state.as_str()).unwrap_or("-")
        })
        .collect()
}

#[test]
fn fires_only_after_for() {
    let r = rule("name = \"High\"\nkind = \"device_used_ratio\"\nabove = 0.9\nfor = \"10s\"");
    let got = run(
        &[r],
        &[(0.0, 0.95), (5.0, 0.95), (10.0, 0.95), (11.0, 0.5), (12.0, 0.95)],
    );
    assert_eq!(got, ["pending", "pending", "firing", "-", "pending"]);
}

#[test]
fn hysteresis_band_does_not_flap() {
    let r = rule("name = \"High\"\nkind = \"device_used_ratio\"\nabove = \"90%\"\nclear = \"85%\"");
    let got = run(
        &[r],
        &[
            (0.0, 0.95),
            (1.0, 0.88),
            (2.0, 0.91),
            (3.0, 0.86),
            (4.0, 0.84),
            (5.0, 0.88),
            (6.0, 0.92),
        ],
    );
    assert_eq!(got, ["firing", "firing", "firing", "firing", "-", "-", "firing"]);
}

#[test]
fn below_rules_and_their_clear() {
    let r = rule("name = \"Low\"\nkind = \"device_free_bytes\"\nbelow = \"10GiB\"\nclear = \"20GiB\"");
    // free = 100 GiB x (1 - ratio)
    let got = run(&[r], &[(0.0, 0.5), (1.0, 0.95), (2.0, 0.85), (3.0, 0.75)]);
    assert_eq!(got, ["-", "firing", "firing", "-"]);
}

#[test]
fn wall_clock_jumps_do_not_shorten_for() {
    let r = rule("name = \"High\"\nkind = \"device_used_ratio\"\nabove = 0.9\nfor = \"10s\"");
    let mut st = EvalState::new();
    for (mono, wall_jump) in [(0.0, 0.0), (1.0, 3600.0), (2.0, -7200.0)] {
        let mut s = snap(mono, 0.95, vec![]);
        s.timestamp += wall_jump;
        st = evaluate(std::slice::from_ref(&r), &st, &s, "h").0;
    }
    assert_eq!(st.values().next().map(|a| a.state), Some(State::Pending));
}

fn proc(pid: u32, start: f64, used: u64) -> Process {
    Process {
        pid,
        start_time: Some(start),
        used_bytes: Some(used),
        holder: Some(Holder::Live),
        who: Who::shared("python", "alice", None),
        ..Process::default()
    }
}

#[test]
fn process_alerts_resolve_when_the_process_goes_and_pid_reuse_starts_over() {
    let r = rule("name = \"Big\"\nkind = \"process_used_bytes\"\nabove = \"1GiB\"\nfor = \"5s\"");
    let rules = [r];
    let mut st = EvalState::new();
    let mut all: Vec<Transition> = Vec::new();
    let steps = [
        (0.0, Some(100.0)),
        (5.0, Some(100.0)),
        (6.0, None),
        (7.0, Some(200.0)),
        (8.0, Some(200.0)),
    ];
    let mut states = Vec::new();
    for (t, start) in steps {
        let procs = start.map(|s| vec![proc(42, s, 2 << 30)]).unwrap_or_default();
        let (next, tr) = evaluate(&rules, &st, &snap(t, 0.1, procs), "h");
        st = next;
        all.extend(tr);
        states.push(st.values().next().map(|a| a.state.as_str()).unwrap_or("-"));
    }
    assert_eq!(
        states,
        ["pending", "firing", "-", "pending", "pending"],
        "a reused pid is a new process"
    );
    let kinds: Vec<&str> = all.iter().map(|t| t.to.as_str()).collect();
    assert_eq!(kinds, ["pending", "firing", "resolved", "pending"]);
    let resolved = &all[2].alert;
    assert_eq!(resolved.labels.get("pid").map(ArcStr::as_str), Some("42"));
    assert_eq!(resolved.resolved_at, Some(1_000_006.0));
}

#[test]
fn stale_snapshots_freeze_all_but_poll_health() {
    let high = rule("name = \"High\"\nkind = \"device_used_ratio\"\nabove = 0.9");
    let poll = rule("name = \"Poll\"\nkind = \"poll_failing\"\nfor = \"2s\"");
    let rules = [high, poll];
    let (st, _) = evaluate(&rules, &EvalState::new(), &snap(0.0, 0.95, vec![]), "h");
    let mut stale = snap(1.0, 0.1, vec![]);
    stale.stale = true;
    stale.poll.success = false;
    let (st, _) = evaluate(&rules, &st, &stale, "h");
    stale.monotonic = 3.0;
    let (st, _) = evaluate(&rules, &st, &stale, "h");
    let states: Vec<(&str, &str)> = st.values().map(|a| (&*a.rule, a.state.as_str())).collect();
    assert_eq!(states, [("High", "firing"), ("Poll", "firing")]);
}

#[test]
fn annotations_are_rendered() {
    let r = rule(
        "name = \"High\"\nkind = \"device_used_ratio\"\nabove = 0.9\nannotations = { summary = \"GPU {{ gpu }} ({{ model }}) at {{ value_human }}, limit {{ threshold_human }}\" }",
    );
    let (st, _) = evaluate(&[r], &EvalState::new(), &snap(0.0, 0.95, vec![]), "h");
    let a = st.values().next().expect("alert");
    assert_eq!(a.annotations()["summary"], "GPU 0 (NVIDIA H100) at 95.0%, limit 90.0%");
    assert_eq!(a.labels.get("instance").map(ArcStr::as_str), Some("h"));
    assert_eq!(a.labels.get("uuid").map(ArcStr::as_str), Some("GPU-a"));
}

#[test]
fn invalid_rules_say_why() {
    let cases = [
        (
            "name = \"R\"\nkind = \"device_used_ratio\"\nabove = 1.5",
            "outside 0..1",
        ),
        (
            "name = \"R\"\nkind = \"device_used_ratio\"\nabove = 0.9\nclear = 0.95",
            "`clear` (0.95) must not be above `above` (0.9)",
        ),
        (
            "name = \"R\"\nkind = \"device_free_bytes\"\nbelow = \"2GiB\"\nclear = \"1GiB\"",
            "must not be below `below`",
        ),
        ("name = \"R\"\nkind = \"device_used_bytes\"", "needs a threshold"),
        (
            "name = \"R\"\nkind = \"device_used_bytes\"\nabove = 1\nbelow = 2",
            "either `above` or `below`",
        ),
        (
            "name = \"R\"\nkind = \"device_held_bytes\"\nabove = 1",
            "needs `holder`",
        ),
        (
            "name = \"R\"\nkind = \"group_used_bytes\"\nabove = 1",
            "needs `group_by`",
        ),
        (
            "name = \"R\"\nkind = \"device_lost\"\nabove = 1",
            "takes no above/below/clear",
        ),
        (
            "name = \"R\"\nkind = \"device_lost\"\nannotations = { s = \"{{ oops }}\" }",
            "unknown placeholder",
        ),
        (
            "name = \"R\"\nkind = \"device_lost\"\nlabels = { \"bad-name\" = \"x\" }",
            "not a valid Prometheus label name",
        ),
        (
            "name = \"R\"\nkind = \"device_lost\"\naction = \"terminate\"",
            "`action` needs a rule about processes",
        ),
        (
            "name = \"R\"\nkind = \"group_used_bytes\"\ngroup_by = \"user\"\nabove = 1\naction = \"suspend\"",
            "`action = \"suspend\"` needs a rule about processes",
        ),
        (
            "name = \"my rule\"\nkind = \"device_lost\"",
            "must be letters, digits and _",
        ),
    ];
    for (text, want) in cases {
        let cfg: RuleConfig = toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let e = Rule::new(cfg).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(want), "{text:?}: got {e:?}, want {want:?}");
    }
}

#[test]
fn builtin_rule_sets_are_valid() {
    assert_eq!(parse_rule_set(DEFAULT_RULES).map(|r| r.len()), Ok(13));
    assert_eq!(parse_rule_set(DEMO_RULES).map(|r| r.len()), Ok(16));
}

#[test]
fn config_errors_name_the_rule_and_its_line() {
    let text = "[poll]\ninterval = \"1s\"\n\n[[rule]]\nname = \"Ok\"\nkind = \"device_lost\"\n\n[[rule]]\nname = \"Bad\"\nkind = \"device_used_ratio\"\nabove = 2\n";
    let e = crate::app::config::Config::from_toml(text, "g.toml", false)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.starts_with("g.toml:9: rule \"Bad\": device_used_ratio threshold 2 is outside 0..1"),
        "{e}"
    );
    let e = crate::app::config::Config::from_toml("[[rule]]\nname = \"X\"\nkind = \"nope\"\n", "g.toml", false)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    // The span names the element of the array of tables.
    assert!(e.starts_with("g.toml:3: rule[0].kind: unknown variant `nope`"), "{e}");
    // An unknown action names the line and the two actions there are.
    let text = "[[rule]]\nname = \"X\"\nkind = \"process_idle_holder\"\naction = \"hibernate\"\n";
    let e = crate::app::config::Config::from_toml(text, "g.toml", false)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.starts_with("g.toml:4: rule[0].action: unknown variant `hibernate`, expected `terminate` or `suspend`"),
        "{e}"
    );
}

/// A pass over what did not change changes nothing: the same alerts, no
/// transition, and
/// `update` says so; a changed value or a new process is seen at once.
#[test]
fn an_unchanged_pass_keeps_every_alert_and_reports_no_change() {
    let rules = [
        rule(
            "name = \"Big\"\nkind = \"process_used_bytes\"\nabove = \"1GiB\"\nlabels = { team = \"ml\", user = \"x\" }",
        ),
        rule("name = \"High\"\nkind = \"device_used_ratio\"\nabove = 0.5\nfor = \"1h\""),
    ];
    let procs = |used: u64| vec![proc(42, 100.0, used), proc(43, 100.0, 3 << 30)];
    let mut st = EvalState::new();
    let mut out = Vec::new();
    assert!(super::eval::update(
        &rules,
        &mut st,
        &snap(0.0, 0.9, procs(2 << 30)),
        "h",
        &mut out
    ));
    assert_eq!(out.len(), 3, "two firing processes and a pending device: {out:?}");
    let before: Vec<_> = st.values().cloned().collect();
    out.clear();
    let same = super::eval::update(&rules, &mut st, &snap(1.0, 0.9, procs(2 << 30)), "h", &mut out);
    assert!(!same && out.is_empty(), "nothing changed: {out:?}");
    let after: Vec<_> = st.values().cloned().collect();
    assert_eq!(before, after);
    // The rule's own label wins over the instance's.
    assert_eq!(after[0].labels.get("user").map(ArcStr::as_str), Some("x"));
    assert_eq!(after[0].labels.get("team").map(ArcStr::as_str), Some("ml"));
    assert!(super::eval::update(
        &rules,
        &mut st,
        &snap(2.0, 0.9, procs(5 << 30)),
        "h",
        &mut out
    ));
    assert!(out.is_empty(), "a new value is no transition: {out:?}");
    let grown = st
        .values()
        .find(|a| a.labels.get("pid").map(ArcStr::as_str) == Some("42"))
        .map(|a| a.value);
    assert_eq!(grown, Some((5u64 << 30) as f64));
}

#[test]
fn alerts_keep_the_order_of_their_old_text_keys() {
    let r = rule("name = \"Big\"\nkind = \"process_used_bytes\"\nabove = \"1GiB\"");
    let pids = [9, 10, 100, 2, 42];
    let mut s = snap(0.0, 0.1, pids.iter().map(|&p| proc(p, 5.0, 2 << 30)).collect());
    let mut b = s.devices[0].clone();
    b.uuid = "GPU-a-2".into();
    b.processes = vec![proc(7, 5.0, 2 << 30)];
    s.devices.insert(0, b);
    let (st, tr) = evaluate(&[r], &EvalState::new(), &s, "h");
    // "GPU-a/..." sorts before "GPU-a-2/..." ('/' above '-'), and PIDs as text.
    let want = ["GPU-a-2/7", "GPU-a/10", "GPU-a/100", "GPU-a/2", "GPU-a/42", "GPU-a/9"];
    let key = |a: &eval::Alert| {
        format!(
            "{}/{}",
            a.labels.get("uuid").map(ArcStr::as_str).unwrap_or(""),
            a.labels.get("pid").map(ArcStr::as_str).unwrap_or("")
        )
    };
    assert_eq!(st.values().map(key).collect::<Vec<_>>(), want);
    // Transitions come in the snapshot's order, as they always did.
    let seen = ["GPU-a-2/7", "GPU-a/9", "GPU-a/10", "GPU-a/100", "GPU-a/2", "GPU-a/42"];
    assert_eq!(tr.iter().map(|t| key(&t.alert)).collect::<Vec<_>>(), seen);
    // The transition carries the alert as the state holds it.
    assert_eq!(Some(&tr[0].alert), st.values().next());
}
