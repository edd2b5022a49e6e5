//! The supervisor's alarm clock: a timerfd the runtime's I/O driver
//! watches, set by whoever changes the poll's state (the poll thread as a
//! poll starts and ends, the supervisor after each look) to the moment the
//! supervisor must look next. Owns the timer only; when to look is the
//! poller's.
//!
//! Why a timerfd: the poll thread publishes each result itself,
//! so the supervisor is no longer woken by results. A tokio timer could
//! only be moved by the supervisor's own task, which would then have to
//! wake every poll to move it; the timerfd is moved by a syscall on the
//! poll thread, and fires only for a poll that is late or stuck.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create};
use tokio::io::Interest;
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};

/// One timer, through two descriptors of it: the thread's and the
/// supervisor's (which the runtime watches).
pub(super) struct Alarm(OwnedFd);

/// The supervisor's end, before it is registered with the runtime.
pub(super) struct Ringer(OwnedFd);

/// A new, unset alarm: the setting end and the watched end.
pub(super) fn pair() -> std::io::Result<(Alarm, Ringer)> {
    let fd = timerfd_create(
        TimerfdClockId::Monotonic,
        TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
    )?;
    let other = fd.try_clone()?;
    Ok((Alarm(fd), Ringer(other)))
}

impl Alarm {
    /// Rings at `at` (at once when it is past), replacing any earlier
    /// setting. A failure is logged: the supervisor's own look (which
    /// also sets it) still follows the next state change.
    pub(super) fn set(&self, at: Instant) {
        // Relative, from `Instant` (CLOCK_MONOTONIC too); a zero value
        // would disarm it, so a time already past rings in 1 ns.
        let after = at
            .saturating_duration_since(Instant::now())
            .max(Duration::from_nanos(1));
        let value = Itimerspec {
            it_interval: Timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: Timespec {
                tv_sec: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(after.subsec_nanos()),
            },
        };
        if let Err(e) = rustix::time::timerfd_settime(&self.0, TimerfdTimerFlags::empty(), &value) {
            tracing::warn!(error = %e, "cannot set the poll supervisor's timer");
        }
    }
}

impl Ringer {
    /// Registers the alarm with the runtime's I/O driver (inside it).
    pub(super) fn watch(self) -> std::io::Result<AsyncFd<OwnedFd>> {
        // SAFETY: an `OwnedFd` is open until dropped and always names the
        // same descriptor; the `AsyncFd` owns it for its whole life.
        unsafe { AsyncFd::register_with_interest(self.0, Interest::READABLE) }.map_err(std::io::Error::from)
    }
}

/// Takes the alarm's expirations after it rang. One read empties a
/// timerfd, so readiness is cleared without reading again for `EAGAIN`
/// (tokio keeps the readiness of a newer expiry).
pub(super) fn drain(mut guard: AsyncFdReadyGuard<'_, OwnedFd>) {
    let mut count = [0u8; 8];
    match rustix::io::read(guard.get_inner(), &mut count) {
        // Read, or nothing to take (the alarm was set again meanwhile).
        Ok(_) | Err(rustix::io::Errno::AGAIN) => guard.clear_ready(),
        // Interrupted or odd: leave readiness set, so the next look reads again.
        Err(_) => guard.retain_ready(),
    }
}
