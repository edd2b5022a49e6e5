//! The identity cache on its own, with a clock the test moves: what PIDs
//! share, when an entry is read again, and that what it shares is bounded
//! and swept.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arcstr::ArcStr;

use super::super::cache::{IdentityCache, KEY_MAX, SHARED_MAX};

const REFRESH: Duration = Duration::from_secs(30);
const POD: &[u8] = b"0::/kubepods/burstable/pod1c4e0f2a-9b7d-4c1e-8a3f-2b6d5e7f9a01\n";
const JOB: &[u8] = b"0::/slurm/uid_1000/job_77/step_0/task_0\n";

#[test]
fn processes_in_one_cgroup_share_one_parsed_copy() {
    let mut cache = IdentityCache::new(REFRESH);
    let t = Instant::now();
    let a = cache.fill(100, 1, (Some(1000), "python", ArcStr::new()), POD, t);
    let b = cache.fill(101, 1, (Some(1000), "python", ArcStr::new()), POD, t);
    let c = cache.fill(102, 1, (Some(1001), "torchrun", ArcStr::new()), POD, t);
    let d = cache.fill(103, 1, (Some(1000), "python", ArcStr::new()), JOB, t);
    assert!(
        Arc::ptr_eq(&a.1, &b.1) && Arc::ptr_eq(&a.0, &b.0),
        "same cgroup: one copy"
    );
    assert!(Arc::ptr_eq(&a.1, &c.1), "another user in the same cgroup");
    assert!(!Arc::ptr_eq(&a.1, &d.1), "another cgroup");
    assert_eq!(a.0.placement.pod_uid, "1c4e0f2a-9b7d-4c1e-8a3f-2b6d5e7f9a01");
    assert_eq!(d.0.placement.job, "77");
    assert_eq!((c.0.uid, c.0.comm.as_str()), (Some(1001), "torchrun"));
    assert_eq!(cache.len(), 4);
    // Two workloads; three identities: (1000, python, pod), (1001,
    // torchrun, pod), (1000, python, job).
    assert_eq!(cache.shared(), (2, 3));
    // An unreadable cgroup reads as an empty one: no workload.
    let none = cache.fill(104, 1, (None, "x", ArcStr::new()), b"", t);
    assert_eq!(none.0.placement, Default::default());
    // A file longer than a key may be is parsed for its process alone.
    let long = format!("0::/{}/job.slice/slurm/job_9\n", "n".repeat(KEY_MAX));
    let (x, y) = (
        cache.fill(105, 1, (None, "x", ArcStr::new()), long.as_bytes(), t),
        cache.fill(106, 1, (None, "x", ArcStr::new()), long.as_bytes(), t),
    );
    assert_eq!((x.0.placement.job.as_str(), y.0.placement.job.as_str()), ("9", "9"));
    assert!(!Arc::ptr_eq(&x.1, &y.1), "not shared");
    assert_eq!(cache.shared().0, 3, "the empty file's workload, not the long one");
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
fn first_refreshes_are_spread_over_the_second_half_of_a_period() {
    let mut cache = IdentityCache::new(REFRESH);
    let t = Instant::now();
    let pids = 1000..3000u32;
    for pid in pids.clone() {
        cache.fill(pid, 1, (Some(1), "p", ArcStr::new()), POD, t);
    }
    let misses = |cache: &mut IdentityCache, after: Duration| {
        pids.clone()
            .filter(|&pid| cache.hit(pid, 1, "p", t + after).is_none())
            .count()
    };
    assert_eq!(misses(&mut cache, REFRESH / 2 - Duration::from_millis(1)), 0);
    let halfway = misses(&mut cache, REFRESH * 3 / 4);
    assert!(
        halfway > 600 && halfway < 1400,
        "{halfway} of 2000 due by 3/4 of a period"
    );
    // One read again is then due a whole period later.
    cache.fill(1000, 1, (Some(1), "p", ArcStr::new()), POD, t + REFRESH);
    assert!(
        cache
            .hit(1000, 1, "p", t + REFRESH * 2 - Duration::from_millis(1))
            .is_some()
    );
    assert_eq!(misses(&mut cache, REFRESH), 1999, "all but the one read again");
}

#[test]
fn what_no_process_holds_is_swept_and_sharing_is_bounded() {
    let mut cache = IdentityCache::new(REFRESH);
    let t = Instant::now();
    let n = SHARED_MAX as u32 + 100;
    for pid in 1..=n {
        let cgroup = format!("0::/system.slice/unit-{pid}.service\n");
        let id = cache.fill(pid, 1, (Some(1), "p", ArcStr::new()), cgroup.as_bytes(), t);
        assert_eq!(
            id.0.placement.unit,
            format!("unit-{pid}.service"),
            "parsed even past the cap"
        );
    }
    let (workloads, idents) = cache.shared();
    assert!(workloads <= SHARED_MAX && idents <= SHARED_MAX, "{workloads} {idents}");
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
    assert_eq!(cache.shared(), (1, 1));
}

#[test]
fn alike_processes_share_one_who_and_a_new_user_name_gets_its_own() {
    let mut cache = IdentityCache::new(REFRESH);
    let t = Instant::now();
    let a = cache.fill(100, 1, (Some(1000), "python", ArcStr::from("alice")), POD, t);
    let b = cache.fill(101, 1, (Some(1000), "python", ArcStr::from("alice")), POD, t);
    assert!(Arc::ptr_eq(&a.0, &b.0), "one Who for processes alike");
    assert_eq!((a.0.user.as_str(), a.0.uid), ("alice", Some(1000)));
    // passwd renamed uid 1000: the first process read after is shared
    // under the new name, and the next one finds that.
    let a2 = cache.renamed(100, &a.0, ArcStr::from("alicia"));
    let b2 = cache.renamed(101, &b.0, ArcStr::from("alicia"));
    assert_eq!(a2.user.as_str(), "alicia");
    assert!(Arc::ptr_eq(&a2, &b2) && !Arc::ptr_eq(&a2, &a.0));
    assert_eq!((a2.comm.as_str(), &a2.placement), ("python", &a.0.placement));
    // Cached under its new name: a hit hands it out.
    let hit = cache.hit(100, 1, "python", t).map(|id| id.0);
    assert!(hit.is_some_and(|w| Arc::ptr_eq(&w, &a2)));
    // Not the entry's identity (a stale copy): renamed for that read only.
    let stray = cache.renamed(100, &a.0, ArcStr::from("al"));
    assert_eq!(stray.user.as_str(), "al");
    assert!(cache.hit(100, 1, "python", t).is_some_and(|id| id.0.user == "alicia"));
}
