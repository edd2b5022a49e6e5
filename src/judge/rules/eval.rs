//! Rule evaluation: a pure function of (rules, previous state, snapshot).
//! Durations (`for`) run on the snapshot's monotonic clock so a wall-clock
//! jump neither fires nor resolves anything; reported times are wall-clock.
//! States go inactive -> pending -> firing -> resolved, with hysteresis
//! (`clear`) so a value wobbling around the threshold does not flap.

use std::collections::BTreeMap;

use arcstr::ArcStr;
use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

pub use super::annotations::{Annotations, Labels};
use super::instances::{Instance, Target, for_each, holds};
use super::subject::DevLabels;
use super::{Rule, RuleKind};
use crate::data::snapshot::Snapshot;

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

/// One alert instance; its JSON is that of `/api/v1/alerts` and of
/// transitions.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub rule: ArcStr,
    pub labels: Labels,
    /// Rendered when read ([`Alert::annotations`]) from the alert's labels
    /// and value: the same text at every read.
    pub notes: Annotations,
    pub state: State,
    /// Wall-clock Unix seconds when it became active (pending).
    pub active_at: f64,
    /// Wall-clock Unix seconds when it fired.
    pub fired_at: Option<f64>,
    /// Wall-clock Unix seconds when it resolved.
    pub resolved_at: Option<f64>,
    pub value: f64,
    pub since_mono: f64,
    pub targets: Vec<Target>,
    /// What to do when it fires (from the rule).
    pub action: Option<super::RuleAction>,
}

impl Alert {
    /// Every annotation, rendered.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.notes.render(&self.labels, self.value)
    }

    /// One annotation, rendered; `None` when the rule has none by that name.
    pub fn annotation(&self, name: &str) -> Option<String> {
        self.notes.get(name, &self.labels, self.value)
    }
}

impl Serialize for Alert {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Alert", 8)?;
        st.serialize_field("rule", &self.rule)?;
        st.serialize_field("labels", &self.labels)?;
        st.serialize_field("annotations", &self.annotations())?;
        st.serialize_field("state", &self.state)?;
        st.serialize_field("active_at", &self.active_at)?;
        st.serialize_field("fired_at", &self.fired_at)?;
        st.serialize_field("resolved_at", &self.resolved_at)?;
        st.serialize_field("value", &self.value)?;
        st.end()
    }
}

/// A state change, for notifiers, reclaim and the recent-transitions list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    pub from: Option<State>,
    pub to: State,
    pub at: f64,
    pub alert: Alert,
}

/// Active alerts by rule name, then by instance key (`uuid/pid/stamp`,
/// a UUID, a group): the order the API lists them in.
#[derive(Debug, Clone, Default)]
pub struct EvalState {
    alerts: BTreeMap<String, BTreeMap<String, Slot>>,
    /// Counts evaluations: an entry not seen in this one has vanished.
    pass: u64,
}

#[derive(Debug, Clone)]
struct Slot {
    /// Boxed: a map node has room for 11 slots, most of it empty at
    /// 12,800 alerts, and an alert is 150 bytes.
    alert: Box<Alert>,
    /// The evaluation that last saw this alert's instance.
    pass: u64,
}

impl EvalState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Active alerts, by rule name, then key.
    pub fn values(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.values().flat_map(|m| m.values()).map(|s| &*s.alert)
    }

    /// Keeps the alerts for which `keep(rule name, alert)` says so, asked
    /// in the order of [`EvalState::values`].
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &Alert) -> bool) {
        for (name, m) in &mut self.alerts {
            m.retain(|_, s| keep(name, &s.alert));
        }
        self.alerts.retain(|_, m| !m.is_empty());
    }
}

/// Evaluates every rule against `snap`; `instance` is the value of the
/// `instance` label (the host). A copy of [`update`] for callers that keep
/// the previous state.
pub fn evaluate(rules: &[Rule], prev: &EvalState, snap: &Snapshot, instance: &str) -> (EvalState, Vec<Transition>) {
    let mut next = prev.clone();
    let mut out = Vec::new();
    update(rules, &mut next, snap, instance, &mut out);
    (next, out)
}

/// Evaluates every rule against `snap`, updating `st` in place and
/// appending the transitions to `out`; returns whether any alert was
/// added, changed or removed (when not, a published view is still true).
pub fn update(rules: &[Rule], st: &mut EvalState, snap: &Snapshot, instance: &str, out: &mut Vec<Transition>) -> bool {
    st.pass = st.pass.wrapping_add(1);
    let pass = st.pass;
    let mut changed = false;
    let mut at = Place {
        instance: ArcStr::from(instance),
        devs: DevLabels::default(),
    };
    for rule in rules {
        // On stale data only the poll-health rule can judge anything; the
        // others keep their state until fresh data arrives.
        if snap.stale && rule.cfg.kind != RuleKind::PollFailing {
            continue;
        }
        let alerts = st.alerts.entry(rule.cfg.name.clone()).or_default();
        let mut visit = |inst: Instance<'_>| changed |= visit(rule, alerts, inst, snap, &mut at, pass, out);
        if rule.cfg.kind.is_health() {
            super::health::for_each(rule, snap, &mut visit);
        } else {
            for_each(rule, snap, &mut visit);
        }
        // What was not seen is gone (process exited, GPU removed); in key
        // order, as the transitions always were.
        alerts.retain(|_, s| {
            let seen = s.pass == pass;
            if !seen {
                changed = true;
                resolve(&s.alert, snap.timestamp, out);
            }
            seen
        });
    }
    st.alerts.retain(|_, m| !m.is_empty());
    changed
}

