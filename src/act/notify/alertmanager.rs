//! Delivery to Alertmanager API v2: one target, outbox and task per
//! configured URL, so an Alertmanager that is down never delays the others.
//!
//! Each outbox coalesces by fingerprint (only the latest state of an alert is
//! worth sending), which also bounds it. Firing alerts are re-sent every
//! `resend` from memory; Alertmanager resolves them by itself 4 x `resend`
//! after the last one it got. Must not decide when alerts fire.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::http::{self, Backoff, SendError};
use super::outbox::{self, Outbox, lock};
use super::{AlertPayload, AlertStatus, AlertmanagerConfig, NotifierStats, NotifyError, Secret, fingerprint, wire};

const NAME: &str = "alertmanager";
/// Alerts per POST, as Prometheus batches (its default is 64 as well).
const MAX_BATCH: usize = 64;
const RETRY_INITIAL: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

type FiringSet = Arc<Mutex<BTreeMap<String, AlertPayload>>>;

pub(crate) struct Alertmanager {
    targets: Vec<Arc<Target>>,
    firing: FiringSet,
}

struct Target {
    endpoint: String,
    /// `scheme://host:port`, for logs.
    log_url: String,
    outbox: Mutex<Outbox<AlertPayload>>,
    wake: Notify,
}

#[derive(Clone)]
enum Auth {
    None,
    Basic(String, Secret),
    Bearer(Secret),
}

impl Auth {
    fn apply(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Auth::None => req,
            Auth::Basic(user, pass) => req.basic_auth(user, Some(pass.expose())),
            Auth::Bearer(token) => req.bearer_auth(token.expose()),
        }
    }
}

/// What one delivery task needs besides its target.
#[derive(Clone)]
struct Settings {
    client: reqwest::Client,
    auth: Auth,
    resend: Duration,
    firing: FiringSet,
}

impl Alertmanager {
    pub fn start(
        cfg: &AlertmanagerConfig,
        outbox_root: &Path,
        rt: &tokio::runtime::Handle,
        shutdown: &watch::Receiver<bool>,
        tasks: &mut Vec<JoinHandle<()>>,
    ) -> Result<Self, NotifyError> {
        let client = http::client(
            NAME,
            cfg.timeout,
            cfg.tls_ca_file.as_deref(),
            cfg.tls_insecure_skip_verify,
        )?;
        let auth = match (&cfg.basic_auth, &cfg.bearer_token) {
            (Some(b), _) => Auth::Basic(b.username.clone(), b.password.clone()),
            (None, Some(t)) => Auth::Bearer(t.clone()),
            (None, None) => Auth::None,
        };
        let firing: FiringSet = Arc::default();
        let settings = Settings {
            client,
            auth,
            resend: cfg.resend,
            firing: firing.clone(),
        };
        let dir = outbox_root.join(NAME);
        let mut targets = Vec::new();
        for url in &cfg.urls {
            let base = url.trim_end_matches('/');
            let target = Arc::new(Target {
                endpoint: format!("{base}/api/v2/alerts"),
                log_url: http::redact_url(url),
                outbox: Mutex::new(Outbox::open_or_retry(&dir.join(target_dir_name(base)), cfg.max_queue)),
                wake: Notify::new(),
            });
            let queued = lock(&target.outbox).len();
            if queued > 0 {
                tracing::info!(notifier = NAME, url = %target.log_url, queued, "delivering alerts left by the previous run");
            }
            tasks.push(rt.spawn(run(target.clone(), settings.clone(), shutdown.clone())));
            targets.push(target);
        }
        warn_orphans(&dir, &cfg.urls);
        Ok(Alertmanager { targets, firing })
    }

    pub fn submit(&self, changed: &[AlertPayload], firing: &[AlertPayload]) {
        let mut queue: Vec<(String, &AlertPayload)> = changed.iter().map(|a| (a.fingerprint(), a)).collect();
        let mut now_firing: BTreeMap<String, AlertPayload> = firing
            .iter()
            .filter(|a| a.status == AlertStatus::Firing)
            .map(|a| (a.fingerprint(), a.clone()))
            .collect();
        // The caller's transitions win over its firing list if they disagree.
        for (fp, a) in &queue {
            match a.status {
                AlertStatus::Firing => now_firing.insert(fp.clone(), (*a).clone()),
                AlertStatus::Resolved => now_firing.remove(fp),
            };
        }
        let changed_fps: BTreeSet<String> = queue.iter().map(|(fp, _)| fp.clone()).collect();
        {
            let mut known = lock(&self.firing);
            // A firing alert Alertmanager has not heard of from this process
            // (the first evaluation after a restart) goes out now, not at the
            // next resend.
            for (fp, a) in &now_firing {
                if !known.contains_key(fp) && !changed_fps.contains(fp) {
                    queue.push((fp.clone(), a));
                }
            }
            known.clone_from(&now_firing);
        }
        if queue.is_empty() {
            return;
        }
        for t in &self.targets {
            let mut outbox = lock(&t.outbox);
            for (fp, a) in &queue {
                outbox.push(Some(fp), (*a).clone());
            }
            drop(outbox);
            t.wake.notify_one();
        }
    }

