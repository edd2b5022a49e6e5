//! Configuration reload on SIGHUP and `POST /-/reload`: the new file is
//! loaded and validated first; on error the running config stays and the
//! failure is visible (`gpumem_config_last_reload_successful 0`, a log line,
//! the HTTP answer). Settings that need a restart (poll timing, NVML
//! library, listen address, attribution settings) are reported, not applied.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use crate::config::Config;

/// Outcome of the latest reload, for the config metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReloadStatus {
    pub successful: bool,
    /// Unix seconds of the latest successful load (the start counts).
    pub last_success: f64,
}

/// A reload request from HTTP; the reply says what happened.
pub type ReloadRequest = oneshot::Sender<Result<(), String>>;

/// Loads the config again the way it was loaded at start.
///
/// # Errors
/// The config error, as one line.
pub fn reload(current: &Config) -> Result<Config, String> {
    let next = match &current.source_path {
        Some(p) => Config::load(p, current.demo).map_err(|e| e.to_string())?,
        None => Config::defaults(current.demo),
    };
    Ok(next)
}

/// Names of settings that changed but only take effect after a restart.
pub fn needs_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut v = Vec::new();
    if old.poll != new.poll {
        v.push("poll");
    }
    if old.nvml != new.nvml {
        v.push("nvml");
    }
    if old.server.listen != new.server.listen {
        v.push("server.listen");
    }
    if old.state != new.state {
        v.push("state");
    }
    let (a, b) = (&old.processes, &new.processes);
    if a.proc_root != b.proc_root
        || a.passwd_file != b.passwd_file
        || a.leak_window != b.leak_window
        || a.leak_min_rate != b.leak_min_rate
        || a.late_release_after != b.late_release_after
        || a.utilization_interval != b.utilization_interval
        || a.idle_after != b.idle_after
        || a.cmdline != b.cmdline
    {
        v.push("processes (attribution and diagnosis settings)");
    }
    v
}

/// Serves reload requests until shutdown: from HTTP (`requests`) and SIGHUP.
pub async fn run(
    cfg_tx: watch::Sender<Arc<Config>>,
    status_tx: watch::Sender<ReloadStatus>,
    mut requests: mpsc::Receiver<ReloadRequest>,
    mut shutdown: watch::Receiver<bool>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; reload only over HTTP");
            None
        }
    };
    loop {
        let reply = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            r = requests.recv() => match r { Some(tx) => Some(tx), None => return },
            _ = async { match hup.as_mut() { Some(h) => { h.recv().await; } None => std::future::pending().await } } => {
                tracing::info!("SIGHUP received; reloading the config");
                None
            }
        };
        let result = apply(&cfg_tx, &status_tx);
        if let Some(tx) = reply {
            let _ = tx.send(result);
        }
    }
}

fn apply(cfg_tx: &watch::Sender<Arc<Config>>, status_tx: &watch::Sender<ReloadStatus>) -> Result<(), String> {
    let current = cfg_tx.borrow().clone();
    match reload(&current) {
        Ok(next) => {
            let later = needs_restart(&current, &next);
            if !later.is_empty() {
                tracing::warn!(settings = ?later, "changed settings take effect only after a restart");
            }
            cfg_tx.send_replace(Arc::new(next));
            status_tx.send_replace(ReloadStatus {
                successful: true,
                last_success: crate::clock::unix_now(),
            });
            tracing::info!("config reloaded");
            Ok(())
        }
        Err(e) => {
            tracing::error!(error = %e, "config reload failed; keeping the running config");
            status_tx.send_modify(|s| s.successful = false);
            Err(e)
        }
    }
}
