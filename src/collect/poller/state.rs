//! The poller's shared state and its small rules: the tick grid, when
//! systemd hears "ready", and how NVML's coming and going is logged. Owns
//! no thread and no channel (`poller.rs` does).

use std::time::{Duration, Instant};

use crate::data::snapshot::PollStats;
use crate::data::sysnotify::notify_systemd;

/// A tick later than this after its time counts as missed (as tokio's
/// `Interval` does): the next one goes back onto the grid.
pub(super) const LATE: Duration = Duration::from_millis(5);

/// The tick grid: `next` is when the next poll is due.
pub(super) struct Ticks {
    pub(super) next: Instant,
    pub(super) period: Duration,
}

impl Ticks {
    /// The tick due at `next` fired at `now`: move on by a period, or onto
    /// the next grid point after `now` when it fired late (missed ticks are
    /// skipped, never made up in a burst).
    pub(super) fn fire(&mut self, now: Instant) {
        let due = self.next;
        self.next = if now > due + LATE {
            let period = self.period.as_nanos().max(1);
            let into = (now - due).as_nanos() % period;
            now + Duration::from_nanos(u64::try_from(period - into).unwrap_or(u64::MAX))
        } else {
            due + self.period
        };
    }
}

/// What the thread and the supervisor share, under one lock.
pub(super) struct State {
    pub(super) stats: PollStats,
    pub(super) nvml_was_up: Option<bool>,
    pub(super) ready_sent: bool,
    /// The poll in progress: its number, start and deadline.
    pub(super) current: Option<(u64, Instant, Instant)>,
    /// The poll in progress was given up on (timeout); its result is dropped.
    pub(super) stuck: bool,
    pub(super) ticks: Ticks,
}

/// systemd's Type=notify: ready once the first poll has ended, whatever
/// its outcome, so a missing driver does not hold up boot.
pub(super) fn mark_ready(st: &mut State) {
    if !st.ready_sent {
        st.ready_sent = true;
        notify_systemd(sd_notify::NotifyState::Ready);
    }
}

/// Logs NVML going away or coming back once per transition, not per poll.
pub(super) fn note_nvml(st: &mut State, demo: bool, up: bool, msg: Option<&str>) {
    if st.nvml_was_up == Some(up) {
        return;
    }
    st.nvml_was_up = Some(up);
    match (up, msg) {
        (true, _) => tracing::info!(demo, "GPU source answering; serving fresh snapshots"),
        (false, Some(m)) => tracing::warn!(
            "NVML not available: {m}; retrying with backoff up to every 30s; use --demo to try without a GPU"
        ),
        (false, None) => {}
    }
}
