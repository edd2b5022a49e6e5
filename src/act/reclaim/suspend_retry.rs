//! Retries of refused suspends while their alert keeps firing. Rules act on
//! the transition to firing only, so a suspend refused for a passing reason
//! (another suspend in flight, host memory short for a moment, a driver
//! call that failed or hung) would otherwise wait until the process went
//! busy and idle again. Such a process is offered again on later
//! evaluations, after a back-off that doubles, a bounded number of times.
//!
//! Owns: which refusals are worth a retry, the back-off and the bound.
//! Must not: decide whom to suspend (the rule's firing alert does) or call
//! the driver itself (`Reclaimer::suspend` does, with every check again).

use std::collections::HashMap;
use std::sync::Mutex;

use super::{Outcome, Reclaimer, Target, lock};

/// First wait after a passing refusal; doubles after each further one.
pub const RETRY_BACKOFF_SECS: f64 = 30.0;
/// Attempts after the first; then the process waits for its alert to fire again.
pub const MAX_RETRIES: u32 = 5;

/// Processes whose suspend may be tried again, by (pid, start ticks).
#[derive(Debug, Default)]
pub(super) struct Retries(Mutex<HashMap<(u32, u64), Due>>);

#[derive(Debug, Clone, Copy)]
struct Due {
    /// Retries already made.
    tries: u32,
    /// Unix seconds.
    at: f64,
}

/// A refusal that may pass by itself; the rest (allow/deny lists, identity,
/// a driver without the API, dry run, done) would answer the same again.
fn passing(o: &Outcome) -> bool {
    matches!(
        o,
        Outcome::Refused("in_flight_limit" | "host_memory" | "cuda_not_running" | "recently_resumed")
            | Outcome::Failed(_)
    )
}

fn key(t: &Target) -> (u32, u64) {
    (t.pid, t.start_ticks.unwrap_or(0))
}

impl Retries {
    /// Notes the outcome of a suspend made at `now`.
    pub(super) fn note(&self, t: &Target, o: &Outcome, now: f64) {
        let mut m = lock(&self.0);
        let k = key(t);
        if !passing(o) {
            m.remove(&k);
            return;
        }
        let tries = m.get(&k).map_or(0, |d| d.tries + 1);
        if tries >= MAX_RETRIES {
            m.remove(&k);
            return;
        }
        let wait = RETRY_BACKOFF_SECS * f64::from(1u32 << tries.min(16));
        m.insert(k, Due { tries, at: now + wait });
    }

    fn due(&self, t: &Target, now: f64) -> bool {
        lock(&self.0).get(&key(t)).is_some_and(|d| d.at <= now)
    }

    /// Whether anything waits for a retry (cheap: asked every evaluation).
    pub(super) fn any(&self) -> bool {
        !lock(&self.0).is_empty()
    }
}

impl Reclaimer {
    /// Whether a refused suspend waits for a retry.
    pub fn suspend_retries_pending(&self) -> bool {
        self.shared.suspend.retries.any()
    }

    /// Suspends again those of `firing` (the targets of suspend alerts that
    /// are still firing) whose back-off has run out at `now`; the others are
    /// left alone. Blocking: run it off the async workers.
    pub fn retry_suspends(&self, firing: Vec<Target>, now: f64) -> Vec<(Target, Outcome)> {
        let due: Vec<Target> = firing
            .into_iter()
            .filter(|t| self.shared.suspend.retries.due(t, now))
            .collect();
        if due.is_empty() {
            return Vec::new();
        }
        self.suspend_at(due, now)
    }
}
