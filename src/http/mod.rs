//! The HTTP surface: `router(state)` and the server loop with graceful
//! shutdown. Handlers only read the latest snapshot from the watch channel;
//! they never call NVML, block, or take locks the poller needs.

mod handlers;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use tokio::sync::watch;

use crate::config::Processes;
use crate::metrics::BuildInfo;
use crate::snapshot::Snapshot;

/// What every handler may read.
#[derive(Clone)]
pub struct AppState {
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    pub processes: Arc<Processes>,
    pub build: BuildInfo,
}

/// The daemon's routes. `get` also answers HEAD; other methods get 405.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(handlers::index))
        .route("/metrics", get(handlers::metrics))
        .route("/-/healthy", get(handlers::healthy))
        .route("/-/ready", get(handlers::ready))
        .route("/api/v1/snapshot", get(handlers::snapshot))
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` turns true, then lets
/// in-flight requests finish.
///
/// # Errors
/// The accept loop's I/O error.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await
}
