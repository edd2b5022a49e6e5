//! Sending SIGTERM/SIGKILL to one exact process, behind one seam.
//!
//! Owns: the [`Signaller`] trait (open/pin, then send), its real
//! implementation [`Pidfd`]: the pidfd (Linux 5.3+) that pins the process
//! between the identity check and the signal, and the plain `kill(2)`
//! fallback where pidfds are unavailable. Must not: decide whether to signal
//! (that is policy.rs), or be reachable on a simulated fleet (the reclaimer
//! builds it only for [`super::Host::Real`]).
//!
//! Why a pidfd: it is opened BEFORE `/proc/<pid>/stat` is re-read, so if the
//! check sees the expected start ticks the pidfd refers to that very process;
//! should it exit and its PID be reused before the signal, the kernel answers
//! ESRCH instead of signalling the newcomer. With plain `kill` that window is
//! a few microseconds; it is documented rather than hidden.

use std::os::fd::OwnedFd;

use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal, kill_process, pidfd_open, pidfd_send_signal};

use super::Action;

/// The seam: pins a process by PID, then signals exactly that process.
pub trait Signaller: Send + Sync + std::fmt::Debug {
    /// Pins `pid` before its identity is re-checked.
    fn open(&self, pid: u32) -> Result<Box<dyn Pinned>, SignalError>;
}

/// A pinned process: a signal reaches it, or nothing (`Gone`).
pub trait Pinned: Send + std::fmt::Debug {
    fn send(&self, action: Action) -> Result<(), SignalError>;
}

/// The signal an action sends; suspend and resume send none.
pub fn signal_of(action: Action) -> Result<Signal, SignalError> {
    match action {
        Action::Term => Ok(Signal::TERM),
        Action::Kill => Ok(Signal::KILL),
        Action::Suspend | Action::Resume => Err(SignalError::Failed(format!("{} sends no signal", action.as_str()))),
    }
}

/// This host's processes, through pidfds.
#[derive(Debug)]
pub struct Pidfd;

impl Signaller for Pidfd {
    fn open(&self, pid: u32) -> Result<Box<dyn Pinned>, SignalError> {
        open(pid).map(|h| Box::new(h) as Box<dyn Pinned>)
    }
}

/// A process about to be signalled.
#[derive(Debug)]
struct Handle {
    pid: Pid,
    /// `None` on kernels without pidfd_open, or where seccomp denies it.
    pidfd: Option<OwnedFd>,
}

/// Why a signal was not delivered.
#[derive(Debug, PartialEq, Eq)]
pub enum SignalError {
    /// The process no longer exists.
    Gone,
    /// Anything else, as text for the audit log.
    Failed(String),
}

/// Pins `pid`. PIDs that are not positive `i32` are refused here too, because
/// `kill` gives 0 and negative values process-group meaning.
fn open(pid: u32) -> Result<Handle, SignalError> {
    let raw = i32::try_from(pid).ok().filter(|&p| p > 0);
    let pid = raw
        .and_then(Pid::from_raw)
        .ok_or_else(|| SignalError::Failed(format!("pid {pid} is not a valid process id")))?;
    match pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => Ok(Handle { pid, pidfd: Some(fd) }),
        Err(Errno::SRCH) => Err(SignalError::Gone),
        // Old kernel, or a container seccomp profile that predates pidfds.
        Err(e @ (Errno::NOSYS | Errno::PERM | Errno::ACCESS)) => {
            tracing::debug!(error = %e, "reclaim: pidfd_open unavailable, falling back to kill(2)");
            Ok(Handle { pid, pidfd: None })
        }
        Err(e) => Err(SignalError::Failed(format!("pidfd_open: {e}"))),
    }
}

impl Pinned for Handle {
    /// Sends the action's signal.
    fn send(&self, action: Action) -> Result<(), SignalError> {
        let sig = signal_of(action)?;
        let sent = match &self.pidfd {
            Some(fd) => pidfd_send_signal(fd, sig),
            None => kill_process(self.pid, sig),
        };
        match sent {
            Ok(()) => Ok(()),
            Err(Errno::SRCH) => Err(SignalError::Gone),
            Err(Errno::PERM) => Err(SignalError::Failed(
                "permission denied: signalling another user's process needs CAP_KILL".into(),
            )),
            Err(e) => Err(SignalError::Failed(format!("{}: {e}", action.signal_name()))),
        }
    }
}
