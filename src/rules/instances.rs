//! What a rule looks at in one snapshot: its instances (a device, a process
//! on a device, or a group's sum on a device) with their value, labels and
//! the processes an action would target. It owns matching (`match = {...}`,
//! model globs), the labels each kind carries and whether a value meets a
//! rule's threshold (with `clear`); it must not keep state or
//! decide transitions (that is `eval`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Matchers, Rule, RuleKind};
use crate::snapshot::{Device, Holder, Process, Snapshot};

/// One thing a rule looks at this evaluation, borrowing from the snapshot.
pub(super) struct Instance<'a> {
    pub(super) key: String,
    /// In any order; `eval` sorts them with the rule's own.
    pub(super) labels: Vec<(&'static str, String)>,
    pub(super) value: f64,
    /// For boolean kinds: whether the condition holds (no threshold).
    pub(super) holds: Option<bool>,
    pub(super) model: &'a str,
    pub(super) targets: Vec<ProcessRef>,
    /// `process_oom`: the largest other holders then, for annotations.
    pub(super) others: Option<&'a str>,
}

impl<'a> Instance<'a> {
    /// An instance about device `d` as a whole: keyed by its UUID, no
    /// processes to act on.
    pub(super) fn of_device(
        d: &'a Device,
        labels: Vec<(&'static str, String)>,
        value: f64,
        holds: Option<bool>,
    ) -> Self {
        Instance {
            key: d.uuid.clone(),
            labels,
            value,
            holds,
            model: &d.name,
            targets: vec![],
            others: None,
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

pub(super) fn holds(rule: &Rule, value: f64, boolean: Option<bool>, was_active: bool) -> bool {
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

pub(super) fn device_matches(m: &Matchers, d: &Device) -> bool {
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

pub(super) fn device_labels(d: &Device) -> Vec<(&'static str, String)> {
    let gpu = d.index.map(|i| i.to_string()).unwrap_or_else(|| d.mig_profile.clone());
    vec![("uuid", d.uuid.clone()), ("gpu", gpu)]
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
        user: p.user.to_string(),
        comm: p.comm.to_string(),
        used_bytes: p.used_bytes,
    }
}

/// The instances of `rule` in `snap`. Those of a per-process rule come one
/// at a time: collected first, 12,800 firing idle holders held 5.8 MB of
/// keys and labels at once for the length of an evaluation.
pub(super) fn instances<'a>(rule: &'a Rule, snap: &'a Snapshot) -> Box<dyn Iterator<Item = Instance<'a>> + 'a> {
    let m = &rule.cfg.matchers;
    let devices = snap.devices.iter().filter(|d| device_matches(m, d));
    match rule.cfg.kind {
        RuleKind::PollFailing => {
            let failing = !(snap.poll.success && snap.nvml_up);
            Box::new(std::iter::once(Instance {
                key: String::new(),
                labels: Vec::new(),
                value: f64::from(u8::from(failing)),
                holds: Some(failing),
                model: "",
                targets: vec![],
                others: None,
            }))
        }
        RuleKind::GroupUsedBytes => Box::new(group_instances(rule, devices.collect()).into_iter()),
        RuleKind::ProcessOom => Box::new(devices.flat_map(|d| oom_instances(m, d))),
        k if k.is_process() => {
            let idle_for = rule.cfg.for_.0;
            let now = snap.timestamp;
            Box::new(
                devices
                    .flat_map(|d| {
                        d.processes
                            .iter()
                            .filter(|p| process_matches(m, p))
                            .map(move |p| (d, p))
                    })
                    .filter_map(move |(d, p)| process_instance(rule, k, (idle_for, now), d, p)),
            )
        }
        k => Box::new(devices.filter_map(move |d| device_instance(k, rule.cfg.holder, d))),
    }
}

fn device_instance(kind: RuleKind, holder: Option<Holder>, d: &Device) -> Option<Instance<'_>> {
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
        labels.push(("holder", h.as_str().into()));
    }
    Some(Instance::of_device(d, labels, value, holds))
}

/// How recently the allocator's retries must have risen for
/// `process_fragmentation` to see a process: its cache is then failing it.
const RETRIES_RECENT_SECONDS: f64 = 600.0;

/// Share of reserved memory not holding tensors, for a process whose
/// allocator retried a cudaMalloc recently; `None` otherwise.
fn fragmentation(p: &Process, now: f64) -> Option<f64> {
    let a = p.allocator.as_ref()?;
    let recent = a.last_retry_at.is_some_and(|t| now - t <= RETRIES_RECENT_SECONDS);
    (recent && a.reserved.current > 0).then(|| a.cache_bytes as f64 / a.reserved.current as f64)
}

/// One instance per out-of-memory error reported on `d` recently (the
/// process may have exited since: the OOM often ends the job).
fn oom_instances<'a>(m: &'a Matchers, d: &'a Device) -> impl Iterator<Item = Instance<'a>> + 'a {
    d.ooms
        .iter()
        .filter(move |o| process_matches_user(m, &o.user))
        .map(move |o| {
            let mut labels = device_labels(d);
            labels.push(("pid", o.pid.to_string()));
            labels.push(("comm", o.comm.clone()));
            labels.push(("user", o.user.clone()));
            Instance {
                key: format!("{}/{}/{}", d.uuid, o.pid, o.time.to_bits()),
                labels,
                value: 1.0,
                holds: Some(true),
                model: &d.name,
                targets: vec![],
                others: Some(&o.others),
            }
        })
}

/// `match` of an OOM, which knows only the user of its process.
fn process_matches_user(m: &Matchers, user: &str) -> bool {
    (m.user.is_empty() || m.user.iter().any(|u| u == user))
        && m.container.is_empty()
        && m.pod.is_empty()
        && m.unit.is_empty()
        && m.job.is_empty()
}

fn process_instance<'a>(
    rule: &Rule,
    kind: RuleKind,
    (idle_for, now): (f64, f64),
    d: &'a Device,
    p: &Process,
) -> Option<Instance<'a>> {
    let used = p.used_bytes.unwrap_or(0) as f64;
    let (value, holds) = match kind {
        RuleKind::ProcessUsedBytes => (p.used_bytes? as f64, None),
        RuleKind::ProcessGrowthRate => (p.growth_bytes_per_second?, None),
        RuleKind::ProcessLeakSuspected => (f64::from(u8::from(p.leak_suspected)), Some(p.leak_suspected)),
        RuleKind::ProcessIdleHolder => (used, Some(used > 0.0 && p.idle_seconds.is_some_and(|s| s >= idle_for))),
        RuleKind::ProcessFragmentation => (fragmentation(p, now)?, None),
        _ => return None,
    };
    if !could_hold(rule, value, holds) {
        return None;
    }
    let mut labels = device_labels(d);
    labels.push(("pid", p.pid.to_string()));
    labels.push(("comm", p.comm.to_string()));
    labels.push(("user", p.user.to_string()));
    // PIDs are reused: the start time keeps a new process from inheriting
    // the old one's pending time.
    let key = format!("{}/{}/{}", d.uuid, p.pid, p.start_time.map_or(0, f64::to_bits));
    Some(Instance {
        key,
        labels,
        value,
        holds,
        model: &d.name,
        targets: wants_targets(rule).then(|| process_ref(d, p)).into_iter().collect(),
        others: None,
    })
}

fn group_instances(rule: &Rule, devices: Vec<&Device>) -> Vec<Instance<'static>> {
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
            labels: vec![("group_by", by.as_str().to_string()), ("group", g)],
            value: v,
            holds: None,
            model: "",
            targets,
            others: None,
        })
        .collect()
}
