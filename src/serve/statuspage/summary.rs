//! `GET /api/v1/summary`: the status page's one fetch per refresh, sized for
//! a screen whatever the fleet: per GPU its totals and holder split and only
//! its `top` largest processes, alerts grouped by rule with counts and a few
//! examples each, the latest transitions. At `--demo large` (64 GPUs x 1000
//! processes, ~12,800 alerts) it is a few tens of KB where the snapshot and
//! alert list are megabytes (tests/daemon/statuspage.rs holds it under 200 KB).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::act::alerts::AlertsView;
use crate::app::config::status_page::PageLinks;
use crate::data::snapshot::{
    AllocatorFigures, Device, DriverFigures, DriverInfo, Holder, Holders, Memory, Process, RecentOom, Snapshot,
    Unreleased,
};
use crate::judge::rules::eval::{Alert, State};

/// Examples kept per alert group; the rest are counted.
const EXAMPLES_PER_GROUP: usize = 5;
/// Unreleased-memory notes kept per device; the rest are counted.
const UNRELEASED_PER_DEVICE: usize = 3;
const TRANSITIONS: usize = 10;

/// From this many devices on, the page draws a grid of cards.
pub const GRID_FROM: usize = 9;
/// The most `?top=` gives: beyond that, `/api/v1/snapshot` is the tool.
pub const MAX_TOP: usize = 200;

/// Processes per GPU when `?top=` is not given: a full table for a few
/// GPUs, the largest three on each card of a grid (at 64 GPUs that keeps
/// the summary near 60 KB).
pub fn default_top(devices: usize) -> usize {
    if devices >= GRID_FROM { 3 } else { 10 }
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub seq: u64,
    pub timestamp: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demo: Option<String>,
    pub nvml_up: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml_error: Option<String>,
    pub stale: bool,
    pub driver: Option<DriverInfo>,
    pub poll: PollBrief,
    /// Link bases: Grafana (`[status_page]`, empty: no links), the
    /// runbook (`[links] runbook_base_url`; a path is on this daemon) and
    /// the metrics path (`--web.telemetry-path`).
    pub grafana_url: String,
    pub runbook_url: String,
    pub metrics_path: String,
    pub totals: Totals,
    pub devices: Vec<SummaryDevice>,
    pub alerts: AlertsBrief,
}

#[derive(Debug, Serialize)]
pub struct PollBrief {
    pub success: bool,
    pub duration_seconds: f64,
    pub polls_total: u64,
    pub errors_total: u64,
    pub overruns_total: u64,
}

/// Sums over the whole fleet (all devices, not only those returned).
#[derive(Debug, Default, Serialize)]
pub struct Totals {
    pub devices: usize,
    pub down: usize,
    pub processes: usize,
    pub leaks: usize,
    pub used_bytes: u64,
    pub total_bytes: u64,
    pub holders: Holders,
}

#[derive(Debug, Serialize)]
pub struct SummaryDevice {
    pub uuid: String,
    pub index: Option<u32>,
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub parent_uuid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mig_profile: String,
    pub up: bool,
    pub memory: Option<Memory>,
    pub holders: Option<Holders>,
    pub processes_unreadable: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreleased: Vec<Unreleased>,
    pub unreleased_count: usize,
    /// Recent out-of-memory errors on this GPU (the allocator view).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ooms: Vec<RecentOom>,
    /// What memory health asks an operator to look at (empty when well).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health_problems: Vec<String>,
    pub process_count: usize,
    pub leak_count: usize,
    /// Seconds until the GPU is full at its holders' growth; absent when
    /// nothing grows (the forecast), with who grows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_in_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub growers: Vec<crate::data::snapshot::Grower>,
    /// The `top` largest holders (the snapshot keeps them largest first).
    pub processes: Vec<ProcBrief>,
}

#[derive(Debug, Serialize)]
pub struct ProcBrief {
    pub pid: u32,
    pub comm: String,
    pub user: String,
    pub holder: Option<Holder>,
    pub used_bytes: Option<u64>,
    pub growth_bytes_per_second: Option<f64>,
    pub leak_suspected: bool,
    pub idle: bool,
    /// Container id (12 characters) or `pod UID8`. Empty strings are left
    /// out (here, `unit`, `job`): at 64 GPUs they were a tenth of the body.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub owner: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub unit: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub job: String,
    /// The process's own allocator figures, when it reports them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocator: Option<AllocatorFigures>,
    /// The driver-call ledger's figures, when `[ebpf]` sees the process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<DriverFigures>,
}

