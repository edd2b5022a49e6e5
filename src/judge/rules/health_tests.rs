//! Table tests of the memory-health rule kinds: each built-in health rule's
//! transitions over a sequence of health readings, absent health never
//! firing, and the memory-Xid window. No clocks: time is in the snapshots.

use super::eval::{EvalState, evaluate};
use super::*;
use crate::data::snapshot::health::{Ecc, EccCounts, Health, Remap, XidEvent};
use crate::data::snapshot::{Device, PollStats, Snapshot};

fn snap(t: f64, health: Option<Health>) -> Snapshot {
    Snapshot {
        seq: 1,
        timestamp: 1_000_000.0 + t,
        monotonic: t,
        nvml_up: true,
        devices: vec![Device {
            uuid: "GPU-a".into(),
            index: Some(0),
            up: true,
            health,
            ..Device::default()
        }],
        poll: PollStats {
            success: true,
            ..PollStats::default()
        },
        ..Snapshot::default()
    }
}

fn builtin(name: &str) -> Rule {
    let set = parse_rule_set(DEFAULT_RULES).expect("defaults parse");
    let cfg = set.into_iter().find(|r| r.name == name).expect("built-in rule");
    Rule::new(cfg).expect("valid")
}

/// The alert's state after each (time, health) step, "-" when inactive.
fn run(rule: &Rule, steps: &[(f64, Option<Health>)]) -> Vec<String> {
    let mut st = EvalState::new();
    let rules = std::slice::from_ref(rule);
    steps
        .iter()
        .map(|(t, h)| {
            let (next, _) = evaluate(rules, &st, &snap(*t, h.clone()), "host");
            st = next;
            st.values().next().map_or("-".into(), |a| a.state.as_str().to_string())
        })
        .collect()
}

fn uncorrected(n: u64) -> Option<Health> {
    Some(Health {
        ecc: Some(Ecc {
            enabled: true,
            uncorrected: EccCounts {
                volatile: Some(n),
                aggregate: Some(n),
            },
            ..Ecc::default()
        }),
        ..Health::default()
    })
}

fn remap(pending: bool, failed: bool) -> Option<Health> {
    Some(Health {
        remap: Some(Remap {
            pending,
            failed,
            ..Remap::default()
        }),
        ..Health::default()
    })
}

/// Health whose memory-Xid window holds the memory-related `events`, as
/// `XidBook` fills it.
fn xids(events: &[(u64, f64)]) -> Option<Health> {
    Some(Health {
        xid_watched: true,
        memory_xids: events
            .iter()
            .filter(|(xid, _)| crate::data::snapshot::health::memory_related(*xid))
            .map(|&(xid, t)| XidEvent {
                xid,
                time: 1_000_000.0 + t,
            })
            .collect(),
        ..Health::default()
    })
}

#[test]
fn uncorrected_errors_fire_at_once_and_resolve_after_a_reset() {
    let r = builtin("GpuUncorrectedEccErrors");
    let got = run(
        &r,
        &[
            (0.0, uncorrected(0)),
            (1.0, uncorrected(1)),
            (2.0, uncorrected(2)),
            (3.0, uncorrected(0)),
        ],
    );
    assert_eq!(got, ["-", "firing", "firing", "-"]);
    // A GPU without ECC counters never fires, and an alert about it ends.
    assert_eq!(run(&r, &[(0.0, uncorrected(1)), (1.0, None)]), ["firing", "-"]);
}

#[test]
fn remap_pending_and_failed_follow_the_flags() {
    let pending = builtin("GpuRowRemapPending");
    let steps = [
        (0.0, remap(false, false)),
        (1.0, remap(true, false)),
        (2.0, remap(true, true)),
        (3.0, remap(false, false)),
    ];
    assert_eq!(run(&pending, &steps), ["-", "firing", "firing", "-"]);
    let failed = builtin("GpuRowRemapFailed");
    assert_eq!(run(&failed, &steps), ["-", "-", "firing", "-"]);
    assert_eq!(failed.cfg.severity, "critical");
}

#[test]
fn memory_xids_fire_within_the_window_only() {
    let r = builtin("GpuMemoryXid");
    let w = health::MEMORY_XID_WINDOW;
    let steps = [
        (0.0, xids(&[])),
        // Xid 13 (a graphics engine error) is not about memory.
        (1.0, xids(&[(13, 1.0)])),
        (2.0, xids(&[(13, 1.0), (48, 2.0)])),
        (2.0 + w, xids(&[(13, 1.0), (48, 2.0)])),
        (3.0 + w, xids(&[(13, 1.0), (48, 2.0)])),
    ];
    assert_eq!(run(&r, &steps), ["-", "-", "firing", "firing", "-"]);
    let (st, _) = evaluate(
        std::slice::from_ref(&r),
        &EvalState::new(),
        &snap(5.0, xids(&[(48, 4.0), (94, 5.0)])),
        "host",
    );
    let alert = st.values().next().expect("firing");
    assert_eq!(alert.labels.get("xid").map(ArcStr::as_str), Some("94"));
    assert_eq!(alert.value, 2.0);
    assert!(
        alert.annotations()["summary"].ends_with("memory Xid 94"),
        "{:?}",
        alert.annotations()
    );
}

#[test]
fn other_xids_do_not_push_a_memory_xid_out_of_the_window() {
    // `recent_events = 1` (and 0): the Xid 48 leaves the recent list at
    // once, the alert must keep firing for the whole window all the same.
    for keep in [1, 0] {
        let r = builtin("GpuMemoryXid");
        let mut book = crate::collect::health::XidBook::new(keep);
        let mut st = EvalState::new();
        let mut states = Vec::new();
        for (t, events) in [(1.0, vec![48]), (2.0, vec![13]), (3.0, vec![13]), (600.0, vec![])] {
            let mut h = Health {
                xid_watched: true,
                ..Health::default()
            };
            book.record("GPU-a", &events, 1_000_000.0 + t, &mut h);
            if t >= 2.0 {
                assert!(!h.xid_recent.iter().any(|e| e.xid == 48), "48 left the recent list");
            }
            let (next, _) = evaluate(std::slice::from_ref(&r), &st, &snap(t, Some(h)), "host");
            st = next;
            states.push(st.values().next().map_or("-".into(), |a| a.state.as_str().to_string()));
        }
        assert_eq!(states, ["firing"; 4], "recent_events = {keep}");
    }
}

#[test]
fn health_kinds_take_the_right_thresholds() {
    for (kind, ok) in [
        (
            "device_row_remap_pending",
            "name = \"X\"\nkind = \"device_row_remap_pending\"",
        ),
        (
            "device_ecc_uncorrected",
            "name = \"X\"\nkind = \"device_ecc_uncorrected\"\nabove = 0",
        ),
    ] {
        let cfg: RuleConfig = toml::from_str(ok).expect(kind);
        assert!(Rule::new(cfg).is_ok(), "{kind}");
    }
    let bad: RuleConfig = toml::from_str("name = \"X\"\nkind = \"device_row_remap_failed\"\nabove = 0").expect("toml");
    assert!(Rule::new(bad).is_err(), "a state takes no threshold");
}
