//! `SimulatedSource`: the demo fleet and the test source for everything above
//! the `GpuSource` seam. It steps a `Scenario` on the poll clock (poll N is at
//! scenario time (N-1) x interval), deterministically: the same scenario,
//! interval and epoch give the same polls. It must not read clocks or files
//! after construction. Its processes' identities (user, state, workload)
//! are not in the polls: they are in the `/proc` tree it keeps
//! (`simulated/proctree.rs`), which the pipeline reads like the real one.

use std::sync::Arc;
use std::time::Duration;

use super::scenario::{Exit, Scenario, SimProcess};
use super::{GpuSource, ProcessKinds, RawDevice, RawPoll, RawProcess, SourceError, Utilization};
use crate::collect::attribution::{ProcState, ProcTree};
use crate::data::snapshot::{Device, DriverInfo, Memory};

mod ends;
mod proctree;

pub use ends::SimKill;

/// A simulated fleet.
pub struct SimulatedSource {
    scenario: Scenario,
    interval: f64,
    epoch: f64,
    poll: u64,
    procs: proctree::SimProcTree,
    /// Indices of the scenario's processes by GPU, in file order, with the
    /// lists each is in (its `type`, read once): a GPU's poll walks its
    /// own, not the whole fleet's.
    on_gpu: Vec<Vec<(usize, ProcessKinds)>>,
    /// Processes ended by a (simulated) signal.
    ends: ends::Ends,
}

/// What a process is doing at one instant of scenario time.
#[derive(Default)]
struct Phase {
    listed: bool,
    bytes: u64,
    /// Memory still used on the device after the process left the list.
    pending_release: u64,
    busy: bool,
}

impl SimulatedSource {
    /// `interval` is the poll interval (scenario seconds per poll) and
    /// `epoch` the Unix time of poll 1, from which start times derive.
    pub fn new(scenario: Scenario, interval: Duration, epoch: f64) -> Self {
        let procs = proctree::SimProcTree::new(&scenario.processes, epoch);
        let mut on_gpu = vec![Vec::new(); scenario.gpus.len()];
        for (i, p) in scenario.processes.iter().enumerate() {
            // Scenario::check refuses a GPU it lacks; such a process is on none.
            if let Some(list) = on_gpu.get_mut(p.gpu as usize) {
                list.push((i, p.kinds()));
            }
        }
        Self {
            on_gpu,
            scenario,
            interval: interval.as_secs_f64(),
            epoch,
            poll: 0,
            procs,
            ends: ends::Ends::default(),
        }
    }

    #[cfg(test)]
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    fn gpu_uuid(&self, g: usize) -> String {
        let given = self.scenario.gpus.get(g).and_then(|x| x.uuid.clone());
        given.unwrap_or_else(|| uuid_from(splitmix(self.scenario.seed ^ (g as u64 + 1))))
    }

    fn mig_uuid(&self, g: usize, i: usize) -> String {
        let gpu = splitmix(self.scenario.seed ^ (g as u64 + 1));
        format!("MIG-{}", &uuid_from(splitmix(gpu ^ (i as u64 + 0x51)))[4..])
    }

    /// Builds one device (a GPU, or MIG instance `instance` of it).
    fn device(&self, g: usize, instance: Option<usize>, t: f64) -> (RawDevice, Vec<(u32, u32)>) {
        let gpu = &self.scenario.gpus[g];
        let mut dev = self.device_shell(g);
        let (total, reserved) = match instance {
            // An instance: the GPU's shell under its own UUID, naming the GPU as its parent.
            Some(i) => {
                let (mig, d) = (&gpu.mig[i], &mut dev.device);
                d.parent_uuid = std::mem::take(&mut d.uuid);
                d.uuid = self.mig_uuid(g, i);
                d.index = None;
                d.name = format!("{} MIG {}", gpu.name, mig.profile);
                d.mig_profile = mig.profile.clone();
                (mig.memory.0, 0)
            }
            None => (gpu.memory.0, gpu.reserved.0),
        };
        let mut used = 0u64;
        let mine = &self.on_gpu[g];
        let mut util = Vec::with_capacity(mine.len());
        dev.processes.reserve(mine.len());
        let mine = mine.iter().map(|&(i, kinds)| (&self.scenario.processes[i], kinds));
        for (p, kinds) in mine.filter(|(p, _)| p.instance.map(|i| i as usize) == instance) {
            let ph = self.phase(p, t);
            used = used.saturating_add(ph.pending_release);
            if !ph.listed {
                continue;
            }
            used = used
                .saturating_add(ph.bytes)
                .saturating_add(self.scenario.overhead_per_process.0);
            util.push((p.pid, if ph.busy { p.sm_util } else { 0 }));
            dev.processes.push(RawProcess {
                pid: p.pid,
                used_bytes: (!p.unavailable).then_some(ph.bytes),
                kinds,
            });
        }
        dev.device.memory = memory(total, reserved, used);
        (dev, util)
    }

