//! Table tests of `check::judge` on snapshot fixtures: each row is a fleet,
//! the criteria and the exit code and line expected.

use super::*;

const GIB: u64 = 1 << 30;

/// A process as the JSON API writes it.
fn proc(pid: u32, holder: &str, user: &str, job: &str, gib: u64) -> serde_json::Value {
    serde_json::json!({
        "pid": pid, "used_bytes": gib * GIB, "type": "compute", "comm": "python3",
        "user": user, "uid": 1000 + pid, "state": "sleeping", "holder": holder,
        "job": job, "unit": "", "container": "", "leak_suspected": false, "idle": false
    })
}

fn fleet(devices: &[(bool, u64, Vec<serde_json::Value>)]) -> String {
    let devs: Vec<_> = devices
        .iter()
        .enumerate()
        .map(|(i, (up, unattributed, procs))| {
            serde_json::json!({
                "uuid": format!("GPU-{i}"), "index": i, "name": "H200", "up": up,
                "holders": {"live": 0, "zombie": 0, "exited": 0, "unattributed": unattributed},
                "processes": procs, "unreleased": [], "errors": []
            })
        })
        .collect();
    serde_json::json!({"seq": 3, "timestamp": 1.0, "nvml_up": true, "devices": devs}).to_string()
}

fn job(id: &str) -> Criteria {
    Criteria {
        scope: Scope {
            jobs: vec![id.into()],
            ..Scope::default()
        },
        max_unattributed: GIB / 2,
        ..Criteria::default()
    }
}

#[test]
fn verdicts_on_fixtures() {
    let clean = fleet(&[(true, 0, vec![proc(10, "live", "bob", "78", 3)]), (true, 0, vec![])]);
    let left = fleet(&[(
        true,
        0,
        vec![proc(10, "live", "alice", "77", 2), proc(11, "live", "bob", "78", 5)],
    )]);
    let exited = fleet(&[(true, 0, vec![]), (true, 0, vec![proc(12, "exited", "", "", 7)])]);
    let zombie_and_job = fleet(&[(
        true,
        0,
        vec![proc(13, "zombie", "alice", "77", 1), proc(14, "live", "alice", "77", 4)],
    )]);
    let unattributed = fleet(&[(true, GIB, vec![])]);
    let down = fleet(&[(true, 0, vec![]), (false, 0, vec![])]);
    let allow_root = Criteria {
        allow: Scope {
            users: vec!["root".into()],
            ..Scope::default()
        },
        max_unattributed: GIB,
        ..Criteria::default()
    };
    let by_pid = Criteria {
        scope: Scope {
            pids: vec![11],
            ..Scope::default()
        },
        max_unattributed: GIB,
        ..Criteria::default()
    };
    let cases: Vec<(&str, &String, Criteria, u8, &str)> = vec![
        (
            "another job's memory is not this job's",
            &clean,
            job("77"),
            0,
            "OK: no GPU memory left behind on 2 GPU(s)",
        ),
        (
            "the job's live process",
            &left,
            job("77"),
            1,
            "LEFT: 2.0 GiB on GPU 0: pid 10 (python3, user alice, job 77) still holds it after its job",
        ),
        (
            "by pid",
            &left,
            by_pid,
            1,
            "LEFT: 5.0 GiB on GPU 0: pid 11 (python3, user bob, job 78) still holds it after its job",
        ),
        (
            "exited holders always count",
            &exited,
            job("77"),
            1,
            "LEFT: 7.0 GiB on GPU 1: pid 12 (python3) exited and still holds it",
        ),
        (
            "largest first, the rest counted",
            &zombie_and_job,
            job("77"),
            1,
            "LEFT: 4.0 GiB on GPU 0: pid 14 (python3, user alice, job 77) still holds it after its job (and 1 more, 5.0 GiB in all)",
        ),
        (
            "unattributed over the tolerance",
            &unattributed,
            job("1"),
            1,
            "LEFT: 1.0 GiB on GPU 0 held by no listed process (tolerance 512.0 MiB)",
        ),
        (
            "unattributed within the tolerance",
            &unattributed,
            allow_root.clone(),
            0,
            "OK: no GPU memory left behind on 1 GPU(s)",
        ),
        (
            "not on the allow list",
            &clean,
            allow_root,
            1,
            "LEFT: 3.0 GiB on GPU 0: pid 10 (python3, user bob, job 78) holds it and is not allowed",
        ),
        (
            "a GPU down: cannot tell",
            &down,
            job("77"),
            2,
            "UNKNOWN: cannot tell: GPU 1 (GPU-1) is not answering",
        ),
    ];
    for (what, body, criteria, code, line) in cases {
        let v = judge_json(body, &criteria);
        assert_eq!((v.code, v.line.as_str()), (code, line), "{what}");
    }
}

#[test]
fn no_nvml_or_no_snapshot_is_cannot_tell() {
    let v = judge_json(
        r#"{"nvml_up": false, "nvml_error": "driver not loaded", "devices": []}"#,
        &job("1"),
    );
    assert_eq!(
        (v.code, v.line.as_str()),
        (2, "UNKNOWN: cannot tell: driver not loaded")
    );
    let v = judge_json("<html>login</html>", &job("1"));
    assert_eq!(v.code, 2);
    assert!(
        v.line
            .starts_with("UNKNOWN: cannot tell: the answer is not a gpumemd snapshot"),
        "{}",
        v.line
    );
}
