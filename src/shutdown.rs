//! Shutdown plumbing: one future that resolves on SIGTERM or SIGINT, and a
//! watch channel that fans the decision out to the poller and the server.
//! It must not decide how long draining may take (that is `lib.rs`).

use tokio::sync::watch;

/// Registers for SIGTERM (systemd, Kubernetes) and SIGINT (a terminal) now,
/// and returns a future that resolves when either arrives. Registering
/// before the daemon announces itself means an early SIGTERM is a clean stop,
/// not the default action (death by signal). Call it inside the runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
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

/// A one-way "stop now" flag every task can wait on.
pub fn channel() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    watch::channel(false)
}
