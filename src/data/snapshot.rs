//! The immutable result of one poll, shared by every reader (metrics, JSON
//! API, status page, rules) through a watch channel. Plain data with serde
//! for the JSON API (and back, for `snapshot --url`); it must not hold
//! handles, locks or anything that talks to hardware. A value that could
//! not be read is `None`, never 0.

pub mod health;
mod suspended;

use std::collections::BTreeMap;

mod allocator;
mod driver;
mod forecast;
mod kind;
mod who;

pub use allocator::{AllocPair, AllocatorFigures, Verdict};
use arcstr::ArcStr;
pub use driver::{DriverFailure, DriverFigures};
pub use forecast::Grower;
pub use kind::{ProcessState, ProcessType};
use serde::{Deserialize, Serialize};
pub use suspended::SuspendedProcess;
pub use who::Who;

/// Driver and library versions, as reported by NVML (or the simulation).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DriverInfo {
    pub driver_version: String,
    pub nvml_version: String,
    pub cuda_version: String,
}

/// Device memory in bytes, NVML v2 semantics: `used` excludes `reserved`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Memory {
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
    /// Absent with the v1 API of old drivers.
    pub reserved_bytes: Option<u64>,
}

/// Who holds a device's used memory; the four parts add up to `used_bytes`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Holders {
    /// Processes that are running (present in /proc; a short D is running).
    pub live: u64,
    /// Processes in state Z or X, or stuck in D past `stuck_after` (unkillable).
    pub zombie: u64,
    /// Processes NVML still lists that are gone from /proc.
    pub exited: u64,
    /// Used memory that no listed process accounts for.
    pub unattributed: u64,
}

impl Holders {
    /// The bytes of one holder class.
    pub fn get(&self, h: Holder) -> u64 {
        match h {
            Holder::Live => self.live,
            Holder::Zombie => self.zombie,
            Holder::Exited => self.exited,
            Holder::Unattributed => self.unattributed,
        }
    }
}

/// A holder class: of a device's memory (all four), and of one process
/// (never `Unattributed`, which is memory no listed process accounts for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Holder {
    Live,
    Zombie,
    Exited,
    Unattributed,
}

impl Holder {
    /// Every class, in the order the exposition and the table show them.
    pub const ALL: [Holder; 4] = [Holder::Live, Holder::Zombie, Holder::Exited, Holder::Unattributed];

    pub fn as_str(self) -> &'static str {
        match self {
            Holder::Live => "live",
            Holder::Zombie => "zombie",
            Holder::Exited => "exited",
            Holder::Unattributed => "unattributed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
/// What `[processes] group_by` sums over; each process has one group per kind.
pub enum GroupBy {
    User,
    Container,
    Pod,
    Unit,
    Job,
}

impl GroupBy {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::User => "user",
            GroupBy::Container => "container",
            GroupBy::Pod => "pod",
            GroupBy::Unit => "unit",
            GroupBy::Job => "job",
        }
    }
}
/// Label values are [`ArcStr`]: cloned per process per poll, shared.
/// Where a process runs, from its cgroup (empty = not applicable).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Placement {
    /// Full container id.
    pub container: ArcStr,
    /// "docker", "containerd", "cri-o", "podman".
    pub container_runtime: ArcStr,
    pub pod_uid: ArcStr,
    /// Kubernetes QoS class: "guaranteed", "burstable", "besteffort".
    pub qos_class: ArcStr,
    /// systemd service or scope.
    pub unit: ArcStr,
    pub slice: ArcStr,
    /// Slurm job id.
    pub job: ArcStr,
}

