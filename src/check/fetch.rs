//! Asks the running daemon for its snapshot (`GET /api/v1/snapshot`) for
//! `gpumemd check`. Owns the URL handling (a base URL or the full path,
//! basic auth from `user:password@` in it) and the deadline; it must not
//! judge what comes back.

use std::time::Duration;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum FetchError {
    #[error("`{0}` is not a URL")]
    BadUrl(String),
    #[error("cannot ask {url}: {reason}")]
    Request { url: String, reason: String },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
}

/// The API path asked when the URL names only the daemon.
const SNAPSHOT_PATH: &str = "/api/v1/snapshot";

/// The body of the daemon's snapshot at `url` (e.g.
/// `http://127.0.0.1:9947`), within `timeout`.
pub async fn fetch_snapshot(url: &str, timeout: Duration) -> Result<String, FetchError> {
    let mut u = reqwest::Url::parse(url).map_err(|_| FetchError::BadUrl(url.to_string()))?;
    if !u.path().ends_with(SNAPSHOT_PATH) {
        let base = u.path().trim_end_matches('/').to_string();
        u.set_path(&format!("{base}{SNAPSHOT_PATH}"));
    }
    let user = u.username().to_string();
    let password = u.password().map(str::to_string);
    // Credentials go in the header, never into messages that quote the URL.
    let _ = u.set_username("");
    let _ = u.set_password(None);
    let shown = u.to_string();
    let request_err = |e: reqwest::Error| FetchError::Request {
        url: shown.clone(),
        reason: chain(&e),
    };
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(concat!("gpumemd-check/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(request_err)?;
    let mut req = client.get(u);
    if !user.is_empty() {
        req = req.basic_auth(user, password);
    }
    let resp = req.send().await.map_err(request_err)?;
    if !resp.status().is_success() {
        return Err(FetchError::Status {
            url: shown,
            status: resp.status().as_u16(),
        });
    }
    resp.text().await.map_err(request_err)
}

/// The error and its causes on one line ("error sending request: connection refused").
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
