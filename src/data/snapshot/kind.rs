//! [`ProcessType`] and [`ProcessState`]: a process's `type` and `state` in
//! one byte each, shown as the same strings the snapshot always showed.
//!
//! Owns: the two types, their strings and their serde. Must not: depend on
//! the rest of the crate (the snapshot is a leaf; `source` and
//! `attribution` convert their own types into these).
//!
//! Why: both were a 16-byte string in every `Process`, though
//! each is one of a dozen static strings; at 64 GPUs x 1000 processes two
//! snapshot generations hold 128,000 processes.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Which NVML process lists a PID appeared in: bit 0 compute, bit 1
/// graphics, bit 2 mps. Shown as the lists joined with `+`, e.g.
/// "compute+graphics"; no list at all is "".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ProcessType(u8);

/// The value no list combination has: a `type` this daemon does not know
/// (read from another daemon's JSON), shown as "unknown".
const UNKNOWN_TYPE: u8 = 8;

/// By bits: the label of each combination of lists.
const TYPE_LABELS: [&str; 8] = [
    "",
    "compute",
    "graphics",
    "compute+graphics",
    "mps",
    "compute+mps",
    "graphics+mps",
    "compute+graphics+mps",
];

impl ProcessType {
    /// The type of a process in the lists `compute`, `graphics` and `mps`.
    pub const fn of_lists(compute: bool, graphics: bool, mps: bool) -> Self {
        ProcessType(compute as u8 | (graphics as u8) << 1 | (mps as u8) << 2)
    }

    pub fn as_str(self) -> &'static str {
        TYPE_LABELS.get(usize::from(self.0)).copied().unwrap_or("unknown")
    }

    /// The type a label names; a label we never write is "unknown".
    pub fn from_label(label: &str) -> Self {
        let bits = TYPE_LABELS.iter().position(|&l| l == label);
        ProcessType(bits.map_or(UNKNOWN_TYPE, |b| b as u8))
    }
}

/// A process's scheduler state as the snapshot shows it: the kernel's
/// (attribution's `ProcState`), or what the pipeline says of a PID it could
/// not read. `Unset` (shown as "") is only the `Process` default's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ProcessState {
    #[default]
    Unset,
    Running,
    Sleeping,
    DiskSleep,
    /// D for longer than `[processes] stuck_after`.
    Stuck,
    Zombie,
    Stopped,
    TracingStop,
    Dead,
    Idle,
    /// A state letter the kernel added after this daemon was written.
    Other,
    /// Gone from /proc though NVML still lists it.
    Exited,
    /// /proc could not be read, or another daemon sent a state we do not know.
    Unknown,
}

/// Every state and its `state` label and JSON value (attribution's
/// `ProcState::as_str`, or "exited" / "unknown"), in declaration order:
/// `as_str` indexes it by the variant.
const STATES: [(ProcessState, &str); 13] = [
    (ProcessState::Unset, ""),
    (ProcessState::Running, "running"),
    (ProcessState::Sleeping, "sleeping"),
    (ProcessState::DiskSleep, "disk-sleep"),
    (ProcessState::Stuck, "stuck"),
    (ProcessState::Zombie, "zombie"),
    (ProcessState::Stopped, "stopped"),
    (ProcessState::TracingStop, "tracing-stop"),
    (ProcessState::Dead, "dead"),
    (ProcessState::Idle, "idle"),
    (ProcessState::Other, "other"),
    (ProcessState::Exited, "exited"),
    (ProcessState::Unknown, "unknown"),
];

impl ProcessState {
    pub fn as_str(self) -> &'static str {
        STATES[self as usize].1
    }

    /// The state a string names; one we never write is `Unknown`, so a
    /// newer daemon's JSON still reads.
    pub fn from_label(label: &str) -> Self {
        let found = STATES.iter().find(|(_, l)| *l == label);
        found.map_or(ProcessState::Unknown, |&(s, _)| s)
    }
}

macro_rules! shown_as_str {
    ($t:ty) => {
        impl fmt::Display for $t {
            // `pad`: the snapshot table aligns columns with width specifiers.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        /// As it reads from JSON: tests and fixtures write `"running".into()`.
        impl From<&str> for $t {
            fn from(label: &str) -> Self {
                Self::from_label(label)
            }
        }

        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        // Unknown strings read as "unknown" rather than failing: one odd
        // process must not make a whole remote snapshot unreadable.
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Ok(Self::from_label(&s))
            }
        }
    };
}

shown_as_str!(ProcessType);
shown_as_str!(ProcessState);

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(v: &T) -> Option<T> {
        serde_json::to_string(v)
            .ok()
            .and_then(|j| serde_json::from_str(&j).ok())
    }

    #[test]
    fn every_type_we_write_reads_back_and_others_read_as_unknown() {
        for bits in 0..8u8 {
            let t = ProcessType::of_lists(bits & 1 != 0, bits & 2 != 0, bits & 4 != 0);
            assert_eq!(round_trip(&t), Some(t), "{t}");
        }
        let both = ProcessType::of_lists(true, true, false);
        assert_eq!(
            serde_json::to_string(&both).ok().as_deref(),
            Some("\"compute+graphics\"")
        );
        let odd: Option<ProcessType> = serde_json::from_str("\"vulkan\"").ok();
        assert_eq!(odd.map(ProcessType::as_str), Some("unknown"));
        assert_eq!(ProcessType::default().as_str(), "");
    }

    #[test]
    fn every_state_we_write_reads_back_and_others_read_as_unknown() {
        for (s, label) in STATES {
            assert_eq!(s.as_str(), label);
            assert_eq!(round_trip(&s), Some(s), "{s}");
        }
        assert_eq!(
            serde_json::to_string(&ProcessState::Sleeping).ok().as_deref(),
            Some("\"sleeping\"")
        );
        let odd: Option<ProcessState> = serde_json::from_str("\"napping\"").ok();
        assert_eq!(odd, Some(ProcessState::Unknown));
        assert_eq!(format!("{:<8}|", ProcessState::Zombie), "zombie  |");
    }
}
