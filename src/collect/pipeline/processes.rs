//! `[processes]`: how the pipeline attributes and judges processes, and
//! how many of them the exposition lists. Owned here, beside the pipeline
//! that reads most of it, so the pipeline needs nothing from the config;
//! `config` gathers it with the other sections. Settings only.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::data::snapshot::GroupBy;
use crate::data::units::{ByteSize, PositiveDuration};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessMode {
    /// A series per process (bounded by `top_n`).
    PerProcess,
    /// Only group totals (`group_by`), no per-process series.
    Grouped,
    /// Neither; the holder split is still exported.
    Off,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Processes {
    pub mode: ProcessMode,
    pub group_by: Vec<GroupBy>,
    /// Per GPU, only this many of the largest holders get process series.
    pub top_n: usize,
    /// Processes holding less than this get no process series.
    pub min_bytes: ByteSize,
    /// Export the command line (redacted, truncated) in `gpumem_process_info`.
    pub cmdline: bool,
    /// Label values are cut to this many bytes.
    pub label_max_bytes: usize,
    pub proc_root: PathBuf,
    /// Where user names come from (uid -> name).
    pub passwd_file: PathBuf,
    /// Span of history the leak trend is computed over.
    pub leak_window: PositiveDuration,
    /// Growth below this rate (bytes per second) is never called a leak.
    pub leak_min_rate: ByteSize,
    /// How long memory may stay used after its holder left before it is
    /// reported as not released.
    pub late_release_after: PositiveDuration,
    /// How often per-process SM utilisation is sampled (it costs ~1.4 ms per GPU).
    pub utilization_interval: PositiveDuration,
    /// A process holding memory with no SM activity for this long is idle.
    pub idle_after: PositiveDuration,
    /// A process in D (uninterruptible) this long is stuck: holder `zombie`.
    /// Shorter D spells are a live process waiting in the driver.
    pub stuck_after: PositiveDuration,
}

impl Default for Processes {
    fn default() -> Self {
        Self {
            mode: ProcessMode::PerProcess,
            group_by: vec![GroupBy::User],
            top_n: 50,
            min_bytes: ByteSize(0),
            cmdline: false,
            label_max_bytes: 128,
            proc_root: PathBuf::from("/proc"),
            passwd_file: PathBuf::from("/etc/passwd"),
            leak_window: PositiveDuration::secs(600),
            leak_min_rate: ByteSize(1 << 20),
            late_release_after: PositiveDuration::secs(30),
            utilization_interval: PositiveDuration::secs(10),
            idle_after: PositiveDuration::secs(1800),
            stuck_after: PositiveDuration::secs(30),
        }
    }
}
