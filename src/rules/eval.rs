//! Rule evaluation: a pure function of (rules, previous state, snapshot).
//! Durations (`for`) run on the snapshot's monotonic clock so a wall-clock
//! jump neither fires nor resolves anything; reported times are wall-clock.
//! States go inactive -> pending -> firing -> resolved, with hysteresis
//! (`clear`) so a value wobbling around the threshold does not flap.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Matchers, Rule, RuleKind};
use crate::snapshot::{Device, Holder, Process, Snapshot};
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

/// A process an alert is about (what a `terminate` action would signal).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessRef {
    pub uuid: String,
    pub pid: u32,
    pub start_time: Option<f64>,
    pub start_ticks: Option<u64>,
    pub uid: Option<u32>,
    pub user: String,
    pub comm: String,
    pub used_bytes: Option<u64>,
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

/// One thing a rule looks at this evaluation.
struct Instance {
    key: String,
    labels: BTreeMap<String, String>,
    value: f64,
    /// For boolean kinds: whether the condition holds (no threshold).
    holds: Option<bool>,
    model: String,
    targets: Vec<ProcessRef>,
}

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
        for inst in instances(rule, snap) {
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

fn holds(rule: &Rule, value: f64, boolean: Option<bool>, was_active: bool) -> bool {
    if let Some(h) = boolean {
        return h;
    }
    let c = &rule.cfg;
    match (c.above, c.below) {
        (Some(a), _) => value > if was_active { c.clear.unwrap_or(a).0 } else { a.0 },
        (None, Some(b)) => value < if was_active { c.clear.unwrap_or(b).0 } else { b.0 },
        (None, None) => false,
    }
}

/// Whether an instance could be active, whichever state it had before.
/// One that could not needs no labels, key or annotations: if it was
/// active, `evaluate` resolves it as a vanished instance, with the same
/// transition. Per-process rules skip most processes this way (building
/// every process's instance cost 100 ms at 64 GPUs x 1000 processes).
fn could_hold(rule: &Rule, value: f64, boolean: Option<bool>) -> bool {
    holds(rule, value, boolean, false) || holds(rule, value, boolean, true)
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
    let annotations = render_annotations(rule, &labels, inst.value, &inst.model);
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
        RuleKind::DeviceUsedRatio => format!("{:.1}%", v * 100.0),
        RuleKind::ProcessGrowthRate => format!("{}/s", human(v.max(0.0) as u64)),
        RuleKind::DeviceLost | RuleKind::ProcessLeakSuspected | RuleKind::PollFailing => format_num(v),
        _ => human(v.max(0.0) as u64),
    }
}

fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((pre, rest)) => {
            s.starts_with(pre)
                && (0..=s.len() - pre.len())
                    .any(|i| s.is_char_boundary(pre.len() + i) && glob(rest, &s[pre.len() + i..]))
        }
    }
}

fn device_matches(m: &Matchers, d: &Device) -> bool {
    (m.gpu.is_empty() || d.index.is_some_and(|i| m.gpu.contains(&i)))
        && (m.uuid.is_empty() || m.uuid.contains(&d.uuid))
        && m.model.as_deref().is_none_or(|g| glob(g, &d.name))
}

fn process_matches(m: &Matchers, p: &Process) -> bool {
    let any = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
    any(&m.user, &p.user)
        && any(&m.container, &p.placement.container)
        && any(&m.pod, &p.placement.pod_uid)
        && any(&m.unit, &p.placement.unit)
        && any(&m.job, &p.placement.job)
}

fn device_labels(d: &Device) -> BTreeMap<String, String> {
    let gpu = d.index.map(|i| i.to_string()).unwrap_or_else(|| d.mig_profile.clone());
    BTreeMap::from([("uuid".to_string(), d.uuid.clone()), ("gpu".to_string(), gpu)])
}

/// Targets are what a `terminate` action signals; rules without an action
/// skip them (a group rule's list holds every process of the group).
fn wants_targets(rule: &Rule) -> bool {
    rule.cfg.action.is_some()
}

fn process_ref(d: &Device, p: &Process) -> ProcessRef {
    ProcessRef {
        uuid: d.uuid.clone(),
        pid: p.pid,
        start_time: p.start_time,
        start_ticks: p.start_ticks,
        uid: p.uid,
        user: p.user.clone(),
        comm: p.comm.clone(),
        used_bytes: p.used_bytes,
    }
}

