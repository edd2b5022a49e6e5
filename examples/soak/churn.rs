//! The soak's fleet: [`ChurnSource`], a simulated `GpuSource` whose GPUs
//! replace a tenth of their processes every poll, with its own /proc tree
//! for the pipeline to attribute from (see `main.rs` for the shape).
//! Owns: PIDs, identities, memory figures and departures. Must not: read
//! the host's /proc or time: everything follows the poll counter.

use std::sync::Arc;

use gpumemd::collect::attribution::{
    CgroupInfo, MemProcess, MemTree, ProcState, ProcTree, Runtime, cgroup_path, clock_ticks,
};
use gpumemd::collect::source::{GpuSource, ProcessKinds, RawDevice, RawPoll, RawProcess, SourceError, Utilization};
use gpumemd::data::snapshot::{Device, DriverInfo, Memory};

use crate::Fleet;

const GIB: u64 = 1 << 30;
pub(crate) const MIB: u64 = 1 << 20;
const TOTAL: u64 = 141 * GIB;
const RESERVED: u64 = 600 * MIB;
/// The classic pid_max (still the default on many distributions): with
/// this churn PIDs wrap every few thousand polls and are reused all run
/// long, by new processes with new start times.
const PID_MAX: u32 = 32_768;
/// What each process's CUDA context adds to the device's used memory.
const CONTEXT: u64 = 6 * MIB;
/// Where in its 2400-poll swing the big jobs start: GPU 1 is then under
/// 2 GiB free for about 200 more polls, so the soak's headroom rule (2 m,
/// [`SOAK_RULES`]) fires and resolves within the first 300 polls, and a
/// short run at 64 x 1000 exercises the rules too.
const SWING_START: u64 = 748;
pub(crate) const EPOCH: f64 = 1_790_000_000.0;
const USERS: [&str; 8] = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"];
const COMMS: [&str; 6] = ["python3", "torchrun", "vllm", "jupyter-kernel", "train", "eval"];

/// How a replaced process leaves.
#[derive(Clone, Copy, PartialEq)]
enum Leaving {
    /// Still listed by NVML, gone from /proc.
    Exited,
    /// Still listed, state Z.
    Zombie,
    /// Not listed; its memory stays used (the driver releases it late).
    Unreleased,
}

#[derive(Clone)]
struct Proc {
    pid: u32,
    start_time: f64,
    /// (comm, uid, cgroup path).
    identity: Arc<(String, u32, String)>,
    base: u64,
    /// Growth per second of its life.
    leak: u64,
    born: u64,
    sm_util: u32,
}

struct Lingering {
    proc: Proc,
    how: Leaving,
    polls_left: u32,
    bytes: u64,
}

struct Gpu {
    uuid: String,
    slots: Vec<Proc>,
    lingering: Vec<Lingering>,
    /// Next churn slot to replace (round robin).
    next: usize,
}

/// A fleet with heavy PID churn; see the file's header.
pub(crate) struct ChurnSource {
    fleet: Fleet,
    poll: u64,
    next_pid: u32,
    /// PID_MAX, or more for a fleet that would not fit in it (64 x 1000
    /// holds 64,000 PIDs at once; 64-bit kernels raise pid_max with the CPU
    /// count for the same reason). Without room the search never ends.
    pid_max: u32,
    gpus: Vec<Gpu>,
    /// Identities are shared between processes of the same shape.
    identities: Vec<Arc<(String, u32, String)>>,
    /// The fleet's /proc, which the pipeline attributes from, and what it
    /// shows now per PID: (start ticks, state).
    tree: Arc<MemTree>,
    shown: std::collections::HashMap<u32, (u64, ProcState)>,
    /// PIDs held by a running process or a zombie: the set `spawn` must
    /// avoid. Kept as processes come and go; searching the fleet for each
    /// new PID made the churn quadratic (1.5 s a poll at 64 x 1000).
    taken: std::collections::HashSet<u32>,
}

