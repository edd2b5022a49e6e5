//! Table tests for the holder arithmetic, late-release tracking and idle time.

use super::*;

fn proc(pid: u32, bytes: Option<u64>, holder: Holder) -> Process {
    Process {
        pid,
        used_bytes: bytes,
        holder: Some(holder),
        start_time: Some(100.0),
        ..Process::default()
    }
}

#[test]
fn holder_split_adds_up_to_used() {
    use Holder::*;
    type Case<'a> = (u64, &'a [(Option<u64>, Holder)], Holders);
    let cases: &[Case] = &[
        (
            0,
            &[],
            Holders {
                live: 0,
                zombie: 0,
                exited: 0,
                unattributed: 0,
            },
        ),
        (
            100,
            &[],
            Holders {
                live: 0,
                zombie: 0,
                exited: 0,
                unattributed: 100,
            },
        ),
        (
            100,
            &[(Some(50), Live), (Some(20), Zombie), (Some(10), Exited)],
            Holders {
                live: 50,
                zombie: 20,
                exited: 10,
                unattributed: 20,
            },
        ),
        // Unavailable memory is part of unattributed, not 0 of a holder.
        (
            100,
            &[(None, Live), (Some(30), Live)],
            Holders {
                live: 30,
                zombie: 0,
                exited: 0,
                unattributed: 70,
            },
        ),
        // Listed more than used: trimmed from live first.
        (
            100,
            &[(Some(90), Live), (Some(30), Exited)],
            Holders {
                live: 70,
                zombie: 0,
                exited: 30,
                unattributed: 0,
            },
        ),
        (
            10,
            &[(Some(5), Live), (Some(30), Zombie)],
            Holders {
                live: 0,
                zombie: 10,
                exited: 0,
                unattributed: 0,
            },
        ),
        // The largest figure a process can hold: u64::MAX is NVML's "not
        // available", absent in a `Process` (snapshot/opt.rs).
        (
            u64::MAX,
            &[(Some(u64::MAX - 1), Live), (Some(u64::MAX - 1), Zombie)],
            Holders {
                live: 1,
                zombie: u64::MAX - 1,
                exited: 0,
                unattributed: 0,
            },
        ),
    ];
    for (used, procs, want) in cases {
        let ps: Vec<Process> = procs
            .iter()
            .enumerate()
            .map(|(i, (b, h))| proc(i as u32 + 1, *b, *h))
            .collect();
        let got = holder_split(*used, &ps);
        assert_eq!(got, *want, "used {used}, {procs:?}");
        let sum = got.live as u128 + got.zombie as u128 + got.exited as u128 + got.unattributed as u128;
        assert_eq!(sum, *used as u128);
    }
}

fn holders(unattributed: u64) -> Holders {
    Holders {
        unattributed,
        ..Holders::default()
    }
}

#[test]
fn late_release_reported_after_the_delay_and_cleared_on_release() {
    let mut lr = LateRelease::default();
    let a = proc(7, Some(1000), Holder::Live);
    assert!(
        lr.observe("g", 0.0, 10.0, std::slice::from_ref(&a), &holders(5))
            .is_empty()
    );
    // Leaves the list; its 1000 bytes now show as unattributed.
    assert!(
        lr.observe("g", 1.0, 10.0, &[], &holders(1005)).is_empty(),
        "not before the delay"
    );
    let r = lr.observe("g", 11.0, 10.0, &[], &holders(1005));
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].pid, r[0].bytes, r[0].since), (7, 1000, 1.0));
    // Released: unattributed back to its old level.
    assert!(lr.observe("g", 12.0, 10.0, &[], &holders(5)).is_empty());
    assert!(
        lr.observe("g", 30.0, 10.0, &[], &holders(1005)).is_empty(),
        "a released departure never comes back"
    );
}

#[test]
fn prompt_release_is_never_reported() {
    let mut lr = LateRelease::default();
    let a = proc(7, Some(1000), Holder::Live);
    lr.observe("g", 0.0, 1.0, std::slice::from_ref(&a), &holders(5));
    for t in 1..20 {
        assert!(lr.observe("g", f64::from(t), 1.0, &[], &holders(6)).is_empty());
    }
}

#[test]
fn pid_reuse_is_a_departure() {
    let mut lr = LateRelease::default();
    let a = proc(7, Some(1000), Holder::Live);
    let b = Process {
        start_time: Some(200.0),
        ..a.clone()
    };
    lr.observe("g", 0.0, 0.0, std::slice::from_ref(&a), &holders(0));
    let r = lr.observe("g", 1.0, 0.0, std::slice::from_ref(&b), &holders(1000));
    assert_eq!(r.len(), 1, "the old process with pid 7 left; its memory is still used");
}

#[test]
fn departures_keep_the_list_order() {
    let mut lr = LateRelease::default();
    let ps: Vec<Process> = [(5, 300), (9, 200), (2, 100)]
        .iter()
        .map(|&(pid, b)| proc(pid, Some(b), Holder::Live))
        .collect();
    lr.observe("g", 0.0, 0.0, &ps, &holders(0));
    // All three leave; their 600 bytes stay used.
    let r = lr.observe("g", 1.0, 0.0, &[], &holders(600));
    assert_eq!(r.iter().map(|u| u.pid).collect::<Vec<_>>(), [5, 9, 2]);
}

#[test]
fn a_reordered_list_loses_nobody_and_a_newcomer_keeps_the_others_watched() {
    let mut lr = LateRelease::default();
    let mut ps: Vec<Process> = [(5, 300), (9, 200), (2, 100)]
        .iter()
        .map(|&(pid, b)| proc(pid, Some(b), Holder::Live))
        .collect();
    lr.observe("g", 0.0, 0.0, &ps, &holders(0));
    // The list sorts by size, which changes: the same processes.
    ps.reverse();
    assert!(lr.observe("g", 1.0, 0.0, &ps, &holders(0)).is_empty());
    assert_eq!(lr.sizes(), (1, 0));
    // 9 leaves with its latest bytes while 4 arrives; 5 and 2 stay.
    ps[1] = proc(4, Some(50), Holder::Live);
    ps[0].used_bytes = Some(150);
    let r = lr.observe("g", 2.0, 0.0, &ps, &holders(200));
    assert_eq!(r.iter().map(|u| (u.pid, u.bytes)).collect::<Vec<_>>(), [(9, 200)]);
    // Then everyone leaves, in the order of the list they were last in.
    let r = lr.observe("g", 3.0, 0.0, &[], &holders(600));
    assert_eq!(r.iter().map(|u| u.pid).collect::<Vec<_>>(), [9, 2, 4, 5]);
}
