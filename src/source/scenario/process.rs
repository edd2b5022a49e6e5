//! One simulated process as the scenario holds it: [`SimProcess`]. Owns its
//! TOML form (`[[process]]`, every field flat, as docs/scenarios.md lists
//! them) and the compact form that form becomes. Must not compute anything
//! per poll (that is `simulated.rs`).
//!
//! Why two forms: the `large` fleet holds 64 000 processes, and the flat
//! form (a dozen strings and twenty options, about 450 bytes plus its
//! strings) cost about 45 MB there. The compact form keeps inline only what
//! every process has (pid, placement, base memory, leak, jitter), shares
//! what processes that look alike share (names, workload, command line: an
//! [`Arc<SimIdentity>`], 32 of them in `large`), and boxes the rarer shape
//! and lifecycle knobs ([`SimShape`]: a leak, in one process of 97 in
//! `large`): 56 bytes a process.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use super::{ScenarioProblem, Secs};
use crate::attribution::ProcState;
use crate::source::ProcessKinds;
use crate::units::ByteSize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exit {
    /// Leaves the list; its memory is freed `release_after` later.
    #[default]
    Released,
    /// Stays listed, gone from /proc, for `release_after`.
    Exited,
    /// Becomes a zombie, still listed, for `release_after`.
    Zombie,
}

/// Who a process is: what `/proc` and the name service show of it. Shared
/// between the processes that look alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimIdentity {
    pub comm: String,
    pub user: String,
    pub uid: u32,
    /// The NVML lists it is in (`type`, default compute).
    pub kinds: ProcessKinds,
    /// What /proc says while it runs (`state`, default sleeping; "disk-sleep"
    /// is D: live, unless it stays past `[processes] stuck_after`).
    pub state: ProcState,
    pub container: String,
    pub container_runtime: String,
    pub pod_uid: String,
    pub qos_class: String,
    pub unit: String,
    pub slice: String,
    pub job: String,
    pub cmdline: String,
}

/// The rarer knobs: lifecycle, memory shape past a constant, a leak,
/// utilisation that stops, trace replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimShape {
    /// Growth per second (a leak).
    pub leak: ByteSize,
    pub stop: Option<Secs>,
    pub exit: Exit,
    pub release_after: Option<Secs>,
    /// Warm-up of a caching allocator: `steps` steps to `ramp_to` over `ramp`.
    pub ramp_to: Option<ByteSize>,
    pub ramp: Option<Secs>,
    pub steps: Option<u32>,
    /// Extra memory held during the first half of every `period`.
    pub sawtooth: ByteSize,
    pub period: Option<Secs>,
    pub unavailable: bool,
    /// SM utilisation drops to 0 this long after start.
    pub busy_for: Option<Secs>,
    pub trace: Option<PathBuf>,
    pub speed: Option<f64>,
    pub trace_pid: Option<u32>,
    /// (seconds from the trace's start, used bytes), read at load.
    pub trace_rows: Vec<(f64, u64)>,
}

/// The shape of a process that sets none of [`SimShape`]'s knobs.
static PLAIN: SimShape = SimShape {
    leak: ByteSize(0),
    stop: None,
    exit: Exit::Released,
    release_after: None,
    ramp_to: None,
    ramp: None,
    steps: None,
    sawtooth: ByteSize(0),
    period: None,
    unavailable: false,
    busy_for: None,
    trace: None,
    speed: None,
    trace_pid: None,
    trace_rows: Vec::new(),
};

/// One simulated process (see the module docs for its layout).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "ProcessToml")]
pub struct SimProcess {
    pub pid: u32,
    pub gpu: u32,
    /// The MIG instance (a GPU has at most 7).
    pub instance: Option<u16>,
    /// SM utilisation percent while busy, 0 to 100.
    pub sm_util: u8,
    pub start: Secs,
    /// Base memory.
    pub memory: ByteSize,
    pub jitter: ByteSize,
    pub who: Arc<SimIdentity>,
    /// `None`: every knob at its default.
    pub more: Option<Box<SimShape>>,
}

