//! The HTTP surface: `router(state)` (routes and response compression) and
//! the server loop with graceful shutdown (`serve`, with TLS, basic auth and
//! limits from the web config).
//! Handlers only read the latest snapshot from the watch channel; they never
//! call NVML, block, or take locks the poller needs.

mod arrive;
pub mod auth;
mod bodies;
mod conn;
mod deadline;
mod handlers;
mod lifecycle;
mod places;
mod record;
mod scrape;
pub use scrape::ScrapeMemo;
mod serve;
mod tls;
mod waiting;
pub mod webconfig;
mod webwatch;

pub use serve::serve;

use std::sync::Arc;

use axum::Router;
use axum::routing::{MethodRouter, get, post};
use tokio::sync::{mpsc, watch};
use tower_http::compression::{CompressionLayer, CompressionLevel};

use crate::act::alerts::AlertsView;
use crate::app::config::Config;
use crate::app::reload::{ReloadRequest, ReloadStatus};
use crate::collect::history::SharedHistory;
use crate::collect::poller::Snapshots;
use crate::serve::metrics::{BuildInfo, Counters};

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
    pub allocator: Option<Arc<crate::collect::allocator::AllocatorState>>,
    /// Xid (and later suspend/resume) events for `GET /api/v1/events`.
    pub events: Arc<crate::data::events::EventLog>,
    /// For the suspend/resume lifecycle endpoints.
    pub reclaimer: Option<Arc<crate::act::reclaim::Reclaimer>>,
    /// Where the exposition is served (`--web.telemetry-path`).
    pub telemetry_path: String,
    /// Job-end memory reports for `GET /api/v1/reports`.
    pub reports: Option<Arc<crate::judge::report::Reports>>,
    /// The snapshot's part of `/metrics`, kept until the next poll.
    pub scrape_memo: Arc<ScrapeMemo>,
}

/// Every route but the telemetry one: the router serves this very table
/// and `--web.telemetry-path` may take none of its paths.
fn fixed_routes() -> [(&'static str, MethodRouter<AppState>); 14] {
    [
        ("/", get(handlers::index)),
        ("/-/healthy", get(handlers::healthy)),
        ("/-/ready", get(handlers::ready)),
        ("/api/v1/snapshot", get(handlers::snapshot)),
        ("/api/v1/alerts", get(handlers::alerts)),
        ("/api/v1/history", get(handlers::history)),
        ("/api/v1/events", get(handlers::events)),
        ("/api/v1/summary", get(handlers::summary)),
        ("/api/v1/reports", get(handlers::reports)),
        ("/runbook", get(handlers::runbook)),
        ("/-/reload", post(handlers::reload)),
        ("/api/v1/processes/{pid}/suspend", post(lifecycle::suspend)),
        ("/api/v1/processes/{pid}/resume", post(lifecycle::resume)),
        ("/api/v1/processes/{pid}/record", post(record::record)),
    ]
}

/// Whether `path` is served by the route `pattern` (a `{param}` segment
/// takes any one segment).
fn route_matches(pattern: &str, path: &str) -> bool {
    let (mut pat, mut got) = (pattern.split('/'), path.split('/'));
    loop {
        match (pat.next(), got.next()) {
            (None, None) => return true,
            (Some(p), Some(g)) if p == g || (p.starts_with('{') && !g.is_empty()) => {}
            _ => return false,
        }
    }
}

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
    if fixed_routes().iter().any(|(route, _)| route_matches(route, p)) {
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
    fixed_routes()
        .into_iter()
        .fold(Router::new(), |r, (path, method)| r.route(path, method))
        .route(&metrics_path, get(scrape::metrics))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_of_the_router_is_refused_as_telemetry_path() {
        for (route, _) in fixed_routes() {
            let served = route.replace("{pid}", "42");
            for p in [route, served.as_str()] {
                assert_eq!(
                    check_telemetry_path(p),
                    Err(TelemetryPathError::Taken(p.to_owned())),
                    "{p}"
                );
            }
        }
        for p in ["/metrics", "/runbook/x", "/api/v1/processes//suspend", "/api/v1"] {
            assert_eq!(check_telemetry_path(p), Ok(()), "{p}");
        }
        assert!(matches!(
            check_telemetry_path("metrics"),
            Err(TelemetryPathError::NotAbsolute(_))
        ));
        assert!(matches!(
            check_telemetry_path("/a b"),
            Err(TelemetryPathError::NotPlain(_))
        ));
    }
}
