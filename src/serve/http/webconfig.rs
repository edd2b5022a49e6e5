//! The `--web.config.file`: the Prometheus exporter-toolkit YAML format
//! (`tls_server_config`, `http_server_config`, `basic_auth_users`,
//! `rate_limit`) plus gpumemd's own `limits` section. Parsed once into typed
//! values (TLS config built, bcrypt hashes checked, headers vetted), and
//! re-read when the file or a certificate it names changes, so certificates
//! rotate without a restart. It must not serve or authenticate: that is
//! `serve.rs` and `auth.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, header};
use serde::Deserialize;
use thiserror::Error;

use super::auth::{BasicAuth, RateLimiter};
use super::tls::{self, TlsFile};

/// A web config that cannot be used, as one line naming the file.
#[derive(Debug, Error)]
#[error("web config {path}: {msg}")]
pub struct WebConfigError {
    path: String,
    msg: String,
}

/// What is wrong inside a web config file, by the key it is about.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigProblem {
    #[error("tls_server_config: {0}")]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Auth(#[from] super::auth::NotBcrypt),
    #[error("http_server_config.headers: HTTP header {0:?} can not be configured")]
    HeaderNotAllowed(String),
    #[error("http_server_config.headers: invalid value for {name}: expected one of {allowed:?}, got {value:?}")]
    HeaderValueNotAllowed {
        name: &'static str,
        allowed: &'static [&'static str],
        value: String,
    },
    #[error("http_server_config.headers.{0}: not a valid header value")]
    BadHeaderValue(&'static str),
    #[error("rate_limit.burst must be at least 1 when rate_limit.interval is set")]
    NoBurst,
    #[error("rate_limit.interval: {0:?} is longer than 30 days")]
    IntervalTooLong(String),
    #[error("{key}: {text:?} is not a duration like \"10s\": {source}")]
    NotADuration {
        key: &'static str,
        text: String,
        source: humantime::DurationError,
    },
    #[error("{0} must be above 0")]
    ZeroTimeout(&'static str),
    #[error("{key}: {text:?} is more than the maximum of 1h")]
    TimeoutTooLong { key: &'static str, text: String },
    #[error("limits.max_connections: {0} is not between 1 and 2^31")]
    MaxConnections(usize),
    #[error(
        "limits.max_connections_per_source: {0} is not between 1 and 2^31; it bounds the connections of one \
         source address (default 64)"
    )]
    MaxConnectionsPerSource(usize),
    #[error("limits.max_held_response_bytes must be above 0; it bounds the response bytes waiting for clients")]
    MaxHeldResponseBytes,
    #[error("limits.max_header_bytes must be at least {MIN_HEADER_BYTES} and at most {MAX_HEADER_BYTES}, not {0}")]
    MaxHeaderBytes(usize),
    #[error("limits.max_headers: {0} is not between 1 and {MAX_HEADERS}")]
    MaxHeaders(usize),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    tls_server_config: Option<TlsFile>,
    http_server_config: Option<HttpFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    rate_limit: Option<RateLimitFile>,
    limits: Option<LimitsFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct HttpFile {
    /// Accepted for compatibility; gpumemd serves HTTP/1.1 only.
    #[allow(dead_code)]
    http2: Option<bool>,
    headers: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RateLimitFile {
    interval: Option<String>,
    burst: Option<u32>,
}

/// gpumemd's extension: resource limits of the HTTP server.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct LimitsFile {
    max_connections: Option<usize>,
    max_connections_per_source: Option<usize>,
    max_held_response_bytes: Option<usize>,
    max_header_bytes: Option<usize>,
    max_headers: Option<usize>,
    header_read_timeout: Option<String>,
    request_timeout: Option<String>,
    tls_handshake_timeout: Option<String>,
}

/// What the server enforces on every connection, with or without a web
/// config file. Defaults are documented in docs/web-security.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once (and as many waiting for their first
    /// request); idle keep-alive ones give way to newcomers.
    pub max_connections: usize,
    /// Connections of one source address, waiting and served together.
    pub max_connections_per_source: usize,
    /// Bytes of response bodies held for clients at once, all connections
    /// together; a body past it gets 503. Fixed at start.
    pub max_held_response_bytes: usize,
    /// Bytes of request line plus headers (hyper's read buffer); over it: 431.
    pub max_header_bytes: usize,
    /// Header lines per request; over it: 431.
    pub max_headers: usize,
    /// From the moment the server waits for a request (new or kept-alive
    /// connection) until its header is complete; also the keep-alive idle limit.
    pub header_read_timeout: Duration,
    /// From a complete header to the response; over it: 503.
    pub request_timeout: Duration,
    /// From accept to a finished TLS handshake.
    pub tls_handshake_timeout: Duration,
}

