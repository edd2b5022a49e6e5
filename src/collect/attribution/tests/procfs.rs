//! ProcFs against fixture trees and the real /proc.

use super::super::{CgroupInfo, ProcError, ProcState, ReadOptions, Runtime};
use super::{BTIME, FakeProc, Proc};

const ID: &str = "3f1c9a7be20d44c8a5f6e1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f50";

pub(super) fn with_cmdline(max: usize) -> ReadOptions {
    ReadOptions {
        cmdline: true,
        cmdline_max_bytes: max,
    }
}

#[test]
fn reads_a_live_process() {
    let fake = FakeProc::new();
    let cgroup = format!("0::/system.slice/docker-{ID}.scope\n");
    fake.add(
        4242,
        &Proc {
            comm: "my (weird) prog)",
            cgroup: Some(&cgroup),
            ..Proc::default()
        },
    );
    let id = fake.procfs().read(4242, &ReadOptions::default()).expect("live");
    assert_eq!(id.pid, 4242);
    assert_eq!(id.ppid, 1);
    assert_eq!(id.who.comm, "my (weird) prog)");
    assert_eq!(id.who.uid, Some(1000));
    assert_eq!(id.who.user, "alice");
    assert_eq!(id.state, ProcState::Sleeping);
    assert_eq!(id.start_ticks, 12_345);
    assert_eq!(id.start_time, Some(BTIME as f64 + 123.45));
    assert_eq!(id.cmdline, None, "cmdline is read only when asked");
    assert_eq!(id.cgroup.container_id.as_deref(), Some(ID));
    assert_eq!(id.cgroup.container_runtime, Some(Runtime::Docker));
}

#[test]
fn cmdline_when_asked_is_redacted_and_truncated() {
    let fake = FakeProc::new();
    let raw = b"python3\0train.py\0--token\0hf_abc\0--epochs\x00100\0";
    fake.add(
        10,
        &Proc {
            cmdline: Some(raw),
            ..Proc::default()
        },
    );
    let mut procfs = fake.procfs();
    let full = procfs.read(10, &with_cmdline(200)).expect("read");
    assert_eq!(
        full.cmdline.as_deref(),
        Some("python3 train.py --token <redacted> --epochs 100")
    );
    // 20 bytes including the 3-byte "…".
    let short = procfs.read(10, &with_cmdline(20)).expect("read");
    assert_eq!(short.cmdline.as_deref(), Some("python3 train.py …"));
}

#[test]
fn zombie_without_cmdline_or_cgroup_is_ok() {
    let fake = FakeProc::new();
    fake.add(
        66,
        &Proc {
            comm: "python",
            state: 'Z',
            cgroup: None,
            cmdline: Some(b""),
            ..Proc::default()
        },
    );
    let id = fake.procfs().read(66, &with_cmdline(128)).expect("zombie");
    assert_eq!(id.state, ProcState::Zombie);
    assert!(id.state.is_exited() && id.state.is_unkillable());
    assert_eq!(id.state.as_str(), "zombie");
    assert_eq!(id.cmdline.as_deref(), Some(""));
    assert_eq!(*id.cgroup, CgroupInfo::default());

    // Even with its cmdline file gone too.
    std::fs::remove_file(fake.path("66/cmdline")).expect("rm");
    let id = fake.procfs().read(66, &with_cmdline(128)).expect("zombie");
    assert_eq!(id.cmdline, None);
}

#[test]
fn missing_process_is_gone() {
    let fake = FakeProc::new();
    let err = fake.procfs().read(31337, &ReadOptions::default()).unwrap_err();
    assert!(matches!(err, ProcError::Gone { pid: 31337 }), "{err:?}");
    assert!(err.is_gone());
}

#[test]
fn empty_stat_is_gone() {
    let fake = FakeProc::new();
    fake.add(5, &Proc::default());
    fake.write("5/stat", "");
    let err = fake.procfs().read(5, &ReadOptions::default()).unwrap_err();
    assert!(err.is_gone(), "{err:?}");
}

#[test]
fn vanishing_between_reads_is_gone() {
    // stat was there, status or cgroup no longer: exited mid-read.
    let fake = FakeProc::new();
    fake.add(5, &Proc::default());
    std::fs::remove_file(fake.path("5/status")).expect("rm");
    assert!(fake.procfs().read(5, &ReadOptions::default()).unwrap_err().is_gone());

    fake.add(
        6,
        &Proc {
            cgroup: None,
            ..Proc::default()
        },
    );
    assert!(fake.procfs().read(6, &ReadOptions::default()).unwrap_err().is_gone());
}

