//! Tests of the alert engine across reloads.

use super::*;
use crate::data::snapshot::{Device, Memory, PollStats};
use crate::judge::rules::RuleConfig;

fn rule(text: &str) -> Rule {
    let cfg: RuleConfig = toml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
    Rule::new(cfg).unwrap_or_else(|e| panic!("{e}"))
}

fn snap(mono: f64) -> Snapshot {
    Snapshot {
        seq: 1,
        timestamp: 100.0 + mono,
        monotonic: mono,
        nvml_up: true,
        devices: vec![Device {
            uuid: "GPU-a".into(),
            index: Some(0),
            up: true,
            memory: Some(Memory {
                total_bytes: 100,
                used_bytes: 95,
                free_bytes: 5,
                reserved_bytes: None,
            }),
            ..Device::default()
        }],
        poll: PollStats {
            success: true,
            ..PollStats::default()
        },
        ..Snapshot::default()
    }
}

#[test]
fn reload_keeps_state_of_unchanged_rules_and_resolves_changed_ones() {
    let a = rule("name = \"A\"\nkind = \"device_used_ratio\"\nabove = 0.9\nfor = \"10s\"");
    let b = rule("name = \"B\"\nkind = \"device_used_ratio\"\nabove = 0.5");
    let mut e = AlertEngine::new(vec![a.clone(), b], "h".into(), 10);
    e.evaluate(&snap(0.0));
    // B changes its threshold, A stays as it is.
    let b2 = rule("name = \"B\"\nkind = \"device_used_ratio\"\nabove = 0.6");
    let t = e.set_rules(vec![a, b2], 105.0);
    assert_eq!(t.len(), 1, "the firing B of the old definition resolves");
    assert_eq!((&*t[0].alert.rule, t[0].to), ("B", State::Resolved));
    // A keeps its pending start, so it fires 10 s after the first evaluation.
    e.evaluate(&snap(10.0));
    let v = e.view();
    let states: Vec<(&str, State)> = v.alerts.iter().map(|a| (&*a.rule, a.state)).collect();
    assert_eq!(states, [("A", State::Firing), ("B", State::Firing)]);
    let newest: Vec<(&str, State)> = v.transitions.iter().take(2).map(|t| (&*t.alert.rule, t.to)).collect();
    assert!(newest.contains(&("A", State::Firing)), "newest first: {newest:?}");
}

#[test]
fn recent_transitions_are_bounded() {
    let a = rule("name = \"A\"\nkind = \"device_used_ratio\"\nabove = 0.9");
    let mut e = AlertEngine::new(vec![a], "h".into(), 3);
    for i in 0..10 {
        let mut s = snap(f64::from(i));
        if i % 2 == 1 {
            s.devices[0].memory = Some(Memory {
                total_bytes: 100,
                used_bytes: 1,
                free_bytes: 99,
                reserved_bytes: None,
            });
        }
        e.evaluate(&s);
    }
    assert_eq!(e.view().transitions.len(), 3);
}