/// hyper refuses a read buffer below 8 KiB (it panics), so neither may we.
const MIN_HEADER_BYTES: usize = 8192;
/// hyper reserves room for `max_headers` entries on every request: a huge
/// value (100,000,000 took 3.2 GB per request) is a typo, not a need.
const MAX_HEADERS: usize = 1024;
/// Far above any legitimate request's headers; bounds per-connection buffers.
const MAX_HEADER_BYTES: usize = 1 << 20;
/// Timeouts beyond this are typos that would disable the protection.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 512,
            max_connections_per_source: 64,
            max_held_response_bytes: 128 << 20,
            max_header_bytes: 32 * 1024,
            max_headers: 64,
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            tls_handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// A loaded web config, ready to serve with.
#[derive(Debug, Default)]
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub auth: Option<Arc<BasicAuth>>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub rate_limit: Option<Arc<RateLimiter>>,
    pub limits: Limits,
    /// Files whose change means "load again": the YAML and what it names.
    pub(super) watched: Vec<PathBuf>,
}

/// How long reading the web config may take (as a reload's config read).
const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// Loads and checks `path` completely: YAML, certificates, keys, hashes.
///
/// # Errors
/// The first problem found, as one line naming the file.
pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
    // A regular file only (a FIFO is refused before it is opened), and with
    // a deadline, on a thread of its own: a hung mount as the web config
    // must fail the start (or the re-check), not hold it forever where not
    // even SIGTERM is heard yet.
    let text = crate::data::files::read_regular_within(path, crate::data::files::MAX_CONFIG_BYTES, READ_DEADLINE)
        .map_err(|e| error(path, format!("cannot read: {e}")))?;
    parse(&text, path)
}

/// Parses and checks `text` as the content of `path`: relative files it
/// names are read beside `path`, and errors name it. `load` without the
/// read, so the parser can be fed any text (tests/fuzz.rs).
///
/// # Errors
/// The first problem found, as one line naming `path`.
pub fn parse(text: &str, path: &Path) -> Result<WebConfig, WebConfigError> {
    let file: FileConfig = serde_yaml_ng::from_str::<Option<FileConfig>>(text)
        .map_err(|e| error(path, e.to_string()))?
        .unwrap_or_default();
    let dir = path.parent().unwrap_or(Path::new("."));
    build(file, dir, path).map_err(|e| error(path, e.to_string()))
}

