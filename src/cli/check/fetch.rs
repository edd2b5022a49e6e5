//! Asks the running daemon for its snapshot (`GET /api/v1/snapshot`) for
//! `gpumemd check`, through the shared client (`--url` as a base URL or
//! the full path, TLS files, basic auth). Owns only which endpoint; it must
//! not judge what comes back.

pub use crate::cli::remote::ClientError as FetchError;

use crate::cli::remote::Daemon;

/// The API path asked when the URL names only the daemon.
const SNAPSHOT_PATH: &str = "/api/v1/snapshot";

/// The body of the daemon's snapshot.
///
/// # Errors
/// Unreachable, timed out, or an answer other than 2xx.
pub async fn fetch_snapshot(d: &Daemon) -> Result<String, FetchError> {
    d.get(SNAPSHOT_PATH).await
}
