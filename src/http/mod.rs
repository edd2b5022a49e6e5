//! The HTTP surface: `router(state)` (routes and response compression) and
//! the server loop with graceful shutdown (`serve`, with TLS, basic auth and
//! limits from the web config).
//! Handlers only read the latest snapshot from the watch channel; they never
//! call NVML, block, or take locks the poller needs.

pub mod auth;
mod bodies;
mod deadline;
mod handlers;
mod lifecycle;
mod serve;
mod tls;
mod waiting;
pub mod webconfig;
mod webwatch;

pub use bodies::{MAX_LARGE_BODIES, large_bytes_in_flight};
pub use serve::serve;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use tokio::sync::{mpsc, watch};
use tower_http::compression::{CompressionLayer, CompressionLevel};

use crate::alerts::AlertsView;
use crate::config::Config;
use crate::history::SharedHistory;
use crate::metrics::{BuildInfo, Counters};
use crate::poller::Snapshots;
use crate::reload::{ReloadRequest, ReloadStatus};

/// What every handler may read.
#[derive(Clone)]
pub struct AppState {
    pub snapshots: Snapshots,
    pub alerts: watch::Receiver<Arc<AlertsView>>,
    pub config: watch::Receiver<Arc<Config>>,
    pub reload_status: watch::Receiver<ReloadStatus>,
    pub reload: mpsc::Sender<ReloadRequest>,
    /// The notifiers' and the reclaimer's counters, for `/metrics`.
    pub counters: Counters,
    pub build: BuildInfo,
    /// The last minutes of polls, for `GET /api/v1/history`.
    pub history: SharedHistory,
    /// The allocator view (out-of-memory events), when enabled.
    pub allocator: Option<Arc<crate::allocator::AllocatorState>>,
    /// Xid (and later suspend/resume) events for `GET /api/v1/events`.
    pub events: Arc<crate::events::EventLog>,
    /// For the suspend/resume lifecycle endpoints.
    pub reclaimer: Option<Arc<crate::reclaim::Reclaimer>>,
    /// Where the exposition is served (`--web.telemetry-path`).
    pub telemetry_path: String,
}

/// The fixed routes, which `--web.telemetry-path` may not take.
const FIXED_ROUTES: [&str; 8] = [
    "/",
    "/-/healthy",
    "/-/ready",
    "/-/reload",
    "/api/v1/snapshot",
    "/api/v1/alerts",
    "/api/v1/history",
    "/api/v1/events",
];

/// Why a telemetry path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TelemetryPathError {
    #[error("`{0}` does not start with /")]
    NotAbsolute(String),
    #[error("`{0}` is already a route of gpumemd")]
    Taken(String),
    #[error("`{0}` is not a plain path")]
    NotPlain(String),
}

/// A telemetry path is an absolute literal path that no other route uses
/// (the router would refuse it at start otherwise).
///
/// # Errors
/// Which of these it is not.
pub fn check_telemetry_path(p: &str) -> Result<(), TelemetryPathError> {
    if !p.starts_with('/') {
        return Err(TelemetryPathError::NotAbsolute(p.to_owned()));
    }
    if FIXED_ROUTES.contains(&p) {
        return Err(TelemetryPathError::Taken(p.to_owned()));
    }
    if p.contains(['{', '}', '*', '?', '#']) || p.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(TelemetryPathError::NotPlain(p.to_owned()));
    }
    Ok(())
}

/// The daemon's routes. `get` also answers HEAD; other methods get 405.
/// Responses are gzipped when the client asks (`Accept-Encoding: gzip`, as
/// Prometheus always does): the `large` exposition is 5 MB as text, a
/// twentieth of that gzipped. Tiny bodies (under 32 bytes) go as they are.
pub fn router(state: AppState) -> Router {
    // A bad path (only a caller that skipped `check_telemetry_path`) falls
    // back to the default rather than panic in the router.
    let metrics_path = match check_telemetry_path(&state.telemetry_path) {
        Ok(()) => state.telemetry_path.clone(),
        Err(e) => {
            tracing::warn!(error = %e, "telemetry path refused; serving /metrics");
            "/metrics".to_string()
        }
    };
    Router::new()
        .route("/", get(handlers::index))
        .route(&metrics_path, get(handlers::metrics))
        .route("/-/healthy", get(handlers::healthy))
        .route("/-/ready", get(handlers::ready))
        .route("/api/v1/snapshot", get(handlers::snapshot))
        .route("/api/v1/alerts", get(handlers::alerts))
        .route("/api/v1/history", get(handlers::history))
        .route("/api/v1/events", get(handlers::events))
        .route("/api/v1/summary", get(handlers::summary))
        .route("/runbook", get(handlers::runbook))
        .route("/-/reload", post(handlers::reload))
        .route("/api/v1/processes/{pid}/suspend", post(lifecycle::suspend))
        .route("/api/v1/processes/{pid}/resume", post(lifecycle::resume))
        .with_state(state)
        .layer(compression())
}

/// The response compression of [`router`]: gzip, bodies of 32 bytes or
/// more, at the fastest level: measured (BENCHMARKS.md) it costs under a
/// third of the CPU of the default level per scrape for a body 1.3 to 1.6
/// times larger, still under a tenth of the plain text. Public so
/// `benches/compression.rs` measures this very layer.
pub fn compression() -> CompressionLayer {
    CompressionLayer::new().quality(CompressionLevel::Fastest)
}
