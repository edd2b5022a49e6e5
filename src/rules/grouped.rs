//! Instances that stand for several processes of one GPU: a `per = "gpu"`
//! process rule (one alert per GPU counting the processes that meet the
//! condition, at 64 GPUs x 1000 processes an idle-holder rule otherwise
//! raised 12,800 alerts at once) and a `device_full_forecast` (one alert
//! naming the growers). Owns the `{{ top }}` text of both; which process
//! meets a condition is `instances`'s, transitions are `eval`'s.

use std::fmt::Write as _;

use super::annotations::humanize;
use super::instances::{Instance, holds};
use super::subject::Subject;
use super::{Rule, RuleKind};
use crate::snapshot::{Device, Grower, Process};
use crate::units::human;

/// Processes `{{ top }}` names; the rest are counted.
const TOP: usize = 3;

/// One instance for device `d` when any of `hits` (the processes of `d`
/// the rule's per-process instance would make, with their values) meets
/// the rule's condition: its value is their count.
pub(super) fn per_gpu<'a>(rule: &Rule, d: &'a Device, hits: &mut Vec<(f64, &'a Process)>) -> Option<Instance<'a>> {
    let boolean = rule.cfg.kind.is_boolean();
    // Booleans carry no magnitude of their own: the largest holders first.
    let size = |&(v, p): &(f64, &Process)| if boolean { p.used_bytes.unwrap_or(0) as f64 } else { v };
    if hits.is_empty() {
        return None;
    }
    hits.sort_by(|a, b| size(b).total_cmp(&size(a)).then(a.1.pid.cmp(&b.1.pid)));
    let mut top = String::new();
    for (i, hit) in hits.iter().take(TOP).enumerate() {
        let p = hit.1;
        let shown = if rule.cfg.kind == RuleKind::ProcessLeakSuspected {
            format!("+{}/s", human(p.growth_bytes_per_second.unwrap_or(0.0).max(0.0) as u64))
        } else if boolean {
            human(size(hit) as u64)
        } else {
            humanize(rule.cfg.kind, hit.0)
        };
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(top, "{sep}pid {} ({}, {}) {shown}", p.pid, p.comm, p.user);
    }
    if hits.len() > TOP {
        let _ = write!(top, " and {} more", hits.len() - TOP);
    }
    let count = hits.len() as f64;
    Some(Instance {
        subject: Subject::Gpu { d, top },
        value: count,
        holds: Some(true),
        targets: vec![],
    })
}

/// Whether a process's instance meets the rule's condition now (as a new
/// alert would: a count has no per-process hysteresis).
pub(super) fn meets(rule: &Rule, i: &Instance<'_>) -> bool {
    holds(rule, i.value, i.holds, false)
}

/// The forecast of `d` as an instance: its seconds to full, naming who grows.
pub(super) fn forecast<'a>(d: &'a Device) -> Option<Instance<'a>> {
    let secs = d.full_in_seconds.filter(|_| d.up)?;
    let top = d.growers.iter().map(describe).collect::<Vec<_>>().join(", ");
    Some(Instance {
        subject: Subject::Gpu { d, top },
        value: secs,
        holds: None,
        targets: vec![],
    })
}

/// "pid 731 (python, alice) +64.0 MiB/s", or "unattributed +2.0 MiB/s".
fn describe(g: &Grower) -> String {
    let rate = human(g.bytes_per_second.max(0.0) as u64);
    match g.pid {
        Some(pid) => format!("pid {pid} ({}, {}) +{rate}/s", g.comm, g.user),
        None => format!("unattributed memory +{rate}/s"),
    }
}
