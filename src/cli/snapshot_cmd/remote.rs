//! `snapshot --url`: reads the running daemon's `/api/v1/snapshot`, whose
//! processes carry the growth trend of its history, through the shared
//! client (TLS, basic auth). A bounded plain GET; it must not retry or
//! wait past its timeout.

use std::time::Duration;

use thiserror::Error;

use crate::cli::remote::{ClientArgs, ClientError, Daemon};
use crate::data::snapshot::Snapshot;

/// The whole request, connect to last byte.
pub const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Error)]
pub enum RemoteError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{url}: not a gpumemd snapshot: {source}")]
    NotASnapshot { url: String, source: serde_json::Error },
}

/// The daemon `args` names (`--url` must be given).
///
/// # Errors
/// A bad URL or unreadable TLS or password file.
pub fn connect(args: &ClientArgs, url: &str) -> Result<Daemon, RemoteError> {
    Ok(args.connect(url, TIMEOUT)?)
}

/// Fetches one snapshot on a small runtime of its own (the CLI has none).
///
/// # Errors
/// Unreachable, a non-200 answer, a timeout, or a body that is not a snapshot.
pub fn fetch(d: &Daemon) -> Result<Snapshot, RemoteError> {
    const PATH: &str = "/api/v1/snapshot";
    let body = crate::cli::remote::block_on(d.get(PATH))?;
    serde_json::from_str(&body).map_err(|source| RemoteError::NotASnapshot {
        url: d.endpoint(PATH).to_string(),
        source,
    })
}
