//! The identity cache on its own, with a clock the test moves: what an
//! entry holds, when it is read again, and that the unused are swept.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arcstr::ArcStr;

use super::super::cache::IdentityCache;

const REFRESH: Duration = Duration::from_secs(30);
const POD: &[u8] = b"0::/kubepods/burstable/pod1c4e0f2a-9b7d-4c1e-8a3f-2b6d5e7f9a01\n";
const JOB: &[u8] = b"0::/slurm/uid_1000/job_77/step_0/task_0\n";

#[test]
fn fill_parses_the_cgroup_and_an_unreadable_one_is_no_workload() {
    let mut cache = IdentityCache::new(REFRESH);
    let t = Instant::now();
    let a = cache.fill(100, 1, (Some(1000), "python", ArcStr::new()), POD, t);
    let c = cache.fill(102, 1, (Some(1001), "torchrun", ArcStr::new()), POD, t);
    let d = cache.fill(103, 1, (Some(1000), "python", ArcStr::new()), JOB, t);
    assert_eq!(a.0.placement.pod_uid, "1c4e0f2a-9b7d-4c1e-8a3f-2b6d5e7f9a01");
    assert_eq!(a.1.pod_uid.as_deref(), Some("1c4e0f2a-9b7d-4c1e-8a3f-2b6d5e7f9a01"));
    assert_eq!(d.0.placement.job, "77");
    assert_eq!((c.0.uid, c.0.comm.as_str()), (Some(1001), "torchrun"));
    assert_eq!(cache.len(), 3);
    let none = cache.fill(104, 1, (None, "x", ArcStr::new()), b"", t);
    assert_eq!(none.0.placement, Default::default());
}

#[test]
fn a_hit_needs_the_same_start_and_a_fresh_read() {
    let mut cache = IdentityCache::new(REFRESH);
    let t = Instant::now();
    cache.fill(7, 500, (Some(0), "a", ArcStr::new()), POD, t);
    assert!(cache.hit(7, 500, "a", t + Duration::from_secs(1)).is_some());
    assert!(cache.hit(7, 501, "a", t).is_none(), "a reused PID misses");
    assert!(cache.hit(8, 500, "a", t).is_none(), "never seen");
    // A new comm (exec, PR_SET_NAME) is taken from stat at once.
    let renamed = cache.hit(7, 500, "b", t).map(|id| id.0.comm.clone());
    assert_eq!(renamed.as_deref(), Some("b"));
    assert!(
        cache.hit(7, 500, "a", t + REFRESH).is_none(),
        "read again after a period"
    );
}

#[test]
fn what_no_read_asks_about_for_a_sweep_period_is_swept() {
    let mut cache = IdentityCache::new(REFRESH);
    let t = Instant::now();
    for pid in 1..=100 {
        let cgroup = format!("0::/system.slice/unit-{pid}.service\n");
        let id = cache.fill(pid, 1, (Some(1), "p", ArcStr::new()), cgroup.as_bytes(), t);
        assert_eq!(id.0.placement.unit, format!("unit-{pid}.service"));
    }
    // Only PID 1 is used for two sweep periods: the rest is forgotten.
    for k in 1..=2 {
        let now = t + REFRESH * k;
        cache.round(now);
        cache.fill(
            1,
            1,
            (Some(1), "p", ArcStr::new()),
            b"0::/system.slice/unit-1.service\n",
            now,
        );
    }
    cache.round(t + REFRESH * 3);
    assert_eq!(cache.len(), 1);
}

#[test]
fn a_new_user_name_is_cached_for_the_entry_it_renames() {
    let mut cache = IdentityCache::new(REFRESH);
    let t = Instant::now();
    let a = cache.fill(100, 1, (Some(1000), "python", ArcStr::from("alice")), POD, t);
    assert_eq!((a.0.user.as_str(), a.0.uid), ("alice", Some(1000)));
    // passwd renamed uid 1000: the entry is cached under the new name.
    let a2 = cache.renamed(100, &a.0, ArcStr::from("alicia"));
    assert_eq!(a2.user.as_str(), "alicia");
    assert_eq!((a2.comm.as_str(), &a2.placement), ("python", &a.0.placement));
    let hit = cache.hit(100, 1, "python", t).map(|id| id.0);
    assert!(hit.is_some_and(|w| Arc::ptr_eq(&w, &a2)));
    // Not the entry's identity (a stale copy): renamed for that read only.
    let stray = cache.renamed(100, &a.0, ArcStr::from("al"));
    assert_eq!(stray.user.as_str(), "al");
    assert!(cache.hit(100, 1, "python", t).is_some_and(|id| id.0.user == "alicia"));
}

#[test]
fn alike_processes_share_one_identity_and_unlike_ones_do_not() {
    let mut cache = IdentityCache::new(REFRESH);
    let t = Instant::now();
    let ana = ArcStr::from("ana");
    let a = cache.fill(200, 1, (Some(1000), "python", ana.clone()), JOB, t);
    let b = cache.fill(201, 1, (Some(1000), "python", ana.clone()), JOB, t);
    assert!(Arc::ptr_eq(&a.0, &b.0), "one job's workers share their Who");
    assert!(Arc::ptr_eq(&a.1, &b.1), "and their parsed cgroup");
    let other_comm = cache.fill(202, 1, (Some(1000), "torchrun", ana.clone()), JOB, t);
    assert!(!Arc::ptr_eq(&a.0, &other_comm.0));
    assert!(Arc::ptr_eq(&a.1, &other_comm.1));
    let other_pod = cache.fill(203, 1, (Some(1000), "python", ana), POD, t);
    assert!(!Arc::ptr_eq(&a.0, &other_pod.0));
    assert_eq!(other_pod.0.placement.job, "");
    assert_eq!(b.0.placement.job, "77");
}