fn instances(rule: &Rule, snap: &Snapshot) -> Vec<Instance> {
    let m = &rule.cfg.matchers;
    let devices = snap.devices.iter().filter(|d| device_matches(m, d));
    match rule.cfg.kind {
        RuleKind::PollFailing => {
            let failing = !(snap.poll.success && snap.nvml_up);
            vec![Instance {
                key: String::new(),
                labels: BTreeMap::new(),
                value: f64::from(u8::from(failing)),
                holds: Some(failing),
                model: String::new(),
                targets: vec![],
            }]
        }
        RuleKind::GroupUsedBytes => group_instances(rule, devices.collect()),
        k if k.is_process() => {
            let idle_for = rule.cfg.for_.0;
            devices
                .flat_map(|d| {
                    d.processes
                        .iter()
                        .filter(|p| process_matches(m, p))
                        .map(move |p| (d, p))
                })
                .filter_map(|(d, p)| process_instance(rule, k, idle_for, d, p))
                .collect()
        }
        k => devices.filter_map(|d| device_instance(k, rule.cfg.holder, d)).collect(),
    }
}

fn device_instance(kind: RuleKind, holder: Option<Holder>, d: &Device) -> Option<Instance> {
    let (value, holds) = if kind == RuleKind::DeviceLost {
        (f64::from(u8::from(!d.up)), Some(!d.up))
    } else {
        let m = d.memory.filter(|_| d.up)?;
        let v = match kind {
            RuleKind::DeviceUsedRatio => m.used_bytes as f64 / (m.total_bytes.max(1)) as f64,
            RuleKind::DeviceUsedBytes => m.used_bytes as f64,
            RuleKind::DeviceFreeBytes => m.free_bytes as f64,
            RuleKind::DeviceUnattributedBytes => d.holders?.unattributed as f64,
            RuleKind::DeviceHeldBytes => d.holders?.get(holder?) as f64,
            _ => return None,
        };
        (v, None)
    };
    let mut labels = device_labels(d);
    if let Some(h) = holder {
        labels.insert("holder".into(), h.as_str().into());
    }
    Some(Instance {
        key: d.uuid.clone(),
        labels,
        value,
        holds,
        model: d.name.clone(),
        targets: vec![],
    })
}

fn process_instance(rule: &Rule, kind: RuleKind, idle_for: f64, d: &Device, p: &Process) -> Option<Instance> {
    let used = p.used_bytes.unwrap_or(0) as f64;
    let (value, holds) = match kind {
        RuleKind::ProcessUsedBytes => (p.used_bytes? as f64, None),
        RuleKind::ProcessGrowthRate => (p.growth_bytes_per_second?, None),
        RuleKind::ProcessLeakSuspected => (f64::from(u8::from(p.leak_suspected)), Some(p.leak_suspected)),
        RuleKind::ProcessIdleHolder => (used, Some(used > 0.0 && p.idle_seconds.is_some_and(|s| s >= idle_for))),
        _ => return None,
    };
    if !could_hold(rule, value, holds) {
        return None;
    }
    let mut labels = device_labels(d);
    labels.insert("pid".into(), p.pid.to_string());
    labels.insert("comm".into(), p.comm.clone());
    labels.insert("user".into(), p.user.clone());
    // PIDs are reused: the start time keeps a new process from inheriting
    // the old one's pending time.
    let key = format!("{}/{}/{}", d.uuid, p.pid, p.start_time.map_or(0, f64::to_bits));
    Some(Instance {
        key,
        labels,
        value,
        holds,
        model: d.name.clone(),
        targets: wants_targets(rule).then(|| process_ref(d, p)).into_iter().collect(),
    })
}

fn group_instances(rule: &Rule, devices: Vec<&Device>) -> Vec<Instance> {
    let Some(by) = rule.cfg.group_by else { return vec![] };
    let targets = wants_targets(rule);
    let mut groups: BTreeMap<String, (f64, Vec<ProcessRef>)> = BTreeMap::new();
    for d in devices.into_iter().filter(|d| d.up) {
        for p in d.processes.iter().filter(|p| process_matches(&rule.cfg.matchers, p)) {
            let g = p.group(by);
            if g.is_empty() {
                continue;
            }
            // Look up by &str first: a String per process per evaluation
            // is what the group's first member alone needs.
            if !groups.contains_key(g) {
                groups.insert(g.to_string(), Default::default());
            }
            let Some(e) = groups.get_mut(g) else { continue };
            e.0 += p.used_bytes.unwrap_or(0) as f64;
            if targets {
                e.1.push(process_ref(d, p));
            }
        }
    }
    groups
        .into_iter()
        .map(|(g, (v, targets))| Instance {
            key: g.clone(),
            labels: BTreeMap::from([
                ("group_by".to_string(), by.as_str().to_string()),
                ("group".to_string(), g),
            ]),
            value: v,
            holds: None,
            model: String::new(),
            targets,
        })
        .collect()
}