/// One process holding a context on one device. Its serde is in
/// `snapshot/who.rs`: the JSON shows `who`'s fields as its own.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Process {
    pub pid: u32,
    /// Absent when NVML reports the value as unavailable.
    pub used_bytes: Option<u64>,
    /// The peak of `used_bytes` over `[poll] peak_window`.
    pub used_max_bytes: Option<u64>,
    /// "compute", "graphics", "mps" or a `+`-joined combination.
    pub kind: ProcessType,
    /// Comm, user, uid and placement, shared with attribution's identity
    /// cache (it keeps one per PID between polls): 8 bytes and one
    /// reference count per process and poll instead of 48 and three.
    pub who: std::sync::Arc<Who>,
    /// Parent PID; 1 (or a subreaper) for a child whose job already exited.
    pub ppid: Option<u32>,
    /// "running", "sleeping", "zombie", ... or "exited" when gone from /proc.
    pub state: ProcessState,
    pub holder: Option<Holder>,
    /// Unix seconds; with `pid` it identifies the process across PID reuse.
    pub start_time: Option<f64>,
    /// The exact start time in clock ticks, for reclaim's identity check.
    pub start_ticks: Option<u64>,
    /// One pointer (`ArcStr`): off by default, so almost always `None`.
    pub cmdline: Option<ArcStr>,
    pub growth_bytes_per_second: Option<f64>,
    pub leak_suspected: bool,
    /// Latest SM utilisation sample in percent, when sampled. A byte:
    /// NVML's `u32` is a percentage (stored saturating, see
    /// [`Process::percent`]); 8 bytes less per process.
    pub sm_util_percent: Option<u8>,
    /// Seconds this process has held memory with no SM activity.
    pub idle_seconds: Option<f64>,
    pub idle: bool,
    /// What the process's own allocator reports for this GPU (it opted in
    /// with `gpumemd-torch`); absent otherwise.
    // Boxed: 170 bytes that almost every process would carry empty.
    pub allocator: Option<Box<AllocatorFigures>>,
    /// What the driver-call ledger saw of it (`[ebpf]`); absent otherwise.
    // Boxed for the same reason as `allocator`.
    pub driver: Option<Box<DriverFigures>>,
}

impl Process {
    /// A utilisation sample as `sm_util_percent` keeps it: NVML reports a
    /// percentage in a `u32`; anything past 255 (never seen) saturates.
    pub fn percent(sample: u32) -> u8 {
        u8::try_from(sample).unwrap_or(u8::MAX)
    }

    /// The process's group of kind `by` ("" when it belongs to none).
    pub fn group(&self, by: GroupBy) -> &str {
        match by {
            GroupBy::User => &self.who.user,
            GroupBy::Container => &self.who.placement.container,
            GroupBy::Pod => &self.who.placement.pod_uid,
            GroupBy::Unit => &self.who.placement.unit,
            GroupBy::Job => &self.who.placement.job,
        }
    }
}

/// Memory that stayed used after its holder left the process list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unreleased {
    pub pid: u32,
    pub comm: ArcStr,
    pub user: ArcStr,
    pub bytes: u64,
    /// Unix seconds when the process left NVML's list.
    pub since: f64,
}

/// One GPU or MIG instance, keyed by UUID.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Device {
    pub uuid: String,
    pub index: Option<u32>,
    pub name: String,
    pub pci_bus_id: String,
    /// For a MIG instance, the UUID of its GPU.
    pub parent_uuid: String,
    pub mig_profile: String,
    /// False when this GPU failed this poll (lost, driver error).
    pub up: bool,
    pub memory: Option<Memory>,
    /// The peak of `memory.used_bytes` over `[poll] peak_window`.
    pub used_max_bytes: Option<u64>,
    pub holders: Option<Holders>,
    /// Largest holder first.
    pub processes: Vec<Process>,
    /// True when NVML's process lists could not be read: `processes` is
    /// then empty and `holders` absent, because both are unknown.
    pub processes_unreadable: bool,
    /// Memory not released after holders exited (late release by the driver).
    pub unreleased: Vec<Unreleased>,
    /// Why `up` is false, or which fields could not be read.
    pub errors: Vec<String>,
    /// Out-of-memory errors processes reported on this GPU in the last
    /// minutes (the allocator view); the process may have exited since.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ooms: Vec<RecentOom>,
    /// Memory health (ECC, row remapping, Xid events); absent when not read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<health::Health>,
    /// Processes gpumemd suspended from this GPU (filled by the HTTP layer,
    /// read back by `snapshot --url`); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub suspended: Vec<SuspendedProcess>,
    /// Processes left out of `processes` by `gpumemd snapshot --top` (the
    /// smallest); the daemon lists them all and never sets it.
    #[serde(skip_serializing_if = "is_zero")]
    pub processes_omitted: usize,
    /// Seconds until free memory runs out at the confirmed growth of its
    /// holders; absent when nothing grows (`diagnosis::forecast`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_in_seconds: Option<f64>,
    /// Who grows, fastest first (at most a few).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub growers: Vec<Grower>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// An out-of-memory error a process reported (details in `/api/v1/events`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecentOom {
    /// Unix seconds the report arrived.
    pub time: f64,
    pub pid: u32,
    pub comm: String,
    pub user: String,
    /// The largest other holders of the GPU then, as "comm (pid) 12.0 GiB, ...".
    pub others: String,
}

