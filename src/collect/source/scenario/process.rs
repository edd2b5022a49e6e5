//! One simulated process as the scenario holds it: [`SimProcess`], the
//! `[[process]]` table with every field flat, as docs/scenarios.md lists
//! them. Owns that form and its checks (made as it is read, so an error
//! names its line). Must not compute anything per poll (that is
//! `simulated.rs`).

use std::path::PathBuf;

use arcstr::ArcStr;
use serde::Deserialize;

use super::{ScenarioProblem, Secs};
use crate::collect::attribution::ProcState;
use crate::collect::source::ProcessKinds;
use crate::data::units::ByteSize;

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

/// `[[process]]` as written in a scenario file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields, default)]
pub struct SimProcess {
    pub gpu: u32,
    /// The MIG instance (a GPU has at most 7).
    pub instance: Option<u32>,
    pub pid: u32,
    pub comm: ArcStr,
    pub user: ArcStr,
    pub uid: u32,
    /// The NVML lists it is in ([`SimProcess::kinds`]).
    #[serde(rename = "type")]
    pub kind: Option<ArcStr>,
    /// What /proc says while it runs ([`SimProcess::running_state`]).
    pub state: Option<ArcStr>,
    pub container: ArcStr,
    pub container_runtime: ArcStr,
    pub pod_uid: ArcStr,
    pub qos_class: ArcStr,
    pub unit: ArcStr,
    pub slice: ArcStr,
    pub job: ArcStr,
    pub cmdline: ArcStr,
    pub start: Secs,
    pub stop: Option<Secs>,
    pub exit: Exit,
    pub release_after: Option<Secs>,
    /// Base memory.
    pub memory: ByteSize,
    /// Warm-up of a caching allocator: `steps` steps to `ramp_to` over `ramp`.
    pub ramp_to: Option<ByteSize>,
    pub ramp: Option<Secs>,
    pub steps: Option<u32>,
    /// Growth per second (a leak).
    pub leak: ByteSize,
    /// Extra memory held during the first half of every `period`.
    pub sawtooth: ByteSize,
    pub period: Option<Secs>,
    pub jitter: ByteSize,
    pub unavailable: bool,
    /// SM utilisation percent while busy, 0 to 100.
    pub sm_util: u32,
    /// SM utilisation drops to 0 this long after start.
    pub busy_for: Option<Secs>,
    pub trace: Option<PathBuf>,
    pub speed: Option<f64>,
    pub trace_pid: Option<u32>,
    /// (seconds from the trace's start, used bytes), read at load.
    #[serde(skip)]
    pub trace_rows: Vec<(f64, u64)>,
}

impl<'de> Deserialize<'de> for SimProcess {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let p = SimProcess::deserialize(d)?;
        p.check().map_err(serde::de::Error::custom)?;
        Ok(p)
    }
}

impl SimProcess {
    fn check(&self) -> Result<(), ScenarioProblem> {
        if let Some(name) = self.state.as_deref().filter(|n| ProcState::from_name(n).is_none()) {
            return Err(ScenarioProblem::UnknownState {
                pid: self.pid,
                name: name.to_owned(),
            });
        }
        if self.speed.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
            return Err(ScenarioProblem::BadSpeed(self.pid));
        }
        if self.sm_util > 100 {
            return Err(ScenarioProblem::BadUtil {
                pid: self.pid,
                sm_util: self.sm_util,
            });
        }
        match self.instance {
            Some(i) if u16::try_from(i).is_err() => Err(ScenarioProblem::BadInstance {
                pid: self.pid,
                instance: i,
            }),
            _ => Ok(()),
        }
    }

    /// `state`: sleeping when unset ("disk-sleep" is D: live, unless it
    /// stays past `[processes] stuck_after`).
    pub fn running_state(&self) -> ProcState {
        self.state
            .as_deref()
            .and_then(ProcState::from_name)
            .unwrap_or(ProcState::Sleeping)
    }

    /// `type`: the lists named in it ("compute+graphics"); none named: compute.
    pub fn kinds(&self) -> ProcessKinds {
        let k = self.kind.as_deref().unwrap_or("compute");
        ProcessKinds {
            compute: k.contains("compute"),
            graphics: k.contains("graphics"),
            mps: k.contains("mps"),
        }
    }
}
