//! Messages to systemd under `Type=notify` (READY, WATCHDOG, RELOADING,
//! STOPPING). A leaf: it wraps `sd_notify` and must not decide *when* to
//! notify; the poller and the lifecycle code do.

/// Tells systemd about our state; a no-op without `NOTIFY_SOCKET`. A failure
/// is logged at debug level only: supervision must never stop the daemon.
pub fn notify_systemd(state: sd_notify::NotifyState<'_>) {
    if let Err(e) = sd_notify::notify(&[state]) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}
