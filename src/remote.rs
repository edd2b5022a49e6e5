//! `gpumemd suspend PID` / `gpumemd resume PID`: one POST to a running
//! daemon's lifecycle API, with basic auth when asked.
//!
//! Owns: building the request and turning the answer into text and success.
//! Must not: act on processes itself (the daemon does, with its checks).

use std::time::Duration;

/// A checkpoint moves GiBs into host memory: allow it minutes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Credentials for the web config's basic auth.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

/// Why a lifecycle request did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error("cannot build an HTTP client: {0}")]
    Client(reqwest::Error),
    #[error("{endpoint}: {source}")]
    Unreachable { endpoint: String, source: reqwest::Error },
    #[error("{endpoint}: {status}: {}", body.trim())]
    Refused {
        endpoint: String,
        status: reqwest::StatusCode,
        body: String,
    },
}

/// POSTs `{url}/api/v1/processes/{pid}/{action}`; Ok(body) on 2xx.
///
/// # Errors
/// The daemon's answer (status and body) or why it could not be reached.
pub async fn lifecycle(url: &str, pid: u32, action: &str, auth: Option<Credentials>) -> Result<String, LifecycleError> {
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(LifecycleError::Client)?;
    let endpoint = format!("{}/api/v1/processes/{pid}/{action}", url.trim_end_matches('/'));
    let mut req = client.post(&endpoint);
    if let Some(c) = auth {
        req = req.basic_auth(c.user, Some(c.password));
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(source) => return Err(LifecycleError::Unreachable { endpoint, source }),
    };
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    if status.is_success() {
        Ok(body)
    } else {
        Err(LifecycleError::Refused { endpoint, status, body })
    }
}
