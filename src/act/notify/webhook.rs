//! Delivery to one webhook: every evaluation's transitions become one JSON
//! message (schema in docs/notifications.md), delivered in order, one at a
//! time, signed with `X-Gpumemd-Signature: sha256=<hex HMAC>` when a secret is
//! set. Failures are retried with jittered exponential backoff; a 4xx other
//! than 408/429 is permanent. Must not coalesce: every transition counts.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::http::{self, Backoff, SendError};
use super::outbox::{self, Outbox, lock};
use super::{AlertPayload, NotifierStats, NotifyError, Secret, WebhookConfig, wire};

const NAME: &str = "webhook";
/// The signature header; its value is `sha256=<lowercase hex>`.
pub const SIGNATURE_HEADER: &str = "X-Gpumemd-Signature";

/// The `X-Gpumemd-Signature` value for `body`: `sha256=` and the lowercase
/// hex HMAC-SHA256 of the exact body bytes under `secret`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    // ring is already linked for TLS; its HMAC takes keys of any length.
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    for b in ring::hmac::sign(&key, body).as_ref() {
        let _ = write!(out, "{b:02x}");
    }
    out
}

pub(crate) struct Webhook {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    log_url: String,
    secret: Option<Secret>,
    outbox: Mutex<Outbox<Vec<AlertPayload>>>,
    wake: Notify,
}

impl Webhook {
    pub fn start(
        cfg: &WebhookConfig,
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
        let inner = Arc::new(Inner {
            url: cfg.url.clone(),
            log_url: http::redact_url(&cfg.url),
            secret: cfg.secret.clone(),
            outbox: Mutex::new(Outbox::open_or_retry(&outbox_root.join(NAME), cfg.max_queue)),
            wake: Notify::new(),
        });
        let queued = lock(&inner.outbox).len();
        if queued > 0 {
            tracing::info!(notifier = NAME, url = %inner.log_url, queued, "delivering messages left by the previous run");
        }
        let worker = Worker {
            inner: inner.clone(),
            client,
            backoff: Backoff::new(cfg.retry_initial, cfg.retry_max),
            max_attempts: cfg.max_attempts,
            attempts: 0,
            head: None,
        };
        tasks.push(rt.spawn(worker.run(shutdown.clone())));
        Ok(Webhook { inner })
    }

    /// Queues one message with this evaluation's transitions, in order.
    pub fn submit(&self, changed: &[AlertPayload]) {
        if changed.is_empty() {
            return;
        }
        lock(&self.inner.outbox).push(None, changed.to_vec());
        self.inner.wake.notify_one();
    }

    pub fn stats(&self) -> NotifierStats {
        outbox::stats(NAME, [&self.inner.outbox])
    }
}

struct Worker {
    inner: Arc<Inner>,
    client: reqwest::Client,
    backoff: Backoff,
    max_attempts: Option<u32>,
    /// Failed attempts of the message at the head of the queue.
    attempts: u32,
    head: Option<u64>,
}

impl Worker {
    /// Delivers the oldest message until it is accepted or given up, then the
    /// next: head-of-line order is the point of this notifier.
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        while !http::stopping(&stop) {
            let head = {
                let mut outbox = lock(&self.inner.outbox);
                outbox.retry_open();
                outbox.batch(1).pop()
            };
            let Some((seq, alerts)) = head else {
                tokio::select! {
                    () = self.inner.wake.notified() => {}
                    () = http::wait_stop(&mut stop) => return,
                }
                continue;
            };
            if self.head != Some(seq) {
                // A new head (the old one delivered, dropped or pushed out by
                // the bound) starts with a fresh retry budget.
                self.head = Some(seq);
                self.attempts = 0;
                self.backoff.reset();
            }
            let body = wire::webhook_body(seq, &alerts, crate::data::clock::unix_now());
            let mut req = self.client.post(&self.inner.url);
            if let Some(secret) = &self.inner.secret {
                req = req.header(SIGNATURE_HEADER, signature(secret.expose(), &body));
            }
            let result = tokio::select! {
                r = http::post(req, body) => r,
                () = http::wait_stop(&mut stop) => return,
            };
            if let Some(delay) = self.settle(seq, result)
                && !http::sleep_or_stop(delay, &mut stop).await
            {
                return;
            }
        }
    }

    /// Books the outcome of one attempt; returns the delay before a retry.
    fn settle(&mut self, seq: u64, result: Result<(), SendError>) -> Option<std::time::Duration> {
        let inner = &self.inner;
        let mut outbox = lock(&inner.outbox);
        match result {
            Ok(()) => {
                outbox.counters.sent_ok += 1;
                outbox.remove_seqs(&[seq]);
                if self.attempts > 0 {
                    tracing::info!(notifier = NAME, url = %inner.log_url, attempts = self.attempts + 1, "webhook delivered after retries");
                }
                self.attempts = 0;
                self.backoff.reset();
                None
            }
            Err(e) => {
                outbox.counters.failed += 1;
                self.attempts += 1;
                let permanent = matches!(e, SendError::Permanent(_));
                if permanent || self.max_attempts.is_some_and(|m| self.attempts >= m) {
                    outbox.counters.dropped += outbox.remove_seqs(&[seq]) as u64;
                    tracing::error!(notifier = NAME, url = %inner.log_url, error = %e, id = seq, attempts = self.attempts,
                        "webhook message dropped: {}", if permanent { "rejected by the receiver" } else { "attempts exhausted" });
                    self.attempts = 0;
                    self.backoff.reset();
                    return None;
                }
                let delay = self.backoff.next_delay();
                if self.attempts == 1 {
                    tracing::warn!(notifier = NAME, url = %inner.log_url, error = %e, "webhook delivery failed; kept in the outbox and retried");
                } else {
                    tracing::debug!(notifier = NAME, url = %inner.log_url, error = %e, attempts = self.attempts, retry_in = ?delay, "webhook still failing");
                }
                Some(delay)
            }
        }
    }
}