/// SplitMix64, so the run is deterministic without an RNG crate.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl ChurnSource {
    pub(crate) fn new(fleet: Fleet) -> Self {
        let identities = (0..64u64)
            .map(|i| {
                let workload = CgroupInfo {
                    container_id: (i % 3 == 0).then(|| {
                        format!(
                            "{:016x}{:016x}{:016x}{:016x}",
                            mix(i),
                            mix(i + 1),
                            mix(i + 2),
                            mix(i + 3)
                        )
                        .into()
                    }),
                    container_runtime: (i % 3 == 0).then_some(Runtime::Containerd),
                    pod_uid: (i % 6 == 0)
                        .then(|| format!("{:08x}-0000-4000-8000-{:012x}", mix(i) as u32, mix(i) >> 16).into()),
                    job: (i % 3 == 1).then(|| format!("{}", 40_000 + i).into()),
                    unit: (i % 3 == 2).then(|| "jupyter.service".into()),
                    ..CgroupInfo::default()
                };
                Arc::new((
                    COMMS[(i % 6) as usize].to_string(),
                    1000 + (i % 8) as u32,
                    cgroup_path(&workload),
                ))
            })
            .collect();
        let tree = Arc::new(MemTree::new(EPOCH as u64 - 3600));
        tree.update(|w| w.set_passwd(USERS.iter().enumerate().map(|(i, u)| (1000 + i as u32, *u))));
        let mut s = ChurnSource {
            fleet,
            poll: 0,
            next_pid: 10_000,
            pid_max: PID_MAX.max(u32::try_from(fleet.gpus * fleet.per_gpu * 4).unwrap_or(u32::MAX)),
            gpus: Vec::new(),
            identities,
            tree,
            shown: Default::default(),
            taken: Default::default(),
        };
        for g in 0..fleet.gpus {
            let slots = (0..fleet.per_gpu).map(|i| s.spawn(g, i)).collect();
            s.gpus.push(Gpu {
                uuid: format!(
                    "GPU-{:08x}-{:04x}-4000-8000-{:012x}",
                    mix(g as u64) as u32,
                    g,
                    mix(g as u64) >> 16
                ),
                slots,
                lingering: Vec::new(),
                next: fleet.long_lived,
            });
        }
        s
    }

    /// A new process for slot `i` of GPU `g`, with a fresh PID and start time.
    fn spawn(&mut self, g: usize, i: usize) -> Proc {
        // As the kernel does: the next PID not held by a running process or
        // a zombie (an exited holder's PID is free again while NVML may
        // still list it: reuse then shows the same PID twice).
        let pid = loop {
            let pid = self.next_pid;
            self.next_pid = if pid + 1 >= self.pid_max { 300 } else { pid + 1 };
            if self.taken.insert(pid) {
                break pid;
            }
        };
        let r = mix(u64::from(pid) ^ (self.poll << 24));
        let f = self.fleet;
        // Up to 50 processes a GPU hold what real jobs do; a GPU with more
        // shares the same room among them (1000 jobs of 600 MiB would not
        // fit on any GPU, and every device rule would fire for good).
        let scale = |b: u64| b * 50 / f.per_gpu.max(50) as u64;
        // What the other processes of a GPU hold on average (and their
        // contexts), so the big jobs below put GPUs 0 and 1 where the rules
        // are meant to trip.
        let others = 8 * GIB
            + (f.long_lived - 2) as u64 * scale(3 * GIB)
            + (f.per_gpu - f.long_lived) as u64 * scale(600 * MIB)
            + f.per_gpu as u64 * CONTEXT;
        let (base, leak) = match (g, i) {
            // A training job that leaks 2 MiB/s (past the 1 MiB/s floor).
            (_, 0) => (8 * GIB, 2 * MIB),
            // GPU 0: about 80 % used, past 90 % at the peak of its swing.
            (0, 1) => ((112 * GIB).saturating_sub(others), 0),
            // GPU 1: about 85 % used, under 2 GiB free at the peak.
            (1, 1) => ((120 * GIB).saturating_sub(others), 0),
            (_, i) if i < f.long_lived => (scale(GIB) + (r % scale(4 * GIB)), 0),
            _ => (scale(64 * MIB) + (r % scale(GIB)), 0),
        };
        Proc {
            pid,
            start_time: EPOCH + self.poll as f64 + (r % 100) as f64 / 100.0,
            identity: self.identities[(r % self.identities.len() as u64) as usize].clone(),
            base,
            leak,
            born: self.poll,
            sm_util: if r.is_multiple_of(4) { 0 } else { (r % 100) as u32 },
        }
    }

    fn bytes(&self, p: &Proc, g: usize, slot: usize) -> u64 {
        let age = self.poll - p.born;
        let mut b = p.base + p.leak * age;
        // The big jobs grow by up to 30 GiB and shrink again over 40
        // minutes: GPU 0 crosses 90 % and GPU 1 the 2 GiB headroom for
        // several minutes each time.
        if slot == 1 && g < 2 {
            let phase = ((self.poll + SWING_START) % 2400) as f64 / 2400.0;
            b += (30.0 * GIB as f64 * (phase * std::f64::consts::TAU).sin().max(0.0)) as u64;
        }
        b
    }

    fn raw(&self, p: &Proc, bytes: u64) -> RawProcess {
        RawProcess {
            pid: p.pid,
            used_bytes: Some(bytes),
            kinds: ProcessKinds {
                compute: true,
                ..ProcessKinds::default()
            },
        }
    }

    /// Brings the fleet's /proc up to date: running processes sleep,
    /// zombies are Z, exited and released ones have no entry. Only what
    /// changed is written, as the simulated source does.
    fn sync_tree(&mut self) {
        let hz = clock_ticks() as f64;
        let btime = (EPOCH as u64 - 3600) as f64;
        let mut want: std::collections::HashMap<u32, (u64, ProcState, &Proc)> = Default::default();
        for gpu in &self.gpus {
            for p in &gpu.slots {
                let ticks = ((p.start_time - btime) * hz).round() as u64;
                want.insert(p.pid, (ticks, ProcState::Sleeping, p));
            }
            for l in gpu.lingering.iter().filter(|l| l.how == Leaving::Zombie) {
                let ticks = ((l.proc.start_time - btime) * hz).round() as u64;
                want.entry(l.proc.pid).or_insert((ticks, ProcState::Zombie, &l.proc));
            }
        }
        let shown = &mut self.shown;
        self.tree.update(|w| {
            shown.retain(|pid, _| {
                let keep = want.contains_key(pid);
                if !keep {
                    w.remove(*pid);
                }
                keep
            });
            for (pid, (ticks, state, p)) in &want {
                match shown.get(pid) {
                    Some(&(t, s)) if (t, s) == (*ticks, *state) => {}
                    Some(&(t, _)) if t == *ticks => {
                        w.set_state(*pid, *state);
                    }
                    _ => {
                        let (comm, uid, cgroup) = &*p.identity;
                        w.insert(MemProcess {
                            pid: *pid,
                            ppid: 1,
                            comm: comm.clone(),
                            state: *state,
                            start_ticks: *ticks,
                            uid: *uid,
                            cgroup: cgroup.clone(),
                            cmdline: Vec::new(),
                        });
                    }
                }
                shown.insert(*pid, (*ticks, *state));
            }
        });
    }

    /// Replaces processes: 10 % of each GPU's every poll, from its churn
    /// slots in turn, and the long-lived ones on their own schedules.
    fn churn(&mut self) {
        let f = self.fleet;
        for g in 0..f.gpus {
            let mut leaving = Vec::new();
            for _ in 0..f.replaced {
                let slot = self.gpus[g].next;
                self.gpus[g].next = if slot + 1 >= f.per_gpu { f.long_lived } else { slot + 1 };
                leaving.push(slot);
            }
            // The leaking job restarts every 50 minutes (its memory would
            // otherwise grow without end); the others every 3 hours.
            for slot in 0..f.long_lived {
                let age = self.poll - self.gpus[g].slots[slot].born;
                if (slot == 0 && age >= 3000) || age >= 10_800 + (g * 600 + slot * 97) as u64 {
                    leaving.push(slot);
                }
            }
            for slot in leaving {
                let old = self.gpus[g].slots[slot].clone();
                let bytes = self.bytes(&old, g, slot);
                let r = mix(u64::from(old.pid) ^ self.poll);
                let how = match r % 10 {
                    0 => Some((Leaving::Exited, 3)),
                    1 => Some((Leaving::Zombie, 3)),
                    2 => Some((Leaving::Unreleased, 40)),
                    _ => None,
                };
                // GPU 2's long-lived jobs stay listed after exit for 3
                // minutes: memory held by exited processes past the rule's 2 m.
                let how = if g == 2 && slot < f.long_lived {
                    Some((Leaving::Exited, 180))
                } else {
                    how
                };
                // A zombie keeps its PID until it is reaped; any other
                // leaver frees it at once.
                if how.is_none_or(|(h, _)| h != Leaving::Zombie) {
                    self.taken.remove(&old.pid);
                }
                if let Some((how, polls_left)) = how {
                    self.gpus[g].lingering.push(Lingering {
                        proc: old,
                        how,
                        polls_left,
                        bytes,
                    });
                }
                let new = self.spawn(g, slot);
                self.gpus[g].slots[slot] = new;
            }
            let taken = &mut self.taken;
            self.gpus[g].lingering.retain_mut(|l| {
                l.polls_left -= 1;
                let stays = l.polls_left > 0;
                if !stays && l.how == Leaving::Zombie {
                    taken.remove(&l.proc.pid);
                }
                stays
            });
        }
    }
}

