//! The poll thread's doorbell: how a poll's result reaches the supervisor
//! (see [`Bell`]). Owns the hand-over only; what is published and when is
//! the poller's.

use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;

use super::Done;

/// How a poll's result reaches the supervisor: the result on a plain
/// channel, and a byte on a socket the runtime's I/O driver watches.
///
/// Why not a tokio channel: a wake from outside the runtime unparks a
/// worker as a searcher, and a searcher that finds work unparks the other
/// worker too: two wake-ups a poll, the second for nothing (2.25 a second
/// on the idle H200). A readable socket wakes the worker that is parked on
/// the driver and runs the supervisor there, without a searcher.
pub(super) struct Bell {
    pub(super) tx: mpsc::Sender<Done>,
    pub(super) ring: UnixStream,
}

impl Bell {
    /// Hands over a result; fails once the supervisor is gone.
    pub(super) fn send(&self, d: Done) -> Result<(), ()> {
        self.tx.send(d).map_err(drop)?;
        match (&self.ring).write(&[1]) {
            // A full socket already rings: the supervisor has yet to read.
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(_) => Err(()),
        }
    }
}

/// Reads what the doorbell holds; whether its other end is closed.
pub(super) fn drain(bell: &tokio::net::UnixStream, buf: &mut [u8]) -> bool {
    loop {
        match bell.try_read(buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}