/// One line: a library's multi-line message is joined with spaces, and
/// other control characters (a file name's "\r") are escaped.
pub(super) fn error(path: &Path, msg: String) -> WebConfigError {
    let msg = msg
        .chars()
        .map(|c| match c {
            '\n' => " ".to_string(),
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect();
    WebConfigError {
        path: path.display().to_string(),
        msg,
    }
}

fn build(file: FileConfig, dir: &Path, path: &Path) -> Result<WebConfig, WebConfigProblem> {
    let mut watched = vec![path.to_path_buf()];
    let tls = match &file.tls_server_config {
        Some(t) => tls::server_config(t, dir, &mut watched)?,
        None => None,
    };
    let auth = match file.basic_auth_users {
        Some(users) if !users.is_empty() => Some(Arc::new(BasicAuth::new(users)?)),
        _ => None,
    };
    let headers = headers(&file.http_server_config.unwrap_or_default())?;
    let rate_limit = rate_limit(&file.rate_limit.unwrap_or_default())?;
    let limits = limits(&file.limits.unwrap_or_default())?;
    Ok(WebConfig {
        tls,
        auth,
        headers,
        rate_limit,
        limits,
        watched,
    })
}

/// The headers exporter-toolkit allows, as it spells them, with the values
/// it allows (empty: any). Others are refused so that every Prometheus
/// component agrees.
const ALLOWED_HEADERS: &[(&str, HeaderName, &[&str])] = &[
    ("Strict-Transport-Security", header::STRICT_TRANSPORT_SECURITY, &[]),
    ("X-Content-Type-Options", header::X_CONTENT_TYPE_OPTIONS, &["nosniff"]),
    ("X-Frame-Options", header::X_FRAME_OPTIONS, &["deny", "sameorigin"]),
    ("X-XSS-Protection", header::X_XSS_PROTECTION, &[]),
    ("Content-Security-Policy", header::CONTENT_SECURITY_POLICY, &[]),
];

fn headers(h: &HttpFile) -> Result<Vec<(HeaderName, HeaderValue)>, WebConfigProblem> {
    let mut out = Vec::new();
    for (name, value) in &h.headers {
        let Some(&(canonical, ref header_name, allowed)) =
            ALLOWED_HEADERS.iter().find(|(n, ..)| n.eq_ignore_ascii_case(name))
        else {
            return Err(WebConfigProblem::HeaderNotAllowed(name.clone()));
        };
        if !allowed.is_empty() && !allowed.contains(&value.as_str()) {
            return Err(WebConfigProblem::HeaderValueNotAllowed {
                name: canonical,
                allowed,
                value: value.clone(),
            });
        }
        if value.is_empty() {
            continue; // "Unset if blank."
        }
        let v = HeaderValue::from_str(value).map_err(|_| WebConfigProblem::BadHeaderValue(canonical))?;
        out.push((header_name.clone(), v));
    }
    Ok(out)
}

fn rate_limit(r: &RateLimitFile) -> Result<Option<Arc<RateLimiter>>, WebConfigProblem> {
    let interval = match &r.interval {
        // At most 30 days, as durations in the main config: 99999999h
        // would otherwise refill the bucket never.
        Some(s) => match duration(s, "rate_limit.interval")? {
            d if d > crate::data::units::MAX_DURATION => {
                return Err(WebConfigProblem::IntervalTooLong(s.clone()));
            }
            d => d,
        },
        None => Duration::ZERO,
    };
    if interval.is_zero() {
        return Ok(None);
    }
    match r.burst {
        Some(b) if b > 0 => Ok(Some(Arc::new(RateLimiter::new(interval, b)))),
        _ => Err(WebConfigProblem::NoBurst),
    }
}

fn limits(l: &LimitsFile) -> Result<Limits, WebConfigProblem> {
    let d = Limits::default();
    let dur = |v: &Option<String>, key: &'static str, default: Duration| -> Result<Duration, WebConfigProblem> {
        match v {
            None => Ok(default),
            Some(s) => match duration(s, key)? {
                z if z.is_zero() => Err(WebConfigProblem::ZeroTimeout(key)),
                long if long > MAX_TIMEOUT => Err(WebConfigProblem::TimeoutTooLong { key, text: s.clone() }),
                ok => Ok(ok),
            },
        }
    };
    let out = Limits {
        max_connections: l.max_connections.unwrap_or(d.max_connections),
        max_connections_per_source: l.max_connections_per_source.unwrap_or(d.max_connections_per_source),
        max_held_response_bytes: l.max_held_response_bytes.unwrap_or(d.max_held_response_bytes),
        max_header_bytes: l.max_header_bytes.unwrap_or(d.max_header_bytes),
        max_headers: l.max_headers.unwrap_or(d.max_headers),
        header_read_timeout: dur(
            &l.header_read_timeout,
            "limits.header_read_timeout",
            d.header_read_timeout,
        )?,
        request_timeout: dur(&l.request_timeout, "limits.request_timeout", d.request_timeout)?,
        tls_handshake_timeout: dur(
            &l.tls_handshake_timeout,
            "limits.tls_handshake_timeout",
            d.tls_handshake_timeout,
        )?,
    };
    if out.max_connections == 0 || out.max_connections > u32::MAX as usize / 2 {
        return Err(WebConfigProblem::MaxConnections(out.max_connections));
    }
    if out.max_connections_per_source == 0 || out.max_connections_per_source > u32::MAX as usize / 2 {
        return Err(WebConfigProblem::MaxConnectionsPerSource(
            out.max_connections_per_source,
        ));
    }
    if out.max_held_response_bytes == 0 {
        return Err(WebConfigProblem::MaxHeldResponseBytes);
    }
    if !(MIN_HEADER_BYTES..=MAX_HEADER_BYTES).contains(&out.max_header_bytes) {
        return Err(WebConfigProblem::MaxHeaderBytes(out.max_header_bytes));
    }
    if !(1..=MAX_HEADERS).contains(&out.max_headers) {
        return Err(WebConfigProblem::MaxHeaders(out.max_headers));
    }
    Ok(out)
}

/// Go-style durations ("10s", "1m30s", "500ms").
fn duration(s: &str, key: &'static str) -> Result<Duration, WebConfigProblem> {
    humantime::parse_duration(s.trim()).map_err(|source| WebConfigProblem::NotADuration {
        key,
        text: s.to_owned(),
        source,
    })
}
