//! The daemon's own families beyond the snapshot: alerts, reloads, the
//! counters the notifiers and the reclaimer keep, and `process_*` from the
//! stats the caller read. Owns [`Counters`], the one
//! handle through which those counters reach a scrape: it reads each
//! producer's own stats type at render time, with no copies in between. It
//! must not change any producer's state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::family::{Family, write_table};
use super::selfproc::{PROCESS, SelfStats};
use super::text::{Kind, Writer};
use crate::act::alerts::AlertsView;
use crate::act::notify::{NotifierStats, Notifiers};
use crate::act::reclaim::{ReclaimStats, Reclaimer, Suspended};
use crate::app::reload::ReloadStatus;
use crate::collect::allocator::AllocatorState;
use crate::collect::ledger::Ledger;
use crate::judge::report::Reports;

/// Where the counters of the notifiers and the reclaimer live; read only
/// when a scrape renders them. Cloning shares the producers; a producer
/// left `None` leaves its families out.
#[derive(Clone, Default)]
pub struct Counters {
    pub reclaimer: Option<Arc<Reclaimer>>,
    pub notifiers: Option<Arc<Notifiers>>,
    /// `None` when nothing configured needs the state dir (no
    /// notifications): the series is then left out. Re-probed in the
    /// background by the daemon; read at scrape time.
    pub state_dir_writable: Option<Arc<AtomicBool>>,
    /// The allocator receiver's message counts, when `[allocator]` is enabled.
    pub allocator: Option<Arc<AllocatorState>>,
    /// The driver-call ledger's `gpumem_ebpf_*` families, when `[ebpf]` is enabled.
    pub ledger: Option<Arc<Ledger>>,
    /// Job-end reports and the per-user idle byte-seconds they count.
    pub reports: Option<Arc<Reports>>,
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters")
            .field("reclaimer", &self.reclaimer.is_some())
            .field("notifiers", &self.notifiers.is_some())
            .field("state_dir_writable", &self.state_dir_writable)
            .field("allocator", &self.allocator.is_some())
            .field("ledger", &self.ledger.is_some())
            .field("reports", &self.reports.is_some())
            .finish()
    }
}

/// Daemon state beyond the snapshot: alerts, reloads, deliveries, reclaim,
/// and the process's own resource use.
#[derive(Debug, Clone, Default)]
pub struct DaemonState<'a> {
    pub alerts: Option<&'a AlertsView>,
    pub reload: Option<ReloadStatus>,
    pub counters: Option<&'a Counters>,
    /// `process_*` families; `None` leaves them all out.
    pub process: Option<SelfStats>,
}

/// Labels `gpumem_alerts` sets itself; a rule label of the same name is
/// left out (config refuses them; this keeps the output valid anyway).
/// `instance` would clash with the scrape target's own label.
const ALERT_OWN_LABELS: [&str; 3] = ["alertname", "alertstate", "instance"];

pub(super) fn render(w: &mut Writer, d: &DaemonState<'_>) {
    if let Some(view) = d.alerts {
        alerts(w, view);
    }
    if let Some(r) = d.reload {
        write_table(w, RELOAD, &[r]);
    }
    if let Some(p) = d.process {
        write_table(w, PROCESS, &[p]);
    }
    let Some(c) = d.counters else { return };
    if let Some(n) = &c.notifiers {
        notifications(w, &n.stats());
    }
    if let Some(ok) = &c.state_dir_writable {
        STATE_DIR.write(w, [&ok.load(Ordering::Relaxed)]);
    }
    if let Some(r) = &c.reclaimer {
        RECLAIM.write(w, [&r.stats()]);
        write_table(w, SUSPENDED, &[r.suspended()]);
    }
    if let Some(a) = &c.allocator {
        ALLOCATOR.write(w, [&a.counts()]);
    }
    if let Some(l) = &c.ledger {
        write_table(w, super::ledger::LEDGER, &[super::ledger::LedgerStats::of(l)]);
    }
    if let Some(r) = &c.reports {
        IDLE_HELD.write(w, [&r.idle_by_user()]);
    }
}

pub(super) const RELOAD: &[Family<ReloadStatus>] = &[
    Family::new(
        "gpumem_config_last_reload_successful",
        Kind::Gauge,
        "",
        "1 if the latest config (re)load succeeded.",
        |r, e| e(&[], r.successful.into()),
    ),
    Family::new(
        "gpumem_config_last_reload_success_timestamp_seconds",
        Kind::Gauge,
        "seconds",
        "Unix time of the latest successful config load.",
        |r, e| e(&[], r.last_success.into()),
    ),
];

