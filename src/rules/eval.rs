//! Rule evaluation: a pure function of (rules, previous state, snapshot).
//! Durations (`for`) run on the snapshot's monotonic clock so a wall-clock
//! jump neither fires nor resolves anything; reported times are wall-clock.
//! States go inactive -> pending -> firing -> resolved, with hysteresis
//! (`clear`) so a value wobbling around the threshold does not flap.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

use super::annotations::Annotations;
use super::ident::{Devs, Ident, Key};
pub use super::instances::ProcessRef;
use super::instances::{Instance, for_each, holds};
use super::labels::Labels;

use super::state::{Merged, Plan, Scratch};
use super::subject::LabelBuf;
use super::{Rule, RuleKind};
use crate::snapshot::Snapshot;

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

/// One alert instance. A clone is cheap: the rule name, the labels and
/// what the annotations are rendered from are shared. 120 bytes (was
/// 152): 12,800 firing alerts hold one each.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub rule: Arc<str>,
    pub labels: Labels,
    /// Rendered when read ([`Alert::annotations`]), from the alert's
    /// labels and value: the same text at every read.
    pub annotations: Annotations,
    pub state: State,
    /// Wall-clock Unix seconds when it became active (pending).
    pub active_at: f64,
    /// Wall-clock Unix seconds when it fired.
    pub fired_at: Option<f64>,
    /// Wall-clock Unix seconds when it resolved.
    pub resolved_at: Option<f64>,
    pub value: f64,
    pub since_mono: f64,
    pub targets: Box<[ProcessRef]>,
    /// What to do when it fires (from the rule).
    pub action: Option<super::RuleAction>,
}

impl Alert {
    /// Every annotation, rendered.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.annotations.render(&self.labels, self.value)
    }

    /// One annotation, rendered; `None` when the rule has none by that name.
    pub fn annotation(&self, name: &str) -> Option<String> {
        self.annotations.get(name, &self.labels, self.value)
    }
}

/// The JSON of `/api/v1/alerts` and of transitions, field for field what
/// the derived form of the stored maps gave.
impl Serialize for Alert {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Alert", 8)?;
        st.serialize_field("rule", &*self.rule)?;
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
/// The alert is the one the engine's state holds (a storm of 12,800 new
/// alerts kept a second copy of each, 2.75 MB, until the next poll).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    pub from: Option<State>,
    pub to: State,
    pub at: f64,
    #[serde(serialize_with = "shared")]
    pub alert: Arc<Alert>,
}

/// Serialises a shared alert as the alert (serde's `rc` feature would do
/// the same, at the price of rebuilding every crate that uses serde).
fn shared<S: Serializer>(a: &Arc<Alert>, s: S) -> Result<S::Ok, S::Error> {
    (**a).serialize(s)
}

/// Active alerts by rule name, then by instance identity: the order the
/// string keys "name\0identity" gave (names are letters, digits and `_`,
/// all above NUL), in a key of 24 bytes a lookup borrows from the
/// snapshot without building one. Updated in place by [`update`]: an
/// alert that did not change keeps its entry and its shared `Arc`
/// (rebuilding the map of 12,800 firing alerts every pass, and dropping
/// the old one, was a tenth of the async side's CPU at 64 x 1000).
#[derive(Debug, Clone, Default)]
pub struct EvalState {
    alerts: BTreeMap<Arc<str>, BTreeMap<Ident, Slot>>,
    devs: Devs,
    /// Counts evaluations: an entry not seen in this one has vanished.
    pass: u64,
    scratch: Scratch,
}

#[derive(Debug, Clone)]
struct Slot {
    alert: Arc<Alert>,
    /// The evaluation that last saw this alert's instance.
    pass: u64,
}

impl EvalState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Active alerts, by rule name, then identity.
    pub fn values(&self) -> impl Iterator<Item = &Arc<Alert>> {
        self.alerts.values().flat_map(|m| m.values()).map(|s| &s.alert)
    }

    /// Keeps the alerts for which `keep(rule name, alert)` says so, asked
    /// in the order of [`EvalState::values`].
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &Arc<Alert>) -> bool) {
        for (name, m) in &mut self.alerts {
            m.retain(|_, s| keep(name, &s.alert));
        }
        self.alerts.retain(|_, m| !m.is_empty());
        self.devs.prune();
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
    let EvalState {
        alerts,
        devs,
        pass,
        scratch,
    } = st;
    let Scratch { labels, plans } = scratch;
    plans.resize_with(rules.len(), Plan::default);
    let mut changed = false;
    for (rule, plan) in rules.iter().zip(plans.iter_mut()) {
        // On stale data only the poll-health rule can judge anything; the
        // others keep their state until fresh data arrives.
        if snap.stale && rule.cfg.kind != RuleKind::PollFailing {
            continue;
        }
        if !alerts.contains_key(&*rule.name) {
            alerts.insert(rule.name.clone(), BTreeMap::new());
        }
        let Some(alerts) = alerts.get_mut(&*rule.name) else {
            continue;
        };
        let mut p = Pass {
            rule,
            plan,
            alerts,
            devs,
            labels,
            snap,
            instance,
            out,
            pass: *pass,
            changed: false,
        };
        let mut visit = |inst: Instance<'_>| p.visit(inst);
        if rule.cfg.kind.is_health() {
            super::health::for_each(rule, snap, &mut visit);
        } else {
            for_each(rule, snap, &mut visit);
        }
        changed |= p.changed;
        // What was not seen is gone (process exited, GPU removed); in key
        // order, as the transitions always were.
        alerts.retain(|_, s| {
            let seen = s.pass == *pass;
            if !seen {
                changed = true;
                resolve(&s.alert, snap.timestamp, out);
            }
            seen
        });
    }
    if changed {
        alerts.retain(|_, m| !m.is_empty());
        devs.prune();
    }
    changed
}