/// One instance of `rule` seen in this pass; returns whether an alert was
/// added, changed or removed.
fn visit(
    rule: &Rule,
    alerts: &mut BTreeMap<String, Slot>,
    inst: Instance,
    snap: &Snapshot,
    at: &mut Place,
    pass: u64,
    out: &mut Vec<Transition>,
) -> bool {
    let key = inst.subject.key();
    match alerts.get_mut(&key) {
        Some(slot) if holds(rule, inst.value, inst.holds, true) => {
            slot.pass = pass;
            step(rule, &mut slot.alert, seen(rule, inst, at), snap, out)
        }
        Some(_) => {
            if let Some(old) = alerts.remove(&key) {
                resolve(&old.alert, snap.timestamp, out);
            }
            true
        }
        None if holds(rule, inst.value, inst.holds, false) => {
            let alert = start(rule, seen(rule, inst, at), snap, out);
            alerts.insert(
                key,
                Slot {
                    alert: Box::new(alert),
                    pass,
                },
            );
            true
        }
        None => false,
    }
}

/// Appends the resolution of `old` to `out` if it was firing.
pub fn resolve(old: &Alert, now: f64, out: &mut Vec<Transition>) {
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

/// What every instance of a pass shares: the `instance` label (the host)
/// and the label values of the device last seen.
struct Place {
    instance: ArcStr,
    devs: DevLabels,
}

/// What an instance gives its alert this pass.
struct Seen {
    labels: Labels,
    notes: Annotations,
    value: f64,
    targets: Vec<Target>,
}

/// The instance's labels merged with the rule's (alertname, severity,
/// instance, then its own: a later name replaces an earlier one), and what
/// its annotations are rendered from.
fn seen(rule: &Rule, inst: Instance, at: &mut Place) -> Seen {
    let dev = inst.subject.device().map(|d| at.devs.of(d));
    let mut labels = inst.subject.labels(dev);
    let model = dev.map_or_else(ArcStr::new, |d| d.model.clone());
    labels.insert(arcstr::literal!("instance"), at.instance.clone());
    labels.extend(rule.labels.iter().cloned());
    Seen {
        notes: Annotations {
            notes: rule.notes.clone(),
            model,
            others: inst.subject.others().map(ArcStr::from),
            top: inst.subject.top().map(ArcStr::from),
        },
        labels,
        value: inst.value,
        targets: inst.targets,
    }
}

/// How long a condition must hold before it fires; the idle-holder kind
/// measures its own duration (idle seconds >= for).
fn hold_for(rule: &Rule) -> f64 {
    if rule.cfg.kind == RuleKind::ProcessIdleHolder {
        0.0
    } else {
        rule.cfg.for_.0
    }
}

/// A new alert: pending, or firing at once when the rule has no `for`.
fn start(rule: &Rule, seen: Seen, snap: &Snapshot, out: &mut Vec<Transition>) -> Alert {
    let now = snap.timestamp;
    let fires = hold_for(rule) <= 0.0;
    let a = Alert {
        rule: rule.name.clone(),
        labels: seen.labels,
        notes: seen.notes,
        state: if fires { State::Firing } else { State::Pending },
        active_at: now,
        fired_at: fires.then_some(now),
        resolved_at: None,
        value: seen.value,
        since_mono: snap.monotonic,
        targets: seen.targets,
        action: rule.cfg.action,
    };
    out.push(Transition {
        from: None,
        to: a.state,
        at: now,
        alert: a.clone(),
    });
    a
}

/// An active alert seen again: it fires once pending long enough, and
/// takes the instance's value, labels and targets; returns whether it
/// changed.
fn step(rule: &Rule, a: &mut Alert, seen: Seen, snap: &Snapshot, out: &mut Vec<Transition>) -> bool {
    let now = snap.timestamp;
    let fires = a.state == State::Pending && snap.monotonic - a.since_mono >= hold_for(rule);
    if !fires && a.labels == seen.labels && a.notes == seen.notes && a.value == seen.value && a.targets == seen.targets
    {
        return false;
    }
    a.labels = seen.labels;
    a.notes = seen.notes;
    a.value = seen.value;
    a.targets = seen.targets;
    if fires {
        a.state = State::Firing;
        a.fired_at = Some(now);
        out.push(Transition {
            from: Some(State::Pending),
            to: State::Firing,
            at: now,
            alert: a.clone(),
        });
    }
    true
}
