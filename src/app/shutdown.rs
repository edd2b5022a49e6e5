//! Signal plumbing: the handlers installed first thing at start (SIGHUP kept
//! for the reload task), one future that resolves on SIGTERM or SIGINT, and
//! a watch channel that fans the decision out to the poller and the server.
//! It must not decide how long draining may take (that is `lib.rs`).

use std::sync::Mutex;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;

/// Registers for SIGTERM (systemd, Kubernetes) and SIGINT (a terminal) now,
/// and returns a future that resolves when either arrives. Registering
/// before the daemon announces itself means an early SIGTERM is a clean stop,
/// not the default action (death by signal). Call it inside the runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        let wait = |s: std::io::Result<tokio::signal::unix::Signal>, name: &'static str| async move {
            match s {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, signal = name, "cannot listen for the signal");
                    std::future::pending::<()>().await
                }
            }
        };
        tokio::select! {
            _ = wait(term, "SIGTERM") => tracing::info!("SIGTERM received; shutting down"),
            _ = wait(int, "SIGINT") => tracing::info!("SIGINT received; shutting down"),
        }
    }
}

/// The SIGHUP registration made by [`install_early`], handed to the reload
/// task; a SIGHUP that arrived in between is still pending on it.
static EARLY_HANGUP: Mutex<Option<Signal>> = Mutex::new(None);

/// Installs the daemon's signal handling, to be called first thing in the
/// runtime: from here on SIGHUP is caught (kept for the reload task, which
/// takes it with [`take_early_hangup`]; a SIGHUP during start then becomes
/// one reload right after it), and the returned future resolves on SIGTERM
/// or SIGINT.
pub fn install_early() -> impl std::future::Future<Output = ()> + Send + 'static {
    match signal(SignalKind::hangup()) {
        Ok(s) => {
            if let Ok(mut slot) = EARLY_HANGUP.lock() {
                *slot = Some(s);
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot catch SIGHUP; a SIGHUP will stop the daemon"),
    }
    shutdown_signal()
}

/// The SIGHUP registration of [`install_early`], if it ran and nobody took
/// it yet.
pub fn take_early_hangup() -> Option<Signal> {
    EARLY_HANGUP.lock().ok().and_then(|mut s| s.take())
}

/// A one-way "stop now" flag every task can wait on.
pub fn channel() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    watch::channel(false)
}
