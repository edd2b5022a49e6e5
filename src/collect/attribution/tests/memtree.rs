//! The in-memory tree renders what the real reader reads back: a process
//! written into a `MemTree` comes out of `ProcFs` as it went in, and every
//! workload shape survives `cgroup_path` -> `parse_cgroup`.

use std::sync::Arc;

use arcstr::ArcStr;

use super::super::{
    CgroupInfo, MemIdentity, MemProcess, MemTree, ProcFs, ProcState, ReadOptions, Runtime, cgroup_path, clock_ticks,
    parse_cgroup,
};

fn info(f: impl FnOnce(&mut CgroupInfo)) -> CgroupInfo {
    let mut i = CgroupInfo::default();
    f(&mut i);
    i
}

#[test]
fn cgroup_paths_parse_back_into_the_same_workload() {
    let id = "3f4e9c2b1a0d8e7f6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170655".to_string();
    let pod = "6b1f0c2e-8d4a-4f3b-9e2d-7c1a5b0e4f93".to_string();
    let cases = [
        CgroupInfo::default(),
        info(|i| i.slice = Some("user-1000.slice".into())),
        info(|i| {
            i.slice = Some("system.slice".into());
            i.unit = Some("jupyter.service".into());
        }),
        info(|i| {
            i.slice = Some("system.slice".into());
            i.job = Some("4242".into());
            i.job_step = Some("batch".into());
        }),
        info(|i| i.job = Some("17".into())),
        info(|i| {
            i.container_id = Some(ArcStr::from(id.as_str()));
            i.container_runtime = Some(Runtime::Docker);
        }),
        info(|i| i.container_id = Some(ArcStr::from(id.as_str()))),
        info(|i| {
            i.container_id = Some(ArcStr::from(id.as_str()));
            i.container_runtime = Some(Runtime::Podman);
            i.unit = Some("app.service".into());
        }),
        info(|i| {
            i.container_id = Some(ArcStr::from(id.as_str()));
            i.container_runtime = Some(Runtime::Containerd);
            i.pod_uid = Some(ArcStr::from(pod.as_str()));
            i.qos_class = Some("burstable".into());
        }),
        info(|i| {
            i.container_id = Some(ArcStr::from(id.as_str()));
            i.container_runtime = Some(Runtime::CriO);
            i.pod_uid = Some(ArcStr::from(pod.as_str()));
            i.qos_class = Some("guaranteed".into());
        }),
        info(|i| {
            i.pod_uid = Some(ArcStr::from(pod.as_str()));
            i.qos_class = Some("besteffort".into());
        }),
    ];
    for want in cases {
        let path = cgroup_path(&want);
        assert_eq!(parse_cgroup(&format!("0::{path}\n")), want, "{path}");
    }
}

fn python(pid: u32, state: ProcState) -> MemProcess {
    MemProcess {
        pid,
        ppid: 1,
        comm: "a-very-long-process-name".into(),
        state,
        start_ticks: 250 * clock_ticks(),
        uid: 1001,
        cgroup: "/system.slice/train.service".into(),
        cmdline: MemIdentity::nul_args("python train.py --password hunter2"),
    }
}

#[test]
fn procfs_reads_back_what_was_written() {
    let tree = Arc::new(MemTree::new(1_700_000_000));
    tree.update(|w| {
        w.set_passwd([(1001, "bob")]);
        w.insert(python(42, ProcState::DiskSleep));
    });
    let mut fs = ProcFs::on(tree.clone()).with_passwd_recheck(std::time::Duration::ZERO);
    let opts = ReadOptions {
        cmdline: true,
        ..ReadOptions::default()
    };
    let id = fs.read(42, &opts).expect("in the tree");
    assert_eq!(id.who.comm, "a-very-long-pro", "cut to 15 bytes as the kernel does");
    assert_eq!(
        (id.state, id.ppid, id.who.uid, id.who.user.as_str()),
        (ProcState::DiskSleep, 1, Some(1001), "bob")
    );
    assert_eq!(id.start_time, Some(1_700_000_250.0));
    assert_eq!(id.cgroup.unit.as_deref(), Some("train.service"));
    assert_eq!(id.cmdline.as_deref(), Some("python train.py --password <redacted>"));

    // A zombie keeps its entry but has no argv; a renamed user shows at once.
    tree.update(|w| {
        assert!(w.set_state(42, ProcState::Zombie));
        w.set_passwd([(1001, "robert")]);
    });
    let id = fs.read(42, &opts).expect("zombie");
    assert_eq!(
        (id.state, id.cmdline.as_deref(), id.who.user.as_str()),
        (ProcState::Zombie, Some(""), "robert")
    );

    tree.update(|w| w.remove(42));
    assert!(fs.read(42, &opts).is_err_and(|e| e.is_gone()));
    assert!(tree.is_empty());
    assert!(!tree.update(|w| w.set_state(42, ProcState::Running)), "absent");
}

/// What the tree writes between polls (a zombie, a D, a removal, a new
/// process in the PID) shows at the next poll.
#[test]
fn procfs_sees_each_write_at_the_next_poll() {
    use std::time::{Duration, Instant};
    let tree = Arc::new(MemTree::new(1_700_000_000));
    let pids: Vec<u32> = (100..110).collect();
    tree.update(|w| pids.iter().for_each(|&p| w.insert(python(p, ProcState::Sleeping))));
    let mut fs = ProcFs::on(tree.clone());
    let opts = ReadOptions::default();
    let start = Instant::now();
    let poll = |fs: &mut ProcFs, at: Duration| -> Vec<Option<(ProcState, u64)>> {
        pids.iter()
            .map(|&p| fs.read_at(p, &opts, start + at).ok().map(|i| (i.state, i.start_ticks)))
            .collect()
    };
    let ms = Duration::from_millis;
    let first = poll(&mut fs, ms(1));
    assert!(first.iter().all(|s| s.is_some_and(|(s, _)| s == ProcState::Sleeping)));
    tree.update(|w| {
        w.set_state(100, ProcState::Zombie);
        w.set_state(101, ProcState::DiskSleep);
        w.remove(102);
        w.insert(MemProcess {
            start_ticks: 9_999,
            ..python(103, ProcState::Running)
        });
    });
    let states = poll(&mut fs, ms(2));
    let ticks = first[0].map(|(_, t)| t);
    assert_eq!(
        states[..4],
        [
            ticks.map(|t| (ProcState::Zombie, t)),
            ticks.map(|t| (ProcState::DiskSleep, t)),
            None,
            Some((ProcState::Running, 9_999))
        ]
    );
    assert_eq!(states[4..], first[4..], "the rest as they were");
}
