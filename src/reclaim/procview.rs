//! [`ProcView`]: what reclaim needs to know about one live PID, read from a
//! `/proc` tree just before each signal.
//!
//! Owns: reading `stat`, `status` and the start of `cmdline`, and parsing
//! them. Must not: signal, cache (a stale view is exactly what the re-check
//! exists to avoid) or read more than a few KiB per process.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// `PF_KTHREAD` in the flags field (9) of stat (include/linux/sched.h): the
/// kernel's own answer to "is this a kernel thread".
const PF_KTHREAD: u64 = 0x0020_0000;

/// kthreadd: the parent of every kernel thread.
const KTHREADD_PID: u32 = 2;

/// ESRCH: what reading a reaped task's open proc file returns.
const ESRCH: i32 = 3;

/// stat and status are a few hundred bytes; anything larger is not procfs.
const SMALL_FILE_MAX: u64 = 64 * 1024;

/// Enough of cmdline for argv[0] (PATH_MAX).
const ARGV0_MAX: u64 = 4096;

/// One process as `/proc` shows it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcView {
    pub pid: u32,
    pub ppid: u32,
    /// The state letter of stat field 3 ('R', 'S', 'D', 'Z', ...).
    pub state: char,
    /// stat field 9.
    pub flags: u64,
    /// stat field 22: clock ticks after boot; with the pid, the exact identity.
    pub start_ticks: u64,
    /// Real uid (first number of `Uid:` in status).
    pub uid: u32,
    pub comm: String,
    /// argv[0]; `None` when cmdline is empty (kernel threads, exiting tasks).
    pub argv0: Option<String>,
}

impl ProcView {
    /// Exited but not reaped, or being torn down: nothing left to signal.
    pub fn is_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// A kernel thread, by flag, by parent, or by having no command line.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0 || self.pid == KTHREADD_PID || self.ppid == KTHREADD_PID || self.argv0.is_none()
    }

    /// The basename of argv[0], also cut at the first space or ':' because
    /// daemons rewrite argv[0] into a status ("sshd: alice [priv]").
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
pub fn read_view(proc_root: &Path, pid: u32) -> Result<ProcView, ViewError> {
    let dir = proc_root.join(pid.to_string());
    let stat = read_limited(&dir.join("stat"), SMALL_FILE_MAX).map_err(|e| io_error(e, "stat"))?;
    let stat = parse_stat(&String::from_utf8_lossy(&stat))?;
    let status = read_limited(&dir.join("status"), SMALL_FILE_MAX).map_err(|e| io_error(e, "status"))?;
    let uid = parse_status_uid(&String::from_utf8_lossy(&status))
        .ok_or_else(|| ViewError::Unreadable(format!("{pid}/status has no Uid line")))?;
    // An exiting task may already have lost its mm; treat as empty.
    let cmdline = read_limited(&dir.join("cmdline"), ARGV0_MAX).unwrap_or_default();
    let argv0 = cmdline
        .split(|&b| b == 0)
        .next()
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned());
    Ok(ProcView {
        pid,
        ppid: stat.ppid,
        state: stat.state,
        flags: stat.flags,
        start_ticks: stat.start_ticks,
        uid,
        comm: stat.comm,
        argv0,
    })
}

fn io_error(e: io::Error, what: &str) -> ViewError {
    if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(ESRCH) {
        ViewError::Gone
    } else {
        ViewError::Unreadable(format!("cannot read {what}: {e}"))
    }
}

