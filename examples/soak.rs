//! Soak test: a million polls of a fleet with heavy PID churn through
//! everything the daemon runs per poll, checking that retained state and
//! per-poll cost stay flat.
//!
//! ```sh
//! cargo run --release --example soak -- --polls 1000000
//! ```
//!
//! The fleet (`ChurnSource`, `--gpus` x `--per-gpu`, default 4 x 10): every
//! poll 10 % of each GPU's processes are replaced by new ones with a fresh
//! PID and start time; some of those leave as exited or zombie holders for a
//! few polls, or leave memory the driver releases late. PIDs wrap at 32768,
//! so they are reused all run long. Long-lived processes leak, fill GPUs
//! past 90 % and hold memory after exit, so every default rule goes pending,
//! fires and resolves over and over. The snapshot clock advances 1 s per
//! poll, so the leak window (10 m), late release (30 s) and rule `for`
//! durations all elapse many times. The default size is what a million
//! polls allow in under 3 minutes on 2 cores; `--gpus 8 --per-gpu 50` is a
//! big node, for fewer polls.
//!
//! Two threads, as in the daemon: the poll thread runs the source and
//! `Pipeline::build` (attribution, holder split, late release, idle, leak
//! trend); the alert loop runs `AlertEngine::evaluate` with the default
//! rules and builds the view the API publishes, and every `--render-every`
//! polls renders the Prometheus exposition (every 100th, the JSON snapshot).
//!
//! Measured per window of `--window` polls: wall and CPU time per poll (and
//! per stage), the process's VmRSS, and the sizes of the pipeline's and the
//! alert engine's state. Exits 1 when, after the first window (warm-up),
//! VmRSS grew by more than 10 % or 4 MiB (whichever is larger), when the
//! per-poll cost of the last window is more than 1.5x the first window's,
//! or when per-process state outgrew the processes listed. Cost is judged
//! two ways, and only a rise in both fails the run: the lower quartile of
//! 1000-poll chunks' (a tenth of a shorter window's) wall time (more work shifts every chunk, another
//! process taking the CPU for a while shifts only some) and CPU time per
//! poll (which competition for the CPU barely moves). `--inject-leak`
//! checks the checks: it keeps every 100th snapshot and walks them all each
//! poll, and the run must then fail on both memory and cost.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a failed step ends the run

use std::process::ExitCode;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use gpumemd::alerts::AlertEngine;
use gpumemd::attribution::{CgroupInfo, MemProcess, MemTree, ProcState, ProcTree, Runtime, cgroup_path, clock_ticks};
use gpumemd::config::{Config, GroupBy};
use gpumemd::metrics::{DaemonState, Format, render};
use gpumemd::pipeline::{Pipeline, Retained};
use gpumemd::snapshot::{Device, DriverInfo, Memory, PollStats, Snapshot};
use gpumemd::source::{GpuSource, ProcessKinds, RawDevice, RawPoll, RawProcess, SourceError, Utilization};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
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
const EPOCH: f64 = 1_790_000_000.0;
/// Static fullness rules with short windows, besides the defaults: the
/// defaults' own are info over 30 minutes and more (a GPU full by design
/// pages nobody), longer than a short run, which must still see alerts
/// fire and resolve.
const SOAK_RULES: &str = r#"
[[rule]]
name = "SoakMemoryHigh"
kind = "device_used_ratio"
above = "90%"
clear = "85%"
for = "5m"
[[rule]]
name = "SoakHeadroomLow"
kind = "device_free_bytes"
below = "2GiB"
clear = "3GiB"
for = "2m"
"#;
const USERS: [&str; 8] = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"];
const COMMS: [&str; 6] = ["python3", "torchrun", "vllm", "jupyter-kernel", "train", "eval"];

struct Args {
    polls: u64,
    window: u64,
    render_every: u64,
    fleet: Fleet,
    /// Self-test: keep state that grows, so the run must fail.
    inject_leak: bool,
}

/// The fleet's shape.
#[derive(Clone, Copy)]
struct Fleet {
    gpus: usize,
    per_gpu: usize,
    /// Slots 0..long_lived of each GPU hold long-running jobs; the rest churn.
    long_lived: usize,
    /// New processes per GPU per poll: 10 % of the GPU's processes.
    replaced: usize,
}

