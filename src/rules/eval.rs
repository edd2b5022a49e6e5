//! Rule evaluation: a pure function of (rules, previous state, snapshot).
//! Durations (`for`) run on the snapshot's monotonic clock so a wall-clock
//! jump neither fires nor resolves anything; reported times are wall-clock.
//! States go inactive -> pending -> firing -> resolved, with hysteresis
//! (`clear`) so a value wobbling around the threshold does not flap.

use std::collections::BTreeMap;

use serde::Serialize;

pub use super::instances::ProcessRef;
use super::instances::{Instance, holds, instances};
use super::{Rule, RuleKind};
use crate::snapshot::Snapshot;
use crate::units::human;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Pending,
    Firing,
    Resolved,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Firing => "firing",
            State::Resolved => "resolved",
        }
    }
}

/// One alert instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    pub rule: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub state: State,
    /// Wall-clock Unix seconds when it became active (pending).
    pub active_at: f64,
    /// Wall-clock Unix seconds when it fired.
    pub fired_at: Option<f64>,
    /// Wall-clock Unix seconds when it resolved.
    pub resolved_at: Option<f64>,
    pub value: f64,
    #[serde(skip)]
    pub since_mono: f64,
    #[serde(skip)]
    pub targets: Vec<ProcessRef>,
    /// What to do when it fires (from the rule).
    #[serde(skip)]
    pub action: Option<super::RuleAction>,
}

/// A state change, for notifiers, reclaim and the recent-transitions list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    pub from: Option<State>,
    pub to: State,
    pub at: f64,
    pub alert: Alert,
}

/// Active alerts keyed by (rule name, identity).
pub type EvalState = BTreeMap<(String, String), Alert>;

/// Evaluates every rule against `snap`; `instance` is the value of the
/// `instance` label (the host).
pub fn evaluate(rules: &[Rule], prev: &EvalState, snap: &Snapshot, instance: &str) -> (EvalState, Vec<Transition>) {
    let mut next = EvalState::new();
    let mut out = Vec::new();
    for rule in rules {
        // On stale data only the poll-health rule can judge anything; the
        // others keep their state until fresh data arrives.
        if snap.stale && rule.cfg.kind != RuleKind::PollFailing {
            for (k, a) in prev.iter().filter(|(k, _)| k.0 == rule.cfg.name) {
                next.insert(k.clone(), a.clone());
            }
            continue;
        }
        let found = if rule.cfg.kind.is_health() {
            super::health::instances(rule, snap)
        } else {
            instances(rule, snap)
        };
        for inst in found {
            let key = (rule.cfg.name.clone(), inst.key.clone());
            let was = prev.get(&key);
            if condition(rule, &inst, was.is_some()) {
                let a = step(rule, was, inst, snap, instance, &mut out);
                next.insert(key, a);
            } else if let Some(old) = was {
                resolve(old, snap.timestamp, &mut out);
            }
        }
        for (k, old) in prev
            .iter()
            .filter(|(k, _)| k.0 == rule.cfg.name && !next.contains_key(*k))
        {
            // The thing it was about is gone (process exited, GPU removed),
            // unless we already resolved it above.
            if !out
                .iter()
                .any(|t| t.to == State::Resolved && t.alert.rule == k.0 && t.alert.labels == old.labels)
            {
                resolve(old, snap.timestamp, &mut out);
            }
        }
    }
    (next, out)
}

fn resolve(old: &Alert, now: f64, out: &mut Vec<Transition>) {
    // A pending alert that clears never fired: nothing to notify.
    if old.state == State::Firing {
        let mut a = old.clone();
        a.state = State::Resolved;
        a.resolved_at = Some(now);
        out.push(Transition {
            from: Some(State::Firing),
            to: State::Resolved,
            at: now,
            alert: a,
        });
    }
}

fn condition(rule: &Rule, inst: &Instance, was_active: bool) -> bool {
    holds(rule, inst.value, inst.holds, was_active)
}

fn step(
    rule: &Rule,
    was: Option<&Alert>,
    inst: Instance,
    snap: &Snapshot,
    instance: &str,
    out: &mut Vec<Transition>,
) -> Alert {
    let now = snap.timestamp;
    let mono = snap.monotonic;
    let mut labels = inst.labels;
    labels.insert("alertname".into(), rule.cfg.name.clone());
    labels.insert("severity".into(), rule.cfg.severity.clone());
    labels.insert("instance".into(), instance.to_string());
    for (k, v) in &rule.cfg.labels {
        labels.insert(k.clone(), v.clone());
    }
    let annotations = render_annotations(rule, &labels, inst.value, &inst.model, inst.others.as_deref());
    // The idle-holder kind measures its own duration (idle seconds >= for).
    let hold_for = if rule.cfg.kind == RuleKind::ProcessIdleHolder {
        0.0
    } else {
        rule.cfg.for_.0
    };
    let mut a = match was {
        Some(old) => Alert {
            labels,
            annotations,
            value: inst.value,
            targets: inst.targets,
            ..old.clone()
        },
        None => Alert {
            rule: rule.cfg.name.clone(),
            labels,
            annotations,
            state: State::Pending,
            active_at: now,
            fired_at: None,
            resolved_at: None,
            value: inst.value,
            since_mono: mono,
            targets: inst.targets,
            action: rule.cfg.action,
        },
    };
    let from = was.map(|w| w.state);
    if a.state == State::Pending && mono - a.since_mono >= hold_for {
        a.state = State::Firing;
        a.fired_at = Some(now);
    }
    if from != Some(a.state) {
        out.push(Transition {
            from,
            to: a.state,
            at: now,
            alert: a.clone(),
        });
    }
    a
}

fn render_annotations(
    rule: &Rule,
    labels: &BTreeMap<String, String>,
    value: f64,
    model: &str,
    others: Option<&str>,
) -> BTreeMap<String, String> {
    let mut vars: BTreeMap<&str, String> = labels.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let threshold = rule.cfg.above.or(rule.cfg.below).map(|t| t.0);
    vars.insert("value", format_num(value));
    vars.insert("value_human", humanize(rule.cfg.kind, value));
    vars.insert("threshold", threshold.map(format_num).unwrap_or_default());
    vars.insert(
        "threshold_human",
        threshold.map(|t| humanize(rule.cfg.kind, t)).unwrap_or_default(),
    );
    vars.insert("model", model.to_string());
    vars.insert("others", others.unwrap_or_default().to_string());
    rule.annotations
        .iter()
        .map(|(k, t)| (k.clone(), t.render(&vars)))
        .collect()
}

fn format_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

fn humanize(kind: RuleKind, v: f64) -> String {
    match kind {
        RuleKind::DeviceUsedRatio | RuleKind::ProcessFragmentation => format!("{:.1}%", v * 100.0),
        RuleKind::ProcessGrowthRate => format!("{}/s", human(v.max(0.0) as u64)),
        RuleKind::DeviceLost | RuleKind::ProcessLeakSuspected | RuleKind::PollFailing | RuleKind::ProcessOom => {
            format_num(v)
        }
        k if k.is_health() => format_num(v),
        _ => human(v.max(0.0) as u64),
    }
}
