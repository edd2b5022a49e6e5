//! The scenario format of the simulated fleet: GPUs, processes with memory
//! shapes and lifecycles, and recorded traces to replay. Owns parsing,
//! validation and the built-in scenarios; it computes nothing per poll (that
//! is `simulated.rs`). Scenario files are TOML; see docs/scenarios.md.

use std::path::Path;

use arcstr::ArcStr;
use serde::Deserialize;

use crate::data::files::{MAX_SCENARIO_BYTES, MAX_TRACE_BYTES, read_regular};
use crate::data::units::ByteSize;

mod error;
mod health;
mod process;
pub use error::{ScenarioError, ScenarioProblem};
pub use health::{SimHealth, SimXid};
pub use process::{Exit, SimProcess};

/// Seconds of simulated time, written like a duration ("0s", "20s", "5m").
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd)]
pub struct Secs(pub f64);

impl<'de> Deserialize<'de> for Secs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(s.trim())
            .map(|d| Secs(d.as_secs_f64()))
            .map_err(|e| serde::de::Error::custom(format!("`{s}` is not a duration ({e}); use e.g. \"20s\"")))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub seed: u64,
    /// Scenario time wraps after this long; processes then start again with
    /// new start times, as restarted jobs would.
    #[serde(rename = "loop")]
    pub loop_after: Option<Secs>,
    /// Used memory that per-process lists never show, per listed process
    /// (the real H200 traces show 5-6 MiB per CUDA process).
    #[serde(default = "default_overhead")]
    pub overhead_per_process: ByteSize,
    /// Processes' memory is reported in whole multiples of this (rounded
    /// down). NVML lists processes' memory in whole MiB on current drivers;
    /// the default, 1 byte, keeps a scenario's figures as computed.
    #[serde(default = "default_granularity")]
    pub granularity: ByteSize,
    #[serde(default)]
    pub driver: SimDriver,
    #[serde(rename = "gpu")]
    pub gpus: Vec<SimGpu>,
    #[serde(rename = "process", default)]
    pub processes: Vec<SimProcess>,
}

fn default_overhead() -> ByteSize {
    ByteSize(6 << 20)
}