    pub fn stats(&self) -> NotifierStats {
        outbox::stats(NAME, self.targets.iter().map(|t| &t.outbox))
    }
}

/// One target's delivery loop: send what is queued oldest first, queue the
/// firing set again every `resend`, back off while the target fails.
async fn run(t: Arc<Target>, s: Settings, mut stop: watch::Receiver<bool>) {
    let mut w = Worker {
        backoff: Backoff::new(RETRY_INITIAL, s.resend.min(RETRY_MAX)),
        next_resend: Instant::now() + s.resend,
        failing: false,
        t,
        s,
    };
    while !http::stopping(&stop) {
        lock(&w.t.outbox).retry_open();
        if Instant::now() >= w.next_resend {
            w.queue_resends();
        }
        let batch = lock(&w.t.outbox).batch(MAX_BATCH);
        if batch.is_empty() {
            tokio::select! {
                () = w.t.wake.notified() => {}
                () = tokio::time::sleep_until(w.next_resend) => {}
                () = http::wait_stop(&mut stop) => return,
            }
            continue;
        }
        let (seqs, alerts): (Vec<u64>, Vec<AlertPayload>) = batch.into_iter().unzip();
        let body = wire::alertmanager_body(&alerts, crate::data::clock::unix_now(), w.s.resend);
        let req = w.s.auth.apply(w.s.client.post(&w.t.endpoint));
        let result = tokio::select! {
            r = http::post(req, body) => r,
            () = http::wait_stop(&mut stop) => return,
        };
        if let Some(delay) = w.settle(&seqs, result)
            && !http::sleep_or_stop(delay, &mut stop).await
        {
            return;
        }
    }
}

struct Worker {
    t: Arc<Target>,
    s: Settings,
    backoff: Backoff,
    next_resend: Instant,
    /// Log one warning per outage; the retries are debug noise.
    failing: bool,
}

impl Worker {
    /// Queues the firing set in memory; alerts already queued keep their
    /// place (and their newer state).
    fn queue_resends(&mut self) {
        let firing: Vec<(String, AlertPayload)> = lock(&self.s.firing)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut outbox = lock(&self.t.outbox);
        for (fp, a) in firing {
            outbox.push_volatile(&fp, a);
        }
        self.next_resend = Instant::now() + self.s.resend;
    }

    /// Books the outcome of one POST; returns the delay before a retry.
    fn settle(&mut self, seqs: &[u64], result: Result<(), SendError>) -> Option<Duration> {
        let t = &self.t;
        let n = seqs.len() as u64;
        let mut outbox = lock(&t.outbox);
        match result {
            Ok(()) => {
                outbox.counters.sent_ok += n;
                outbox.remove_seqs(seqs);
                self.backoff.reset();
                if std::mem::take(&mut self.failing) {
                    tracing::info!(notifier = NAME, url = %t.log_url, "Alertmanager accepts alerts again");
                }
                None
            }
            Err(SendError::Permanent(e)) => {
                outbox.counters.failed += n;
                let dropped = outbox.remove_seqs(seqs);
                outbox.counters.dropped += dropped as u64;
                tracing::error!(notifier = NAME, url = %t.log_url, error = %e, dropped, "Alertmanager rejected alerts; dropped");
                None
            }
            Err(SendError::Transient(e)) => {
                outbox.counters.failed += n;
                let delay = self.backoff.next_delay();
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(notifier = NAME, url = %t.log_url, error = %e,
                        "cannot reach Alertmanager; alerts kept in the outbox and retried");
                } else {
                    tracing::debug!(notifier = NAME, url = %t.log_url, error = %e, retry_in = ?delay, "Alertmanager still failing");
                }
                Some(delay)
            }
        }
    }
}

/// A readable, unique, secret-free directory name for a base URL:
/// `am_9093-<hash>`. Only host and port are shown: a path or user info can
/// hold a token, and names on disk are seen by anyone who can list the
/// state dir. The hash covers the whole URL, so names stay unique.
pub(crate) fn target_dir_name(base: &str) -> String {
    let shown = reqwest::Url::parse(base).ok().map_or_else(String::new, |u| {
        let host = u.host_str().unwrap_or("");
        u.port().map_or_else(|| host.to_owned(), |p| format!("{host}:{p}"))
    });
    let readable: String = shown
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let hash = fingerprint(&BTreeMap::from([("url".to_owned(), base.to_owned())]));
    format!("{readable}-{}", hash.get(..8).unwrap_or(&hash))
}

/// Alerts queued for a URL that is no longer configured are not ours to
/// send elsewhere; say where they are so an operator can decide.
fn warn_orphans(dir: &Path, urls: &[String]) {
    let known: Vec<String> = urls.iter().map(|u| target_dir_name(u.trim_end_matches('/'))).collect();
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if known.contains(&name) || !entry.path().is_dir() {
            continue;
        }
        let queued = std::fs::read_dir(entry.path())
            .map(|r| {
                r.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                    .count()
            })
            .unwrap_or(0);
        if queued > 0 {
            tracing::warn!(notifier = NAME, dir = %entry.path().display(), queued,
                "outbox of an Alertmanager URL no longer configured; left in place, not delivered");
        }
    }
}
