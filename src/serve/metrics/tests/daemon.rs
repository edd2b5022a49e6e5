//! Unit tests of the daemon families: alert labels, producers' counters,
//! and the table rule that every family name ends in its unit.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::*;
use crate::act::alerts::AlertsView;
use crate::act::notify::NotifierStats;
use crate::act::reclaim::{ReclaimConfig, Reclaimer};
use crate::judge::rules::eval::{Alert, Annotations, State};

fn alert(labels: &[(&str, &str)]) -> Alert {
    Alert {
        rule: "R".into(),
        labels: labels.iter().map(|&(k, v)| (k.into(), v.into())).collect(),
        notes: Annotations::fixed(BTreeMap::new()),
        state: State::Firing,
        active_at: 0.0,
        fired_at: Some(0.0),
        resolved_at: None,
        value: 1.0,
        since_mono: 0.0,
        targets: Vec::new(),
        action: None,
    }
}

/// Label names of every sample line, in order.
fn label_names(line: &str) -> Vec<&str> {
    let Some(inner) = line.split_once('{').and_then(|(_, r)| r.rsplit_once('}')) else {
        return Vec::new();
    };
    // Values here hold no `",`, so this split is exact for these tests.
    inner
        .0
        .split("\",")
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, _)| k)
        .collect()
}

#[test]
fn no_series_repeats_a_label_name_whatever_rule_labels_say() {
    let view = AlertsView {
        alerts: vec![alert(&[
            ("alertname", "Other"),
            ("alertstate", "inactive"),
            ("instance", "h"),
            ("severity", "page"),
        ])],
        ..AlertsView::default()
    };
    let s = snap(vec![dev("GPU-a", vec![proc(1, Some(1), "u")])]);
    let d = DaemonState {
        alerts: Some(&view),
        ..DaemonState::default()
    };
    let out = render_with(&s, &d, &cfg());
    let alerts = samples(&out, "gpumem_alerts");
    assert_eq!(
        alerts,
        [r#"gpumem_alerts{alertname="R",alertstate="firing",severity="page"} 1"#]
    );
    for line in out.lines().filter(|l| !l.starts_with('#')) {
        let names = label_names(line);
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "{line}");
    }
}

/// Target labels Prometheus (job, instance) and the Prometheus Operator
/// (namespace, pod, container, service, endpoint) set on every series: a
/// label of ours by one of these names is overwritten or renamed on ingest.
const TARGET_LABELS: [&str; 7] = [
    "job",
    "instance",
    "namespace",
    "pod",
    "container",
    "service",
    "endpoint",
];

#[test]
fn no_series_uses_a_label_name_the_scrape_target_sets() {
    let mut p = proc(1, Some(1 << 30), "u");
    let placement = &mut std::sync::Arc::make_mut(&mut p.who).placement;
    placement.container = "c0ffee".into();
    placement.container_runtime = "containerd".into();
    placement.pod_uid = "uid-1".into();
    placement.job = "42".into();
    let s = snap(vec![dev("GPU-a", vec![p])]);
    let mut c = cfg();
    c.group_by = crate::app::config::Config::defaults(true).processes.group_by;
    assert!(!c.group_by.is_empty(), "the demo config groups");
    let out = render_with(&s, &DaemonState::default(), &c);
    let used = samples(&out, "gpumem_process_memory_used_bytes");
    assert!(used.iter().any(|l| l.contains(r#"container_id="c0ffee""#)), "{used:?}");
    for line in out.lines().filter(|l| !l.starts_with('#')) {
        for name in label_names(line) {
            assert!(!TARGET_LABELS.contains(&name), "{name} in {line}");
        }
    }
}

#[test]
fn family_names_end_in_their_unit() {
    let names = device::DEVICE.iter().map(|f| (f.name, f.unit));
    let names = names.chain(device::POLL.iter().map(|f| (f.name, f.unit)));
    use crate::serve::metrics::daemon::{NOTIFIER, RECLAIM, RELOAD, STATE_DIR};
    let names = names.chain(RELOAD.iter().map(|f| (f.name, f.unit)));
    let names = names.chain(NOTIFIER.iter().map(|f| (f.name, f.unit)));
    let names = names.chain(
        crate::serve::metrics::selfproc::PROCESS
            .iter()
            .map(|f| (f.name, f.unit)),
    );
    let single = [
        (device::BUILD.name, device::BUILD.unit),
        (STATE_DIR.name, STATE_DIR.unit),
        (RECLAIM.name, RECLAIM.unit),
    ];
    for (name, unit) in names.chain(single) {
        let base = name.trim_end_matches("_total");
        let suffix = ["bytes", "seconds"]
            .into_iter()
            .find(|u| base.ends_with(&format!("_{u}")));
        assert_eq!(suffix.unwrap_or(""), unit, "{name}");
    }
}

#[test]
fn daemon_counters_come_from_their_producers_at_render_time() {
    let tmp = std::env::temp_dir();
    let reclaimer = Reclaimer::new(
        ReclaimConfig::default(),
        crate::act::reclaim::Host::Real("/proc".into()),
        &tmp,
    );
    let reclaimer = Arc::new(reclaimer.unwrap_or_else(|e| panic!("{e}")));
    let counters = Counters {
        reclaimer: Some(reclaimer),
        state_dir_writable: Some(Default::default()),
        ..Counters::default()
    };
    let d = DaemonState {
        counters: Some(&counters),
        ..DaemonState::default()
    };
    let out = render_with(&snap(Vec::new()), &d, &cfg());
    assert_eq!(
        samples(&out, "gpumem_reclaim_actions_total").len(),
        crate::act::reclaim::SERIES.len()
    );
    assert_eq!(value(&out, "gpumem_state_dir_writable", ""), Some(0));
    // No notifier configured: no notifier families.
    assert!(!announced(&out, "gpumem_notifications_total"));
    let empty = render(&snap(Vec::new()), &cfg());
    assert!(!announced(&empty, "gpumem_reclaim_actions_total"));
    assert!(!announced(&empty, "gpumem_state_dir_writable"));
}

#[test]
fn notifier_families_have_one_series_per_notifier_and_result() {
    let stats = [NotifierStats {
        notifier: "webhook",
        sent_ok: 3,
        failed: 2,
        dropped: 1,
        queue_length: 4,
        persist_errors: 5,
    }];
    let mut w = Writer::new(Format::Prometheus, 64);
    crate::serve::metrics::daemon::notifications(&mut w, &stats);
    let out = w.finish();
    let n = "gpumem_notifications_total";
    assert_eq!(value(&out, n, r#"result="success""#), Some(3));
    assert_eq!(value(&out, n, r#"result="failure""#), Some(2));
    assert_eq!(value(&out, n, r#"result="dropped""#), Some(1));
    assert_eq!(value(&out, "gpumem_notification_queue_length", "webhook"), Some(4));
    assert_eq!(
        value(&out, "gpumem_notification_outbox_write_errors_total", "webhook"),
        Some(5)
    );
    let mut w = Writer::new(Format::Prometheus, 64);
    crate::serve::metrics::daemon::notifications(&mut w, &[]);
    assert_eq!(w.finish(), "");
}
