//! Unit tests of the status page's data: the summary's grouping, counts and
//! caps, and the link settings it refuses.

use std::collections::BTreeMap;

use super::*;
use crate::act::alerts::AlertsView;
use crate::app::config::status_page::{LinkBase, PageLinks};
use crate::data::snapshot::{Device, Holders, Memory, Process, Snapshot};
use crate::judge::rules::eval::{Alert, Annotations, State};

fn alert(rule: &str, severity: &str, state: State, gpu: u32, active_at: f64) -> Alert {
    Alert {
        rule: rule.into(),
        labels: BTreeMap::from([
            ("severity".into(), severity.into()),
            ("gpu".into(), gpu.to_string().into()),
            ("instance".into(), "h".into()),
        ]),
        notes: Annotations::fixed(BTreeMap::from([("summary".to_string(), format!("{rule} on {gpu}"))])),
        state,
        active_at,
        fired_at: (state == State::Firing).then_some(active_at + 10.0),
        resolved_at: None,
        value: 1.0,
        since_mono: 0.0,
        targets: Vec::new(),
        action: None,
    }
}

fn fleet(gpus: u32, procs: u32) -> Snapshot {
    let devices = (0..gpus)
        .map(|i| Device {
            uuid: format!("GPU-{i}"),
            index: Some(i),
            up: i != 1,
            memory: Some(Memory {
                total_bytes: 100,
                used_bytes: 40,
                free_bytes: 60,
                reserved_bytes: None,
            }),
            holders: Some(Holders {
                live: 30,
                unattributed: 10,
                ..Holders::default()
            }),
            processes: (0..procs)
                .map(|p| Process {
                    pid: 1000 * i + p,
                    leak_suspected: p == 0,
                    ..Process::default()
                })
                .collect(),
            ..Device::default()
        })
        .collect();
    Snapshot {
        seq: 3,
        devices,
        ..Snapshot::default()
    }
}

#[test]
fn devices_keep_their_top_processes_and_totals_count_everything() {
    let s = summarize(&fleet(4, 20), &AlertsView::default(), &PageLinks::default(), 3, None);
    assert_eq!(s.devices.len(), 4);
    for d in &s.devices {
        assert_eq!(d.process_count, 20);
        assert_eq!(d.processes.len(), 3);
        assert_eq!(d.leak_count, 1);
    }
    assert_eq!(
        s.devices[2].processes[0].pid, 2000,
        "largest first, as the snapshot has them"
    );
    assert_eq!(
        (s.totals.devices, s.totals.down, s.totals.processes, s.totals.leaks),
        (4, 1, 80, 4)
    );
    assert_eq!((s.totals.used_bytes, s.totals.total_bytes), (160, 400));
    assert_eq!(s.totals.holders.unattributed, 40);
    let one = summarize(
        &fleet(4, 20),
        &AlertsView::default(),
        &PageLinks::default(),
        50,
        Some("GPU-2"),
    );
    assert_eq!(one.devices.len(), 1);
    assert_eq!(one.devices[0].processes.len(), 20);
    assert_eq!(one.totals.devices, 4, "totals stay fleet-wide");
}

#[test]
fn alerts_are_grouped_by_rule_with_counts_firing_and_severe_first() {
    let mut alerts: Vec<Alert> = (0..40)
        .map(|g| alert("Noisy", "info", State::Firing, g, 500.0 - f64::from(g)))
        .collect();
    alerts.push(alert("Leak", "critical", State::Pending, 0, 100.0));
    alerts.push(alert("Leak", "critical", State::Firing, 3, 300.0));
    alerts.push(alert("Leak", "critical", State::Firing, 2, 200.0));
    alerts.push(alert("Quiet", "critical", State::Pending, 1, 50.0));
    let view = AlertsView {
        alerts,
        transitions: Vec::new(),
        rules: vec!["Leak".into(), "Noisy".into(), "Quiet".into()],
    };
    let s = summarize(&fleet(1, 0), &view, &PageLinks::default(), 5, None);
    let a = &s.alerts;
    assert_eq!((a.rules, a.firing, a.pending), (3, 42, 2));
    let order: Vec<(&str, usize, usize)> = a
        .groups
        .iter()
        .map(|g| (g.rule.as_str(), g.firing, g.pending))
        .collect();
    assert_eq!(order, vec![("Leak", 2, 1), ("Noisy", 40, 0), ("Quiet", 0, 1)]);
    let leak = &a.groups[0];
    let gpus: Vec<&str> = leak.examples.iter().map(|e| e.labels["gpu"].as_str()).collect();
    assert_eq!(gpus, vec!["2", "3", "0"], "firing first, oldest first");
    assert_eq!(leak.since, 100.0);
    assert!(!leak.examples[0].labels.contains_key("instance"), "only where-labels");
    assert_eq!(a.groups[1].examples.len(), 5, "examples are capped, counts are not");
}

