//! [`Quiet`]: what a poll may take from a watched process's last stat read
//! instead of reading it again. Owns that rule and its period; must not
//! read files or know how the tree watches (`ProcTree::watch`).
//!
//! Why: a known process's stat was read every poll to see three
//! things: that it is still the same process, its state, and its ppid and
//! comm. The tree now says when a watched process exits (a pidfd on a real
//! `/proc`, the write log of the demo's), so the same-process question no
//! longer needs the read. State, ppid and comm are read again within a
//! recheck period (a process's phase set by its PID, so reads spread over
//! polls): a third of `stuck_after`, at most [`STAT_RECHECK`], so a D
//! spell is timed at most a third of its threshold late. A process in any
//! state but R, S or I is read every poll: a D that lasts is what
//! `stuck_after` times, and Z, X, T are about to change. A process NVML lists for the first time is read at once, and
//! one that exits is seen at the next poll, as before.

use std::time::Duration;

use super::ProcState;

/// The longest recheck period: a watched process's state, ppid and comm
/// are trusted for half to all of it, by PID. With `stuck_after` at its 30
/// s default the period is this.
pub(super) const STAT_RECHECK: Duration = Duration::from_secs(10);

/// The recheck period for `stuck_after`: a third of it, from 1 s to
/// [`STAT_RECHECK`].
pub fn recheck_for(stuck_after: Duration) -> Duration {
    (stuck_after / 3).clamp(Duration::from_secs(1), STAT_RECHECK)
}

/// Sixteenths of a second: the unit of [`Quiet::due`], so that it fits 32
/// bits for 8 years of uptime (past that it saturates and every poll reads,
/// as without watches) and the cache entry stays 40 bytes.
const UNIT_NS: u64 = 62_500_000;

/// What the last stat read said, and until when it is trusted: 12 bytes.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Quiet {
    /// When stat must be read again, in sixteenths of a second from the
    /// cache's epoch; 0 (the default): at the next read.
    pub(super) due: u32,
    pub(super) ppid: u32,
    /// The cache's forget count when this was noted: a forget of all
    /// (`IdentityCache::forget_stats`) makes every older note untrusted.
    pub(super) epoch: u16,
    /// The state letter stat showed (R, S or I are trusted).
    pub(super) code: u8,
    /// The tree tells when this PID's process exits.
    pub(super) watched: bool,
}

impl Quiet {
    /// A note of a read at `now_ns` of a process in `state`, trusted for
    /// half to all of `recheck`.
    pub(super) fn noted(
        pid: u32,
        (state, ppid): (ProcState, u32),
        watched: bool,
        (now_ns, recheck): (u64, Duration),
        epoch: u16,
    ) -> Self {
        let recheck = u64::try_from(recheck.as_nanos()).unwrap_or(u64::MAX);
        // 64 phases from half the period to the whole of it.
        let phase = recheck / 2 + recheck / 2 / 64 * u64::from(spread(pid));
        let code = u8::try_from(state.code()).unwrap_or(0);
        Quiet {
            due: units(now_ns.saturating_add(phase)),
            ppid,
            epoch,
            code,
            watched,
        }
    }

    /// The state and ppid to report at `now_ns` without reading, when this
    /// note may stand in for a read.
    pub(super) fn trusted(&self, now_ns: u64, epoch: u16) -> Option<(ProcState, u32)> {
        if !self.watched || self.epoch != epoch || units(now_ns) >= self.due {
            return None;
        }
        let state = match self.code {
            b'R' => ProcState::Running,
            b'S' => ProcState::Sleeping,
            b'I' => ProcState::Idle,
            _ => return None,
        };
        Some((state, self.ppid))
    }
}

/// `ns` in sixteenths of a second, rounded down, saturating.
fn units(ns: u64) -> u32 {
    u32::try_from(ns / UNIT_NS).unwrap_or(u32::MAX)
}

/// 0..64 from a PID, scattered so that consecutive PIDs differ.
pub(super) fn spread(pid: u32) -> u32 {
    pid.wrapping_mul(0x9E37_79B9) >> 26
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_watched_r_s_or_i_within_its_period_and_epoch_stands_in() {
        let period = u64::try_from(STAT_RECHECK.as_nanos()).unwrap_or(u64::MAX);
        for pid in [1, 2, 1000, 4_194_303] {
            let now = 10 * UNIT_NS;
            let q = Quiet::noted(pid, (ProcState::Sleeping, 7), true, (now, STAT_RECHECK), 3);
            let due = u64::from(q.due) * UNIT_NS;
            assert!(due + UNIT_NS > now + period / 2 && due <= now + period, "{pid}: {due}");
            assert_eq!(q.trusted(now, 3), Some((ProcState::Sleeping, 7)));
            assert_eq!(q.trusted(due, 3), None, "due");
            assert_eq!(q.trusted(now, 4), None, "forgotten");
        }
        let unwatched = Quiet::noted(5, (ProcState::Running, 1), false, (0, STAT_RECHECK), 0);
        assert_eq!(unwatched.trusted(0, 0), None);
        for state in [
            ProcState::DiskSleep,
            ProcState::Zombie,
            ProcState::Stopped,
            ProcState::Dead,
        ] {
            assert_eq!(
                Quiet::noted(5, (state, 1), true, (0, STAT_RECHECK), 0).trusted(0, 0),
                None,
                "{state:?}"
            );
        }
        assert_eq!(Quiet::default().trusted(0, 0), None, "a default note is due");
        assert_eq!(std::mem::size_of::<Quiet>(), 12);
    }

    #[test]
    fn the_recheck_is_a_third_of_stuck_after_from_1_to_10_s() {
        let s = Duration::from_secs;
        assert_eq!(recheck_for(s(30)), s(10));
        assert_eq!(recheck_for(s(600)), s(10));
        assert_eq!(recheck_for(s(6)), s(2));
        assert_eq!(recheck_for(Duration::from_millis(100)), s(1));
    }
}
