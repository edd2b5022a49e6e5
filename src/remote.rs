//! `gpumemd suspend PID` / `gpumemd resume PID`: one POST to a running
//! daemon's lifecycle API, with basic auth and the TLS files of the web
//! config (a private CA, a client certificate) when asked.
//!
//! Owns: building the request and turning the answer into text and success.
//! Must not: act on processes itself (the daemon does, with its checks).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A checkpoint moves GiBs into host memory: allow it minutes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Credentials for the web config's basic auth.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

/// PEM files for an `https://` daemon: a CA to trust beside the system's
/// roots (a private CA), and a client certificate with its key (for
/// `client_auth_type: RequireAndVerifyClientCert`).
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, LifecycleError> {
    std::fs::read(path).map_err(|e| tls_file(flag, path, e))
}

fn tls_file(flag: &'static str, path: &Path, e: impl std::fmt::Display) -> LifecycleError {
    LifecycleError::TlsFile {
        flag,
        path: path.to_path_buf(),
        detail: e.to_string(),
    }
}

/// An HTTP client with the TLS files applied.
///
/// # Errors
/// An unreadable or invalid file (naming its flag), or a certificate
/// without its key.
pub fn client(tls: &TlsFiles) -> Result<reqwest::Client, LifecycleError> {
    let mut b = reqwest::Client::builder().timeout(REQUEST_TIMEOUT);
    if let Some(ca) = &tls.ca_file {
        let pem = read("--ca-file", ca)?;
        let cert = reqwest::Certificate::from_pem(&pem).map_err(|e| tls_file("--ca-file", ca, e))?;
        b = b.add_root_certificate(cert);
    }
    match (&tls.cert_file, &tls.key_file) {
        (Some(c), Some(k)) => {
            let mut pem = read("--cert-file", c)?;
            pem.push(b'\n');
            pem.extend(read("--key-file", k)?);
            let id = reqwest::Identity::from_pem(&pem)
                .map_err(|e| tls_file("--cert-file", c, format!("with --key-file {}: {e}", k.display())))?;
            b = b.identity(id);
        }
        (None, None) => {}
        _ => return Err(LifecycleError::HalfIdentity),
    }
    b.build().map_err(LifecycleError::Client)
}

/// Why a lifecycle request did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error("cannot build an HTTP client: {0}")]
    Client(reqwest::Error),
    #[error("{flag} {}: {detail}", path.display())]
    TlsFile {
        flag: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("--cert-file and --key-file go together")]
    HalfIdentity,
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
pub async fn lifecycle(
    url: &str,
    pid: u32,
    action: &str,
    auth: Option<Credentials>,
    tls: &TlsFiles,
) -> Result<String, LifecycleError> {
    let client = client(tls)?;
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

/// GETs `{url}{path}` within `timeout`; Ok(body) on 2xx. Read-only
/// commands (`gpumemd report`) ask the daemon through this.
///
/// # Errors
/// As [`lifecycle`].
pub async fn get(
    url: &str,
    path: &str,
    auth: Option<Credentials>,
    tls: &TlsFiles,
    timeout: Duration,
) -> Result<String, LifecycleError> {
    let client = client(tls)?;
    let endpoint = format!("{}{path}", url.trim_end_matches('/'));
    let mut req = client.get(&endpoint).timeout(timeout);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_tls_files_name_their_flag() {
        let missing = TlsFiles {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsFiles::default()
        };
        assert!(
            client(&missing)
                .err()
                .is_some_and(|e| e.to_string().starts_with("--ca-file /nonexistent/ca.pem"))
        );
        let half = TlsFiles {
            cert_file: Some("/nonexistent/c.pem".into()),
            ..TlsFiles::default()
        };
        assert_eq!(
            client(&half).err().map(|e| e.to_string()).as_deref(),
            Some("--cert-file and --key-file go together")
        );
        assert!(client(&TlsFiles::default()).is_ok());
    }
}
