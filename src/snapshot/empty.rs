//! The empty `Process`: every field unset, its `Who` the one shared empty
//! `Arc<Who>` (a derived `Default` allocated a fresh one, twice
//! per process and poll at 64 x 1000: in attribution and when the pipeline
//! sorts). Owns that value only; must not hold anything else.

use std::sync::{Arc, LazyLock};

use super::{Process, ProcessState, ProcessType, Who};

static NO_ONE: LazyLock<Arc<Who>> = LazyLock::new(|| Arc::new(Who::default()));

impl Default for Process {
    fn default() -> Self {
        Process {
            pid: 0,
            used_bytes: None,
            used_max_bytes: None,
            kind: ProcessType::of_lists(false, false, false),
            who: Arc::clone(&NO_ONE),
            ppid: None,
            state: ProcessState::Unset,
            holder: None,
            start_time: None,
            start_ticks: None,
            cmdline: None,
            growth_bytes_per_second: None,
            leak_suspected: false,
            sm_util_percent: None,
            idle_seconds: None,
            idle: false,
            allocator: None,
        }
    }
}