impl Fleet {
    fn new(gpus: usize, per_gpu: usize) -> Self {
        Fleet {
            gpus,
            per_gpu,
            long_lived: (per_gpu / 5).max(2),
            replaced: (per_gpu / 10).max(1),
        }
    }
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        polls: 1_000_000,
        window: 100_000,
        render_every: 10,
        fleet: Fleet::new(4, 10),
        inject_leak: false,
    };
    let (mut gpus, mut per_gpu) = (4, 10);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&v: &u64| v > 0)
                .ok_or_else(|| format!("{name} needs a positive number"))
        };
        match flag.as_str() {
            "--polls" => a.polls = value("--polls")?,
            "--window" => a.window = value("--window")?,
            "--render-every" => a.render_every = value("--render-every")?,
            "--gpus" => gpus = value("--gpus")? as usize,
            "--per-gpu" => per_gpu = value("--per-gpu")?.max(3) as usize,
            "--inject-leak" => a.inject_leak = true,
            "-h" | "--help" => {
                return Err(
                    "usage: soak [--polls N] [--window N] [--render-every N] [--gpus N] [--per-gpu N] [--inject-leak]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other}; see --help")),
        }
    }
    a.fleet = Fleet::new(gpus, per_gpu);
    if a.polls < 2 * a.window {
        return Err(format!(
            "--polls ({}) must cover at least two windows of {} (warm-up and one to compare)",
            a.polls, a.window
        ));
    }
    Ok(a)
}

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
struct ChurnSource {
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
    fn new(fleet: Fleet) -> Self {
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

/// VmRSS of this process, bytes.
fn rss() -> u64 {
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
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let f: Vec<u64> = after_comm.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    // utime and stime are fields 14 and 15; index 0 here is field 3.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn mib(b: u64) -> f64 {
    b as f64 / MIB as f64
}

/// One poll's result, from the poll thread to the alert loop.
struct Polled {
    n: u64,
    snap: Arc<Snapshot>,
    /// Time in the source and in the pipeline.
    source: Duration,
    pipeline: Duration,
    /// Set when the pipeline's state outgrew what is listed: the run fails.
    problem: Option<String>,
    retained: Retained,
    listed: usize,
}

/// The poll thread: source and pipeline, as the daemon's `gpumemd-poll`.
fn poll_thread(
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
struct Window {
    cpu_us: f64,
    wall_us: f64,
    /// Lower quartile of the window's chunks of polls, wall us per poll:
    /// what the work costs when nothing else competes for the CPU.
    p25_us: f64,
    rss: u64,
}

const CHUNK: u64 = 1000;

fn main() -> ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::from(2);
        }
    };
    let mut cfg = Config::defaults(false);
    cfg.processes.group_by = vec![GroupBy::User, GroupBy::Container, GroupBy::Job];
    let mut rules = cfg.effective_rules();
    let soak = gpumemd::rules::parse_rule_set(SOAK_RULES).expect("the soak's rules parse");
    rules.extend(soak.into_iter().map(|c| gpumemd::rules::Rule::new(c).expect("valid")));
    let f = args.fleet;
    println!(
        "soak: {} polls, {} GPUs x {} processes ({} long-lived), {} replaced per GPU per poll, {} rules, render every {} polls",
        args.polls,
        f.gpus,
        f.per_gpu,
        f.long_lived,
        f.replaced,
        rules.len(),
        args.render_every
    );
    // As in the daemon: a poll thread (source, pipeline) hands snapshots to
    // the alert loop, which evaluates and publishes a view; scrapes render
    // from the same snapshot. A short queue keeps the poller from running
    // ahead, like the daemon's one-poll-per-tick.
    let (tx, rx) = mpsc::sync_channel::<Polled>(4);
    let util_every = cfg.processes.utilization_interval.get().as_secs().max(1);
    let poller = {
        let src = ChurnSource::new(f);
        let (pipeline, polls) = (Pipeline::for_source(&cfg.processes, &src), args.polls);
        std::thread::Builder::new()
            .name("soak-poll".into())
            .spawn(move || poll_thread(src, pipeline, polls, util_every, tx))
            .expect("spawn the poll thread")
    };
    let mut engine = AlertEngine::new(rules, "soak".into(), cfg.alerting.recent_transitions);
    let build = gpumemd::build_info();