pub(super) const NOTIFIER: &[Family<NotifierStats>] = &[
    Family::new(
        "gpumem_notifications_total",
        Kind::Counter,
        "",
        "Alert notifications by notifier and result.",
        |s, e| {
            for (result, v) in [("success", s.sent_ok), ("failure", s.failed), ("dropped", s.dropped)] {
                e(&[("notifier", s.notifier), ("result", result)], v.into());
            }
        },
    ),
    Family::new(
        "gpumem_notification_queue_length",
        Kind::Gauge,
        "",
        "Notifications waiting in the outbox, by notifier.",
        |s, e| e(&[("notifier", s.notifier)], s.queue_length.into()),
    ),
    Family::new(
        "gpumem_notification_outbox_write_errors_total",
        Kind::Counter,
        "",
        "Outbox writes that failed (state dir unwritable or full); the notification was still attempted from memory.",
        |s, e| e(&[("notifier", s.notifier)], s.persist_errors.into()),
    ),
];

pub(super) const STATE_DIR: Family<bool> = Family::new(
    "gpumem_state_dir_writable",
    Kind::Gauge,
    "",
    "1 if the state dir could be written at start; 0 means alert notifications are disabled (see the log).",
    |ok, e| e(&[], (*ok).into()),
);

pub(super) const RECLAIM: Family<ReclaimStats> = Family::new(
    "gpumem_reclaim_actions_total",
    Kind::Counter,
    "",
    "Reclaim actions by action and result.",
    |r, e| {
        for (a, res, v) in r.entries() {
            e(&[("action", a), ("result", res)], v.into());
        }
    },
);

pub(super) const ALLOCATOR: Family<Vec<(&'static str, u64)>> = Family::new(
    "gpumem_allocator_messages_total",
    Kind::Counter,
    "",
    "Allocator reports received from processes (gpumemd-torch), by result: accepted or why dropped.",
    |counts, e| {
        for (result, v) in counts {
            e(&[("result", result)], (*v).into());
        }
    },
);

/// Bounded: the first `report::TOP_USERS` users, then `user="other"`.
pub(super) const IDLE_HELD: Family<Vec<(String, f64)>> = Family::new(
    "gpumem_user_idle_held_byte_seconds_total",
    Kind::Counter,
    "",
    "Byte-seconds of GPU memory held by processes flagged idle (no SM activity for [processes] idle_after), by user: the first 20 users seen, the rest summed as user other.",
    |v, e| {
        for (user, bs) in v {
            e(&[("user", user)], (*bs).into());
        }
    },
);

/// Processes parked in host memory by `action = "suspend"`: not in NVML's
/// list any more, so not in the per-process families either.
pub(super) const SUSPENDED: &[Family<Vec<Suspended>>] = &[
    Family::new(
        "gpumem_process_suspended",
        Kind::Gauge,
        "",
        "1 for each process gpumemd suspended (CUDA checkpoint) and has not resumed.",
        |v, e| {
            for s in v {
                let pid = s.pid.to_string();
                e(&[("uuid", &s.gpu_uuid), ("pid", &pid)], 1u64.into());
            }
        },
    ),
    Family::new(
        "gpumem_device_memory_suspended_bytes",
        Kind::Gauge,
        "bytes",
        "GPU memory of suspended processes, parked in host memory, by the device they left.",
        |v, e| {
            let mut by_uuid: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
            for s in v {
                *by_uuid.entry(&s.gpu_uuid).or_insert(0) += s.bytes;
            }
            for (uuid, bytes) in by_uuid {
                e(&[("uuid", uuid)], bytes.into());
            }
        },
    ),
];

fn alerts(w: &mut Writer, view: &AlertsView) {
    w.family(
        "gpumem_alerts",
        Kind::Gauge,
        "Pending and firing alerts of gpumemd's own rules, like Prometheus' ALERTS.",
    );
    for a in &view.alerts {
        let mut labels: Vec<(&str, &str)> = vec![("alertname", &a.rule), ("alertstate", a.state.as_str())];
        for (k, v) in &a.labels {
            // Rule labels come from the config: whatever it lets through,
            // a label name appears at most once per series.
            if !ALERT_OWN_LABELS.contains(&k.as_str()) && !labels.iter().any(|(n, _)| n == k) {
                labels.push((k, v));
            }
        }
        w.sample("gpumem_alerts", &labels, 1u64);
    }
}

/// The notifier families; none when no notifier is configured.
pub(super) fn notifications(w: &mut Writer, stats: &[NotifierStats]) {
    if !stats.is_empty() {
        write_table(w, NOTIFIER, stats);
    }
}
