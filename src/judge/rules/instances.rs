//! What a rule looks at in one snapshot: its instances (a device, a process
//! on a device, or a group's sum on a device) with their value, labels and
//! the processes an action would target. It owns matching (`match = {...}`,
//! model globs), the labels each kind carries, whether a value meets a
//! rule's threshold (with `clear`), and [`Target`], the process an alert
//! names for reclaim (which re-exports it); it must not keep state or
//! decide transitions (that is `eval`).

use std::collections::BTreeMap;

use super::grouped;
use super::subject::Subject;
use super::{Matchers, Rule, RuleKind};
use crate::data::snapshot::{Device, Process, Snapshot};

/// One thing a rule looks at this evaluation, borrowing from the snapshot.
pub(super) struct Instance<'a> {
    /// What it is about: gives its key and labels, written on demand.
    pub(super) subject: Subject<'a>,
    pub(super) value: f64,
    /// For boolean kinds: whether the condition holds (no threshold).
    pub(super) holds: Option<bool>,
    pub(super) targets: Vec<Target>,
}

impl<'a> Instance<'a> {
    /// An instance with no processes to act on.
    pub(super) fn new(subject: Subject<'a>, value: f64, holds: Option<bool>) -> Self {
        Instance {
            subject,
            value,
            holds,
            targets: vec![],
        }
    }
}

/// A process an alert is about: what its rule's action (or the API)
/// asks reclaim to terminate or suspend.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Target {
    pub pid: u32,
    /// Unix seconds as gpumemd computed it (audit only).
    pub start_time: Option<f64>,
    /// `/proc/<pid>/stat` field 22: the exact identity. `None` is refused.
    pub start_ticks: Option<u64>,
    /// When set, must still be the process's real uid.
    pub uid: Option<u32>,
    /// Resolved user name; empty when unresolved (lists then match by uid).
    pub user: String,
    pub comm: String,
    pub rule: String,
    pub gpu_uuid: String,
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

/// The process `p` on `d` as `rule`'s action would name it.
fn target(rule: &Rule, d: &Device, p: &Process) -> Target {
    Target {
        pid: p.pid,
        start_time: p.start_time,
        start_ticks: p.start_ticks,
        uid: p.uid,
        user: p.user.to_string(),
        comm: p.comm.to_string(),
        rule: rule.cfg.name.clone(),
        gpu_uuid: d.uuid.clone(),
        used_bytes: p.used_bytes,
    }
}

/// Hands each instance of `rule` in `snap` that could be active to `f`,
/// one at a time (collected first, 12,800 firing idle holders held 5.8 MB
/// of keys and labels at once), without boxing an iterator per rule.
pub(super) fn for_each<'a>(rule: &Rule, snap: &'a Snapshot, f: &mut dyn FnMut(Instance<'a>)) {
    let m = &rule.cfg.matchers;
    let devices = snap.devices.iter().filter(|d| device_matches(m, d));
    match rule.cfg.kind {
        RuleKind::PollFailing => {
            let failing = !(snap.poll.success && snap.nvml_up);
            f(Instance::new(
                Subject::Poller,
                f64::from(u8::from(failing)),
                Some(failing),
            ));
        }
        RuleKind::GroupUsedBytes => group_instances(rule, devices, f),
        RuleKind::ProcessOom => devices.for_each(|d| oom_instances(m, d, f)),
        k if k.is_process() && rule.cfg.per.is_some() => {
            let ctx = (k, rule.cfg.for_.0, snap.timestamp);
            let mut hits = Vec::new();
            for d in devices {
                hits.clear();
                for p in d.processes.iter().filter(|p| process_matches(m, p)) {
                    // As a new alert would hold: a count has no
                    // per-process hysteresis.
                    let i = process_instance(rule, ctx, d, p).filter(|i| holds(rule, i.value, i.holds, false));
                    if let Some(i) = i {
                        hits.push((i.value, p));
                    }
                }
                if !hits.is_empty() {
                    let count = hits.len() as f64;
                    let top = grouped::top_of(rule, &mut hits);
                    f(Instance::new(Subject::Gpu { d, top }, count, Some(true)));
                }
            }
        }
        RuleKind::DeviceFullForecast => devices.for_each(|d| {
            if let Some(secs) = d.full_in_seconds.filter(|_| d.up) {
                let top = grouped::growers_of(d);
                f(Instance::new(Subject::Gpu { d, top }, secs, None));
            }
        }),
        k if k.is_process() => {
            let ctx = (k, rule.cfg.for_.0, snap.timestamp);
            for d in devices {
                for p in d.processes.iter().filter(|p| process_matches(m, p)) {
                    if let Some(i) = process_instance(rule, ctx, d, p) {
                        f(i);
                    }
                }
            }
        }
        k => devices.for_each(|d| {
            if let Some(i) = device_instance(rule, k, d) {
                f(i);
            }
        }),
    }
}

