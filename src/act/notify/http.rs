//! What both receivers share: building the HTTP client (timeouts, TLS, no
//! redirects), one POST classified into delivered / retry / give up, the
//! jittered exponential backoff, and URLs redacted for logs. It must not know
//! the payload formats or the outbox.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use super::NotifyError;

/// Why a POST did not deliver.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// Worth retrying: timeout, refused connection, 5xx, 408, 429.
    #[error("{0}")]
    Transient(String),
    /// Retrying cannot help: another 4xx, a redirect.
    #[error("{0}")]
    Permanent(String),
}

/// The client of `notifier`: `timeout` per request and per connect, the
/// extra CA roots of `tls_ca_file`, no redirects.
pub(crate) fn client(
    notifier: &'static str,
    timeout: Duration,
    tls_ca_file: Option<&Path>,
    insecure_skip_verify: bool,
) -> Result<reqwest::Client, NotifyError> {
    let mut b = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        // A redirected POST turns into a GET on many servers; a receiver that
        // redirects is misconfigured and should say so, not half-work.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("gpumemd/", env!("CARGO_PKG_VERSION")))
        .danger_accept_invalid_certs(insecure_skip_verify);
    if let Some(path) = tls_ca_file {
        let tls_err = |reason: String| NotifyError::TlsCa {
            path: path.to_path_buf(),
            reason,
        };
        let pem = std::fs::read(path).map_err(|e| tls_err(e.to_string()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| tls_err(error_chain(&e)))?;
        if certs.is_empty() {
            return Err(tls_err("no PEM certificate in it".into()));
        }
        for cert in certs {
            b = b.add_root_certificate(cert);
        }
    }
    b.build().map_err(|e| NotifyError::Client {
        notifier,
        reason: error_chain(&e),
    })
}

/// POSTs `body` as JSON. Success is any 2xx.
pub(crate) async fn post(req: reqwest::RequestBuilder, body: Vec<u8>) -> Result<(), SendError> {
    let resp = req
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| SendError::Transient(error_chain(&e.without_url())))?;
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    // The receiver's reason helps the operator; keep it short, it is logged.
    let detail = resp.text().await.unwrap_or_default();
    let detail: String = detail.trim().chars().take(200).collect();
    let msg = if detail.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {detail}")
    };
    let code = status.as_u16();
    if status.is_server_error() || code == 408 || code == 429 {
        Err(SendError::Transient(msg))
    } else {
        Err(SendError::Permanent(msg))
    }
}

/// An error and its causes on one line ("error sending request: connection
/// refused"), since reqwest's top-level message alone says little.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// `scheme://host:port` of a URL: webhook paths and queries often carry
/// tokens, and logs must not.
pub(crate) fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => match (u.host_str(), u.port_or_known_default()) {
            (Some(h), Some(p)) => format!("{}://{h}:{p}", u.scheme()),
            (Some(h), None) => format!("{}://{h}", u.scheme()),
            _ => "<url>".into(),
        },
        Err(_) => "<url>".into(),
    }
}

/// Exponential backoff with "equal jitter": each delay is half the current
/// step plus a random part of the other half, so receivers coming back are
/// not hit by every daemon in the fleet at once.
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    step: Duration,
    rng: u64,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.min(max);
        Backoff {
            initial,
            max,
            step: initial,
            rng: seed(),
        }
    }

    pub fn reset(&mut self) {
        self.step = self.initial;
    }

    pub fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = self.step.saturating_mul(2).min(self.max);
        let half = step / 2;
        // 53 random bits make a uniform float in [0, 1).
        let unit = (splitmix64(&mut self.rng) >> 11) as f64 / (1u64 << 53) as f64;
        half + half.mul_f64(unit)
    }
}

/// A per-instance seed without the rand crate: the clock's nanoseconds and a
/// process-wide counter, so two backoffs started together still differ.
fn seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    u64::from(nanos) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(std::process::id()) << 32
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// True once the daemon is stopping (the flag is set or its sender is gone).
pub(crate) fn stopping(rx: &watch::Receiver<bool>) -> bool {
    *rx.borrow() || rx.has_changed().is_err()
}

/// Sleeps for `d` unless the daemon stops first; returns false on stop.
pub(crate) async fn sleep_or_stop(d: Duration, rx: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => !stopping(rx),
        () = wait_stop(rx) => false,
    }
}

/// Resolves when the daemon stops.
pub(crate) async fn wait_stop(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}
