//! [`ProcView`]: what reclaim needs to know about one live PID, read just
//! before each signal through attribution's one `/proc` reader
//! ([`read_task`]), plus reclaim's questions about it.
//!
//! Owns: turning a [`Task`] into the view policy checks, and the kernel
//! thread test. Must not: parse `/proc` files (attribution does), signal,
//! or cache (a stale view is exactly what the re-check exists to avoid).

use std::path::Path;

use crate::collect::attribution::{DirTree, ProcError, ProcState, ProcTree, Task, read_task};

/// `PF_KTHREAD` in the flags field (9) of stat (include/linux/sched.h): the
/// kernel's own answer to "is this a kernel thread".
const PF_KTHREAD: u64 = 0x0020_0000;

/// kthreadd: the parent of every kernel thread.
const KTHREADD_PID: u32 = 2;

/// One process as `/proc` shows it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcView {
    pub pid: u32,
    pub ppid: u32,
    pub state: ProcState,
    /// stat field 9.
    pub flags: u64,
    /// stat field 22: clock ticks after boot; with the pid, the exact identity.
    pub start_ticks: u64,
    /// Real uid (first number of `Uid:` in status).
    pub uid: u32,
    pub comm: String,
    /// `argv[0]`; `None` when cmdline is empty (kernel threads, exiting tasks).
    pub argv0: Option<String>,
}

impl ProcView {
    /// Exited but not reaped, or being torn down: nothing left to signal.
    pub fn is_exited(&self) -> bool {
        self.state.is_exited()
    }

    /// A kernel thread, by flag, by parent, or by having no command line.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0 || self.pid == KTHREADD_PID || self.ppid == KTHREADD_PID || self.argv0.is_none()
    }

    /// The basename of `argv[0]`, also cut at the first space or ':' because
    /// daemons rewrite `argv[0]` into a status (`sshd: alice [priv]`).
    pub fn argv0_names(&self) -> Vec<&str> {
        let Some(argv0) = self.argv0.as_deref() else {
            return Vec::new();
        };
        let whole = argv0.rsplit('/').next().unwrap_or(argv0);
        let head = argv0.split([' ', ':']).next().unwrap_or(argv0);
        let head = head.rsplit('/').next().unwrap_or(head);
        if head == whole { vec![whole] } else { vec![whole, head] }
    }
}

/// Why a view could not be had.
#[derive(Debug)]
pub enum ViewError {
    /// No such process (any more).
    Gone,
    /// It exists but could not be read or parsed; the message says which file.
    Unreadable(String),
}

/// Reads `<proc_root>/<pid>/{stat,status,cmdline}`.
///
/// # Errors
/// `Gone` for a process that does not exist; `Unreadable` when stat or
/// status cannot be read or parsed, or status has no real uid.
pub fn read_view(proc_root: &Path, pid: u32) -> Result<ProcView, ViewError> {
    // passwd is never read: reclaim decides by uid.
    read_view_in(&DirTree::new(proc_root, "/etc/passwd"), pid)
}

/// [`read_view`] from any tree (the demo's simulated `/proc`).
///
/// # Errors
/// As [`read_view`].
pub fn read_view_in(tree: &dyn ProcTree, pid: u32) -> Result<ProcView, ViewError> {
    let t: Task = read_task(tree, pid).map_err(|e| match e {
        ProcError::Gone { .. } => ViewError::Gone,
        other => ViewError::Unreadable(other.to_string()),
    })?;
    let uid = t
        .uid
        .ok_or_else(|| ViewError::Unreadable(format!("{pid}/status has no Uid line")))?;
    Ok(ProcView {
        pid,
        ppid: t.ppid,
        state: t.state,
        flags: t.flags,
        start_ticks: t.start_ticks,
        uid,
        comm: t.comm,
        argv0: t.argv0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(comm: &str, state: &str, flags: u64) -> String {
        format!(
            "4242 ({comm}) {state} 77 4242 4242 0 -1 {flags} 100 0 0 0 5 3 0 0 \
             20 0 12 0 123456 1000000 500 18446744073709551615 1 1 0 0 0 0 0\n"
        )
    }

    #[test]
    fn reads_a_fixture_tree_and_reports_missing_pids_as_gone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pid_dir = dir.path().join("4242");
        std::fs::create_dir_all(&pid_dir).expect("mkdir");
        std::fs::write(pid_dir.join("stat"), line("a) R 1 2 (b", "R", 0x0020_0040)).expect("stat");
        std::fs::write(pid_dir.join("status"), "Uid:\t1001\t1001\t1001\t1001\n").expect("status");
        std::fs::write(pid_dir.join("cmdline"), b"/usr/bin/python3\0train.py\0").expect("cmdline");
        let v = read_view(dir.path(), 4242).expect("view");
        assert_eq!(
            (v.uid, v.argv0.as_deref(), v.state, v.ppid, v.comm.as_str()),
            (1001, Some("/usr/bin/python3"), ProcState::Running, 77, "a) R 1 2 (b")
        );
        assert!(v.is_kernel_thread(), "PF_KTHREAD set in flags");
        std::fs::write(pid_dir.join("stat"), line("python3", "Z", 0)).expect("stat");
        let v = read_view(dir.path(), 4242).expect("view");
        assert!(!v.is_kernel_thread() && v.is_exited());
        assert_eq!(v.argv0_names(), ["python3"]);
        std::fs::write(pid_dir.join("cmdline"), b"").expect("cmdline");
        assert!(
            read_view(dir.path(), 4242).expect("view").is_kernel_thread(),
            "no argv: kernel thread"
        );
        std::fs::write(pid_dir.join("status"), "Name:\tx\n").expect("status");
        assert!(matches!(read_view(dir.path(), 4242), Err(ViewError::Unreadable(_))));
        std::fs::write(pid_dir.join("stat"), "").expect("stat");
        assert!(matches!(read_view(dir.path(), 4242), Err(ViewError::Gone)));
        assert!(matches!(read_view(dir.path(), 4243), Err(ViewError::Gone)));
    }

    #[test]
    fn reads_this_process() {
        let me = read_view(Path::new("/proc"), std::process::id()).expect("own view");
        assert!(me.argv0.is_some() && !me.is_kernel_thread() && !me.is_exited());
    }
}
