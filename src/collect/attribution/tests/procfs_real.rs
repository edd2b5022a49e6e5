//! ProcFs against the real /proc of the machine running the tests: only
//! what holds on any Linux host (this process, pid 1, a pid that cannot
//! exist).

use std::time::{SystemTime, UNIX_EPOCH};

use super::super::{ProcFs, ProcState, ReadOptions};
use super::procfs::with_cmdline;
use crate::tests::wait_true;

#[test]
fn real_proc_self() {
    let mut procfs = ProcFs::new("/proc", "/etc/passwd");
    let id = procfs
        .read(std::process::id(), &with_cmdline(4096))
        .expect("own process");
    let exe = std::env::current_exe().expect("exe");
    let name = exe.file_name().expect("name").to_string_lossy().into_owned();
    // comm is the first 15 bytes of the executable's name.
    assert!(
        name.starts_with(id.who.comm.as_str()) && !id.who.comm.is_empty(),
        "{} vs {name}",
        id.who.comm
    );
    assert!(
        matches!(id.state, ProcState::Running | ProcState::Sleeping),
        "{:?}",
        id.state
    );
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("meta"));
    assert_eq!(id.who.uid, Some(uid));
    if uid == 0 {
        assert_eq!(id.who.user, "root");
    }
    assert!(!id.who.user.is_empty());
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
    let mut procfs = ProcFs::new("/proc", "/etc/passwd");
    let init = procfs.read(1, &ReadOptions::default()).expect("pid 1");
    assert_eq!(init.pid, 1);
    assert!(!init.who.comm.is_empty());
    // Above any pid_max (at most 2^22).
    let err = procfs.read(4_000_000_000, &ReadOptions::default()).unwrap_err();
    assert!(err.is_gone(), "{err:?}");
}

/// On the host's own /proc a live child reads the same at each poll; once
/// it has exited the next poll sees the zombie; reaped, it is gone.
#[test]
fn real_proc_an_exited_child_is_a_zombie_at_the_next_poll() {
    use std::time::{Duration, Instant};
    let mut procfs = ProcFs::new("/proc", "/etc/passwd");
    let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
    let pid = child.id();
    let opts = ReadOptions::default();
    let start = Instant::now();
    // Each poll has its own clock value.
    let mut poll = 0u32;
    let mut read = |procfs: &mut ProcFs| {
        poll += 1;
        procfs.read_at(pid, &opts, start + Duration::from_millis(u64::from(poll)))
    };
    // Asleep in `sleep` first: while it execs it has another comm.
    wait_true("asleep in sleep", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains("(sleep) S "))
    });
    let first = read(&mut procfs).expect("live child");
    let again = read(&mut procfs).expect("still live");
    assert_eq!(again.start_ticks, first.start_ticks);
    assert_eq!(again.who.comm.as_str(), "sleep");
    child.kill().expect("kill");
    // Not reaped: a zombie once the kernel says so in stat itself.
    wait_true("a zombie", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    });
    let zombie = read(&mut procfs).expect("a zombie is read, not gone");
    assert_eq!(zombie.state, ProcState::Zombie);
    let _ = child.wait();
    let err = read(&mut procfs).expect_err("reaped");
    assert!(err.is_gone(), "{err:?}");
}
