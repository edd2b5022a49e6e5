//! The HTTP surface: `router(state)` (routes and response compression) and
//! the server loop with graceful shutdown (`serve`, with TLS, basic auth and
//! limits from the web config).
//! Handlers only read the latest snapshot from the watch channel; they never
//! call NVML, block, or take locks the poller needs.

pub mod auth;
mod deadline;
mod handlers;
mod serve;
mod tls;
pub mod webconfig;
mod webwatch;

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
}

/// The daemon's routes. `get` also answers HEAD; other methods get 405.
/// Responses are gzipped when the client asks (`Accept-Encoding: gzip`, as
/// Prometheus always does): the `large` exposition is 5 MB as text, a
/// twentieth of that gzipped. Tiny bodies (under 32 bytes) go as they are.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(handlers::index))
        .route("/metrics", get(handlers::metrics))
        .route("/-/healthy", get(handlers::healthy))
        .route("/-/ready", get(handlers::ready))
        .route("/api/v1/snapshot", get(handlers::snapshot))
        .route("/api/v1/alerts", get(handlers::alerts))
        .route("/api/v1/history", get(handlers::history))
        .route("/api/v1/events", get(handlers::events))
        .route("/-/reload", post(handlers::reload))
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
