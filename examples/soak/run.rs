//! The soak's poll thread and its measurements: [`poll_thread`] runs the
//! source and the pipeline as the daemon's poll thread does and hands each
//! snapshot on; [`rss`] and [`cpu_time`] read this process's own /proc
//! entries. Must not judge anything (`main.rs` does).

use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use gpumemd::collect::pipeline::{Pipeline, Retained};
use gpumemd::collect::source::GpuSource;
use gpumemd::data::snapshot::{PollStats, Snapshot};

use crate::churn::{ChurnSource, EPOCH, MIB};

/// VmRSS of this process, bytes.
pub(crate) fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// CPU time (user + system) of this process. stat counts in clock ticks
/// of 100 Hz; a window lasts seconds, so 10 ms is fine resolution.
pub(crate) fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let f: Vec<u64> = after_comm.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    // utime and stime are fields 14 and 15; index 0 here is field 3.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

pub(crate) fn mib(b: u64) -> f64 {
    b as f64 / MIB as f64
}

/// One poll's result, from the poll thread to the alert loop.
pub(crate) struct Polled {
    pub(crate) n: u64,
    pub(crate) snap: Arc<Snapshot>,
    /// Time in the source and in the pipeline.
    pub(crate) source: Duration,
    pub(crate) pipeline: Duration,
    /// Set when the pipeline's state outgrew what is listed: the run fails.
    pub(crate) problem: Option<String>,
    pub(crate) retained: Retained,
    pub(crate) listed: usize,
}

/// The poll thread: source and pipeline, as the daemon's `gpumemd-poll`.
pub(crate) fn poll_thread(
    mut src: ChurnSource,
    mut pipeline: Pipeline,
    polls: u64,
    util_every: u64,
    out: mpsc::SyncSender<Polled>,
) {
    for n in 1..=polls {
        let started = Instant::now();
        let raw = match src.poll(n % util_every == 1) {
            Ok(r) => r,
            Err(e) => panic!("the source failed: {e}"),
        };
        let now = EPOCH + n as f64;
        let t_source = Instant::now();
        let (driver, devices) = pipeline.build(raw, now);
        let listed: usize = devices.iter().map(|d| d.processes.len()).sum();
        let snap = Arc::new(Snapshot {
            seq: n,
            timestamp: now,
            monotonic: n as f64,
            nvml_up: true,
            driver,
            devices,
            poll: PollStats {
                polls_total: n,
                success: true,
                duration_seconds: started.elapsed().as_secs_f64(),
                last_success_timestamp: Some(now),
                ..PollStats::default()
            },
            ..Snapshot::default()
        });
        let r = pipeline.retained();
        // Per-process state must never outgrow the processes listed now.
        let problem = (r.leak_series > listed || r.idle_entries > listed || r.late_pending > 64 * r.late_devices)
            .then(|| format!("poll {n}: state {r:?} outgrew the {listed} processes listed"));
        let stop = problem.is_some();
        let msg = Polled {
            n,
            snap,
            source: t_source - started,
            pipeline: t_source.elapsed(),
            problem,
            retained: r,
            listed,
        };
        if out.send(msg).is_err() || stop {
            return;
        }
    }
}

/// Costs of one window.
pub(crate) struct Window {
    pub(crate) cpu_us: f64,
    pub(crate) wall_us: f64,
    /// Lower quartile of the window's chunks of polls, wall us per poll:
    /// what the work costs when nothing else competes for the CPU.
    pub(crate) p25_us: f64,
    pub(crate) rss: u64,
}

pub(crate) const CHUNK: u64 = 1000;
