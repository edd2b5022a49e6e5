//! ProcFs against the real /proc of the machine running the tests: only
//! what holds on any Linux host (this process, pid 1, a pid that cannot
//! exist).

use std::time::{SystemTime, UNIX_EPOCH};

use super::super::{ProcFs, ProcState, ReadOptions};
use super::procfs::with_cmdline;

#[test]
fn real_proc_self() {
    let mut procfs = ProcFs::new("/proc");
    let id = procfs
        .read(std::process::id(), &with_cmdline(4096))
        .expect("own process");
    let exe = std::env::current_exe().expect("exe");
    let name = exe.file_name().expect("name").to_string_lossy().into_owned();
    // comm is the first 15 bytes of the executable's name.
    assert!(
        name.starts_with(id.comm.as_str()) && !id.comm.is_empty(),
        "{} vs {name}",
        id.comm
    );
    assert!(
        matches!(id.state, ProcState::Running | ProcState::Sleeping),
        "{:?}",
        id.state
    );
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("meta"));
    assert_eq!(id.uid, Some(uid));
    if uid == 0 {
        assert_eq!(id.user, "root");
    }
    assert!(!id.user.is_empty());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let started = id.start_time.expect("start time");
    // btime is whole seconds and drifts: allow a few seconds into the future.
    assert!(
        started <= now + 5.0 && started > now - 3600.0,
        "start {started}, now {now}"
    );
    assert!(id.cmdline.expect("cmdline").contains(&name));
}

#[test]
fn real_proc_pid_1_and_a_missing_pid() {
    let mut procfs = ProcFs::new("/proc");
    let init = procfs.read(1, &ReadOptions::default()).expect("pid 1");
    assert_eq!(init.pid, 1);
    assert!(!init.comm.is_empty());
    // Above any pid_max (at most 2^22).
    let err = procfs.read(4_000_000_000, &ReadOptions::default()).unwrap_err();
    assert!(err.is_gone(), "{err:?}");
}
