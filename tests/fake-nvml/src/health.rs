//! Memory health in a scenario: the `[[health]]` entries (ECC, row
//! remapping, retired pages, memory temperature, event support per GPU,
//! each taking effect from a poll on) and the `[[xid]]` events that arrive
//! at a poll. Parsing and the "state at poll N" lookup; no FFI and no
//! globals (exports/health.rs answers the calls from this).
//!
//! `ecc.unsupported` names one counter that answers NOT_SUPPORTED while
//! the others answer (e.g. `"corrected_aggregate"`).
//!
//! A GPU without any `[[health]]` entry answers NOT_SUPPORTED to every
//! health read (as the fake did before it knew them) but does support Xid
//! events; a part left out of an entry (e.g. no `retired`) is NOT_SUPPORTED.

use serde::Deserialize;

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    device: usize,
    #[serde(default)]
    from_poll: u64,
    ecc: Option<Ecc>,
    remap: Option<Remap>,
    retired: Option<Retired>,
    memory_temp: Option<u32>,
    events: Option<bool>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawXid {
    device: usize,
    poll: u64,
    code: u64,
}

#[derive(Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Ecc {
    pub enabled: bool,
    pub pending: bool,
    pub corrected_volatile: u64,
    pub corrected_aggregate: u64,
    pub uncorrected_volatile: u64,
    pub uncorrected_aggregate: u64,
    /// One counter that answers NOT_SUPPORTED while the others answer.
    pub unsupported: Option<EccCounter>,
}

/// One of NVML's four ECC counters.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EccCounter {
    CorrectedVolatile,
    CorrectedAggregate,
    UncorrectedVolatile,
    UncorrectedAggregate,
}

#[derive(Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Remap {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failed: bool,
}

#[derive(Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Retired {
    pub single_bit: u32,
    pub double_bit: u32,
    pub pending: bool,
}

/// One GPU's health from `from_poll` on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub ecc: Option<Ecc>,
    pub remap: Option<Remap>,
    pub retired: Option<Retired>,
    pub memory_temp: Option<u32>,
    /// Whether the GPU supports Xid / ECC events.
    pub events: bool,
}

impl State {
    /// A GPU the scenario says nothing about.
    pub const UNKNOWN: State = State {
        ecc: None,
        remap: None,
        retired: None,
        memory_temp: None,
        events: true,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub device: usize,
    pub from_poll: u64,
    pub state: State,
}

/// An Xid event that arrives when the poll clock reaches `poll`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Xid {
    pub device: usize,
    pub poll: u64,
    pub code: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Sorted by `from_poll`.
    pub entries: Vec<Entry>,
    pub xids: Vec<Xid>,
}

impl Plan {
    /// GPU `device`'s health at `poll`.
    pub fn state(&self, device: usize, poll: u64) -> State {
        self.entries
            .iter()
            .rev()
            .find(|e| e.device == device && e.from_poll <= poll)
            .map_or(State::UNKNOWN, |e| e.state)
    }
}

/// Checks the sections against the `devices` GPUs there are.
pub fn plan(health: &[RawHealth], xids: &[RawXid], devices: usize) -> Result<Plan, String> {
    let check = |what: &str, d: usize| {
        (d < devices)
            .then_some(())
            .ok_or(format!("{what}: device {d} does not exist ({devices} devices)"))
    };
    let mut entries = Vec::new();
    for h in health {
        check("health", h.device)?;
        entries.push(Entry {
            device: h.device,
            from_poll: h.from_poll,
            state: State {
                ecc: h.ecc,
                remap: h.remap,
                retired: h.retired,
                memory_temp: h.memory_temp,
                events: h.events.unwrap_or(true),
            },
        });
    }
    entries.sort_by_key(|e| e.from_poll);
    let mut out = Vec::new();
    for x in xids {
        check("xid", x.device)?;
        out.push(Xid {
            device: x.device,
            poll: x.poll,
            code: x.code,
        });
    }
    Ok(Plan { entries, xids: out })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_entry_up_to_the_poll_wins() {
        let text = r#"
            [[health]]
            device = 0
            memory_temp = 40
            [[health]]
            device = 0
            from_poll = 5
            memory_temp = 50
            remap = { pending = true }
        "#;
        #[derive(Deserialize)]
        struct F {
            health: Vec<RawHealth>,
        }
        let f: F = toml::from_str(text).unwrap();
        let p = plan(&f.health, &[], 1).unwrap();
        assert_eq!(p.state(0, 4).memory_temp, Some(40));
        assert_eq!(p.state(0, 4).remap, None);
        assert_eq!(p.state(0, 5).remap.map(|r| r.pending), Some(true));
        assert_eq!(p.state(1, 5), State::UNKNOWN);
        assert!(plan(&f.health, &[], 0).is_err());
    }
}
