//! Attribution: who is a PID? Reads a `/proc` tree (the real one or a fixture
//! tree rooted anywhere) and turns one PID into a [`ProcessIdentity`]: comm,
//! user, state, start time, optional redacted cmdline and the workload it
//! belongs to (container, Kubernetes pod, systemd unit, Slurm job) from its
//! cgroup path.
//!
//! Owns: the identity types, `/proc/<pid>/{stat,status,cgroup,cmdline}`
//! parsing, the passwd user cache, cgroup path classification and cmdline
//! secret redaction.
//!
//! It is the crate's one `/proc` reader: reclaim reads its live view of a
//! PID through [`read_task`] too. Files come through a [`ProcTree`]: the
//! real directory ([`DirTree`]) or the simulated fleet's [`MemTree`].
//!
//! Must not: depend on anything else in the crate but the leaf `snapshot`
//! (for its shared string, [`ArcStr`]), call NVML, keep
//! per-process state between polls beyond its caches (identity across PID
//! reuse is `(pid, start_time)`, and how long a process has been in D is
//! the caller's to remember), panic on anything a file can contain, or use
//! NSS (users come from a passwd file only; `CLK_TCK` comes from the
//! kernel's auxiliary vector through rustix).

mod cache;
mod cgroup;
mod files;
mod memtree;
mod nss;
mod procfs;
mod redact;
mod stat;
mod task;
mod tree;
mod users;

use arcstr::ArcStr;

pub use crate::data::snapshot::{Placement, Who};

#[cfg(test)]
mod tests;

pub use cgroup::parse_cgroup;
pub use memtree::{MemIdentity, MemProcess, MemTree, MemWriter, cgroup_path};
pub use nss::{Lookup, NssNames, system_lookup};
pub use procfs::ProcFs;
pub use redact::{format_cmdline, redact_cmdline};
pub use task::{Task, read_task};
// Public for tests/fuzz.rs, which feeds them arbitrary bytes.
pub use stat::{StatError, StatFields, parse_btime, parse_stat, parse_status_uid};
pub use tree::{DirTree, PidFile, ProcTree, TreeFile, clock_ticks};

/// What [`ProcFs::read_at`] reads besides the always-read stat/status/cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Read `/proc/<pid>/cmdline` (DESIGN `[processes] cmdline = false` by default).
    pub cmdline: bool,
    /// The redacted cmdline, including a trailing "…" when cut, never exceeds this.
    pub cmdline_max_bytes: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        // 128 matches DESIGN's default label value truncation.
        ReadOptions {
            cmdline: false,
            cmdline_max_bytes: 128,
        }
    }
}

/// Everything attribution knows about one live (or zombie) process.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessIdentity {
    pub pid: u32,
    /// Parent PID (stat field 4): says who should have reaped a zombie.
    pub ppid: u32,
    /// Comm (stat field 2, at most 15 bytes for user tasks), real uid
    /// from `/proc/<pid>/status` (`None` when the line is unparsable), the
    /// user's name from passwd (else the uid as text, else "") and the
    /// placement from the cgroup. The identity cache's own: the snapshot's
    /// process takes it as it is, one reference count.
    pub who: std::sync::Arc<Who>,
    pub state: ProcState,
    /// Start time in clock ticks since boot (stat field 22): exact, for
    /// telling a reused PID apart without float comparison.
    pub start_ticks: u64,
    /// Unix seconds: btime + start_ticks / CLK_TCK; `None` when btime is unreadable.
    pub start_time: Option<f64>,
    /// Only when asked: args joined with spaces, secrets redacted, truncated.
    /// `Some("")` for a process without args (zombie, kernel thread); `None`
    /// when not asked or unreadable (e.g. permission denied).
    pub cmdline: Option<ArcStr>,
    /// Shared with the identity cache: cloning it per poll is one count.
    /// `who.placement` is how the snapshot shows it.
    pub cgroup: std::sync::Arc<CgroupInfo>,
}

/// Scheduler state, `/proc/<pid>/stat` field 3, plus the one verdict the
/// caller adds: [`ProcState::Stuck`]. The crate's one process-state type:
/// the snapshot and the simulated fleet carry it as [`ProcState::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProcState {
    Running,
    Sleeping,
    /// D: uninterruptible. A live CUDA process passes through it whenever it
    /// waits in the driver, so on its own it says nothing is wrong.
    DiskSleep,
    /// D for longer than the caller's `stuck_after`: never parsed (the
    /// kernel prints D), set by whoever remembers since when.
    Stuck,
    Zombie,
    Stopped,
    TracingStop,
    Dead,
    Idle,
    Other(char),
}

impl ProcState {
    /// Maps the single-letter code the kernel prints (fs/proc/array.c).
    pub fn from_code(c: char) -> Self {
        match c {
            'R' => ProcState::Running,
            'S' => ProcState::Sleeping,
            'D' => ProcState::DiskSleep,
            'Z' => ProcState::Zombie,
            'T' => ProcState::Stopped,
            't' => ProcState::TracingStop,
            'X' | 'x' => ProcState::Dead,
            'I' => ProcState::Idle,
            other => ProcState::Other(other),
        }
    }

