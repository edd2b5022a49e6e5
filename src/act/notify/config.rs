//! The `[notify.*]` config sections: typed values with defaults, and one
//! `validate()` whose messages name the key and say what would be valid. It
//! must not read files or touch the network; `Notifiers::start` does that.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

/// Default bound of one outbox (entries per notifier and target).
pub const DEFAULT_MAX_QUEUE: usize = 10_000;

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alertmanager: Option<AlertmanagerConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookConfig>,
}

/// `[notify.alertmanager]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AlertmanagerConfig {
    /// Base URLs like `http://am:9093`; alerts go to `{url}/api/v2/alerts`.
    /// Each is its own target with its own queue.
    pub urls: Vec<String>,
    /// Firing alerts are sent again this often; their `endsAt` is 4x this.
    #[serde(default = "default_resend", with = "humantime_serde")]
    pub resend: Duration,
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token: Option<Secret>,
    /// PEM file with the CA(s) that sign the receivers' certificates, in
    /// addition to the built-in roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_insecure_skip_verify: bool,
    /// Alerts kept per URL while it is unreachable; the oldest go first.
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
}

impl Default for AlertmanagerConfig {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            resend: default_resend(),
            timeout: default_timeout(),
            basic_auth: None,
            bearer_token: None,
            tls_ca_file: None,
            tls_insecure_skip_verify: false,
            max_queue: DEFAULT_MAX_QUEUE,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    pub username: String,
    pub password: Secret,
}

/// `[notify.webhook]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub url: String,
    /// Key of the `X-Gpumemd-Signature` HMAC-SHA256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Secret>,
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// First retry delay; it doubles per failed attempt up to `retry_max`.
    #[serde(default = "default_retry_initial", with = "humantime_serde")]
    pub retry_initial: Duration,
    #[serde(default = "default_retry_max", with = "humantime_serde")]
    pub retry_max: Duration,
    /// Attempts per message before it is dropped; unset = until delivered
    /// (the outbox bound still applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_insecure_skip_verify: bool,
    /// Messages kept while the receiver is unreachable; the oldest go first.
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            secret: None,
            timeout: default_timeout(),
            retry_initial: default_retry_initial(),
            retry_max: default_retry_max(),
            max_attempts: None,
            tls_ca_file: None,
            tls_insecure_skip_verify: false,
            max_queue: DEFAULT_MAX_QUEUE,
        }
    }
}

fn default_resend() -> Duration {
    Duration::from_secs(60)
}
fn default_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_retry_initial() -> Duration {
    Duration::from_secs(1)
}
fn default_retry_max() -> Duration {
    Duration::from_secs(300)
}
fn default_max_queue() -> usize {
    DEFAULT_MAX_QUEUE
}

/// A credential: it prints and serializes as `<secret>`, so neither logs nor
/// `check-config` output show it.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<secret>")
    }
}

/// A `[notify]` value that is invalid: the dotted key it is about
/// (`notify.alertmanager.urls[1]`) and what is wrong with it. The key stays
/// a field so the config loader can locate it without re-parsing a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct NotifyConfigError {
    pub key: String,
    pub problem: Problem,
}

/// What is wrong with one `[notify]` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("at least one Alertmanager URL is needed, e.g. [\"http://localhost:9093\"]")]
    NoUrls,
    #[error("`{0}` is listed twice")]
    Duplicate(String),
    #[error("set basic_auth or bearer_token, not both")]
    BothAuths,
    #[error("must not be empty")]
    Empty,
    #[error("must not be empty (leave it out to send unsigned)")]
    EmptySecret,
    #[error("{} is below retry_initial ({})", humantime::format_duration(*max), humantime::format_duration(*initial))]
    RetryMaxBelowInitial { max: Duration, initial: Duration },
    #[error("must be at least 1 (leave it out to retry until delivered)")]
    NoAttempts,
    #[error("must not be empty; give an http(s) URL")]
    EmptyUrl,
    #[error("`{0}` is not an http(s) URL")]
    NotHttp(String),
    #[error("`{0}` has no host")]
    NoHost(String),
    #[error("credentials in the URL are not allowed; use basic_auth or bearer_token")]
    CredentialsInUrl,
    #[error("`{0}` must be a base URL without ?query or #fragment")]
    NotBaseUrl(String),
    #[error("must be above zero, e.g. \"10s\"")]
    Zero,
    #[error("{} is more than a day", humantime::format_duration(*.0))]
    MoreThanADay(Duration),
    #[error("must be at least 1 (default {DEFAULT_MAX_QUEUE})")]
    EmptyQueue,
}

impl Problem {
    fn at(self, key: impl Into<String>) -> NotifyConfigError {
        NotifyConfigError {
            key: key.into(),
            problem: self,
        }
    }
}