impl SimProcess {
    /// The process's shape knobs (defaults when it sets none).
    pub fn shape(&self) -> &SimShape {
        self.more.as_deref().unwrap_or(&PLAIN)
    }

    /// The knobs, to set one (boxed on first use).
    pub fn shape_mut(&mut self) -> &mut SimShape {
        self.more.get_or_insert_with(Box::default)
    }
}

/// `[[process]]` as written in a scenario file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ProcessToml {
    gpu: u32,
    instance: Option<u32>,
    pid: u32,
    comm: String,
    user: String,
    uid: u32,
    #[serde(rename = "type")]
    kind: Option<String>,
    state: Option<String>,
    container: String,
    container_runtime: String,
    pod_uid: String,
    qos_class: String,
    unit: String,
    slice: String,
    job: String,
    cmdline: String,
    start: Secs,
    stop: Option<Secs>,
    exit: Exit,
    release_after: Option<Secs>,
    memory: ByteSize,
    ramp_to: Option<ByteSize>,
    ramp: Option<Secs>,
    steps: Option<u32>,
    leak: ByteSize,
    sawtooth: ByteSize,
    period: Option<Secs>,
    jitter: ByteSize,
    unavailable: bool,
    sm_util: u32,
    busy_for: Option<Secs>,
    trace: Option<PathBuf>,
    speed: Option<f64>,
    trace_pid: Option<u32>,
}

impl TryFrom<ProcessToml> for SimProcess {
    type Error = ScenarioProblem;

    fn try_from(t: ProcessToml) -> Result<Self, ScenarioProblem> {
        let state = match t.state.as_deref() {
            None => ProcState::Sleeping,
            Some(name) => ProcState::from_name(name).ok_or_else(|| ScenarioProblem::UnknownState {
                pid: t.pid,
                name: name.to_owned(),
            })?,
        };
        if t.speed.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
            return Err(ScenarioProblem::BadSpeed(t.pid));
        }
        let sm_util = u8::try_from(t.sm_util)
            .ok()
            .filter(|&u| u <= 100)
            .ok_or(ScenarioProblem::BadUtil {
                pid: t.pid,
                sm_util: t.sm_util,
            })?;
        let instance = match t.instance {
            None => None,
            Some(i) => Some(u16::try_from(i).map_err(|_| ScenarioProblem::BadInstance {
                pid: t.pid,
                instance: i,
            })?),
        };
        let shape = SimShape {
            leak: t.leak,
            stop: t.stop,
            exit: t.exit,
            release_after: t.release_after,
            ramp_to: t.ramp_to,
            ramp: t.ramp,
            steps: t.steps,
            sawtooth: t.sawtooth,
            period: t.period,
            unavailable: t.unavailable,
            busy_for: t.busy_for,
            trace: t.trace,
            speed: t.speed,
            trace_pid: t.trace_pid,
            trace_rows: Vec::new(),
        };
        let who = SimIdentity {
            comm: t.comm,
            user: t.user,
            uid: t.uid,
            kinds: kinds(t.kind.as_deref()),
            state,
            container: t.container,
            container_runtime: t.container_runtime,
            pod_uid: t.pod_uid,
            qos_class: t.qos_class,
            unit: t.unit,
            slice: t.slice,
            job: t.job,
            cmdline: t.cmdline,
        };
        Ok(SimProcess {
            pid: t.pid,
            gpu: t.gpu,
            instance,
            sm_util,
            start: t.start,
            memory: t.memory,
            jitter: t.jitter,
            who: Arc::new(who),
            more: (shape != PLAIN).then(|| Box::new(shape)),
        })
    }
}

/// `type`: the lists named in it ("compute+graphics"); none named: compute.
fn kinds(kind: Option<&str>) -> ProcessKinds {
    let k = kind.unwrap_or("compute");
    ProcessKinds {
        compute: k.contains("compute"),
        graphics: k.contains("graphics"),
        mps: k.contains("mps"),
    }
}
