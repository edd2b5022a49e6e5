//! `snapshot --url`: reads the running daemon's `/api/v1/snapshot`, whose
//! processes carry the growth trend of its history. A bounded plain GET;
//! it must not retry or wait past its timeout.

use std::time::Duration;

use thiserror::Error;

use crate::snapshot::Snapshot;

/// The whole request, connect to last byte.
const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Error)]
pub enum RemoteError {
    #[error("--url {url}: {msg}")]
    Request { url: String, msg: String },
}

/// The snapshot URL of a daemon base URL (`http://host:9947` or with a
/// trailing slash); a URL already naming the endpoint is kept.
pub fn snapshot_url(base: &str) -> String {
    let b = base.trim_end_matches('/');
    if b.ends_with("/api/v1/snapshot") {
        b.to_string()
    } else {
        format!("{b}/api/v1/snapshot")
    }
}

/// Fetches one snapshot on a small runtime of its own (the CLI has none).
///
/// # Errors
/// Unreachable, a non-200 answer, a timeout, or a body that is not a snapshot.
pub fn fetch(base: &str) -> Result<Snapshot, RemoteError> {
    let url = snapshot_url(base);
    let err = |msg: String| RemoteError::Request {
        url: base.to_string(),
        msg,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| err(format!("cannot start a runtime: {e}")))?;
    rt.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| err(e.to_string()))?;
        let resp = client.get(&url).send().await.map_err(|e| err(e.to_string()))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(err(format!("HTTP {status}")));
        }
        let body = resp.bytes().await.map_err(|e| err(e.to_string()))?;
        serde_json::from_slice(&body).map_err(|e| err(format!("not a gpumemd snapshot: {e}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(snapshot_url("http://h:9947"), "http://h:9947/api/v1/snapshot");
        assert_eq!(snapshot_url("http://h:9947/"), "http://h:9947/api/v1/snapshot");
        assert_eq!(snapshot_url("http://h/api/v1/snapshot"), "http://h/api/v1/snapshot");
    }

    #[test]
    fn an_unreachable_daemon_is_an_error_not_a_hang() {
        // A port nothing listens on: bind, learn the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(9);
        let e = fetch(&format!("http://127.0.0.1:{port}")).err();
        assert!(e.is_some_and(|e| e.to_string().starts_with("--url http://127.0.0.1:")));
    }
}
