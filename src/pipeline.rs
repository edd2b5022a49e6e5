//! Turns a source's `RawPoll` into snapshot devices: attributes each PID
//! (from /proc, or from the simulation's identity), splits memory by holder,
//! and runs the stateful diagnoses (late release, leaks, idle holders). Runs
//! on the poller thread. It must not call NVML or touch the network; time
//! comes from the caller so tests drive it without clocks.

use crate::attribution::{CgroupInfo, ProcError, ProcFs, ReadOptions, redact_cmdline};
use crate::config::Processes;
use crate::diagnosis::leak::{LeakConfig, LeakTracker};
use crate::diagnosis::{IdleTracker, LateRelease, ProcKey, holder_split, proc_key};
use crate::snapshot::{Device, DriverInfo, Holder, Holders, Placement, Process};
use crate::source::{RawPoll, RawProcess, SimIdentity, Utilization};

/// The stateful part of turning polls into snapshots.
pub struct Pipeline {
    cfg: Processes,
    procfs: ProcFs,
    leak: LeakTracker<ProcKey>,
    late: LateRelease,
    idle: IdleTracker,
    /// Whether any utilisation sample ever came back, per device: without
    /// one, idleness is unknown rather than "idle since start".
    util_seen: std::collections::HashSet<String>,
}

