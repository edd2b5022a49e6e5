//! The grace timer: one std thread that, `grace` after a delivered SIGTERM,
//! re-checks the process and sends SIGKILL if it is still the same one.
//!
//! Owns: the pending escalations and their deadlines. Must not: signal
//! without re-reading `/proc` and re-running the policy with the config in
//! force at that moment (a reload may have disabled reclaim meanwhile).
//!
//! A std thread rather than a tokio task so that `request` works from any
//! caller (async worker, blocking thread, test) and no runtime is required.

use std::io;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use super::procview::ViewError;
use super::signal::{Pinned, SignalError};
use super::{Action, Outcome, Shared, Target, policy};

/// A SIGTERM that was delivered and may need a SIGKILL.
#[derive(Debug)]
pub struct Pending {
    pub target: Target,
    /// Kept open so the SIGKILL goes to the process the SIGTERM went to.
    pub handle: Box<dyn Pinned>,
    pub deadline: Instant,
}

/// The running timer thread. Dropping the sender is the stop signal.
#[derive(Debug)]
pub struct Worker {
    tx: Option<Sender<Box<Pending>>>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    pub fn spawn(shared: Arc<Shared>) -> io::Result<Worker> {
        let (tx, rx) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("gpumemd-reclaim".into())
            .spawn(move || run(&shared, &rx))?;
        Ok(Worker {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Hands `p` to the thread; gives it back if the thread is gone.
    pub fn schedule(&self, p: Pending) -> Result<(), Box<Pending>> {
        match &self.tx {
            Some(tx) => tx.send(Box::new(p)).map_err(|e| e.0),
            None => Err(Box::new(p)),
        }
    }
}

impl Drop for Worker {
    /// Stops the thread, which cancels (and audits) what is still pending:
    /// a SIGKILL is never sent early just because the daemon is stopping.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared, rx: &Receiver<Box<Pending>>) {
    let mut pending: Vec<Pending> = Vec::new();
    loop {
        let next = pending.iter().map(|p| p.deadline).min();
        let received = match next {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
        };
        match received {
            Ok(p) => pending.push(*p),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        fire_due(shared, &mut pending);
    }
    for p in pending {
        shared.finish(Action::Kill, &p.target, &Outcome::Cancelled("shutdown"));
    }
}

fn fire_due(shared: &Shared, pending: &mut Vec<Pending>) {
    let now = Instant::now();
    let (due, later): (Vec<_>, Vec<_>) = pending.drain(..).partition(|p| p.deadline <= now);
    *pending = later;
    for p in due {
        let outcome = escalate(shared, &p);
        shared.finish(Action::Kill, &p.target, &outcome);
    }
}

/// The SIGKILL decision: the same checks as for SIGTERM, on a fresh view.
fn escalate(shared: &Shared, p: &Pending) -> Outcome {
    let cfg = shared.config();
    if !cfg.enabled || cfg.dry_run {
        return Outcome::Cancelled("disabled");
    }
    let live = match shared.view(p.target.pid) {
        Ok(v) => v,
        Err(ViewError::Gone) => return Outcome::Exited,
        Err(ViewError::Unreadable(e)) => return Outcome::Failed(e),
    };
    if live.is_exited() && Some(live.start_ticks) == p.target.start_ticks {
        return Outcome::Exited;
    }
    if let Err(reason) = policy::check(&cfg, &shared.me, &p.target, &live) {
        return Outcome::Refused(reason);
    }
    match p.handle.send(Action::Kill) {
        Ok(()) => Outcome::Signalled,
        Err(SignalError::Gone) => Outcome::Exited,
        Err(SignalError::Failed(e)) => Outcome::Failed(e),
    }
}
