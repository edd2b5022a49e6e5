//! The empty `Process`: every field unset, its placement the one shared
//! empty `Arc<Placement>` (issue 21: a derived `Default` allocated a fresh
//! one, twice per process and poll at 64 x 1000: in attribution and when
//! the pipeline sorts). Owns that value only; must not hold anything else.

use std::sync::{Arc, LazyLock};

use super::{Placement, Process, ProcessState, ProcessType, Text};

static NO_PLACEMENT: LazyLock<Arc<Placement>> = LazyLock::new(|| Arc::new(Placement::default()));

impl Default for Process {
    fn default() -> Self {
        Process {
            pid: 0,
            used_bytes: None,
            used_max_bytes: None,
            kind: ProcessType::of_lists(false, false, false),
            comm: Text::EMPTY,
            user: Text::EMPTY,
            uid: None,
            ppid: None,
            state: ProcessState::Unset,
            holder: None,
            start_time: None,
            start_ticks: None,
            placement: Arc::clone(&NO_PLACEMENT),
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
