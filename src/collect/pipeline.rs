//! Turns a source's `RawPoll` into snapshot devices: attributes each PID
//! from a /proc tree (the host's, or the one a simulated source keeps: the
//! same code either way, chosen once in [`Pipeline::for_source`]), splits
//! memory by holder, and runs the stateful diagnoses (stuck in D, late
//! release, leaks, idle holders). Runs on the poller thread. It must not
//! call NVML or touch the network; time comes from the caller so tests drive
//! it without clocks.

use crate::collect::attribution::{ProcError, ProcFs, ProcState, ProcessIdentity, ReadOptions};
use crate::collect::diagnosis::forecast::forecast;
use crate::collect::diagnosis::leak::{LeakConfig, LeakTracker};
use crate::collect::diagnosis::leak_alloc;
use crate::collect::diagnosis::peaks::PeakTracker;
use crate::collect::diagnosis::stuck::StuckTracker;
use crate::collect::diagnosis::{LateRelease, ProcKey, holder_split, proc_key};
use crate::collect::source::{GpuSource, RawPoll, RawProcess, Utilization};
use crate::data::snapshot::{Device, DriverInfo, Holder, Process, ProcessState, ProcessType};
pub use processes::{ProcessMode, Processes};

/// `[poll] peak_window` when the caller sets none (DESIGN.md's default).
const DEFAULT_PEAK_WINDOW: f64 = 60.0;

/// How much history a [`Pipeline`] holds, for checks that it stays
/// bounded under PID churn (examples/soak/).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    /// Processes with a leak-trend history.
    pub leak_series: usize,
    /// Processes with an idle-time record.
    pub idle_entries: usize,
    /// Devices whose previous poll late-release detection remembers.
    pub late_devices: usize,
    /// Departed holders still watched for late release (at most 64 a device).
    pub late_pending: usize,
    /// Devices that ever returned utilisation samples.
    pub util_devices: usize,
    /// Processes remembered in D (uninterruptible).
    pub dsleep_entries: usize,
    /// Processes and devices with a peak window.
    pub peak_series: usize,
    /// Devices with a trend of their unattributed memory (the forecast's).
    pub unattributed_series: usize,
}

/// The stateful part of turning polls into snapshots.
pub struct Pipeline {
    cfg: Processes,
    procfs: ProcFs,
    /// Per process: peaks over `[poll] peak_window`, leak trend, idle time.
    records: Records,
    late: LateRelease,
    stuck: StuckTracker,
    /// Peaks over `[poll] peak_window`, per device.
    device_peaks: PeakTracker<u32>,
    /// Whether any utilisation sample ever came back, per device: without
    /// one, idleness is unknown rather than "idle since start".
    util_seen: std::collections::HashSet<String>,
    devices: DeviceIds,
    /// The allocator view, when `[allocator]` is enabled (or the demo).
    allocator: Option<std::sync::Arc<crate::collect::allocator::AllocatorState>>,
    /// The driver-call ledger, when `[ebpf]` is enabled.
    ledger: Option<std::sync::Arc<crate::collect::ledger::Ledger>>,
    /// Leak trends of `allocated` for processes that report it.
    tensor_leaks: LeakTracker<ProcKey>,
    /// Xid event counts and recent events per device.
    xids: crate::collect::health::XidBook,
    /// Where each Xid event is also listed (`GET /api/v1/events`).
    events: Option<std::sync::Arc<crate::data::events::EventLog>>,
    /// Listed processes that left, for a source that keeps its lists.
    departures: departures::Departures,
    /// Leak trends of each device's unattributed bytes, for the forecast.
    unattributed: LeakTracker<u32>,
}

/// Small ids for the UUIDs of the devices present, so a `ProcKey` is `Copy`
/// and hashing it hashes 16 bytes rather than a UUID string. A device that
/// disappears and comes back gets a new id; its processes' history was
/// forgotten with it anyway.
#[derive(Debug, Default)]
struct DeviceIds {
    ids: std::collections::HashMap<String, u32>,
    next: u32,
}

impl DeviceIds {
    fn id(&mut self, uuid: &str) -> u32 {
        if let Some(&id) = self.ids.get(uuid) {
            return id;
        }
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.ids.insert(uuid.to_string(), id);
        id
    }
}

