//! `attribution::parse_cgroup`: `/proc/<pid>/cgroup` of any runtime. It
//! cannot fail, so besides "no panic, no hang" the properties are the
//! shapes its fields promise, since they become label values: a container
//! id is 64 lowercase hex, a pod uid a UUID or 32 hex, a job digits, and no
//! field holds a path separator or a line break.

use gpumemd::collect::attribution::{CgroupInfo, parse_cgroup};
use proptest::prelude::*;

use super::mutate;
use crate::{bounded, cases, corpus};

const ID: &str = "3f1c9a7be20d44c8a5f6e1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f50";

const DICT: &[&str] = &[
    "0::",
    "1:name=systemd:",
    "11:memory:",
    "4:cpu,cpuacct:",
    "/",
    "/../..",
    ":",
    "\n",
    " (deleted)",
    ID,
    "3f1c9a7be20d44c8",
    "docker",
    "docker-",
    "cri-containerd-",
    "cri-containerd:",
    "nerdctl-",
    "crio-",
    "crio-conmon-",
    "libpod-",
    "libpod-conmon-",
    ".scope",
    ".slice",
    ".service",
    "system.slice",
    "user.slice",
    "user-1000.slice",
    "user@1000.service",
    "session-3.scope",
    "kubepods",
    "kubepods.slice",
    "kubepods-burstable",
    "kubepods-besteffort-",
    "-pod",
    "pod",
    "1c4e0f2a-9b7d-4c1e-8a3f-2b6d5e7f9a01",
    "1c4e0f2a_9b7d_4c1e_8a3f_2b6d5e7f9a01",
    "burstable",
    "besteffort",
    "slurm",
    "slurmstepd.scope",
    "uid_1000",
    "job_",
    "job_42",
    "step_",
    "step_batch",
    "task_0",
    "-",
    "_",
    ".",
];

fn check(text: String) -> CgroupInfo {
    let info = parse_cgroup(&text);
    assert_shapes(&info, &text);
    info
}

/// The promises of `CgroupInfo`'s fields.
fn assert_shapes(i: &CgroupInfo, input: &str) {
    let ctx = || format!("input {input:?} gave {i:?}");
    if let Some(id) = &i.container_id {
        assert!(
            id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "container id: {}",
            ctx()
        );
    }
    assert!(
        i.container_runtime.is_none() || i.container_id.is_some(),
        "runtime without a container: {}",
        ctx()
    );
    if let Some(uid) = &i.pod_uid {
        assert!(
            (32..=36).contains(&uid.len()) && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'),
            "pod uid: {}",
            ctx()
        );
    }
    assert_eq!(i.pod_uid.is_some(), i.qos_class.is_some(), "qos without pod: {}", ctx());
    if let Some(q) = &i.qos_class {
        assert!(
            ["guaranteed", "burstable", "besteffort"].contains(&q.as_str()),
            "qos: {}",
            ctx()
        );
    }
    if let Some(job) = &i.job {
        assert!(
            !job.is_empty() && job.bytes().all(|b| b.is_ascii_digit()),
            "job: {}",
            ctx()
        );
    }
    assert!(i.job_step.is_none() || i.job.is_some(), "step without job: {}", ctx());
    if let Some(u) = &i.unit {
        assert!(u.ends_with(".service") || u.ends_with(".scope"), "unit: {}", ctx());
    }
    if let Some(s) = &i.slice {
        assert!(s.ends_with(".slice"), "slice: {}", ctx());
    }
    for v in [&i.container_id, &i.pod_uid, &i.unit, &i.slice, &i.job, &i.job_step]
        .into_iter()
        .flatten()
    {
        assert!(
            !v.is_empty() && !v.contains(['/', ':', '\n', '\r']),
            "field {v:?}: {}",
            ctx()
        );
    }
}

fn run(text: String) -> CgroupInfo {
    bounded("cgroup", text, check)
}

#[test]
fn every_seed_names_its_workload() {
    for s in corpus("cgroup", &[]) {
        let info = run(s.text());
        // The root cgroup names nothing; every other seed is a workload.
        if !s.name.ends_with("host-root") {
            assert_ne!(info, CgroupInfo::default(), "seed {} named nothing", s.name);
        }
    }
}

#[test]
fn huge_files_are_parsed_in_bounded_time() {
    // procfs caps reads at 64 KiB; far beyond that must still be quick.
    let line = format!("0::/system.slice/docker-{ID}.scope/{}\n", "a/".repeat(2_000));
    let _ = run(line.repeat(100));
    let _ = run(format!("0::{}", "/".repeat(1_000_000)));
    let _ = run(":".repeat(1_000_000));
}

proptest! {
    #![proptest_config(cases(1024))]

    #[test]
    fn arbitrary_text(text in any::<String>()) {
        run(text);
    }

    #[test]
    fn cgroup_tokens(text in mutate::soup(DICT, 48)) {
        run(text);
    }

    #[test]
    fn mutated_seeds(seed in any::<usize>(), edits in mutate::edits(12)) {
        let seeds = corpus("cgroup", &[]);
        let s = &seeds[seed % seeds.len()];
        run(String::from_utf8_lossy(&mutate::apply(&s.bytes, &edits, DICT)).into_owned());
    }
}
