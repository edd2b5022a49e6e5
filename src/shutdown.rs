//! Shutdown plumbing: one future that resolves on SIGTERM or SIGINT, and a
//! watch channel that fans the decision out to the poller and the server.
//! It must not decide how long draining may take (that is `lib.rs`).

use tokio::sync::watch;

/// Resolves when the process is asked to stop (SIGTERM from systemd or
/// Kubernetes, SIGINT from a terminal).
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            // Without a SIGTERM handler we can still stop on Ctrl-C.
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM received; shutting down"),
        r = tokio::signal::ctrl_c() => match r {
            Ok(()) => tracing::info!("SIGINT received; shutting down"),
            Err(e) => tracing::warn!(error = %e, "cannot listen for SIGINT"),
        },
    }
}

/// A one-way "stop now" flag every task can wait on.
pub fn channel() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    watch::channel(false)
}
