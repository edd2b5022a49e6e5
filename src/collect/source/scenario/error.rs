//! The scenario boundary's errors: what went wrong loading a scenario, and
//! what is wrong inside one. Owns their wording; it must not decide what is
//! valid (that is `scenario.rs` and `process.rs`).

use std::path::PathBuf;

use thiserror::Error;

use super::BUILTIN_NAMES;
use crate::data::files::ReadError;

#[derive(Debug, Error)]
pub enum ScenarioError {
    #[error("unknown scenario `{0}`; built-in scenarios are: {list}", list = BUILTIN_NAMES.join(", "))]
    Unknown(String),
    #[error("cannot read scenario {path}: {source}")]
    Read { path: PathBuf, source: ReadError },
    // A trace path or value quoted in the message can hold a line break:
    // escaped, so the error stays one line.
    #[error("scenario {origin}: {}", crate::data::files::one_line(&problem.to_string()))]
    Invalid { origin: String, problem: ScenarioProblem },
}

/// What is wrong inside a scenario.
#[derive(Debug, Error)]
pub enum ScenarioProblem {
    #[error("{}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    Toml { line: Option<usize>, message: String },
    #[error("needs at least one [[gpu]]")]
    NoGpus,
    #[error("gpu {gpu}: reserved ({reserved} bytes) is more than its memory ({memory} bytes)")]
    ReservedAboveMemory { gpu: usize, reserved: u64, memory: u64 },
    #[error("process {pid} is on gpu {gpu}, but there are {gpus} GPUs")]
    NoSuchGpu { pid: u32, gpu: u32, gpus: usize },
    #[error("process {pid} is on MIG instance {instance}, but gpu {gpu} has {instances}")]
    NoSuchInstance {
        pid: u32,
        instance: u32,
        gpu: u32,
        instances: usize,
    },
    #[error("process {pid} is on MIG-enabled gpu {gpu}: give it an `instance`")]
    NeedsInstance { pid: u32, gpu: u32 },
    #[error("a process needs a non-zero pid")]
    ZeroPid,
    #[error("process {pid}: state `{name}` is not one of running, sleeping, disk-sleep, stopped, zombie, idle")]
    UnknownState { pid: u32, name: String },
    #[error("process {0}: speed must be a positive number")]
    BadSpeed(u32),
    #[error("process {pid}: sm_util {sm_util} is not a percent from 0 to 100")]
    BadUtil { pid: u32, sm_util: u32 },
    #[error("process {pid}: instance {instance} is not a MIG instance number (a GPU has at most 7)")]
    BadInstance { pid: u32, instance: u32 },
    #[error("trace {}: {source}", path.display())]
    TraceRead { path: PathBuf, source: ReadError },
    #[error("trace {} line {line}: expected t_seconds,pid,used_bytes", path.display())]
    TraceRow { path: PathBuf, line: usize },
    #[error("trace {} has no rows", .0.display())]
    TraceEmpty(PathBuf),
}