#[test]
fn malformed_stat_is_an_error() {
    let fake = FakeProc::new();
    fake.add(5, &Proc::default());
    fake.write("5/stat", "5 (x) S 1 2\n");
    let err = fake.procfs().read(5, &ReadOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            ProcError::Malformed {
                pid: 5,
                what: "stat",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("starttime"), "{err}");
}

#[test]
fn unreadable_cgroup_and_cmdline_leave_parts_empty() {
    // Tests run as root here, where chmod 000 does not deny a read; a
    // directory in place of the file gives a non-"gone" read error on any
    // account, which takes the same path as permission denied.
    let fake = FakeProc::new();
    fake.add(
        9,
        &Proc {
            cgroup: None,
            cmdline: None,
            ..Proc::default()
        },
    );
    std::fs::create_dir_all(fake.path("9/cgroup")).expect("mkdir");
    std::fs::create_dir_all(fake.path("9/cmdline")).expect("mkdir");
    let id = fake.procfs().read(9, &with_cmdline(128)).expect("still ok");
    assert_eq!(*id.cgroup, CgroupInfo::default());
    assert_eq!(id.cmdline, None);
    assert_eq!(id.who.user, "alice");
}

#[test]
fn permission_denied_cgroup_is_not_fatal() {
    use std::os::unix::fs::PermissionsExt;
    let fake = FakeProc::new();
    fake.add(9, &Proc::default());
    let path = fake.path("9/cgroup");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    // As root the read succeeds anyway; either way the read must be Ok.
    let id = fake.procfs().read(9, &ReadOptions::default()).expect("ok");
    if std::fs::read(&path).is_err() {
        assert_eq!(*id.cgroup, CgroupInfo::default());
    }
}

#[test]
fn pid_reuse_gives_a_different_start_time() {
    let (first, second) = (FakeProc::new(), FakeProc::new());
    first.add(
        700,
        &Proc {
            start_ticks: 1_000,
            comm: "old",
            ..Proc::default()
        },
    );
    second.add(
        700,
        &Proc {
            start_ticks: 90_000,
            comm: "new",
            ..Proc::default()
        },
    );
    let a = first.procfs().read(700, &ReadOptions::default()).expect("first");
    let b = second.procfs().read(700, &ReadOptions::default()).expect("second");
    assert_eq!(a.pid, b.pid);
    assert_ne!(a.start_ticks, b.start_ticks);
    assert_eq!(a.start_time, Some(BTIME as f64 + 10.0));
    assert_eq!(b.start_time, Some(BTIME as f64 + 900.0));

    // One ProcFs, the tree changing under it: nothing stale is served.
    let mut procfs = first.procfs();
    procfs.read(700, &ReadOptions::default()).expect("before");
    first.add(
        700,
        &Proc {
            start_ticks: 5_000,
            comm: "reused",
            cgroup: Some("0::/system.slice/x.service\n"),
            ..Proc::default()
        },
    );
    let c = procfs.read(700, &ReadOptions::default()).expect("after");
    assert_eq!((c.who.comm.as_str(), c.start_ticks), ("reused", 5_000));
    assert_eq!(c.cgroup.unit.as_deref(), Some("x.service"));
}

#[test]
fn users_from_fixture_passwd() {
    let fake = FakeProc::new();
    fake.add(
        1,
        &Proc {
            uid: 0,
            ..Proc::default()
        },
    );
    fake.add(
        2,
        &Proc {
            uid: 4242,
            ..Proc::default()
        },
    );
    fake.add(3, &Proc::default());
    fake.write("3/status", "Name:\tx\nState:\tS (sleeping)\n");
    let mut procfs = fake.procfs();
    let opts = ReadOptions::default();
    assert_eq!(procfs.read(1, &opts).expect("root").who.user, "root");
    assert_eq!(procfs.read(2, &opts).expect("unknown").who.user, "4242");
    let no_uid = procfs.read(3, &opts).expect("no Uid line");
    assert_eq!((no_uid.who.uid, no_uid.who.user.as_str()), (None, ""));

    // passwd gains the user: picked up without a new ProcFs.
    std::fs::write(fake.passwd(), "root:x:0:0::/:/bin/sh\nbob:x:4242:1::/:/bin/sh\n").expect("w");
    assert_eq!(procfs.read(2, &opts).expect("known now").who.user, "bob");
}

#[test]
fn boot_time_is_cached_and_errors_are_typed() {
    let fake = FakeProc::new();
    let mut procfs = fake.procfs();
    assert_eq!(procfs.boot_time().expect("btime"), BTIME as f64);
    fake.write("stat", "btime 5\n");
    assert_eq!(procfs.boot_time().expect("cached"), BTIME as f64);
    assert_eq!(fake.procfs().boot_time().expect("fresh"), 5.0);

    fake.write("stat", "cpu 1 2\n");
    let err = fake.procfs().boot_time().unwrap_err();
    assert!(matches!(err, ProcError::Malformed { pid: 0, .. }), "{err:?}");
    std::fs::remove_file(fake.path("stat")).expect("rm");
    let err = fake.procfs().boot_time().unwrap_err();
    assert!(matches!(err, ProcError::Unreadable { pid: 0, .. }), "{err:?}");

    // No btime: the process still reads, without a start time.
    fake.add(8, &Proc::default());
    let id = fake.procfs().read(8, &ReadOptions::default()).expect("ok");
    assert_eq!((id.start_ticks, id.start_time), (12_345, None));
}

#[test]
fn clock_ticks_setting() {
    let fake = FakeProc::new();
    fake.add(
        8,
        &Proc {
            start_ticks: 500,
            ..Proc::default()
        },
    );
    let id = fake
        .procfs()
        .with_clock_ticks(250)
        .read(8, &ReadOptions::default())
        .expect("ok");
    assert_eq!(id.start_time, Some(BTIME as f64 + 2.0));
}

#[test]
fn huge_cmdline_drops_the_partial_last_arg() {
    let fake = FakeProc::new();
    let mut raw = b"app\0--url\0".to_vec();
    raw.extend(std::iter::repeat_n(b'a', 256 * 1024 - raw.len() - 12));
    raw.extend_from_slice(b"\0https://u:secretpassword@h\0");
    fake.add(
        11,
        &Proc {
            cmdline: Some(&raw),
            ..Proc::default()
        },
    );
    let id = fake.procfs().read(11, &with_cmdline(usize::MAX)).expect("ok");
    let line = id.cmdline.expect("cmdline");
    assert!(!line.contains("secret"), "partial URL leaked");
    assert!(line.starts_with("app --url aaa"));
}

#[test]
fn uid_and_cgroup_are_reused_until_refresh_or_a_new_start_time() {
    let fake = FakeProc::new();
    fake.add(20, &Proc::default());
    let opts = ReadOptions::default();
    let mut procfs = fake.procfs();
    let first = procfs.read(20, &opts).expect("read");
    assert_eq!(first.who.uid, Some(1000));

    // The same process moves cgroup and changes uid: within the refresh
    // period the cached answer stands (status and cgroup are not re-read).
    fake.add(
        20,
        &Proc {
            uid: 0,
            cgroup: Some("0::/system.slice/other.service\n"),
            ..Proc::default()
        },
    );
    let cached = procfs.read(20, &opts).expect("read");
    assert_eq!((cached.who.uid, &cached.cgroup), (first.who.uid, &first.cgroup));
    assert_eq!(procfs.cached_identities(), 1);

    // A new process under the same PID (another start time) is read at once.
    fake.add(
        20,
        &Proc {
            uid: 0,
            start_ticks: 99_999,
            cgroup: Some("0::/system.slice/other.service\n"),
            ..Proc::default()
        },
    );
    let reused = procfs.read(20, &opts).expect("read");
    assert_eq!((reused.who.uid, reused.who.user.as_str()), (Some(0), "root"));
    assert_ne!(reused.cgroup, first.cgroup);

    // With no refresh period every read sees the files as they are now.
    let mut fresh = fake.procfs().with_identity_refresh(std::time::Duration::ZERO);
    assert_eq!(fresh.read(20, &opts).expect("read").who.uid, Some(0));
    fake.add(
        20,
        &Proc {
            uid: 1000,
            start_ticks: 99_999,
            ..Proc::default()
        },
    );
    assert_eq!(fresh.read(20, &opts).expect("read").who.uid, Some(1000));
}
