//! Configuration reload on SIGHUP and `POST /-/reload`: the file is loaded
//! the way it was at start (same file, demo layering and command-line
//! overrides) and validated first; on error the running config stays and the
//! failure is visible (`gpumem_config_last_reload_successful 0`, a log line,
//! the HTTP answer). Restart-only settings (`config::RestartOnly`) that
//! changed are reported, not applied.
//!
//! The file is read on a thread of its own with a deadline: a FIFO or a hung
//! mount fails the reload instead of freezing an async worker, and shutdown
//! never waits for it. This module must not apply settings itself; the
//! components follow the config channel.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{mpsc, oneshot, watch};

use crate::app::config::{Config, ConfigError};

/// How long reading and checking the config file may take.
pub const RELOAD_DEADLINE: Duration = Duration::from_secs(5);

/// Outcome of the latest reload, for the config metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReloadStatus {
    pub successful: bool,
    /// Unix seconds of the latest successful load (the start counts).
    pub last_success: f64,
}

/// A reload request from HTTP; the reply says what happened, as one line.
pub type ReloadRequest = oneshot::Sender<Result<(), ReloadError>>;

/// Why a reload failed; the running config stays in every case.
#[derive(Debug, Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "the config was not loaded within {}; keeping the running config",
        humantime::format_duration(*.0)
    )]
    TimedOut(Duration),
    #[error("an earlier reload is still stuck reading the config file; keeping the running config")]
    Busy,
    #[error("cannot start the reload thread: {0}")]
    Thread(std::io::Error),
}

/// Loads the config again the way `current` was loaded: same file, same
/// demo layering, same command-line overrides.
///
/// # Errors
/// The config error (a read error included).
pub fn reload(current: &Config) -> Result<Config, ConfigError> {
    let mut next = match &current.source_path {
        Some(p) => Config::load(p, current.demo)?,
        None => Config::defaults(current.demo),
    };
    current.overrides.clone().apply(&mut next);
    Ok(next)
}

/// Serves reload requests until shutdown: from HTTP (`requests`) and SIGHUP.
pub async fn run(
    cfg_tx: watch::Sender<Arc<Config>>,
    status_tx: watch::Sender<ReloadStatus>,
    mut requests: mpsc::Receiver<ReloadRequest>,
    mut shutdown: watch::Receiver<bool>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    // The binary registered SIGHUP first thing at start; taking that
    // registration keeps a SIGHUP sent during start from being lost.
    let early = crate::app::shutdown::take_early_hangup();
    let mut hup = early
        .map(Ok)
        .unwrap_or_else(|| signal(SignalKind::hangup()))
        .inspect_err(|e| tracing::warn!(error = %e, "cannot listen for SIGHUP; reload only over HTTP"))
        .ok();
    let reader = Reader::default();
    loop {
        let reply = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            r = requests.recv() => match r { Some(tx) => Some(tx), None => return },
            _ = async { match hup.as_mut() { Some(h) => { h.recv().await; } None => std::future::pending().await } } => {
                tracing::info!("SIGHUP received; reloading the config");
                None
            }
        };
        let current = cfg_tx.borrow().clone();
        // Shutdown wins over a reload in progress: the reader thread, if
        // stuck, is left behind and ends with the process.
        let loaded = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            r = reader.load(current.clone(), RELOAD_DEADLINE) => r,
        };
        let result = publish(&cfg_tx, &status_tx, &current, loaded);
        if let Some(tx) = reply {
            let _ = tx.send(result);
        }
    }
}

/// Runs [`reload`] on a plain thread (not the blocking pool: the runtime
/// waits for that at shutdown) and gives up after a deadline. At most one
/// such thread exists: while one is stuck, later reloads fail at once
/// instead of piling up threads.
#[derive(Default)]
struct Reader {
    busy: Arc<AtomicBool>,
}

impl Reader {
    async fn load(&self, current: Arc<Config>, deadline: Duration) -> Result<Config, ReloadError> {
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(ReloadError::Busy);
        }
        let (tx, rx) = oneshot::channel();
        let busy = self.busy.clone();
        let spawned = std::thread::Builder::new()
            .name("gpumemd-reload".into())
            .spawn(move || {
                let r = reload(&current);
                busy.store(false, Ordering::Release);
                let _ = tx.send(r);
            });
        if let Err(e) = spawned {
            self.busy.store(false, Ordering::Release);
            return Err(ReloadError::Thread(e));
        }
        match tokio::time::timeout(deadline, rx).await {
            Ok(Ok(r)) => r.map_err(ReloadError::from),
            // The thread ended without answering: it panicked.
            Ok(Err(_)) => Err(ReloadError::Thread(std::io::Error::other("the reload thread died"))),
            Err(_) => Err(ReloadError::TimedOut(deadline)),
        }
    }
}

fn publish(
    cfg_tx: &watch::Sender<Arc<Config>>,
    status_tx: &watch::Sender<ReloadStatus>,
    current: &Config,
    loaded: Result<Config, ReloadError>,
) -> Result<(), ReloadError> {
    match loaded {
        Ok(next) => {
            let later = crate::app::config::needs_restart(current, &next);
            if !later.is_empty() {
                tracing::warn!(settings = ?later, "changed settings take effect only after a restart");
            }
            cfg_tx.send_replace(Arc::new(next));
            status_tx.send_replace(ReloadStatus {
                successful: true,
                last_success: crate::data::clock::unix_now(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::config::Overrides;

    #[test]
    fn reload_keeps_the_command_line_overrides() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("gpumemd.toml");
        std::fs::write(&path, "[nvml]\nlibrary = \"from-file.so\"\n").expect("write");
        let mut cfg = Config::load(&path, false).expect("valid");
        Overrides {
            nvml_lib: Some("/opt/fake/libnvidia-ml.so".into()),
            cuda_lib: None,
            listen: Some("127.0.0.1:0".into()),
            web_config_file: None,
            telemetry_path: None,
            tls: false,
        }
        .apply(&mut cfg);
        std::fs::write(&path, "[nvml]\nlibrary = \"from-file.so\"\n[processes]\ntop_n = 7\n").expect("write");
        let next = reload(&cfg).expect("reloads");
        assert_eq!(next.processes.top_n, 7, "the file was read again");
        assert_eq!(next.nvml.library, "/opt/fake/libnvidia-ml.so");
        assert_eq!(next.server.listen, "127.0.0.1:0");
        assert!(
            crate::app::config::needs_restart(&cfg, &next).is_empty(),
            "no false \"needs a restart\""
        );
    }

    #[tokio::test]
    async fn a_fifo_config_is_refused_at_once_and_a_later_reload_succeeds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("gpumemd.toml");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        let cfg = Config {
            source_path: Some(path.clone()),
            ..Config::defaults(false)
        };
        let reader = Reader::default();
        let deadline = Duration::from_secs(30);
        let started = std::time::Instant::now();
        let e = reader
            .load(Arc::new(cfg.clone()), deadline)
            .await
            .expect_err("a FIFO nobody writes");
        assert!(e.to_string().contains("is a FIFO, not a regular file"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        // Nothing was left stuck: the next reload of a regular file goes through.
        std::fs::remove_file(&path).expect("rm FIFO");
        std::fs::write(&path, "[processes]\ntop_n = 3\n").expect("write config");
        let next = reader.load(Arc::new(cfg), deadline).await.expect("a regular file");
        assert_eq!(next.processes.top_n, 3);
    }
}