    /// Updates the `/proc` tree to scenario time `t` of loop `cycle`.
    fn sync_proc(&mut self, t: f64, cycle: u64) {
        let loop_len = self.scenario.loop_after.map(|l| l.0).unwrap_or(0.0);
        let ps = &self.scenario.processes;
        let epoch = self.epoch;
        let ends = &self.ends;
        self.procs.sync(
            ps,
            cycle,
            |i| proc_state(&ps[i], t, ends.stop_of(&ps[i])),
            |i| epoch + cycle as f64 * loop_len + ps[i].start.0,
        );
    }

    /// The lifecycle of `p` at scenario time `t` (see `Exit`) as NVML
    /// sees it; [`proc_state`] is the same lifecycle as /proc sees it.
    fn phase(&self, p: &SimProcess, t: f64) -> Phase {
        let none = Phase::default();
        let local = t - p.start.0;
        if local < 0.0 {
            return none;
        }
        let busy = p.busy_for.is_none_or(|b| local < b.0);
        let Some(stop) = stop_at(p, self.ends.stop_of(p)).filter(|s| local >= *s) else {
            return Phase {
                listed: true,
                bytes: self.bytes(p, local),
                busy,
                ..none
            };
        };
        let after = local - stop;
        let held = self.bytes(p, stop);
        let release = p.release_after.map(|r| r.0);
        match p.exit {
            Exit::Released if after < release.unwrap_or(0.0) => Phase {
                pending_release: held,
                ..none
            },
            Exit::Released => none,
            Exit::Exited if after < release.unwrap_or(30.0) => Phase {
                listed: true,
                bytes: held,
                ..none
            },
            Exit::Zombie if release.is_none_or(|r| after < r) => Phase {
                listed: true,
                bytes: held,
                ..none
            },
            Exit::Exited | Exit::Zombie => none,
        }
    }

    /// Memory of `p` at `local` seconds after its start.
    fn bytes(&self, p: &SimProcess, local: f64) -> u64 {
        if !p.trace_rows.is_empty() {
            let x = local * p.speed.unwrap_or(1.0);
            let i = p.trace_rows.partition_point(|r| r.0 <= x);
            return self.whole(p.trace_rows[i.saturating_sub(1)].1);
        }
        let mut b = p.memory.0 as f64;
        if let (Some(to), Some(ramp)) = (p.ramp_to, p.ramp) {
            let steps = f64::from(p.steps.unwrap_or(4).max(1));
            let frac = ((local / ramp.0.max(1e-9)) * steps).floor().min(steps) / steps;
            b += (to.0 as f64 - b) * frac;
        }
        b += p.leak.0 as f64 * local;
        if let Some(period) = p.period.filter(|x| x.0 > 0.0)
            && local % period.0 < period.0 / 2.0
        {
            b += p.sawtooth.0 as f64;
        }
        if p.jitter.0 > 0 {
            b += (splitmix(self.scenario.seed ^ u64::from(p.pid) << 20 ^ self.poll) % p.jitter.0) as f64;
        }
        self.whole(b.max(0.0) as u64)
    }

    /// `b` rounded down to the scenario's granularity.
    fn whole(&self, b: u64) -> u64 {
        let g = self.scenario.granularity.0.max(1);
        b - b % g
    }
}

impl GpuSource for SimulatedSource {
    fn poll(&mut self, sample_utilization: bool) -> Result<RawPoll, SourceError> {
        self.poll += 1;
        let mut t = (self.poll - 1) as f64 * self.interval;
        let mut cycle = 0;
        if let Some(l) = self.scenario.loop_after.filter(|l| l.0 > 0.0) {
            cycle = (t / l.0).floor() as u64;
            t -= cycle as f64 * l.0;
        }
        self.ends.advance(t, cycle);
        self.sync_proc(t, cycle);
        let mut devices = Vec::new();
        let mut utilization = sample_utilization.then(Utilization::new);
        for g in 0..self.scenario.gpus.len() {
            devices.extend(self.gpu_devices(g, t, utilization.as_mut()));
        }
        let d = &self.scenario.driver;
        Ok(RawPoll {
            driver: Some(DriverInfo {
                driver_version: d.driver_version.clone(),
                nvml_version: d.nvml_version.clone(),
                cuda_version: d.cuda_version.clone(),
            }),
            devices,
            utilization,
        })
    }

    fn demo_name(&self) -> Option<String> {
        Some(self.scenario.name.clone())
    }