impl Pipeline {
    /// Attribution from the configured `proc_root` and `passwd_file`.
    pub fn new(cfg: &Processes) -> Self {
        Self::with_procfs(cfg, ProcFs::new(&cfg.proc_root, &cfg.passwd_file))
    }

    /// Attribution from the source's own /proc tree when it keeps one (the
    /// simulated fleet), else as [`Pipeline::new`].
    pub fn for_source(cfg: &Processes, source: &dyn GpuSource) -> Self {
        match source.proc_tree() {
            Some(tree) => Self::with_procfs(cfg, ProcFs::on(tree)),
            None => Self::new(cfg),
        }
    }

    fn with_procfs(cfg: &Processes, procfs: ProcFs) -> Self {
        let leak = LeakConfig {
            window: cfg.leak_window.get().as_secs_f64(),
            min_growth_bytes_per_second: cfg.leak_min_rate.0 as f64,
            ..LeakConfig::default()
        };
        Self {
            cfg: cfg.clone(),
            procfs,
            records: Records::new(PeakTracker::new(DEFAULT_PEAK_WINDOW), LeakTracker::new(leak.clone())),
            late: LateRelease::default(),
            stuck: StuckTracker::default(),
            device_peaks: PeakTracker::new(DEFAULT_PEAK_WINDOW),
            util_seen: Default::default(),
            devices: DeviceIds::default(),
            allocator: None,
            ledger: None,
            tensor_leaks: LeakTracker::new(leak.clone()),
            unattributed: LeakTracker::new(leak),
            xids: crate::collect::health::XidBook::new(crate::collect::health::HealthConfig::default().recent_events),
            events: None,
            departures: departures::Departures::default(),
        }
    }

    /// Joins the figures processes report about their allocators.
    pub fn with_allocator(mut self, state: std::sync::Arc<crate::collect::allocator::AllocatorState>) -> Self {
        self.allocator = Some(state);
        self
    }

    /// Peaks over `seconds` instead of the default 60 (`[poll] peak_window`).
    pub fn with_peak_window(mut self, seconds: f64) -> Self {
        self.records.peaks = PeakTracker::new(seconds);
        self.device_peaks = PeakTracker::new(seconds);
        self
    }