/// One rule's walk over its instances.
struct Pass<'p> {
    rule: &'p Rule,
    plan: &'p mut Plan,
    alerts: &'p mut BTreeMap<Ident, Slot>,
    devs: &'p mut Devs,
    labels: &'p mut LabelBuf,
    snap: &'p Snapshot,
    instance: &'p str,
    out: &'p mut Vec<Transition>,
    pass: u64,
    changed: bool,
}

impl Pass<'_> {
    fn visit(&mut self, inst: Instance<'_>) {
        let rule = self.rule;
        let id = inst.subject.id();
        match self.alerts.get_mut(&id as &dyn Key) {
            Some(slot) if holds(rule, inst.value, inst.holds, true) => {
                slot.pass = self.pass;
                let labels = merged(rule, self.plan, self.labels, self.instance, &inst);
                self.changed |= step(rule, &mut slot.alert, inst, &labels, self.snap, self.out);
            }
            Some(_) => {
                if let Some(old) = self.alerts.remove(&id as &dyn Key) {
                    resolve(&old.alert, self.snap.timestamp, self.out);
                }
                self.changed = true;
            }
            None if holds(rule, inst.value, inst.holds, false) => {
                let key = self.devs.own(id);
                let labels = merged(rule, self.plan, self.labels, self.instance, &inst);
                let alert = start(rule, inst, &labels, self.snap, self.out);
                self.alerts.insert(key, Slot { alert, pass: self.pass });
                self.changed = true;
            }
            None => {}
        }
    }
}

/// `inst`'s labels written into `buf` and merged with the rule's shape
/// (which `plan` fits to them first).
fn merged<'a>(
    rule: &'a Rule,
    plan: &'a mut Plan,
    buf: &'a mut LabelBuf,
    instance: &'a str,
    inst: &Instance,
) -> Merged<'a> {
    buf.clear();
    inst.subject.write_labels(buf);
    plan.fit(rule, buf, instance);
    Merged {
        plan,
        rule,
        buf,
        instance,
    }
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
            alert: Arc::new(a),
        });
    }
}

fn annotations(rule: &Rule, inst: &Instance) -> Annotations {
    Annotations::from_rule(&rule.notes, Some(inst.model), inst.others)
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
fn start(rule: &Rule, inst: Instance, labels: &Merged, snap: &Snapshot, out: &mut Vec<Transition>) -> Arc<Alert> {
    let now = snap.timestamp;
    let fires = hold_for(rule) <= 0.0;
    let a = Alert {
        rule: rule.name.clone(),
        labels: labels.build(),
        annotations: annotations(rule, &inst),
        state: if fires { State::Firing } else { State::Pending },
        active_at: now,
        fired_at: fires.then_some(now),
        resolved_at: None,
        value: inst.value,
        since_mono: snap.monotonic,
        targets: inst.targets.into_boxed_slice(),
        action: rule.cfg.action,
    };
    let a = Arc::new(a);
    out.push(Transition {
        from: None,
        to: a.state,
        at: now,
        alert: a.clone(),
    });
    a
}

/// An active alert seen again: it fires once pending long enough, and
/// takes the instance's value, labels and targets. Unchanged, it keeps its
/// `Arc` (the published view goes on sharing it) and nothing is built;
/// returns whether it changed.
fn step(
    rule: &Rule,
    slot: &mut Arc<Alert>,
    inst: Instance,
    labels: &Merged,
    snap: &Snapshot,
    out: &mut Vec<Transition>,
) -> bool {
    let now = snap.timestamp;
    let old = &**slot;
    let fires = old.state == State::Pending && snap.monotonic - old.since_mono >= hold_for(rule);
    let same_labels = labels.same_as(&old.labels);
    let same_notes = old.annotations.is_from(&rule.notes, inst.model, inst.others);
    if !fires && same_labels && same_notes && old.value == inst.value && *old.targets == *inst.targets {
        return false;
    }
    let a = Alert {
        rule: old.rule.clone(),
        labels: if same_labels {
            old.labels.clone()
        } else {
            labels.build()
        },
        annotations: if same_notes {
            old.annotations.clone()
        } else {
            annotations(rule, &inst)
        },
        state: if fires { State::Firing } else { old.state },
        active_at: old.active_at,
        fired_at: if fires { Some(now) } else { old.fired_at },
        resolved_at: old.resolved_at,
        value: inst.value,
        since_mono: old.since_mono,
        targets: inst.targets.into_boxed_slice(),
        action: old.action,
    };
    *slot = Arc::new(a);
    if fires {
        out.push(Transition {
            from: Some(State::Pending),
            to: State::Firing,
            at: now,
            alert: slot.clone(),
        });
    }
    true
}
