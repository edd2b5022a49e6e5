//! Alert delivery: to Alertmanager (API v2) and to a signed JSON webhook,
//! through a durable outbox on disk (`<state dir>/outbox/`).
//!
//! The rule engine hands every evaluation's transitions and firing set to
//! [`Notifiers::submit`], which persists them and returns without touching the
//! network; one task per receiver delivers in the background, retries with
//! backoff, and picks up what a previous run left on disk. This module owns
//! the wire formats, the outbox files and the delivery counters; it must not
//! evaluate rules, read the daemon's config file or render metrics (the lead
//! exports [`Notifiers::stats`]). It depends only on the leaf `clock`.

mod alertmanager;
mod config;
mod http;
mod open;
mod outbox;
mod webhook;
mod wire;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{AlertmanagerConfig, BasicAuth, NotifyConfig, NotifyConfigError, Problem, Secret, WebhookConfig};
pub use webhook::signature;

/// One alert as the daemon's rule engine hands it over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertPayload {
    /// Identifying labels; always has `alertname`.
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub status: AlertStatus,
    /// Unix seconds.
    pub starts_at: f64,
    /// Unix seconds; set when resolved.
    pub ends_at: Option<f64>,
    /// The value that crossed the threshold, when there is one.
    pub value: Option<f64>,
    pub generator_url: String,
}

impl AlertPayload {
    /// The alert's identity: [`fingerprint`] of its labels.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.labels)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertStatus {
    Firing,
    Resolved,
}

impl AlertStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }
}

/// A stable hex identity of a label set: FNV-1a 64 over the sorted
/// `name 0xff value 0xff` sequence, printed as 16 hex digits. It is the same
/// algorithm as Prometheus' `LabelSet.Fingerprint`, so it equals the
/// `fingerprint` Alertmanager shows for the alert. Labels with an empty value
/// count as absent, as they do in Prometheus.
pub fn fingerprint(labels: &BTreeMap<String, String>) -> String {
    const OFFSET: u64 = 14_695_981_039_346_656_037;
    const PRIME: u64 = 1_099_511_628_211;
    let mut h = OFFSET;
    let mut add = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(PRIME);
        }
    };
    // BTreeMap iterates in byte order of the names, as Go's sort.Strings does.
    for (name, value) in labels.iter().filter(|(_, v)| !v.is_empty()) {
        add(name.as_bytes());
        add(&[0xff]);
        add(value.as_bytes());
        add(&[0xff]);
    }
    format!("{h:016x}")
}

/// Delivery counters of one notifier, for
/// `gpumem_notifications_total{notifier,result}` and
/// `gpumem_notification_queue_length{notifier}`. An Alertmanager counts alerts
/// (summed over its URLs); the webhook counts messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotifierStats {
    /// `"alertmanager"` or `"webhook"`.
    pub notifier: &'static str,
    /// Accepted by the receiver (`result="success"`).
    pub sent_ok: u64,
    /// Failed attempts: timeouts, refused connections, error statuses
    /// (`result="failure"`); a retried notification counts each attempt.
    pub failed: u64,
    /// Given up without delivery: queue full, permanent rejection, corrupt
    /// outbox file, attempts exhausted (`result="dropped"`).
    pub dropped: u64,
    /// Waiting for delivery now.
    pub queue_length: u64,
    /// Outbox writes or removals that failed (the notification was still
    /// attempted from memory).
    pub persist_errors: u64,
}

#[derive(Debug, Error)]
pub enum NotifyError {
    #[error("invalid notify config: {0}")]
    Config(#[from] NotifyConfigError),
    #[error("cannot use state directory {}: {source}", path.display())]
    StateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot read TLS CA file {}: {reason}", path.display())]
    TlsCa { path: PathBuf, reason: String },
    #[error("cannot build the HTTP client for {notifier}: {reason}")]
    Client { notifier: &'static str, reason: String },
    #[error("Notifiers::start must be called inside a tokio runtime")]
    NoRuntime,
}

/// The running notifiers. Dropping it stops the delivery tasks; what was not
/// delivered stays in the outbox for the next start.
pub struct Notifiers {
    /// Firing alerts handed over and not yet resolved, across restarts.
    open: std::sync::Mutex<open::OpenAlerts>,
    alertmanager: Option<alertmanager::Alertmanager>,
    webhook: Option<webhook::Webhook>,
    tasks: Vec<JoinHandle<()>>,
}

impl Notifiers {
    /// Opens the outbox under `state_dir/outbox/` (creating it), loads what a
    /// previous run left, and spawns the delivery tasks.
    ///
    /// # Errors
    /// An invalid config, a state directory that cannot be created or written
    /// (the error names the path), an unreadable CA file, or no tokio runtime.
    pub fn start(
        cfg: &NotifyConfig,
        state_dir: &Path,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Notifiers, NotifyError> {
        cfg.validate().map_err(NotifyError::Config)?;
        let rt = tokio::runtime::Handle::try_current().map_err(|_| NotifyError::NoRuntime)?;
        let root = state_dir.join("outbox");
        // Built first so that an error part-way drops it, and its Drop stops
        // the tasks already spawned.
        let mut n = Notifiers {
            open: std::sync::Mutex::new(open::OpenAlerts::load(&root)),
            alertmanager: None,
            webhook: None,
            tasks: Vec::new(),
        };
        if let Some(c) = &cfg.alertmanager {
            n.alertmanager = Some(alertmanager::Alertmanager::start(
                c,
                &root,
                &rt,
                &shutdown,
                &mut n.tasks,
            )?);
        }
        if let Some(c) = &cfg.webhook {
            n.webhook = Some(webhook::Webhook::start(c, &root, &rt, &shutdown, &mut n.tasks)?);
        }
        Ok(n)
    }

    /// Takes the alerts that changed state in this evaluation (fired or
    /// resolved) and the full current firing set, which drives resends. It
    /// never waits on the network: it writes the outbox (small files, fsynced)
    /// and wakes the delivery tasks. The first call of a run also resolves
    /// the alerts a previous run left firing that are not firing now.
    pub fn submit(&self, changed: &[AlertPayload], firing: &[AlertPayload]) {
        let extra = outbox::lock(&self.open).track(changed, firing, crate::data::clock::unix_now());
        let joined: Vec<AlertPayload>;
        let changed = if extra.is_empty() {
            changed
        } else {
            joined = changed.iter().cloned().chain(extra).collect();
            &joined
        };
        if let Some(am) = &self.alertmanager {
            am.submit(changed, firing);
        }
        if let Some(wh) = &self.webhook {
            wh.submit(changed);
        }
        // After the outboxes have the resolutions (see `OpenAlerts::track`).
        outbox::lock(&self.open).settle(changed);
    }

    /// One entry per configured notifier.
    pub fn stats(&self) -> Vec<NotifierStats> {
        let am = self.alertmanager.iter().map(alertmanager::Alertmanager::stats);
        am.chain(self.webhook.iter().map(webhook::Webhook::stats)).collect()
    }

    /// Waits for the delivery tasks to end; they end when `shutdown` turns
    /// true (or its sender is dropped).
    pub async fn join(mut self) {
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
    }
}

impl Drop for Notifiers {
    fn drop(&mut self) {
        // An aborted send leaves its entries in the outbox: delivery is at
        // least once, never lost.
        for task in &self.tasks {
            task.abort();
        }
    }
}
