//! gpumemd as a library: `run()` wires a `GpuSource`, the poller, the
//! pipeline and the HTTP server together and runs them until shutdown. The
//! binary (`main.rs`) only parses the CLI, sets up logging, binds and maps
//! errors to exit codes; tests call `run()` directly on 127.0.0.1:0.

pub mod attribution;
pub mod cli;
pub mod config;
pub mod diagnosis;
pub mod http;
pub mod metrics;
pub mod pipeline;
pub mod poller;
pub mod shutdown;
pub mod snapshot;
pub mod source;
pub mod table;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::metrics::BuildInfo;
use crate::pipeline::Pipeline;
use crate::poller::{PollSettings, PollerError};
use crate::source::GpuSource;

/// How long in-flight HTTP requests may take to finish after shutdown.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The version and git revision baked in at build time.
pub fn build_info() -> BuildInfo {
    BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        revision: option_env!("GPUMEMD_REVISION").unwrap_or("unknown"),
    }
}

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Poller(#[from] PollerError),
    #[error("HTTP server failed: {0}")]
    Serve(std::io::Error),
    #[error("in-flight requests did not finish within {0:?} of shutdown")]
    Drain(Duration),
}

/// Poll settings from a config.
pub fn poll_settings(cfg: &Config) -> PollSettings {
    PollSettings {
        interval: cfg.poll.interval.get(),
        timeout: cfg.poll.effective_timeout(),
        utilization_interval: cfg.processes.utilization_interval.get(),
    }
}

/// Runs the daemon until `shutdown` resolves, then drains within a bound.
///
/// # Errors
/// A dead poll thread, a failed accept loop, or a drain that overran.
pub async fn run(
    cfg: Config,
    source: Box<dyn GpuSource>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let (stop_tx, stop_rx) = shutdown::channel();
    let pipeline = Pipeline::new(&cfg.processes);
    let (snapshots, poll_loop) = poller::start(source, pipeline, poll_settings(&cfg), stop_rx.clone())?;
    let state = http::AppState {
        snapshots,
        processes: Arc::new(cfg.processes.clone()),
        build: build_info(),
    };
    let mut server = tokio::spawn(http::serve(listener, http::router(state), stop_rx.clone()));
    let mut poll_task = tokio::spawn(poll_loop);
    let mut shutdown = Box::pin(shutdown);
    // Whichever ends first decides: a signal is a clean stop, a task that
    // ends on its own is a failure the caller must see.
    let failure = tokio::select! {
        _ = &mut shutdown => None,
        r = &mut poll_task => Some(match r {
            Ok(Ok(())) => RunError::Poller(PollerError::WorkerDied),
            Ok(Err(e)) => RunError::Poller(e),
            Err(_) => RunError::Poller(PollerError::WorkerDied),
        }),
        r = &mut server => Some(match r {
            Ok(Ok(())) => RunError::Serve(std::io::Error::other("server stopped")),
            Ok(Err(e)) => RunError::Serve(e),
            Err(e) => RunError::Serve(std::io::Error::other(e.to_string())),
        }),
    };
    let _ = stop_tx.send(true);
    if let Some(e) = failure {
        return Err(e);
    }
    match tokio::time::timeout(DRAIN_TIMEOUT, server).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) => Err(RunError::Serve(e)),
        Ok(Err(e)) => Err(RunError::Serve(std::io::Error::other(e.to_string()))),
        Err(_) => Err(RunError::Drain(DRAIN_TIMEOUT)),
    }
}
