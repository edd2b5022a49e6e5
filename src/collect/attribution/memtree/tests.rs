//! The tree's own bookkeeping: `stat` written without `fmt` is the text the
//! kernel format gives, and a removal keeps every other PID readable.

use super::*;

fn read(tree: &MemTree, pid: u32, what: PidFile) -> Option<String> {
    let mut buf = Vec::new();
    tree.read(TreeFile::Pid(pid, what), 1 << 16, &mut buf).ok()?;
    String::from_utf8(buf).ok()
}

fn proc(pid: u32, comm: &str, state: ProcState, start_ticks: u64) -> MemProcess {
    MemProcess {
        pid,
        ppid: 1,
        comm: comm.into(),
        state,
        start_ticks,
        uid: 1000,
        cgroup: "/slurm/job_9".into(),
        cmdline: MemIdentity::nul_args("python x.py"),
    }
}

#[test]
fn stat_is_what_the_format_string_gave() {
    let cases = [
        (1, "a", ProcState::Running, 0),
        (4_194_303, "a-very-long-process-name", ProcState::Zombie, u64::MAX),
        (100_000, "wörker-ü", ProcState::Other('W'), 1_234_567),
        (42, "", ProcState::Stuck, 10),
    ];
    let tree = MemTree::new(0);
    for (pid, name, state, start) in cases {
        tree.update(|w| w.insert(proc(pid, name, state, start)));
        // The kernel's layout, as the tree printed it with `format!` before.
        let want = format!(
            "{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0 \
             18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
            comm = comm(name),
            state = state.code(),
            ppid = 1,
        );
        assert_eq!(read(&tree, pid, PidFile::Stat).as_deref(), Some(want.as_str()));
    }
}

#[test]
fn removing_a_pid_keeps_the_others() {
    let tree = MemTree::new(0);
    tree.update(|w| {
        for pid in 1..=5 {
            w.insert(proc(pid, &format!("p{pid}"), ProcState::Sleeping, u64::from(pid)));
        }
        w.remove(2);
        w.remove(9);
        w.insert(proc(4, "again", ProcState::Running, 40));
    });
    assert_eq!(tree.len(), 4);
    assert_eq!(read(&tree, 2, PidFile::Stat), None);
    for (pid, name) in [(1, "p1"), (3, "p3"), (4, "again"), (5, "p5")] {
        let stat = read(&tree, pid, PidFile::Stat).unwrap_or_default();
        assert!(stat.starts_with(&format!("{pid} ({name}) ")), "{stat}");
    }
}