    /// Joins the driver-call ledger's figures and OOM events.
    pub fn with_ledger(mut self, ledger: std::sync::Arc<crate::collect::ledger::Ledger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Keeps the last `keep` Xid events per device (`[health] recent_events`).
    pub fn with_recent_xids(mut self, keep: usize) -> Self {
        self.xids = crate::collect::health::XidBook::new(keep);
        self
    }

    /// Lists every Xid event in `log` too (the daemon's shared event list).
    pub fn with_events(mut self, log: std::sync::Arc<crate::data::events::EventLog>) -> Self {
        self.events = Some(log);
        self
    }

    /// The history held now.
    pub fn retained(&self) -> Retained {
        let (late_devices, late_pending) = self.late.sizes();
        let (leak, idle, peaks) = self.records.sizes();
        Retained {
            leak_series: leak + self.tensor_leaks.len(),
            idle_entries: idle,
            late_devices,
            late_pending,
            util_devices: self.util_seen.len(),
            dsleep_entries: self.stuck.len(),
            peak_series: peaks + self.device_peaks.len(),
            unattributed_series: self.unattributed.len(),
        }
    }

    /// Builds the devices of one poll taken at Unix time `now`.
    pub fn build(&mut self, raw: RawPoll, now: f64) -> (Option<DriverInfo>, Vec<Device>) {
        let util = raw.utilization.as_ref();
        if let Some(u) = util {
            self.util_seen
                .extend(u.iter().filter(|(_, m)| !m.is_empty()).map(|(k, _)| k.clone()));
        }
        let mut devices = Vec::with_capacity(raw.devices.len());
        self.records
            .reserve(raw.devices.iter().map(|d| d.processes.len()).sum());
        // The identity cache's refresh clock, read once for the whole poll.
        let clock = std::time::Instant::now();
        for rd in raw.devices {
            let mut dev = rd.device;
            // A down GPU has no health this poll, but its events (often
            // the reason it is down) are counted and its book is kept.
            match dev.health.as_mut() {
                Some(h) => self.xids.record(&dev.uuid, &rd.xid_events, now, h),
                None => self.xids.note(&dev.uuid, &rd.xid_events, now),
            }
            self.list_xids(&dev.uuid, &rd.xid_events, now);
            // Attributed and observed in the source's order; sorted for the
            // snapshot after.
            let mut processes: Vec<Process> = rd.processes.iter().map(|rp| self.attribute(rp, now, clock)).collect();
            self.observe_processes(&dev.uuid, &mut processes, now, util);
            by_size(&mut processes);
            dev.processes = processes;
            self.diagnose(&mut dev, now);
            devices.push(dev);
        }
        self.departures.note(&devices);
        aggregate_mig_parents(&mut devices);
        if let Some(a) = self.allocator.clone() {
            a.join(&mut devices, now);
        }
        if let Some(l) = &self.ledger {
            l.join(&mut devices, now);
        }
        self.judge_and_forecast(&mut devices, now);
        self.forget_gone(&devices);
        (raw.driver, devices)
    }

    /// Whether the last poll found a listed process that had left since
    /// the poll before: a source that keeps its lists between polls must
    /// read them anew (`GpuSource::note_departure`).
    pub fn departed(&self) -> bool {
        self.departures.departed()
    }

    fn list_xids(&self, uuid: &str, xids: &[u64], now: f64) {
        let Some(log) = &self.events else { return };
        for &xid in xids {
            let memory = crate::data::snapshot::health::memory_related(xid);
            log.push(
                crate::data::events::Event::new("xid", now, uuid)
                    .with("xid", xid)
                    .with("memory_related", memory),
            );
        }
    }

    /// Each process's peak, leak trend and idle time from its record.
    fn observe_processes(&mut self, uuid: &str, processes: &mut [Process], now: f64, util: Option<&Utilization>) {
        let idle_after = self.cfg.idle_after.get().as_secs_f64();
        let dev_util = util.and_then(|u| u.get(uuid));
        let util_known = self.util_seen.contains(uuid);
        let dev_id = self.devices.id(uuid);
        for p in processes {
            let key = proc_key(dev_id, p);
            p.sm_util_percent = dev_util.and_then(|m| m.get(&p.pid)).map(|&u| Process::percent(u));
            let activity = if util_known && p.holder == Some(Holder::Live) {
                Activity::Tracked {
                    active: dev_util.is_some() && p.sm_util_percent.is_some_and(|u| u > 0),
                }
            } else {
                Activity::Untracked
            };
            let seen = self.records.observe(key, now, p.used_bytes, activity);
            p.used_max_bytes = seen.used_max_bytes;
            if let Some(t) = seen.trend {
                p.growth_bytes_per_second = Some(t.growth_bytes_per_second);
                p.leak_suspected = t.suspected;
            }
            if let Some(idle) = seen.idle_seconds {
                p.idle_seconds = Some(idle);
                p.idle = idle >= idle_after && p.used_bytes.unwrap_or(0) > 0;
            }
        }
    }

    /// The device's peak, holder split and late release.
    fn diagnose(&mut self, dev: &mut Device, now: f64) {
        let late_after = self.cfg.late_release_after.get().as_secs_f64();
        let dev_id = self.devices.id(&dev.uuid);
        if dev.up {
            dev.used_max_bytes = self
                .device_peaks
                .observe(&dev_id, now, dev.memory.map(|m| m.used_bytes));
        }
        if let (Some(m), true, false) = (dev.memory, dev.up, dev.processes_unreadable) {
            let holders = holder_split(m.used_bytes, &dev.processes);
            dev.unreleased = self.late.observe(&dev.uuid, now, late_after, &dev.processes, &holders);
            dev.holders = Some(holders);
        }
    }

    /// The leak verdict of processes seen from inside (with the allocator
    /// view or the ledger) comes from their tensors' trend, else from their
    /// driver allocations' (diagnosis/leak_alloc.rs). Then each device's
    /// time to full from its growers, the unattributed memory's trend
    /// included: after the tensors' verdicts, as they decide which
    /// processes grow.
    fn judge_and_forecast(&mut self, devices: &mut [Device], now: f64) {
        let inside = self.allocator.is_some() || self.ledger.is_some();
        for dev in devices.iter_mut() {
            let dev_id = self.devices.id(&dev.uuid);
            if inside {
                // A process without either view keeps NVML's verdict.
                for p in &mut dev.processes {
                    leak_alloc::judge(&mut self.tensor_leaks, &proc_key(dev_id, p), p, now);
                }
            }
            let unattributed = dev.holders.map(|h| h.unattributed);
            let trend = self.unattributed.observe_and_assess(&dev_id, now, unattributed);
            if let Some((secs, growers)) = forecast(dev, trend) {
                dev.full_in_seconds = Some(secs);
                dev.growers = growers;
            }
        }
    }

    /// Attributes one PID from the /proc tree seen at time `now`.
    fn attribute(&mut self, rp: &RawProcess, now: f64, clock: std::time::Instant) -> Process {
        let kind = ProcessType::from(rp.kinds);
        let opts = ReadOptions {
            cmdline: self.cfg.cmdline,
            cmdline_max_bytes: self.cfg.label_max_bytes,
        };
        let (holder, state) = match self.procfs.read_at(rp.pid, &opts, clock) {
            Ok(id) => return self.identified(rp, kind, id, now),
            // A PID that exited between NVML's list and our read, or that
            // NVML keeps listing after exit: an exited holder, not an error.
            Err(ProcError::Gone { .. }) => (Holder::Exited, ProcessState::Exited),
            Err(e) => {
                tracing::debug!(pid = rp.pid, error = %e, "cannot attribute process");
                (Holder::Live, ProcessState::Unknown)
            }
        };
        Process {
            pid: rp.pid,
            used_bytes: rp.used_bytes,
            kind,
            holder: Some(holder),
            state,
            ..Process::default()
        }
    }

    /// The process `id` describes. A D that has lasted `stuck_after` is
    /// `Stuck`, and with Z and X holds as `zombie`; a shorter D is live.
    /// Built in one literal rather than from `Process::default()`: at 64 x
    /// 1000 the default's empty `Who` cost an allocation and reference-count
    /// updates per process and poll, and every field was written twice.
    fn identified(&mut self, rp: &RawProcess, kind: ProcessType, id: ProcessIdentity, now: f64) -> Process {
        let after = self.cfg.stuck_after.get().as_secs_f64();
        let in_d = id.state == ProcState::DiskSleep;
        let state = if self.stuck.observe((id.pid, id.start_ticks), in_d, now, after) {
            ProcState::Stuck
        } else {
            id.state
        };
        Process {
            pid: rp.pid,
            used_bytes: rp.used_bytes,
            used_max_bytes: None,
            kind,
            who: id.who,
            ppid: Some(id.ppid),
            state: state.into(),
            holder: Some(if state.is_unkillable() {
                Holder::Zombie
            } else {
                Holder::Live
            }),
            start_time: id.start_time,
            start_ticks: Some(id.start_ticks),
            cmdline: id.cmdline,
            growth_bytes_per_second: None,
            leak_suspected: false,
            sm_util_percent: None,
            idle_seconds: None,
            idle: false,
            allocator: None,
            driver: None,
        }
    }

    /// Drops per-process history of processes and devices not seen this
    /// poll, so state stays bounded under PID churn. `diagnose` saw every
    /// process of this poll, which marked its leak and idle entries; the
    /// rest are swept without building a set of the live keys (a cache miss
    /// per process per map at 64k processes).
    fn forget_gone(&mut self, devices: &[Device]) {
        // A set, not a scan per entry: a scan made this quadratic in the
        // number of GPUs (30k GPUs took 12 s).
        let uuids: std::collections::HashSet<&str> = devices.iter().map(|d| d.uuid.as_str()).collect();
        let present = |uuid: &str| uuids.contains(uuid);
        self.devices.ids.retain(|uuid, _| present(uuid));
        self.records.retain_seen();
        self.tensor_leaks.retain_seen();
        self.unattributed.retain_seen();
        self.stuck.retain_seen();
        self.device_peaks.retain_seen();
        self.late.retain_devices(&present);
        self.xids.retain_seen();
        // MIG reconfiguration gives instances new UUIDs each time.
        self.util_seen.retain(|uuid| present(uuid));
    }
}

mod departures;
mod mig;
mod order;
mod processes;
mod records;
#[cfg(test)]
mod tests;

use mig::aggregate_mig_parents;
use order::by_size;
use records::{Activity, Records};