    let mut windows: Vec<Window> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let (mut fired, mut resolved, mut max_listed) = (0u64, 0u64, 0usize);
    let mut exposition_bytes = 0usize;
    let (mut w_cpu, mut w_wall, mut chunk_start) = (cpu_time(), Instant::now(), Instant::now());
    let mut chunks: Vec<f64> = Vec::new();
    // A window of fewer than 10,000 polls (a big fleet's short run) still
    // gets ten chunks, so its lower quartile means something.
    let chunk = CHUNK.min(args.window / 10).max(1);
    // Time per stage in the window: source, pipeline (poll thread), rules,
    // the published view, exposition and JSON (alert loop).
    let mut stages = [Duration::ZERO; 5];
    let mut last = 0;
    // --inject-leak: what a bug would do, keeping every 100th snapshot and
    // walking them all on every poll (memory and cost both grow).
    let mut leaked: Vec<Arc<Snapshot>> = Vec::new();
    for p in rx.iter() {
        let n = p.n;
        last = n;
        stages[0] += p.source;
        stages[1] += p.pipeline;
        max_listed = max_listed.max(p.listed);
        if let Some(problem) = p.problem {
            failures.push(problem);
            break;
        }
        let t0 = Instant::now();
        for t in engine.evaluate(&p.snap) {
            match t.to {
                gpumemd::rules::eval::State::Firing => fired += 1,
                gpumemd::rules::eval::State::Resolved => resolved += 1,
                gpumemd::rules::eval::State::Pending => {}
            }
        }
        let t_eval = Instant::now();
        // The alert loop publishes a fresh view after every evaluation.
        let view = Arc::new(engine.view());
        let t1 = Instant::now();
        if n % args.render_every == 0 {
            let daemon = DaemonState {
                alerts: Some(&view),
                ..DaemonState::default()
            };
            exposition_bytes = render(&p.snap, &daemon, &cfg.processes, &build, Format::Prometheus).len();
        }
        if n % 100 == 0 {
            let _ = serde_json::to_vec(&*p.snap).map(|v| v.len());
        }
        if args.inject_leak {
            if n % 100 == 0 {
                leaked.push(p.snap.clone());
            }
            let walked: u64 = leaked
                .iter()
                .flat_map(|s| s.devices.iter().flat_map(|d| d.processes.iter()))
                .map(|p| p.used_bytes.unwrap_or(0))
                .sum();
            std::hint::black_box(walked);
        }
        stages[2] += t_eval - t0;
        stages[3] += t1 - t_eval;
        stages[4] += t1.elapsed();
        if n % chunk == 0 {
            chunks.push(chunk_start.elapsed().as_secs_f64() * 1e6 / chunk as f64);
            chunk_start = Instant::now();
        }
        if n % args.window == 0 {
            let (cpu, wall) = (cpu_time() - w_cpu, w_wall.elapsed());
            chunks.sort_by(f64::total_cmp);
            let w = Window {
                cpu_us: cpu.as_secs_f64() * 1e6 / args.window as f64,
                wall_us: wall.as_secs_f64() * 1e6 / args.window as f64,
                p25_us: chunks.get(chunks.len() / 4).copied().unwrap_or(0.0),
                rss: rss(),
            };
            let us = |d: Duration| d.as_secs_f64() * 1e6 / args.window as f64;
            let r = p.retained;
            println!(
                "window {:>2}: polls {:>8}-{:<8} cpu {:>6.1} us/poll  wall {:>6.1} us/poll (p25 {:.1}; source {:.1}, \
                 pipeline {:.1}, rules {:.1}, view {:.1}, render {:.1})  VmRSS {:>5.1} MiB  listed {} leak_series {} idle {} \
                 late_pending {}  alerts {} transitions kept {}  exposition {} KiB",
                windows.len() + 1,
                n - args.window + 1,
                n,
                w.cpu_us,
                w.wall_us,
                w.p25_us,
                us(stages[0]),
                us(stages[1]),
                us(stages[2]),
                us(stages[3]),
                us(stages[4]),
                mib(w.rss),
                p.listed,
                r.leak_series,
                r.idle_entries,
                r.late_pending,
                view.alerts.len(),
                view.transitions.len(),
                exposition_bytes / 1024
            );
            windows.push(w);
            stages = [Duration::ZERO; 5];
            chunks.clear();
            (w_cpu, w_wall) = (cpu_time(), Instant::now());
        }
    }
    drop(rx);
    if poller.join().is_err() {
        failures.push("the poll thread panicked".into());
    } else if last != args.polls && failures.is_empty() {
        failures.push(format!("the poll thread stopped after {last} polls"));
    }
    println!("alerts fired {fired}, resolved {resolved}; at most {max_listed} processes listed in one poll");
    if fired == 0 || resolved == 0 {
        failures.push("no alert fired and resolved: the fleet does not exercise the rules".into());
    }
    if let (Some(first), Some(last)) = (windows.first(), windows.last()) {
        let growth = last.rss.saturating_sub(first.rss);
        let allowed = (first.rss / 10).max(4 * MIB);
        println!(
            "VmRSS after warm-up {:.1} MiB, at the end {:.1} MiB: +{:.2} MiB (allowed {:.1} MiB)",
            mib(first.rss),
            mib(last.rss),
            mib(growth),
            mib(allowed)
        );
        if growth > allowed {
            failures.push(format!("VmRSS grew by {:.2} MiB after warm-up", mib(growth)));
        }
        // More work per poll raises both; another process competing for
        // the CPU raises wall time far more than CPU time.
        let p25_ratio = last.p25_us / first.p25_us.max(f64::MIN_POSITIVE);
        let cpu_ratio = last.cpu_us / first.cpu_us.max(f64::MIN_POSITIVE);
        let ratio = p25_ratio.min(cpu_ratio);
        println!(
            "per-poll cost, first window: {:.1} us wall (p25 {:.1}), {:.1} us CPU; last: {:.1} us wall (p25 {:.1}), \
             {:.1} us CPU; ratio {p25_ratio:.2}x wall p25, {cpu_ratio:.2}x CPU (allowed 1.5x)",
            first.wall_us, first.p25_us, first.cpu_us, last.wall_us, last.p25_us, last.cpu_us
        );
        if ratio > 1.5 {
            failures.push(format!(
                "per-poll cost rose {ratio:.2}x from the first window to the last"
            ));
        }
    }
    if failures.is_empty() {
        println!("soak: PASS");
        ExitCode::SUCCESS
    } else {
        for f in &failures {
            println!("soak: FAIL: {f}");
        }
        ExitCode::FAILURE
    }
}
