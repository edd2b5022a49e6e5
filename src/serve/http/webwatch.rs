//! [`WebConfigWatch`]: the web config in force, and its re-load when one of
//! its files (the web config, TLS certificate and key, client CA) changes.
//!
//! Owns: change detection and the swap. Checks run on a thread of their
//! own, once a second, never on the accept path: a FIFO named as the web
//! config, or a hung NFS or FUSE mount under a certificate, blocks that
//! thread and nothing else (HTTP keeps serving with the config in force,
//! and no second check is started while one is stuck). Must not: parse
//! (webconfig.rs does) or accept connections (serve.rs does).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use super::webconfig::{WebConfig, WebConfigError, error, load};

/// The file's identity for change detection: a replaced file (rename, a
/// Kubernetes secret's symlink swap) changes inode or mtime or size.
type Stamp = Option<(std::time::SystemTime, u64, u64)>;

fn stamp(p: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// How often the files are looked at.
const CHECK_EVERY: Duration = Duration::from_secs(1);

struct WatchState {
    stamps: Vec<Stamp>,
    /// The stamps of a load that failed: not retried (nor logged) again
    /// until a file changes once more.
    failed: Option<Vec<Stamp>>,
}

/// The current web config, re-loaded when its files change.
pub struct WebConfigWatch {
    path: Option<PathBuf>,
    current: RwLock<Arc<WebConfig>>,
    state: Mutex<WatchState>,
    /// A check is running (or stuck in the kernel): the next tick skips.
    checking: AtomicBool,
}

impl WebConfigWatch {
    /// Loads `path`, or the built-in defaults (plain HTTP, no auth) without one.
    ///
    /// # Errors
    /// The file's first problem.
    pub fn new(path: Option<&Path>) -> Result<Self, WebConfigError> {
        let cfg = match path {
            Some(p) => load(p)?,
            None => WebConfig::default(),
        };
        let stamps = cfg.watched.iter().map(|p| stamp(p)).collect();
        Ok(Self {
            path: path.map(Path::to_path_buf),
            current: RwLock::new(Arc::new(cfg)),
            state: Mutex::new(WatchState { stamps, failed: None }),
            checking: AtomicBool::new(false),
        })
    }

    /// The config in force now.
    pub fn current(&self) -> Arc<WebConfig> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Checks the files every second until `stop` turns true. Each check
    /// runs on a detached thread: one stuck in the kernel is left there
    /// (it cannot be cancelled) and the daemon neither waits for it at
    /// shutdown nor starts another beside it.
    pub async fn follow(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        if self.path.is_none() {
            return;
        }
        let mut tick = tokio::time::interval(CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                r = stop.changed() => if r.is_err() || *stop.borrow() { return },
            }
            if self.checking.swap(true, Ordering::AcqRel) {
                tracing::debug!("the previous web config check has not returned; skipping this one");
                continue;
            }
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("gpumemd-webcfg".into())
                .spawn(move || {
                    me.check();
                    me.checking.store(false, Ordering::Release);
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the web config check thread");
                self.checking.store(false, Ordering::Release);
            }
        }
    }

    /// Re-loads when a watched file changed. A broken new config keeps the
    /// old one in force and is logged once.
    pub fn check(&self) {
        let Some(path) = &self.path else { return };
        let Ok(mut st) = self.state.lock() else { return };
        let cur = self.current();
        let stamps: Vec<Stamp> = cur.watched.iter().map(|p| stamp(p)).collect();
        if stamps == st.stamps || st.failed.as_ref() == Some(&stamps) {
            return;
        }
        match load(path).and_then(|next| same_mode(&cur, next, path)) {
            Ok(next) => {
                tracing::info!(file = %path.display(), tls = next.tls.is_some(), "web config reloaded");
                // Stamps taken before the load: a file that changes during
                // it is then seen as changed next time, not missed.
                st.stamps = if next.watched == cur.watched {
                    stamps
                } else {
                    next.watched.iter().map(|p| stamp(p)).collect()
                };
                st.failed = None;
                if let Ok(mut g) = self.current.write() {
                    *g = Arc::new(next);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot reload the web config; keeping the one in force");
                st.failed = Some(stamps);
            }
        }
    }
}

/// TLS on a plain listener (or the reverse) would break every client at
/// once; that switch waits for a restart.
fn same_mode(cur: &WebConfig, next: WebConfig, path: &Path) -> Result<WebConfig, WebConfigError> {
    if cur.tls.is_some() != next.tls.is_some() {
        return Err(error(path, "turning TLS on or off takes a restart".into()));
    }
    Ok(next)
}