/// Cumulative poller counters, carried in every snapshot so a scrape reads
/// one consistent view.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PollStats {
    pub polls_total: u64,
    pub errors_total: BTreeMap<String, u64>,
    pub overruns_total: u64,
    /// Whether the latest poll succeeded.
    pub success: bool,
    /// Seconds the latest poll took (or how long it had run when it timed out).
    pub duration_seconds: f64,
    /// Of `duration_seconds`, the time spent inside the source (the NVML
    /// calls, or the simulation); the rest is gpumemd's own work.
    pub source_seconds: f64,
    /// Unix seconds of the latest successful poll.
    pub last_success_timestamp: Option<f64>,
}

/// What one poll saw, plus the poller's view of its own health.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshot {
    /// 0 for the placeholder published before the first poll.
    pub seq: u64,
    /// Unix seconds at the start of the poll.
    pub timestamp: f64,
    /// Monotonic seconds (since the daemon started) at the start of the
    /// poll: rule durations use it so wall-clock jumps cannot fire alerts.
    #[serde(skip)]
    pub monotonic: f64,
    /// Set by `--demo`: the simulated scenario's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demo: Option<String>,
    pub nvml_up: bool,
    /// Why NVML is down, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml_error: Option<String>,
    pub driver: Option<DriverInfo>,
    pub devices: Vec<Device>,
    /// True while the latest poll is overdue or failed and this is older data.
    pub stale: bool,
    pub poll: PollStats,
}

/// When a poll ran and what the source said: devices, or why NVML is down.
#[derive(Debug, Clone, PartialEq)]
pub struct PollOutcome {
    pub seq: u64,
    /// Unix and monotonic seconds at the start of the poll.
    pub timestamp: f64,
    pub monotonic: f64,
    pub nvml: Result<(Option<DriverInfo>, Vec<Device>), String>,
}

impl Snapshot {
    /// What is published before the first poll ends.
    pub fn placeholder(demo: Option<String>) -> Snapshot {
        Snapshot {
            demo,
            ..Snapshot::default()
        }
    }

    /// The one way a poll becomes a snapshot (the daemon's poller and the
    /// one-shot `snapshot` command alike).
    pub fn of_poll(outcome: PollOutcome, demo: Option<String>, poll: PollStats) -> Snapshot {
        let (nvml_up, nvml_error, driver, devices) = match outcome.nvml {
            Ok((driver, devices)) => (true, None, driver, devices),
            Err(e) => (false, Some(e), None, Vec::new()),
        };
        Snapshot {
            seq: outcome.seq,
            timestamp: outcome.timestamp,
            monotonic: outcome.monotonic,
            demo,
            nvml_up,
            nvml_error,
            driver,
            devices,
            stale: false,
            poll,
        }
    }

    /// True once a real poll result (not the startup placeholder) exists.
    pub fn has_polled(&self) -> bool {
        self.seq > 0
    }
}

#[cfg(test)]
mod tests;