#[test]
fn link_bases_must_be_web_links() {
    let ok = |s: &str| LinkBase::try_from(s.to_string()).map(|l| l.as_str().to_string());
    assert_eq!(
        ok("https://grafana.example.com/"),
        Ok("https://grafana.example.com".into())
    );
    assert_eq!(ok("/grafana"), Ok("/grafana".into()));
    assert_eq!(ok(""), Ok(String::new()));
    for bad in [
        "javascript:alert(1)",
        "//evil.example",
        "grafana.example.com",
        "https://a b",
    ] {
        assert!(ok(bad).is_err(), "{bad}");
    }
    let cfg: Result<crate::app::config::Config, _> =
        crate::app::config::Config::from_toml("[status_page]\ngrafana_url = \"javascript:x\"\n", "t.toml", false);
    let e = cfg.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.starts_with("t.toml:2:"), "{e}");
}

#[test]
fn the_runbook_has_a_section_per_built_in_and_demo_rule() {
    let html = runbook::html();
    let mut names: Vec<String> = Vec::new();
    for set in [crate::judge::rules::DEFAULT_RULES, crate::judge::rules::DEMO_RULES] {
        let rules = crate::judge::rules::parse_rule_set(set).unwrap_or_default();
        assert!(rules.len() > 5, "the rule set parses");
        names.extend(rules.into_iter().map(|r| r.name));
    }
    for rule in &names {
        assert!(
            html.contains(&format!("<h2 id=\"{}\">{rule}</h2>", rule.to_lowercase())),
            "docs/runbook.md has no `## {rule}` section"
        );
    }
    assert!(!html.contains("<script"), "escaped text only");
}

#[test]
fn the_page_links_its_own_runbook_relatively_and_others_as_given() {
    let local = PageLinks::default();
    let own = Some("http://node1:9947/runbook#gpulost".to_string());
    assert_eq!(
        local.page_runbook(own.clone()),
        None,
        "the page's /runbook#rule instead"
    );
    let wiki = Some("https://wiki.example/gpu#mine".to_string());
    assert_eq!(local.page_runbook(wiki.clone()), wiki, "a rule's own link stays");
    let links = crate::data::links::LinksConfig {
        runbook_base_url: "https://wiki.example/gpu".into(),
        ..crate::data::links::LinksConfig::default()
    };
    let remote = PageLinks::new(&Default::default(), &links, "/m2");
    assert_eq!(remote.runbook_url, "https://wiki.example/gpu");
    assert_eq!(remote.metrics_path, "/m2");
    assert_eq!(remote.page_runbook(own.clone()), own, "only a local base replaces it");
}

#[test]
fn health_problems_reach_the_summary_only_where_something_is_wrong() {
    use crate::data::snapshot::health::{Health, Remap};
    let mut snap = fleet(3, 1);
    let sick = Health {
        remap: Some(Remap {
            pending: true,
            ..Remap::default()
        }),
        ..Health::default()
    };
    let problems = sick.find_problems();
    snap.devices[0].health = Some(Health { problems, ..sick });
    snap.devices[2].health = Some(Health::default());
    let s = summarize(&snap, &AlertsView::default(), &PageLinks::default(), 3, None);
    assert_eq!(s.devices[0].health_problems, ["row remap pending (reset GPU)"]);
    assert!(
        s.devices[1].health_problems.is_empty(),
        "no health read: nothing to say"
    );
    assert!(s.devices[2].health_problems.is_empty(), "healthy");
    let json = serde_json::to_value(&s).expect("json");
    assert_eq!(
        json["devices"][0]["health_problems"][0],
        "row remap pending (reset GPU)"
    );
}

#[test]
fn a_gpu_forecast_to_fill_reaches_the_page_with_its_growers() {
    let mut snap = fleet(2, 3);
    snap.devices[1].full_in_seconds = Some(620.0);
    snap.devices[1].growers = vec![crate::data::snapshot::Grower {
        pid: Some(2001),
        comm: "python3".into(),
        user: "ana".into(),
        holder: None,
        bytes_per_second: 16.0 * 1048576.0,
    }];
    let s = summarize(&snap, &AlertsView::default(), &PageLinks::default(), 3, None);
    assert_eq!(s.devices[0].full_in_seconds, None);
    assert_eq!(s.devices[1].full_in_seconds, Some(620.0));
    let json = serde_json::to_value(&s.devices[1]).unwrap();
    assert_eq!(json["growers"][0]["pid"], 2001);
    assert!(
        serde_json::to_value(&s.devices[0])
            .unwrap()
            .get("full_in_seconds")
            .is_none()
    );
    assert!(include_str!("../http/status_page.html").contains("d.full_in_seconds"));
}