impl NotifyConfig {
    /// Checks what serde cannot: URL shapes, positive durations, bounds.
    ///
    /// # Errors
    /// The first problem, with the `notify.<section>.<key>` it is about.
    pub fn validate(&self) -> Result<(), NotifyConfigError> {
        if let Some(am) = &self.alertmanager {
            am.validate()?;
        }
        if let Some(wh) = &self.webhook {
            wh.validate()?;
        }
        Ok(())
    }
}

impl AlertmanagerConfig {
    fn validate(&self) -> Result<(), NotifyConfigError> {
        const S: &str = "notify.alertmanager";
        if self.urls.is_empty() {
            return Err(Problem::NoUrls.at(format!("{S}.urls")));
        }
        for (i, url) in self.urls.iter().enumerate() {
            check_url(&format!("{S}.urls[{i}]"), url, false)?;
            if self.urls[..i]
                .iter()
                .any(|u| u.trim_end_matches('/') == url.trim_end_matches('/'))
            {
                return Err(Problem::Duplicate(shown(url)).at(format!("{S}.urls[{i}]")));
            }
        }
        positive(&format!("{S}.resend"), self.resend)?;
        positive(&format!("{S}.timeout"), self.timeout)?;
        check_max_queue(&format!("{S}.max_queue"), self.max_queue)?;
        if let Some(auth) = &self.basic_auth {
            if auth.username.is_empty() {
                return Err(Problem::Empty.at(format!("{S}.basic_auth.username")));
            }
            if self.bearer_token.is_some() {
                return Err(Problem::BothAuths.at(S));
            }
        }
        if self.bearer_token.as_ref().is_some_and(|t| t.expose().is_empty()) {
            return Err(Problem::Empty.at(format!("{S}.bearer_token")));
        }
        Ok(())
    }
}

impl WebhookConfig {
    fn validate(&self) -> Result<(), NotifyConfigError> {
        const S: &str = "notify.webhook";
        check_url(&format!("{S}.url"), &self.url, true)?;
        if self.secret.as_ref().is_some_and(|s| s.expose().is_empty()) {
            return Err(Problem::EmptySecret.at(format!("{S}.secret")));
        }
        positive(&format!("{S}.timeout"), self.timeout)?;
        positive(&format!("{S}.retry_initial"), self.retry_initial)?;
        positive(&format!("{S}.retry_max"), self.retry_max)?;
        if self.retry_max < self.retry_initial {
            let p = Problem::RetryMaxBelowInitial {
                max: self.retry_max,
                initial: self.retry_initial,
            };
            return Err(p.at(format!("{S}.retry_max")));
        }
        if self.max_attempts == Some(0) {
            return Err(Problem::NoAttempts.at(format!("{S}.max_attempts")));
        }
        check_max_queue(&format!("{S}.max_queue"), self.max_queue)
    }
}

/// An absolute http(s) URL with a host and no credentials in it (they would
/// end up in logs and outbox paths; the auth keys are the place for them).
fn check_url(key: &str, url: &str, allow_query: bool) -> Result<(), NotifyConfigError> {
    if url.trim().is_empty() {
        return Err(Problem::EmptyUrl.at(key));
    }
    let parsed = match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u,
        _ => return Err(Problem::NotHttp(shown(url)).at(key)),
    };
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Problem::NoHost(shown(url)).at(key));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Problem::CredentialsInUrl.at(key));
    }
    if !allow_query && (parsed.query().is_some() || parsed.fragment().is_some()) {
        return Err(Problem::NotBaseUrl(shown(url)).at(key));
    }
    Ok(())
}

/// A refused URL as an error shows its scheme and host only, `…` for the
/// rest: a path, query or credentials may carry a token (a Slack-style
/// webhook's secret is its path), which would reach the terminal and the
/// journal of whoever runs check-config.
fn shown(url: &str) -> String {
    let mut s = match reqwest::Url::parse(url) {
        Ok(u) => {
            let mut s = format!("{}:", u.scheme());
            if let Some(h) = u.host_str() {
                s += &format!("//{h}");
            }
            if let Some(p) = u.port() {
                s += &format!(":{p}");
            }
            s
        }
        Err(_) => {
            // Unparseable: cut at the first character after the scheme that
            // starts a path, credentials, a query or a fragment.
            let from = url.find("://").map_or(0, |i| i + 3);
            let end = url[from..].find(['/', '@', '?', '#']).map_or(url.len(), |e| from + e);
            url[..end].to_owned()
        }
    };
    if s != url.trim_end_matches('/') {
        s.push('…');
    }
    s
}

/// Above zero and at most a day: longer values are typos, and bounding them
/// keeps every deadline computed from them far from overflow.
fn positive(key: &str, d: Duration) -> Result<(), NotifyConfigError> {
    const MAX: Duration = Duration::from_secs(86_400);
    if d.is_zero() {
        return Err(Problem::Zero.at(key));
    }
    if d > MAX {
        return Err(Problem::MoreThanADay(d).at(key));
    }
    Ok(())
}

fn check_max_queue(key: &str, n: usize) -> Result<(), NotifyConfigError> {
    if n == 0 {
        return Err(Problem::EmptyQueue.at(key));
    }
    Ok(())
}