#[derive(Debug, Serialize)]
pub struct AlertsBrief {
    pub rules: usize,
    pub firing: usize,
    pub pending: usize,
    /// Firing groups first, then by severity, then by count.
    pub groups: Vec<AlertGroup>,
    /// Newest first.
    pub transitions: Vec<TransitionBrief>,
}

#[derive(Debug, Serialize)]
pub struct AlertGroup {
    pub rule: String,
    pub severity: String,
    pub firing: usize,
    pub pending: usize,
    /// An explicit `runbook_url` annotation of the rule, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runbook_url: Option<String>,
    /// Unix seconds the oldest alert of the group became active.
    pub since: f64,
    /// Up to five alerts, firing and oldest first.
    pub examples: Vec<AlertBrief>,
}

#[derive(Debug, Serialize)]
pub struct AlertBrief {
    pub state: State,
    /// Fired at (firing) or active since (pending).
    pub since: f64,
    /// The labels that say where: gpu, pid, group_by/group, uuid.
    pub labels: BTreeMap<String, String>,
    pub summary: String,
}

#[derive(Debug, Serialize)]
pub struct TransitionBrief {
    pub at: f64,
    pub rule: String,
    pub from: Option<State>,
    pub to: State,
    pub labels: BTreeMap<String, String>,
}

/// The summary of `snap` and `alerts`: every device (or only `gpu`, by
/// UUID) with its `top` largest processes.
pub fn summarize(snap: &Snapshot, alerts: &AlertsView, links: &PageLinks, top: usize, gpu: Option<&str>) -> Summary {
    let p = &snap.poll;
    Summary {
        seq: snap.seq,
        timestamp: snap.timestamp,
        demo: snap.demo.clone(),
        nvml_up: snap.nvml_up,
        nvml_error: snap.nvml_error.clone(),
        stale: snap.stale,
        driver: snap.driver.clone(),
        poll: PollBrief {
            success: p.success,
            duration_seconds: p.duration_seconds,
            polls_total: p.polls_total,
            errors_total: p.errors_total.values().sum(),
            overruns_total: p.overruns_total,
        },
        grafana_url: links.grafana_url.clone(),
        runbook_url: links.runbook_url.clone(),
        metrics_path: links.metrics_path.clone(),
        totals: totals(&snap.devices),
        devices: snap
            .devices
            .iter()
            .filter(|d| gpu.is_none_or(|g| g == d.uuid))
            .map(|d| device(d, top))
            .collect(),
        alerts: alerts_brief(alerts, links),
    }
}

fn totals(devices: &[Device]) -> Totals {
    let mut t = Totals {
        devices: devices.len(),
        ..Totals::default()
    };
    for d in devices {
        t.down += usize::from(!d.up);
        t.processes += d.processes.len();
        t.leaks += d.processes.iter().filter(|p| p.leak_suspected).count();
        // MIG instances are inside their GPU's memory: count GPUs only.
        // Sums saturate: the figures come from NVML, unchecked.
        if d.parent_uuid.is_empty()
            && let Some(m) = d.memory
        {
            t.used_bytes = t.used_bytes.saturating_add(m.used_bytes);
            t.total_bytes = t.total_bytes.saturating_add(m.total_bytes);
        }
        if let Some(h) = d.holders {
            t.holders.live = t.holders.live.saturating_add(h.live);
            t.holders.zombie = t.holders.zombie.saturating_add(h.zombie);
            t.holders.exited = t.holders.exited.saturating_add(h.exited);
            t.holders.unattributed = t.holders.unattributed.saturating_add(h.unattributed);
        }
    }
    t
}

fn device(d: &Device, top: usize) -> SummaryDevice {
    SummaryDevice {
        uuid: d.uuid.clone(),
        index: d.index,
        name: d.name.clone(),
        parent_uuid: d.parent_uuid.clone(),
        mig_profile: d.mig_profile.clone(),
        up: d.up,
        memory: d.memory,
        holders: d.holders,
        processes_unreadable: d.processes_unreadable,
        errors: d.errors.clone(),
        unreleased: d.unreleased.iter().take(UNRELEASED_PER_DEVICE).cloned().collect(),
        unreleased_count: d.unreleased.len(),
        ooms: d.ooms.clone(),
        health_problems: d.health.as_ref().map(|h| h.problems.clone()).unwrap_or_default(),
        process_count: d.processes.len(),
        leak_count: d.processes.iter().filter(|p| p.leak_suspected).count(),
        full_in_seconds: d.full_in_seconds,
        growers: d.growers.clone(),
        processes: d.processes.iter().take(top).map(proc_brief).collect(),
    }
}

