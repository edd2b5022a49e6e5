//! The `{{ top }}` text of alerts that stand for several processes of one
//! GPU: a `per = "gpu"` process rule (one alert per GPU counting the
//! processes that meet the condition; at 64 GPUs x 1000 processes an
//! idle-holder rule otherwise raises 12,800 alerts at once) and a
//! `device_full_forecast` (one alert naming the growers). Which process
//! meets a condition and the instances are `instances`'s.

use std::fmt::Write as _;

use super::annotations::humanize;
use super::{Rule, RuleKind};
use crate::data::snapshot::{Device, Grower, Process};
use crate::data::units::human;

/// Processes `{{ top }}` names; the rest are counted.
const TOP: usize = 3;

/// The `{{ top }}` text of a `per = "gpu"` alert: the largest of `hits`
/// (the processes of one GPU that meet the rule's condition, with their
/// values), and how many more. Sorts `hits`.
pub(super) fn top_of(rule: &Rule, hits: &mut [(f64, &Process)]) -> String {
    let boolean = rule.cfg.kind.is_boolean();
    // Booleans carry no magnitude of their own: the largest holders first.
    let size = |&(v, p): &(f64, &Process)| if boolean { p.used_bytes.unwrap_or(0) as f64 } else { v };
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
    top
}

/// The `{{ top }}` text of a forecast: who grows on `d`, fastest first.
pub(super) fn growers_of(d: &Device) -> String {
    d.growers.iter().map(describe).collect::<Vec<_>>().join(", ")
}

/// "pid 731 (python, alice) +64.0 MiB/s", or "unattributed +2.0 MiB/s".
fn describe(g: &Grower) -> String {
    let rate = human(g.bytes_per_second.max(0.0) as u64);
    match g.pid {
        Some(pid) => format!("pid {pid} ({}, {}) +{rate}/s", g.comm, g.user),
        None => format!("unattributed memory +{rate}/s"),
    }
}