impl GpuSource for ChurnSource {
    fn poll(&mut self, sample_utilization: bool) -> Result<RawPoll, SourceError> {
        self.poll += 1;
        self.churn();
        self.sync_tree();
        let mut devices = Vec::with_capacity(self.fleet.gpus);
        let mut utilization = sample_utilization.then(Utilization::new);
        for (g, gpu) in self.gpus.iter().enumerate() {
            let mut processes = Vec::with_capacity(self.fleet.per_gpu + gpu.lingering.len());
            let mut used = 0u64;
            let mut util = rustc_hash::FxHashMap::default();
            for (slot, p) in gpu.slots.iter().enumerate() {
                let b = self.bytes(p, g, slot);
                used += b + CONTEXT;
                util.insert(p.pid, p.sm_util);
                processes.push(self.raw(p, b));
            }
            for l in &gpu.lingering {
                used += l.bytes;
                match l.how {
                    Leaving::Exited | Leaving::Zombie => processes.push(self.raw(&l.proc, l.bytes)),
                    Leaving::Unreleased => {}
                }
            }
            let used = used.min(TOTAL - RESERVED);
            if let Some(u) = utilization.as_mut() {
                u.insert(gpu.uuid.clone(), util);
            }
            devices.push(RawDevice {
                device: Device {
                    uuid: gpu.uuid.clone(),
                    index: Some(g as u32),
                    name: "NVIDIA H200".into(),
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + g * 0x10),
                    up: true,
                    memory: Some(Memory {
                        total_bytes: TOTAL,
                        used_bytes: used,
                        free_bytes: TOTAL - RESERVED - used,
                        reserved_bytes: Some(RESERVED),
                    }),
                    ..Device::default()
                },
                processes,
                ..RawDevice::default()
            });
        }
        Ok(RawPoll {
            driver: Some(DriverInfo {
                driver_version: "580.95.05".into(),
                nvml_version: "13.580.95.05".into(),
                cuda_version: "13.0".into(),
            }),
            devices,
            utilization,
        })
    }

    fn proc_tree(&self) -> Option<Arc<dyn ProcTree>> {
        Some(self.tree.clone())
    }
}
