//! The poll thread's doorbell: how a poll's result reaches the supervisor
//! (see [`Bell`]). Owns the hand-over only; what is published and when is
//! the poller's.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc;

use rustix::event::{EventfdFlags, eventfd};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::Done;

/// How a poll's result reaches the supervisor: the result on a plain
/// channel, and a count on an eventfd the runtime's I/O driver watches.
///
/// Why not a tokio channel: a wake from outside the runtime unparks a
/// worker as a searcher, and a searcher that finds work unparks the other
/// worker too: two wake-ups a poll, the second for nothing (2.25 a second
/// on the idle H200). A readable descriptor wakes the worker that is
/// parked on the driver and runs the supervisor there, without a searcher.
///
/// Why an eventfd and not a socket pair (round 9): a byte on a Unix socket
/// allocates and charges a socket buffer on the way in and frees it on the
/// way out; that send was a quarter of the idle poll thread's CPU in a
/// profile of an 8-process fleet. An eventfd adds to a counter.
pub(super) struct Bell {
    pub(super) tx: mpsc::Sender<Done>,
    pub(super) ring: OwnedFd,
}

/// The two ends of a doorbell: the thread's, and the supervisor's (still to
/// be registered with the runtime, see [`Door::watch`]).
pub(super) fn pair() -> std::io::Result<(OwnedFd, Door)> {
    let fd = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
    let ring = fd.try_clone()?;
    Ok((ring, Door(fd)))
}

/// The supervisor's end, before it is registered.
pub(super) struct Door(OwnedFd);

impl Door {
    /// Registers the door with the runtime's I/O driver (inside it).
    pub(super) fn watch(self) -> std::io::Result<AsyncFd<OwnedFd>> {
        // SAFETY: an `OwnedFd` is open until dropped and always names the
        // same descriptor; the `AsyncFd` owns it for its whole life.
        unsafe { AsyncFd::register_with_interest(self.0, Interest::READABLE) }.map_err(std::io::Error::from)
    }
}

impl Bell {
    /// Hands over a result; fails once the supervisor is gone.
    pub(super) fn send(&self, d: Done) -> Result<(), ()> {
        self.tx.send(d).map_err(drop)?;
        match rustix::io::write(&self.ring, &1u64.to_ne_bytes()) {
            // A full counter (2^64 - 2 rings unread) already rings.
            Ok(_) | Err(rustix::io::Errno::AGAIN) => Ok(()),
            Err(_) => Err(()),
        }
    }
}

/// Takes the doorbell's count after it rang. One read empties an eventfd,
/// so readiness is cleared without reading again for `EAGAIN` (tokio
/// clears it only if no newer ring arrived meanwhile).
pub(super) fn drain(mut guard: tokio::io::unix::AsyncFdReadyGuard<'_, OwnedFd>) {
    let mut count = [0u8; 8];
    match rustix::io::read(guard.get_inner().as_fd(), &mut count) {
        Ok(_) => guard.clear_ready(),
        // Nothing to take: readiness was stale; clear it and wait again.
        Err(rustix::io::Errno::AGAIN) => guard.clear_ready(),
        // Interrupted or odd: leave readiness set, so the next look reads again.
        Err(_) => guard.retain_ready(),
    }
}
