//! Rule evaluation: a pure function of (rules, previous state, snapshot).
//! Durations (`for`) run on the snapshot's monotonic clock so a wall-clock
//! jump neither fires nor resolves anything; reported times are wall-clock.
//! States go inactive -> pending -> firing -> resolved, with hysteresis
//! (`clear`) so a value wobbling around the threshold does not flap.

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

use super::annotations::Annotations;
pub use super::instances::ProcessRef;
use super::instances::{Instance, holds, instances};
use super::labels::{Labels, sort_last_wins};
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
/// what the annotations are rendered from are shared.
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
    pub targets: Vec<ProcessRef>,
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
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    pub from: Option<State>,
    pub to: State,
    pub at: f64,
    pub alert: Alert,
}

/// Active alerts keyed by the rule's name, a NUL and the instance's
/// identity: one shared string that sorts as the pair (name, identity)
/// does (names are letters, digits and `_`, all above NUL) and that a
/// lookup by `&str` finds without building a key.
pub type EvalState = BTreeMap<Arc<str>, Arc<Alert>>;

/// The rule name of an [`EvalState`] key.
pub fn rule_of(key: &str) -> &str {
    key.split('\0').next().unwrap_or(key)
}

/// The entries of `prev` that belong to the rule `name`.
fn of_rule<'a>(prev: &'a EvalState, name: &str) -> impl Iterator<Item = (&'a Arc<str>, &'a Arc<Alert>)> {
    let (lo, hi) = (format!("{name}\0"), format!("{name}\u{1}"));
    prev.range::<str, _>((Bound::Included(lo.as_str()), Bound::Excluded(hi.as_str())))
}

/// Alerts resolved this evaluation, by rule name and labels: a vanished
/// instance already reported resolved is not reported again.
type Resolved = HashSet<(Arc<str>, Labels)>;

/// Evaluates every rule against `snap`; `instance` is the value of the
/// `instance` label (the host).
pub fn evaluate(rules: &[Rule], prev: &EvalState, snap: &Snapshot, instance: &str) -> (EvalState, Vec<Transition>) {
    let mut next = EvalState::new();
    let mut out = Vec::new();
    let mut resolved = Resolved::new();
    let mut key = String::new();
    for rule in rules {
        // On stale data only the poll-health rule can judge anything; the
        // others keep their state until fresh data arrives.
        if snap.stale && rule.cfg.kind != RuleKind::PollFailing {
            for (k, a) in of_rule(prev, &rule.cfg.name) {
                next.insert(k.clone(), a.clone());
            }
            continue;
        }
        let found = if rule.cfg.kind.is_health() {
            Box::new(super::health::instances(rule, snap).into_iter())
        } else {
            instances(rule, snap)
        };
        for inst in found {
            key.clear();
            key.push_str(&rule.cfg.name);
            key.push('\0');
            key.push_str(&inst.key);
            let was = prev.get_key_value(key.as_str());
            if condition(rule, &inst, was.is_some()) {
                let k = was.map_or_else(|| Arc::from(key.as_str()), |(k, _)| k.clone());
                let a = step(rule, was.map(|(_, a)| a), inst, snap, instance, &mut out);
                next.insert(k, a);
            } else if let Some((_, old)) = was {
                resolve(old, snap.timestamp, &mut out, &mut resolved);
            }
        }
        for (k, old) in of_rule(prev, &rule.cfg.name) {
            // The thing it was about is gone (process exited, GPU removed),
            // unless we already resolved it above.
            if !next.contains_key(k) && !resolved.contains(&(old.rule.clone(), old.labels.clone())) {
                resolve(old, snap.timestamp, &mut out, &mut resolved);
            }
        }
    }
    (next, out)
}

fn resolve(old: &Alert, now: f64, out: &mut Vec<Transition>, resolved: &mut Resolved) {
    // A pending alert that clears never fired: nothing to notify.
    if old.state == State::Firing {
        let mut a = old.clone();
        a.state = State::Resolved;
        a.resolved_at = Some(now);
        resolved.insert((a.rule.clone(), a.labels.clone()));
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

/// The alert's labels: the instance's, then alertname, severity and
/// instance, then the rule's own, a later name replacing an earlier one.
/// An alert whose labels did not change keeps its shared set.
fn labels(rule: &Rule, was: Option<&Arc<Alert>>, inst: &Instance, instance: &str) -> Labels {
    let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(inst.labels.len() + 3 + rule.cfg.labels.len());
    pairs.extend(inst.labels.iter().map(|(k, v)| (*k, v.as_str())));
    pairs.push(("alertname", &rule.cfg.name));
    pairs.push(("severity", &rule.cfg.severity));
    pairs.push(("instance", instance));
    pairs.extend(rule.cfg.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    sort_last_wins(&mut pairs);
    match was {
        Some(old) if old.labels.same_as(&pairs) => old.labels.clone(),
        _ => Labels::from_sorted(&pairs),
    }
}

fn annotations(rule: &Rule, was: Option<&Arc<Alert>>, inst: &Instance) -> Annotations {
    let model = rule
        .notes
        .uses_model()
        .then(|| match was.and_then(|o| o.annotations.model()) {
            Some(m) if **m == *inst.model => m.clone(),
            _ => Arc::from(inst.model),
        });
    Annotations::from_rule(&rule.notes, model, inst.others.map(Arc::from))
}

fn step(
    rule: &Rule,
    was: Option<&Arc<Alert>>,
    inst: Instance,
    snap: &Snapshot,
    instance: &str,
    out: &mut Vec<Transition>,
) -> Arc<Alert> {
    let now = snap.timestamp;
    let mono = snap.monotonic;
    let labels = labels(rule, was, &inst, instance);
    let annotations = annotations(rule, was, &inst);
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
            ..(**old).clone()
        },
        None => Alert {
            rule: rule.name.clone(),
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
    // Unchanged (same value, same state): the published view keeps
    // sharing the one it has.
    match was {
        Some(old) if **old == a => old.clone(),
        _ => Arc::new(a),
    }
}