    fn proc_tree(&self) -> Option<Arc<dyn ProcTree>> {
        Some(self.procs.tree())
    }

    fn simulated_kill(&self) -> Option<SimKill> {
        Some(self.ends.handle())
    }
}

impl SimulatedSource {
    /// GPU `g` at simulated time `t`: one device, or a MIG parent followed
    /// by its instances (whose utilisation samples go to `utilization`).
    fn gpu_devices(&self, g: usize, t: f64, mut utilization: Option<&mut Utilization>) -> Vec<RawDevice> {
        let gpu = &self.scenario.gpus[g];
        let lost =
            gpu.lost_from_poll.is_some_and(|f| self.poll >= f) && gpu.lost_until_poll.is_none_or(|u| self.poll < u);
        if lost {
            let mut dev = self.device_shell(g);
            // A lost GPU answers nothing, not even its bus id.
            dev.device.pci_bus_id.clear();
            dev.device.up = false;
            dev.device.errors = vec!["device: GPU is lost (fell off the bus)".into()];
            return vec![dev];
        }
        let instances: Vec<Option<usize>> = if gpu.mig.is_empty() {
            vec![None]
        } else {
            (0..gpu.mig.len()).map(Some).collect()
        };
        let mut parent_used = 0;
        let mut built = Vec::new();
        for inst in instances {
            let (mut dev, util) = self.device(g, inst, t);
            if let (Some(h), None) = (&gpu.health, inst) {
                let (health, events) = h.at(t, t - self.interval);
                dev.device.health = Some(health);
                dev.xid_events = events;
            }
            parent_used += dev.device.memory.map_or(0, |m| m.used_bytes);
            if let Some(u) = utilization.as_deref_mut() {
                u.insert(dev.device.uuid.clone(), util.into_iter().collect());
            }
            built.push(dev);
        }
        if !gpu.mig.is_empty() {
            built.insert(0, self.mig_parent(g, parent_used));
        }
        built
    }

    /// The MIG parent reports the whole GPU's memory and no processes: they
    /// are listed on the instances.
    fn mig_parent(&self, g: usize, instances_used: u64) -> RawDevice {
        let gpu = &self.scenario.gpus[g];
        let mut parent = self.device_shell(g);
        parent.device.memory = memory(gpu.memory.0, gpu.reserved.0, instances_used);
        parent
    }

    fn device_shell(&self, g: usize) -> RawDevice {
        let gpu = &self.scenario.gpus[g];
        RawDevice {
            device: Device {
                uuid: self.gpu_uuid(g),
                index: Some(g as u32),
                name: gpu.name.clone(),
                pci_bus_id: gpu
                    .pci_bus_id
                    .clone()
                    .unwrap_or_else(|| format!("00000000:{:02X}:00.0", 0x18 + g * 0x10)),
                up: true,
                ..Device::default()
            },
            ..RawDevice::default()
        }
    }
}

/// A device's memory of `total` bytes, `reserved` of them reserved, with
/// `used` capped at what reserved memory leaves.
fn memory(total: u64, reserved: u64, used: u64) -> Option<Memory> {
    let used = used.min(total.saturating_sub(reserved));
    Some(Memory {
        total_bytes: total,
        used_bytes: used,
        free_bytes: total - reserved - used,
        reserved_bytes: Some(reserved),
    })
}

/// When `p` stops, in seconds after its start: `stop`, the end of its
/// trace, or `ended` (by a simulated signal), whichever comes first.
fn stop_at(p: &SimProcess, ended: Option<f64>) -> Option<f64> {
    let trace_end = p.trace_rows.last().map(|r| r.0 / p.speed.unwrap_or(1.0));
    [p.stop.map(|s| s.0 - p.start.0), trace_end, ended]
        .into_iter()
        .flatten()
        .reduce(f64::min)
}

/// What `/proc` shows of `p` at scenario time `t`: its scenario state while
/// it runs (sleeping by default), Z while it is an unreaped `zombie`, and no
/// entry before it starts or once it exited.
fn proc_state(p: &SimProcess, t: f64, ended: Option<f64>) -> Option<ProcState> {
    let local = t - p.start.0;
    if local < 0.0 {
        return None;
    }
    let Some(stop) = stop_at(p, ended).filter(|s| local >= *s) else {
        return Some(p.running_state());
    };
    let release = p.release_after.map(|r| r.0);
    (p.exit == Exit::Zombie && release.is_none_or(|r| local - stop < r)).then_some(ProcState::Zombie)
}

/// SplitMix64: a tiny, well-mixed hash so the simulation needs no RNG crate.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn uuid_from(x: u64) -> String {
    let y = splitmix(x);
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        x >> 32,
        (x >> 16) & 0xffff,
        x & 0xffff,
        y >> 48,
        y & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests;