fn device_instance<'a>(rule: &Rule, kind: RuleKind, d: &'a Device) -> Option<Instance<'a>> {
    let (value, holds) = if kind == RuleKind::DeviceLost {
        (f64::from(u8::from(!d.up)), Some(!d.up))
    } else {
        let m = d.memory.filter(|_| d.up)?;
        let v = match kind {
            RuleKind::DeviceUsedRatio => m.used_bytes as f64 / (m.total_bytes.max(1)) as f64,
            RuleKind::DeviceUsedBytes => m.used_bytes as f64,
            RuleKind::DeviceFreeBytes => m.free_bytes as f64,
            RuleKind::DeviceUnattributedBytes => d.holders?.unattributed as f64,
            RuleKind::DeviceHeldBytes => d.holders?.get(rule.cfg.holder?) as f64,
            _ => return None,
        };
        (v, None)
    };
    let holder = rule.cfg.holder;
    Some(Instance::new(Subject::Device { d, holder, xid: None }, value, holds))
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

/// One instance per process that reported an out-of-memory error on `d`
/// recently (it may have exited since: the OOM often ends the job), from
/// its newest OOM (`ooms` is newest first).
fn oom_instances<'a>(m: &Matchers, d: &'a Device, f: &mut dyn FnMut(Instance<'a>)) {
    for (i, o) in d.ooms.iter().enumerate() {
        if d.ooms[..i].iter().any(|n| n.pid == o.pid) || !process_matches_user(m, &o.user) {
            continue;
        }
        f(Instance::new(Subject::Oom { d, o }, 1.0, Some(true)));
    }
}

/// `match` of an OOM, which knows only the user of its process.
fn process_matches_user(m: &Matchers, user: &str) -> bool {
    (m.user.is_empty() || m.user.iter().any(|u| u == user))
        && [&m.container, &m.pod, &m.unit, &m.job].iter().all(|l| l.is_empty())
}

fn process_instance<'a>(
    rule: &Rule,
    (kind, idle_for, now): (RuleKind, f64, f64),
    d: &'a Device,
    p: &'a Process,
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
    Some(Instance {
        subject: Subject::Process { d, p },
        value,
        holds,
        // Targets are what an action signals; rules without one skip them.
        targets: rule.cfg.action.map(|_| target(rule, d, p)).into_iter().collect(),
    })
}

fn group_instances<'a, 'd>(rule: &Rule, devices: impl Iterator<Item = &'d Device>, f: &mut dyn FnMut(Instance<'a>)) {
    let Some(by) = rule.cfg.group_by else { return };
    let targets = rule.cfg.action.is_some();
    let mut groups: BTreeMap<String, (f64, Vec<Target>)> = BTreeMap::new();
    for d in devices.filter(|d| d.up) {
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
                e.1.push(target(rule, d, p));
            }
        }
    }
    for (name, (value, targets)) in groups {
        f(Instance {
            subject: Subject::Group { by, name },
            value,
            holds: None,
            targets,
        });
    }
}
