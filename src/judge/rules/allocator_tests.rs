//! Table tests of the allocator-view rule kinds: `process_fragmentation`
//! (cache share of reserved, only while retries climb) and `process_oom`
//! (an OOM reported on the device, naming the other holders). No clock:
//! times are the snapshots'.

use super::eval::{EvalState, evaluate};
use super::*;
use crate::data::snapshot::{AllocPair, AllocatorFigures, Device, PollStats, Process, RecentOom, Snapshot, Who};

const GIB: u64 = 1 << 30;
const NOW: f64 = 1_000_000.0;

fn rule(text: &str) -> Rule {
    let cfg: RuleConfig = toml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
    Rule::new(cfg).unwrap_or_else(|e| panic!("{e}"))
}

fn snap(procs: Vec<Process>, ooms: Vec<RecentOom>) -> Snapshot {
    Snapshot {
        seq: 1,
        timestamp: NOW,
        monotonic: 10.0,
        nvml_up: true,
        devices: vec![Device {
            uuid: "GPU-a".into(),
            index: Some(0),
            up: true,
            processes: procs,
            ooms,
            ..Device::default()
        }],
        poll: PollStats {
            success: true,
            ..PollStats::default()
        },
        ..Snapshot::default()
    }
}

/// A process reserving 10 GiB with `allocated` in tensors, its retries
/// last rising `retry_ago` seconds before the snapshot.
fn proc(allocated: u64, retry_ago: Option<f64>) -> Process {
    Process {
        pid: 7,
        who: Who::shared("python", "", None),
        allocator: Some(Box::new(AllocatorFigures {
            allocated: AllocPair {
                current: allocated,
                peak: allocated,
            },
            reserved: AllocPair {
                current: 10 * GIB,
                peak: 10 * GIB,
            },
            cache_bytes: 10 * GIB - allocated,
            last_retry_at: retry_ago.map(|a| NOW - a),
            ..AllocatorFigures::default()
        })),
        ..Process::default()
    }
}

fn states(rules: &[Rule], s: &Snapshot) -> Vec<(String, String)> {
    let (st, _) = evaluate(rules, &EvalState::new(), s, "host");
    st.values()
        .map(|a| {
            (
                a.state.as_str().to_string(),
                a.annotation("summary").unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn fragmentation_needs_a_cache_share_and_climbing_retries() {
    let r = rule(
        "name = \"Frag\"\nkind = \"process_fragmentation\"\nabove = \"50%\"\n\
         annotations = { summary = \"{{ value_human }} of pid {{ pid }}'s pool is not tensors\" }",
    );
    let cases = [
        (
            "80% cache, retries a minute ago",
            proc(2 * GIB, Some(60.0)),
            Some("80.0% of pid 7's pool is not tensors"),
        ),
        ("80% cache, retries long ago", proc(2 * GIB, Some(3600.0)), None),
        ("80% cache, never retried", proc(2 * GIB, None), None),
        ("30% cache, retries now", proc(7 * GIB, Some(0.0)), None),
        (
            "no allocator view",
            Process {
                pid: 7,
                ..Process::default()
            },
            None,
        ),
    ];
    for (name, p, want) in cases {
        let got = states(std::slice::from_ref(&r), &snap(vec![p], vec![]));
        let want: Vec<(String, String)> = want
            .map(|s| ("firing".to_string(), s.to_string()))
            .into_iter()
            .collect();
        assert_eq!(got, want, "{name}");
    }
    let bad: Result<RuleConfig, _> = toml::from_str("name = \"F\"\nkind = \"process_fragmentation\"\nabove = 5");
    assert!(
        bad.ok().is_none_or(|c| Rule::new(c).is_err()),
        "a ratio above 1 is refused"
    );
}

#[test]
fn an_oom_fires_at_once_names_the_other_holders_and_goes_with_the_report() {
    let r = rule(
        "name = \"GpuOutOfMemory\"\nkind = \"process_oom\"\nseverity = \"warning\"\n\
         annotations = { summary = \"pid {{ pid }} ({{ comm }}, {{ user }}) OOM on GPU {{ gpu }}; others: {{ others }}\" }",
    );
    let oom = RecentOom {
        time: NOW - 5.0,
        pid: 7,
        comm: "python".into(),
        user: "ann".into(),
        others: "train (9) 60.0 GiB, eval (10) 12.0 GiB".into(),
    };
    let got = states(std::slice::from_ref(&r), &snap(vec![], vec![oom.clone()]));
    assert_eq!(
        got,
        [(
            "firing".to_string(),
            "pid 7 (python, ann) OOM on GPU 0; others: train (9) 60.0 GiB, eval (10) 12.0 GiB".to_string()
        )]
    );
    assert!(states(std::slice::from_ref(&r), &snap(vec![], vec![])).is_empty());
    let only_bob = rule("name = \"O\"\nkind = \"process_oom\"\nmatch = { user = [\"bob\"] }");
    assert!(states(&[only_bob], &snap(vec![], vec![oom])).is_empty());
    let with_threshold: Result<RuleConfig, _> = toml::from_str("name = \"O\"\nkind = \"process_oom\"\nabove = 1");
    assert!(with_threshold.ok().is_none_or(|c| Rule::new(c).is_err()));
}