fn default_granularity() -> ByteSize {
    ByteSize(1)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimDriver {
    pub driver_version: String,
    pub nvml_version: String,
    pub cuda_version: String,
}

impl Default for SimDriver {
    fn default() -> Self {
        Self {
            driver_version: "580.95.05".into(),
            nvml_version: "13.580.95.05".into(),
            cuda_version: "13.0".into(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimGpu {
    #[serde(default = "default_gpu_name")]
    pub name: String,
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    pub memory: ByteSize,
    #[serde(default)]
    pub reserved: ByteSize,
    /// The GPU answers GPU_IS_LOST from this poll on (1-based).
    pub lost_from_poll: Option<u64>,
    /// ... until this poll, when it is back.
    pub lost_until_poll: Option<u64>,
    /// MIG instances; when non-empty the GPU is MIG-enabled.
    #[serde(default)]
    pub mig: Vec<SimMig>,
    /// Memory health; none: the GPU reports no health at all.
    pub health: Option<SimHealth>,
}

fn default_gpu_name() -> String {
    "NVIDIA H100 80GB HBM3".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimMig {
    pub profile: String,
    pub memory: ByteSize,
}

pub const BUILTIN_NAMES: &[&str] = &["default", "gpu-lost", "mig", "large"];

impl Scenario {
    /// A built-in scenario by name, or a scenario file when the argument ends
    /// in `.toml` or names an existing file.
    ///
    /// # Errors
    /// Unknown names, unreadable or invalid files, traces that do not parse.
    pub fn resolve(arg: &str) -> Result<Scenario, ScenarioError> {
        let text = match arg {
            "default" => include_str!("scenarios/default.toml"),
            "gpu-lost" => include_str!("scenarios/gpu-lost.toml"),
            "mig" => include_str!("scenarios/mig.toml"),
            "large" => return Ok(large(64, 1000)),
            _ if arg.ends_with(".toml") || Path::new(arg).is_file() => return Scenario::load(Path::new(arg)),
            _ => return Err(ScenarioError::Unknown(arg.to_string())),
        };
        Scenario::parse(text, arg, None)
    }

    /// Loads a scenario file; trace paths are relative to its folder.
    ///
    /// # Errors
    /// See [`Scenario::resolve`].
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = read_regular(path, MAX_SCENARIO_BYTES).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Scenario::parse(&text, &path.display().to_string(), path.parent())
    }

    /// Parses scenario text; `base` resolves relative trace paths.
    ///
    /// # Errors
    /// See [`Scenario::resolve`].
    pub fn parse(text: &str, origin: &str, base: Option<&Path>) -> Result<Scenario, ScenarioError> {
        let invalid = |problem: ScenarioProblem| ScenarioError::Invalid {
            origin: origin.to_string(),
            problem,
        };
        let mut s: Scenario = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|sp| text[..sp.start.min(text.len())].matches('\n').count() + 1);
            let message = e.message().lines().next().unwrap_or("invalid").to_string();
            invalid(ScenarioProblem::Toml { line, message })
        })?;
        s.check().map_err(&invalid)?;
        for p in &mut s.processes {
            if let Some(trace) = &p.trace {
                let path = base.map(|b| b.join(trace)).unwrap_or_else(|| trace.clone());
                p.trace_rows = read_trace(&path, p.trace_pid).map_err(&invalid)?;
            }
        }
        Ok(s)
    }

    fn check(&self) -> Result<(), ScenarioProblem> {
        if self.gpus.is_empty() {
            return Err(ScenarioProblem::NoGpus);
        }
        // The simulation computes free = memory - reserved - used.
        if let Some((i, g)) = self.gpus.iter().enumerate().find(|(_, g)| g.reserved.0 > g.memory.0) {
            return Err(ScenarioProblem::ReservedAboveMemory {
                gpu: i,
                reserved: g.reserved.0,
                memory: g.memory.0,
            });
        }
        for p in &self.processes {
            let gpu = self.gpus.get(p.gpu as usize).ok_or(ScenarioProblem::NoSuchGpu {
                pid: p.pid,
                gpu: p.gpu,
                gpus: self.gpus.len(),
            })?;
            if let Some(i) = p.instance {
                if i as usize >= gpu.mig.len() {
                    return Err(ScenarioProblem::NoSuchInstance {
                        pid: p.pid,
                        instance: i,
                        gpu: p.gpu,
                        instances: gpu.mig.len(),
                    });
                }
            } else if !gpu.mig.is_empty() {
                return Err(ScenarioProblem::NeedsInstance { pid: p.pid, gpu: p.gpu });
            }
            if p.pid == 0 {
                return Err(ScenarioProblem::ZeroPid);
            }
        }
        Ok(())
    }
}

/// Reads `t_seconds,pid,used_bytes` rows, keeping one PID (the given one, or
/// the first seen) and making time relative to its first row.
fn read_trace(path: &Path, want_pid: Option<u32>) -> Result<Vec<(f64, u64)>, ScenarioProblem> {
    let text = read_regular(path, MAX_TRACE_BYTES).map_err(|source| ScenarioProblem::TraceRead {
        path: path.to_path_buf(),
        source,
    })?;
    let mut rows = Vec::new();
    let mut pid = want_pid;
    for (i, line) in text.lines().enumerate().skip(1) {
        let bad = || ScenarioProblem::TraceRow {
            path: path.to_path_buf(),
            line: i + 1,
        };
        let mut f = line.split(',');
        let (Some(t), Some(p), Some(b)) = (f.next(), f.next(), f.next()) else {
            if line.trim().is_empty() {
                continue;
            }
            return Err(bad());
        };
        let t: f64 = t.trim().parse().map_err(|_| bad())?;
        let p: u32 = p.trim().parse().map_err(|_| bad())?;
        let b: u64 = b.trim().parse().map_err(|_| bad())?;
        if *pid.get_or_insert(p) == p && t.is_finite() {
            rows.push((t, b));
        }
    }
    let Some(&(t0, _)) = rows.first() else {
        return Err(ScenarioProblem::TraceEmpty(path.to_path_buf()));
    };
    rows.iter_mut().for_each(|r| r.0 -= t0);
    Ok(rows)
}

/// A generated fleet for scale tests: `gpus` H200s with `per_gpu` processes
/// each, a few users and jobs, some leaking. Process `i` of a GPU is
/// `worker-{i % 16}` of `user{i % 8}` in job `9000 + i % 32`.
pub fn large(gpus: usize, per_gpu: usize) -> Scenario {
    let mut processes = Vec::with_capacity(gpus * per_gpu);
    // One string per distinct name, shared by every process that has it,
    // as a real host's processes share their few users and commands.
    let names = |n: usize, f: fn(usize) -> String| (0..n).map(|i| ArcStr::from(f(i))).collect::<Vec<_>>();
    let (comms, users, jobs) = (
        names(16, |i| format!("worker-{i}")),
        names(8, |i| format!("user{i}")),
        names(32, |i| format!("{}", 9000 + i)),
    );
    for g in 0..gpus {
        for i in 0..per_gpu {
            processes.push(SimProcess {
                pid: 100_000 + (g * per_gpu + i) as u32,
                gpu: g as u32,
                sm_util: (i % 5) as u32 * 20,
                memory: ByteSize((64 + (i as u64 * 37) % 128) << 20),
                jitter: ByteSize(1 << 20),
                leak: ByteSize(if i % 97 == 0 { 64 << 10 } else { 0 }),
                comm: comms[i % 16].clone(),
                user: users[i % 8].clone(),
                uid: 2000 + (i % 8) as u32,
                job: jobs[i % 32].clone(),
                ..SimProcess::default()
            });
        }
    }
    Scenario {
        name: "large".into(),
        description: "64 GPUs x 1000 processes, for scale".into(),
        seed: 64,
        loop_after: None,
        overhead_per_process: ByteSize(0),
        // Whole MiB, as NVML lists processes on the GPUs this fleet stands
        // for: what the per-process history then holds is what it holds on
        // a real host of this size.
        granularity: ByteSize(1 << 20),
        driver: SimDriver::default(),
        // H200s without MIG.
        gpus: vec![
            SimGpu {
                name: "NVIDIA H200".into(),
                memory: ByteSize(141 << 30),
                reserved: ByteSize(600 << 20),
                ..SimGpu::default()
            };
            gpus
        ],
        processes,
    }
}