fn read_limited(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The stat fields reclaim uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatFields {
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    pub flags: u64,
    pub start_ticks: u64,
}

/// Parses `pid (comm) S ppid ... flags ... starttime ...`. comm may hold
/// spaces and parens, so it runs to the LAST ')'. An empty file is a task
/// being torn down: `Gone`.
pub fn parse_stat(text: &str) -> Result<StatFields, ViewError> {
    let text = text.trim_end_matches(['\n', '\0']);
    if text.trim().is_empty() {
        return Err(ViewError::Gone);
    }
    let bad = |why: &str| ViewError::Unreadable(format!("malformed stat: {why}"));
    let open = text.find('(').ok_or_else(|| bad("no '('"))?;
    let close = text.rfind(')').filter(|&c| c > open).ok_or_else(|| bad("no ')'"))?;
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    // Indices after comm: field N is rest[N - 3].
    let field = |n: usize| rest.get(n - 3).copied().ok_or_else(|| bad("too few fields"));
    let mut state = field(3)?.chars();
    let (Some(state), None) = (state.next(), state.next()) else {
        return Err(bad("state is not one letter"));
    };
    let num = |n: usize| field(n).and_then(|f| f.parse::<u64>().map_err(|_| bad("field is not a number")));
    Ok(StatFields {
        comm: text[open + 1..close].to_string(),
        state,
        ppid: u32::try_from(num(4)?).map_err(|_| bad("ppid out of range"))?,
        flags: num(9)?,
        start_ticks: num(22)?,
    })
}

/// Real uid: the first number of the `Uid:` line.
pub fn parse_status_uid(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_ascii_whitespace().next())
        .and_then(|uid| uid.parse().ok())
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
    fn parses_fields_even_with_hostile_comm() {
        for comm in ["python3", "a) R 1 2 (b", ")", ""] {
            let s = parse_stat(&line(comm, "S", 4_194_560)).expect(comm);
            assert_eq!((s.comm.as_str(), s.state, s.ppid), (comm, 'S', 77));
            assert_eq!((s.flags, s.start_ticks), (4_194_560, 123_456));
        }
    }

    #[test]
    fn empty_is_gone_and_garbage_is_unreadable() {
        assert!(matches!(parse_stat(""), Err(ViewError::Gone)));
        assert!(matches!(parse_stat("\n\0"), Err(ViewError::Gone)));
        for bad in [
            "4242 python3 S 1",
            "4242 (x) SS 1 2",
            "4242 (x) S 1 2 3",
            "4242 (x) S -1 2 3 4 5 6 7",
        ] {
            assert!(matches!(parse_stat(bad), Err(ViewError::Unreadable(_))), "{bad}");
        }
    }

    #[test]
    fn uid_is_the_real_uid() {
        assert_eq!(parse_status_uid("Name:\tx\nUid:\t1001\t0\t0\t0\n"), Some(1001));
        assert_eq!(parse_status_uid("Name:\tx\n"), None);
    }

    #[test]
    fn reads_a_fixture_tree_and_reports_missing_pids_as_gone() {
        let dir = std::env::temp_dir().join(format!("gpumemd-reclaim-procview-{}", std::process::id()));
        let pid_dir = dir.join("4242");
        std::fs::create_dir_all(&pid_dir).expect("mkdir");
        std::fs::write(pid_dir.join("stat"), line("python3", "R", 0)).expect("stat");
        std::fs::write(pid_dir.join("status"), "Uid:\t1001\t1001\t1001\t1001\n").expect("status");
        std::fs::write(pid_dir.join("cmdline"), b"/usr/bin/python3\0train.py\0").expect("cmdline");
        let v = read_view(&dir, 4242).expect("view");
        assert_eq!(
            (v.uid, v.argv0.as_deref(), v.state),
            (1001, Some("/usr/bin/python3"), 'R')
        );
        assert!(!v.is_kernel_thread() && !v.is_exited());
        assert_eq!(v.argv0_names(), ["python3"]);
        std::fs::write(pid_dir.join("cmdline"), b"").expect("cmdline");
        assert!(
            read_view(&dir, 4242).expect("view").is_kernel_thread(),
            "no argv: kernel thread"
        );
        assert!(matches!(read_view(&dir, 4243), Err(ViewError::Gone)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn reads_this_process() {
        let me = read_view(Path::new("/proc"), std::process::id()).expect("own view");
        assert!(me.argv0.is_some() && !me.is_kernel_thread() && !me.is_exited());
    }
}
