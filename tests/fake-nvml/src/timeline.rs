//! The `[[step]]` (timeline edits on the poll clock) and `[[fault]]` (return
//! codes and hangs per function, device and poll range) sections of a
//! scenario file, converted into `model::Step` and `model::Fault`.

use serde::Deserialize;

use crate::codes::parse_code;
use crate::funcs::FuncSet;
use crate::model::{Device, Fault, Step, Target};
use crate::scenario::{self, RawProcess, RawSize};
use crate::units::parse_duration;

/// A device by NVML index or by UUID ("GPU-..." or "MIG-...").
#[derive(Deserialize)]
#[serde(untagged)]
pub enum RawTarget {
    Index(u32),
    Uuid(String),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStep {
    poll: u64,
    device: RawTarget,
    total: Option<RawSize>,
    reserved: Option<RawSize>,
    used: Option<RawSize>,
    overhead: Option<RawSize>,
    #[serde(default)]
    remove: Vec<u32>,
    #[serde(default)]
    add: Vec<RawProcess>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFault {
    function: OneOrMany,
    device: Option<RawTarget>,
    poll: Option<u64>,
    from_poll: Option<u64>,
    to_poll: Option<u64>,
    code: Option<String>,
    hang: Option<String>,
    times: Option<u32>,
}

fn target(raw: &RawTarget, devices: &[Device]) -> Result<Target, String> {
    let target = match raw {
        RawTarget::Index(i) => Target::Index(*i),
        RawTarget::Uuid(u) => Target::Uuid(u.clone()),
    };
    // Checked against the starting fleet so a typo fails at init instead of
    // silently never matching.
    match target.resolve(devices) {
        Some(_) => Ok(target),
        None => Err(format!("no device {target:?}")),
    }
}

fn optional_size(raw: &Option<RawSize>) -> Result<Option<u64>, String> {
    raw.as_ref().map(RawSize::bytes).transpose()
}

pub fn steps(raw: &[RawStep], devices: &[Device]) -> Result<Vec<Step>, String> {
    let mut steps = raw
        .iter()
        .enumerate()
        .map(|(n, s)| step(s, devices).map_err(|e| format!("step {n} (poll {}): {e}", s.poll)))
        .collect::<Result<Vec<_>, _>>()?;
    steps.sort_by_key(|s| s.poll);
    Ok(steps)
}

fn step(raw: &RawStep, devices: &[Device]) -> Result<Step, String> {
    Ok(Step {
        poll: raw.poll,
        target: target(&raw.device, devices)?,
        total: optional_size(&raw.total)?,
        reserved: optional_size(&raw.reserved)?,
        used: raw.used.as_ref().map(|u| u.bytes_or("auto")).transpose()?,
        overhead: optional_size(&raw.overhead)?,
        remove: raw.remove.clone(),
        add: raw.add.iter().map(scenario::process).collect::<Result<_, _>>()?,
    })
}

pub fn faults(raw: &[RawFault], devices: &[Device]) -> Result<Vec<Fault>, String> {
    raw.iter()
        .enumerate()
        .map(|(n, f)| fault(f, devices).map_err(|e| format!("fault {n}: {e}")))
        .collect()
}

fn fault(raw: &RawFault, devices: &[Device]) -> Result<Fault, String> {
    let names = match &raw.function {
        OneOrMany::One(name) => std::slice::from_ref(name),
        OneOrMany::Many(names) => names.as_slice(),
    };
    let funcs = names.iter().try_fold(FuncSet::default(), |set, name| {
        Ok::<_, String>(set.union(FuncSet::parse(name)?))
    })?;
    let target = raw.device.as_ref().map(|t| target(t, devices)).transpose()?;
    if target.is_some() && !funcs.intersects(FuncSet::device_group()) {
        return Err("`device` given but no function in the fault takes a device".into());
    }
    let (from_poll, to_poll) = match (raw.poll, raw.from_poll, raw.to_poll) {
        (Some(p), None, None) => (p, Some(p)),
        (Some(_), _, _) => return Err("use either poll or from_poll/to_poll".into()),
        (None, from, to) => (from.unwrap_or(0), to),
    };
    if to_poll.is_some_and(|to| to < from_poll) {
        return Err("to_poll is before from_poll".into());
    }
    if raw.code.is_none() && raw.hang.is_none() {
        return Err("a fault needs a code, a hang or both".into());
    }
    Ok(Fault {
        funcs,
        target,
        from_poll,
        to_poll,
        code: raw.code.as_deref().map(parse_code).transpose()?,
        hang: raw.hang.as_deref().map(parse_duration).transpose()?.unwrap_or_default(),
        times: raw.times,
    })
}