    /// Label value for `gpumem_process_info{state}`: the snapshot's state
    /// names it, so the two cannot drift apart.
    pub fn as_str(&self) -> &'static str {
        crate::data::snapshot::ProcessState::from(*self).as_str()
    }

    /// The inverse of [`ProcState::as_str`] (scenario files name states).
    pub fn from_name(name: &str) -> Option<Self> {
        // Every named state: those the kernel prints, the caller's verdict, and "other".
        let coded = "RSDZTtXI".chars().map(ProcState::from_code);
        coded
            .chain([ProcState::Stuck, ProcState::Other('?')])
            .find(|s| s.as_str() == name)
    }

    /// The letter the kernel prints (`Stuck` is a D that lasted).
    pub fn code(&self) -> char {
        match self {
            ProcState::Running => 'R',
            ProcState::Sleeping => 'S',
            ProcState::DiskSleep | ProcState::Stuck => 'D',
            ProcState::Zombie => 'Z',
            ProcState::Stopped => 'T',
            ProcState::TracingStop => 't',
            ProcState::Dead => 'X',
            ProcState::Idle => 'I',
            ProcState::Other(c) => *c,
        }
    }

    /// The name `/proc/<pid>/status` prints after the letter: the label's,
    /// but with spaces, and a D that lasted is still "disk sleep".
    pub fn kernel_name(&self) -> &'static str {
        match self {
            ProcState::DiskSleep | ProcState::Stuck => "disk sleep",
            ProcState::TracingStop => "tracing stop",
            ProcState::Other(_) => "unknown",
            named => named.as_str(),
        }
    }

    /// Z or X: exited, not yet reaped (or being torn down). Such a task has
    /// lost its memory map and may lack files a live one has.
    pub fn is_exited(&self) -> bool {
        matches!(self, ProcState::Zombie | ProcState::Dead)
    }

    /// DESIGN's `zombie` holder: exited (Z, X) or stuck in D. A plain D is
    /// live: it is how a CUDA process waits in the driver.
    pub fn is_unkillable(&self) -> bool {
        self.is_exited() || *self == ProcState::Stuck
    }
}

/// The snapshot's one-byte state, whose string [`ProcState::as_str`] shows.
impl From<ProcState> for crate::data::snapshot::ProcessState {
    fn from(s: ProcState) -> Self {
        use crate::data::snapshot::ProcessState as P;
        match s {
            ProcState::Running => P::Running,
            ProcState::Sleeping => P::Sleeping,
            ProcState::DiskSleep => P::DiskSleep,
            ProcState::Stuck => P::Stuck,
            ProcState::Zombie => P::Zombie,
            ProcState::Stopped => P::Stopped,
            ProcState::TracingStop => P::TracingStop,
            ProcState::Dead => P::Dead,
            ProcState::Idle => P::Idle,
            ProcState::Other(_) => P::Other,
        }
    }
}

/// Why a PID could not be attributed.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// ENOENT/ESRCH or an empty stat: the process exited (or was never
    /// there). The caller treats it as an `exited` holder, not as an error.
    #[error("process {pid} is gone")]
    Gone { pid: u32 },
    /// A required file (stat, status; `<root>/stat` for btime with pid 0)
    /// could not be read for another reason.
    #[error("cannot read {what} of process {pid}: {source}")]
    Unreadable {
        pid: u32,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A required file had content we cannot parse.
    #[error("malformed {what} of process {pid}: {detail}")]
    Malformed {
        pid: u32,
        what: &'static str,
        detail: String,
    },
}

impl ProcError {
    /// True for [`ProcError::Gone`]: lets callers branch without a match.
    pub fn is_gone(&self) -> bool {
        matches!(self, ProcError::Gone { .. })
    }
}

/// Container runtime recognised from the cgroup path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Runtime {
    Docker,
    Containerd,
    CriO,
    Podman,
}

impl Runtime {
    /// Label value for `gpumem_process_info{container_runtime}`: a static
    /// string, so no process allocates one.
    pub fn as_str(&self) -> ArcStr {
        match self {
            Runtime::Docker => arcstr::literal!("docker"),
            Runtime::Containerd => arcstr::literal!("containerd"),
            Runtime::CriO => arcstr::literal!("cri-o"),
            Runtime::Podman => arcstr::literal!("podman"),
        }
    }

    /// The inverse of [`Runtime::as_str`].
    pub fn from_name(name: &str) -> Option<Self> {
        [Runtime::Docker, Runtime::Containerd, Runtime::CriO, Runtime::Podman]
            .into_iter()
            .find(|r| r.as_str() == name)
    }
}

/// The workload a process belongs to, from `/proc/<pid>/cgroup`.
/// Every field is `None` when not applicable (DESIGN: empty label).
#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub struct CgroupInfo {
    /// Full 64-hex container id.
    pub container_id: Option<ArcStr>,
    /// Known only when the path names it (`docker-`, `cri-containerd-`,
    /// `crio-`, `libpod-`, `/docker/`); a bare id under a pod leaves it `None`.
    pub container_runtime: Option<Runtime>,
    /// Pod UID with dashes (systemd slice names use underscores).
    pub pod_uid: Option<ArcStr>,
    /// "guaranteed" | "burstable" | "besteffort"; set only with a pod.
    pub qos_class: Option<ArcStr>,
    /// Innermost real systemd service/scope ("jupyter.service",
    /// "session-3.scope"); never a container scope, and not a unit that
    /// merely hosts a container or Slurm job found below it.
    pub unit: Option<ArcStr>,
    /// Innermost slice, e.g. "user-1000.slice".
    pub slice: Option<ArcStr>,
    /// Slurm job id, e.g. "12345".
    pub job: Option<ArcStr>,
    /// Slurm step: "0", "batch", "extern", "interactive".
    pub job_step: Option<ArcStr>,
}

impl CgroupInfo {
    /// The snapshot's view: empty strings for what does not apply.
    pub fn placement(&self) -> Placement {
        let text = |t: &Option<ArcStr>| t.clone().unwrap_or_default();
        Placement {
            container: text(&self.container_id),
            container_runtime: self.container_runtime.map(|r| r.as_str()).unwrap_or_default(),
            pod_uid: text(&self.pod_uid),
            qos_class: text(&self.qos_class),
            unit: text(&self.unit),
            slice: text(&self.slice),
            job: text(&self.job),
        }
    }
}