fn proc_brief(p: &Process) -> ProcBrief {
    let pl = &p.placement;
    let owner = if !pl.pod_uid.is_empty() {
        format!("pod {}", pl.pod_uid.chars().take(8).collect::<String>())
    } else {
        pl.container.chars().take(12).collect()
    };
    ProcBrief {
        pid: p.pid,
        comm: p.comm.to_string(),
        user: p.user.to_string(),
        holder: p.holder,
        used_bytes: p.used_bytes,
        // Whole bytes per second: the decimals are noise the page never shows.
        growth_bytes_per_second: p.growth_bytes_per_second.map(f64::round),
        leak_suspected: p.leak_suspected,
        idle: p.idle,
        owner,
        unit: pl.unit.to_string(),
        job: pl.job.to_string(),
        allocator: p.allocator.as_deref().cloned(),
        driver: p.driver.as_deref().cloned(),
    }
}

fn alerts_brief(v: &AlertsView, links: &PageLinks) -> AlertsBrief {
    let mut by_rule: BTreeMap<&str, Vec<&Alert>> = BTreeMap::new();
    for a in &v.alerts {
        by_rule.entry(&a.rule).or_default().push(a);
    }
    let mut groups: Vec<AlertGroup> = by_rule
        .into_iter()
        .map(|(rule, list)| group(rule, list, links))
        .collect();
    let sev = |s: &str| match s {
        "critical" => 0,
        "warning" => 1,
        "info" => 2,
        _ => 3,
    };
    groups.sort_by(|a, b| {
        (b.firing > 0)
            .cmp(&(a.firing > 0))
            .then(sev(&a.severity).cmp(&sev(&b.severity)))
            .then((b.firing + b.pending).cmp(&(a.firing + a.pending)))
            .then(a.rule.cmp(&b.rule))
    });
    AlertsBrief {
        rules: v.rules.len(),
        firing: v.alerts.iter().filter(|a| a.state == State::Firing).count(),
        pending: v.alerts.iter().filter(|a| a.state == State::Pending).count(),
        groups,
        transitions: v
            .transitions
            .iter()
            .take(TRANSITIONS)
            .map(|t| TransitionBrief {
                at: t.at,
                rule: t.alert.rule.to_string(),
                from: t.from,
                to: t.to,
                labels: where_labels(&t.alert),
            })
            .collect(),
    }
}

fn group(rule: &str, mut list: Vec<&Alert>, links: &PageLinks) -> AlertGroup {
    let since = |a: &Alert| match a.state {
        State::Firing => a.fired_at.unwrap_or(a.active_at),
        _ => a.active_at,
    };
    list.sort_by(|a, b| {
        (b.state == State::Firing)
            .cmp(&(a.state == State::Firing))
            .then(since(a).total_cmp(&since(b)))
    });
    let first = list.first();
    AlertGroup {
        rule: rule.to_string(),
        severity: first
            .and_then(|a| a.labels.get("severity").map(|s| s.to_string()))
            .unwrap_or_default(),
        firing: list.iter().filter(|a| a.state == State::Firing).count(),
        pending: list.iter().filter(|a| a.state == State::Pending).count(),
        runbook_url: links.page_runbook(first.and_then(|a| a.annotation("runbook_url"))),
        since: list.iter().map(|a| a.active_at).fold(f64::INFINITY, f64::min),
        examples: list
            .iter()
            .take(EXAMPLES_PER_GROUP)
            .map(|a| AlertBrief {
                state: a.state,
                since: since(a),
                labels: where_labels(a),
                summary: a
                    .annotation("summary")
                    .or_else(|| a.annotation("description"))
                    .unwrap_or_default(),
            })
            .collect(),
    }
}

/// The labels that locate an alert; the rest (severity, instance, job) are
/// the same across a group.
fn where_labels(a: &Alert) -> BTreeMap<String, String> {
    a.labels
        .iter()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "gpu" | "uuid" | "pid" | "comm" | "user" | "holder" | "group" | "group_by"
            )
        })
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