impl Pipeline {
    pub fn new(cfg: &Processes) -> Self {
        let leak = LeakConfig {
            window: cfg.leak_window.get().as_secs_f64(),
            min_growth_bytes_per_second: cfg.leak_min_rate.0 as f64,
            ..LeakConfig::default()
        };
        Self {
            cfg: cfg.clone(),
            procfs: ProcFs::new(&cfg.proc_root).with_passwd(&cfg.passwd_file),
            leak: LeakTracker::new(leak),
            late: LateRelease::default(),
            idle: IdleTracker::default(),
            util_seen: Default::default(),
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
        for rd in raw.devices {
            let mut dev = Device {
                uuid: rd.uuid,
                index: rd.index,
                name: rd.name,
                pci_bus_id: rd.pci_bus_id,
                parent_uuid: rd.parent_uuid,
                mig_profile: rd.mig_profile,
                up: rd.up,
                memory: rd.memory,
                processes_unreadable: rd.processes_unreadable,
                errors: rd.errors,
                ..Device::default()
            };
            dev.processes = rd.processes.iter().map(|rp| self.attribute(rp)).collect();
            dev.processes
                .sort_by(|a, b| b.used_bytes.cmp(&a.used_bytes).then(a.pid.cmp(&b.pid)));
            self.diagnose(&mut dev, now, util);
            devices.push(dev);
        }
        aggregate_mig_parents(&mut devices);
        self.forget_gone(&devices);
        (raw.driver, devices)
    }

    fn diagnose(&mut self, dev: &mut Device, now: f64, util: Option<&Utilization>) {
        let late_after = self.cfg.late_release_after.get().as_secs_f64();
        let idle_after = self.cfg.idle_after.get().as_secs_f64();
        let dev_util = util.and_then(|u| u.get(&dev.uuid));
        let util_known = self.util_seen.contains(&dev.uuid);
        for p in &mut dev.processes {
            let key = proc_key(&dev.uuid, p);
            if let Some(b) = p.used_bytes {
                self.leak.observe(&key, now, b);
            }
            if let Some(t) = self.leak.assess(&key) {
                p.growth_bytes_per_second = Some(t.growth_bytes_per_second);
                p.leak_suspected = t.suspected;
            }
            p.sm_util_percent = dev_util.and_then(|m| m.get(&p.pid).copied());
            if util_known && p.holder == Some(Holder::Live) {
                let idle = self.idle.observe(&key, now, p.sm_util_percent, dev_util.is_some());
                p.idle_seconds = Some(idle);
                p.idle = idle >= idle_after && p.used_bytes.unwrap_or(0) > 0;
            }
        }
        if let (Some(m), true, false) = (dev.memory, dev.up, dev.processes_unreadable) {
            let holders = holder_split(m.used_bytes, &dev.processes);
            dev.unreleased = self.late.observe(&dev.uuid, now, late_after, &dev.processes, &holders);
            dev.holders = Some(holders);
        }
    }

    /// Attributes one PID: the simulation's identity when it has one, else /proc.
    fn attribute(&mut self, rp: &RawProcess) -> Process {
        let mut p = Process {
            pid: rp.pid,
            used_bytes: rp.used_bytes,
            kind: rp.kinds.label(),
            ..Process::default()
        };
        if let Some(sim) = &rp.sim {
            self.fill_sim(&mut p, sim);
            return p;
        }
        let opts = ReadOptions {
            cmdline: self.cfg.cmdline,
            cmdline_max_bytes: self.cfg.label_max_bytes,
        };
        match self.procfs.read(rp.pid, &opts) {
            Ok(id) => {
                p.holder = Some(if id.state.is_zombie_like() {
                    Holder::Zombie
                } else {
                    Holder::Live
                });
                p.state = id.state.as_str().to_string();
                p.comm = id.comm;
                p.user = id.user;
                p.uid = id.uid;
                p.ppid = Some(id.ppid);
                p.start_time = id.start_time;
                p.start_ticks = Some(id.start_ticks);
                p.cmdline = id.cmdline;
                p.placement = placement(id.cgroup);
            }
            // A PID that exited between NVML's list and our read, or that
            // NVML keeps listing after exit: an exited holder, not an error.
            Err(ProcError::Gone { .. }) => {
                p.holder = Some(Holder::Exited);
                p.state = "exited".into();
            }
            Err(e) => {
                tracing::debug!(pid = rp.pid, error = %e, "cannot attribute process");
                p.holder = Some(Holder::Live);
                p.state = "unknown".into();
            }
        }
        p
    }

    fn fill_sim(&self, p: &mut Process, sim: &SimIdentity) {
        let zombie_like = matches!(sim.state.as_str(), "zombie" | "disk-sleep");
        p.holder = Some(match (sim.in_proc, zombie_like) {
            (false, _) => Holder::Exited,
            (true, true) => Holder::Zombie,
            (true, false) => Holder::Live,
        });
        p.state = if sim.in_proc {
            sim.state.clone()
        } else {
            "exited".into()
        };
        p.comm = sim.comm.clone();
        p.user = sim.user.clone();
        p.uid = Some(sim.uid);
        p.start_time = Some(sim.start_time);
        p.placement = sim.placement.clone();
        if self.cfg.cmdline && sim.in_proc && !sim.cmdline.is_empty() {
            let args: Vec<&str> = sim.cmdline.split_whitespace().collect();
            p.cmdline = Some(truncate(redact_cmdline(&args), self.cfg.label_max_bytes));
        }
    }

    /// Drops per-process history of processes and devices not seen this
    /// poll, so state stays bounded under PID churn.
    fn forget_gone(&mut self, devices: &[Device]) {
        let live: std::collections::HashSet<ProcKey> = devices
            .iter()
            .flat_map(|d| d.processes.iter().map(|p| proc_key(&d.uuid, p)))
            .collect();
        self.leak.retain(|k| live.contains(k));
        self.idle.retain(|k| live.contains(k));
        self.late.retain_devices(&|uuid| devices.iter().any(|d| d.uuid == uuid));
    }
}

/// The snapshot's view of a cgroup: empty strings for what does not apply.
fn placement(c: CgroupInfo) -> Placement {
    Placement {
        container: c.container_id.unwrap_or_default(),
        container_runtime: c.container_runtime.map(|r| r.as_str().to_string()).unwrap_or_default(),
        pod_uid: c.pod_uid.unwrap_or_default(),
        qos_class: c.qos_class.unwrap_or_default(),
        unit: c.unit.unwrap_or_default(),
        slice: c.slice.unwrap_or_default(),
        job: c.job.unwrap_or_default(),
    }
}

/// A MIG parent lists no processes (they are on its instances); its holder
/// split is the sum of its instances', with the rest unattributed.
fn aggregate_mig_parents(devices: &mut [Device]) {
    let sums: Vec<(usize, Holders)> = devices
        .iter()
        .enumerate()
        .filter(|(_, d)| d.up && d.memory.is_some())
        .filter_map(|(i, d)| {
            let children: Vec<&Device> = devices.iter().filter(|c| c.parent_uuid == d.uuid).collect();
            if children.is_empty() {
                return None;
            }
            let mut h = Holders::default();
            for c in children.iter().filter_map(|c| c.holders) {
                h.live += c.live;
                h.zombie += c.zombie;
                h.exited += c.exited;
            }
            let used = d.memory.map_or(0, |m| m.used_bytes);
            let parts = vec![
                part(h.live, Holder::Live),
                part(h.zombie, Holder::Zombie),
                part(h.exited, Holder::Exited),
            ];
            Some((i, holder_split(used, &parts)))
        })
        .collect();
    for (i, h) in sums {
        devices[i].holders = Some(h);
    }
}

fn part(bytes: u64, holder: Holder) -> Process {
    Process {
        used_bytes: Some(bytes),
        holder: Some(holder),
        ..Process::default()
    }
}

/// Cuts `s` to at most `max` bytes on a char boundary, marking the cut.
pub fn truncate(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut cut = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push('…');
    s
}
