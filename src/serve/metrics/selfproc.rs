//! The exporter's own `process_*` families (CPU, memory, file descriptors,
//! start time), named and computed as the Go and Python Prometheus clients
//! do, so the usual exporter-health dashboards work. Owns [`SelfStats`] and
//! its reading from `/proc/self`, which the scrape handler calls and passes
//! in through `DaemonState`: rendering itself stays free of I/O (and the
//! golden test can pass fixed values). It reads nothing but `/proc`.

use std::path::Path;
use std::sync::OnceLock;

use crate::collect::attribution::{parse_btime, parse_stat};

use super::family::{Emit, Family};
use super::text::Kind;

/// What `/proc` said about one process; `None` where it could not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SelfStats {
    /// User plus system CPU time.
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    /// The soft limit on open files; absent when unlimited.
    pub max_fds: Option<u64>,
    /// Unix time the process started.
    pub start_time_seconds: Option<f64>,
}

/// Clock ticks per second and page size: the units `/proc/<pid>/stat`
/// counts in.
#[derive(Debug, Clone, Copy)]
pub struct Units {
    pub ticks_per_second: u64,
    pub page_size: u64,
}

impl SelfStats {
    /// Reads this process from `/proc/self` now.
    pub fn read() -> SelfStats {
        let units = Units {
            ticks_per_second: rustix::param::clock_ticks_per_second(),
            page_size: rustix::param::page_size() as u64,
        };
        // The boot time is read once, as attribution does: the kernel
        // recomputes it on each read, and a second's jitter would move
        // `process_start_time_seconds` as a restart does; and each read of
        // `/proc/stat` sums every CPU's and interrupt's counters.
        static BOOT: OnceLock<u64> = OnceLock::new();
        let root = Path::new("/proc");
        let boot = BOOT
            .get()
            .copied()
            .or_else(|| boot_time(root).map(|b| *BOOT.get_or_init(|| b)));
        SelfStats::read_from(root, "self", units, boot)
    }

    /// Reads process `pid` (or `self`) under `proc_root`, for a host
    /// booted at Unix time `boot` (see `boot_time`). Each value is read on
    /// its own: one unreadable file leaves the others.
    pub fn read_from(proc_root: &Path, pid: &str, units: Units, boot: Option<u64>) -> SelfStats {
        let dir = proc_root.join(pid);
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        let stat = std::fs::read(dir.join("stat")).ok().and_then(|b| parse_stat(&b).ok());
        let ticks = Some(units.ticks_per_second as f64).filter(|&t| t > 0.0);
        let stat = stat.as_ref();
        let cpu = stat.and_then(|s| Some(s.utime?.saturating_add(s.stime?)));
        SelfStats {
            cpu_seconds: cpu.zip(ticks).map(|(c, t)| c as f64 / t),
            resident_bytes: stat
                .and_then(|s| s.rss_pages)
                .map(|p| p.saturating_mul(units.page_size)),
            virtual_bytes: stat.and_then(|s| s.vsize),
            open_fds: std::fs::read_dir(dir.join("fd")).ok().map(|d| d.count() as u64),
            max_fds: read("limits").and_then(|s| max_open_files(&s)),
            start_time_seconds: stat
                .zip(boot)
                .zip(ticks)
                .map(|((s, b), t)| b as f64 + s.start_ticks as f64 / t),
        }
    }
}

/// The host's boot time, Unix seconds: `btime` of `proc_root/stat`.
pub fn boot_time(proc_root: &Path) -> Option<u64> {
    std::fs::read_to_string(proc_root.join("stat"))
        .ok()
        .and_then(|s| parse_btime(&s))
}

/// The soft "Max open files" of `/proc/<pid>/limits`.
fn max_open_files(s: &str) -> Option<u64> {
    let line = s.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

const fn family(
    name: &'static str,
    kind: Kind,
    unit: &'static str,
    help: &'static str,
    samples: fn(&SelfStats, &mut Emit<'_>),
) -> Family<SelfStats> {
    // Optional: a value /proc did not give leaves its family out, as the
    // Go client does, rather than announcing a family with no sample.
    Family::new(name, kind, unit, help, samples).optional()
}

pub(super) const PROCESS: &[Family<SelfStats>] = &[
    family(
        "process_cpu_seconds_total",
        Kind::Counter,
        "seconds",
        "Total user and system CPU time spent in seconds.",
        |s, e| s.cpu_seconds.into_iter().for_each(|v| e(&[], v.into())),
    ),
    family(
        "process_open_fds",
        Kind::Gauge,
        "",
        "Number of open file descriptors.",
        |s, e| s.open_fds.into_iter().for_each(|v| e(&[], v.into())),
    ),
    family(
        "process_max_fds",
        Kind::Gauge,
        "",
        "Maximum number of open file descriptors.",
        |s, e| s.max_fds.into_iter().for_each(|v| e(&[], v.into())),
    ),
    family(
        "process_virtual_memory_bytes",
        Kind::Gauge,
        "bytes",
        "Virtual memory size in bytes.",
        |s, e| s.virtual_bytes.into_iter().for_each(|v| e(&[], v.into())),
    ),
    family(
        "process_resident_memory_bytes",
        Kind::Gauge,
        "bytes",
        "Resident memory size in bytes.",
        |s, e| s.resident_bytes.into_iter().for_each(|v| e(&[], v.into())),
    ),
    family(
        "process_start_time_seconds",
        Kind::Gauge,
        "seconds",
        "Start time of the process since unix epoch in seconds.",
        |s, e| s.start_time_seconds.into_iter().for_each(|v| e(&[], v.into())),
    ),
];
