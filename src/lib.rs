//! gpumemd as a library: `run()` wires a `GpuSource`, the poller, the
//! pipeline and the HTTP server together and runs them until shutdown. The
//! binary (`main.rs`) only parses the CLI, sets up logging, binds and maps
//! errors to exit codes; tests call `run()` directly on 127.0.0.1:0.

pub mod act;
pub mod app;
pub mod cli;
pub mod collect;
pub mod data;
pub mod judge;
pub mod serve;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::config::Config;
use crate::collect::pipeline::Pipeline;
use crate::collect::poller::{PollSettings, PollerError};
use crate::collect::source::GpuSource;
use crate::serve::metrics::BuildInfo;
pub use app::daemon::OnAlerts;

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
    #[error("reclaim: {0}")]
    Reclaim(#[from] act::reclaim::ReclaimError),
}

/// Poll settings from a config.
pub fn poll_settings(cfg: &Config) -> PollSettings {
    PollSettings {
        interval: cfg.poll.interval.get(),
        timeout: cfg.poll.effective_timeout(),
        utilization_interval: cfg.processes.utilization_interval.get(),
    }
}

/// What runs before the server: reclaim, notifiers, the allocator view,
/// the poller and its history.
struct Core {
    reclaimer: Arc<act::reclaim::Reclaimer>,
    notifiers: Option<Arc<act::notify::Notifiers>>,
    state_dir_writable: Option<Arc<AtomicBool>>,
    allocator: Option<Arc<collect::allocator::AllocatorState>>,
    /// The driver-call ledger, when `[ebpf]` is enabled.
    ledger: Option<Arc<collect::ledger::Ledger>>,
    /// Removes the allocator socket when dropped, so it is held to the end
    /// of `run`.
    socket: Option<collect::allocator::receiver::SocketGuard>,
    snapshots: collect::poller::Snapshots,
    /// Where the alert loop is set as the poller's follower.
    follow: collect::poller::FollowHandle,
    /// The poll thread's supervisor, spawned once the server is.
    poll_loop: std::pin::Pin<Box<dyn Future<Output = Result<(), PollerError>> + Send>>,
    history: Arc<std::sync::Mutex<collect::history::History>>,
    /// What follows each snapshot beside the alerts (history, the demo's
    /// allocator feed), run in the alert loop's task.
    followers: Vec<app::daemon::OnSnapshot>,
    /// `GET /api/v1/events`: Xids from the pipeline, suspends and resumes
    /// from the reclaimer.
    events: Arc<data::events::EventLog>,
    /// Job-end memory reports, followed from each snapshot.
    reports: Arc<judge::report::Reports>,
}

/// Starts the [`Core`] tasks from `cfg` and `source`.
fn start_core(cfg: &Config, source: Box<dyn GpuSource>, stop: &watch::Receiver<bool>) -> Result<Core, RunError> {
    // Kept whether or not the allocator view is on.
    let events = data::events::EventLog::shared();
    let host = app::daemon::reclaim_host(&cfg.reclaim, cfg.processes.proc_root.clone(), source.as_ref());
    let reclaimer =
        Arc::new(act::reclaim::Reclaimer::new(cfg.reclaim.clone(), host, &cfg.state.dir)?.with_events(events.clone()));
    let notifiers = app::daemon::start_notifiers(cfg, stop.clone());
    // Notifications are what an unwritable state dir silently turns off
    // (reclaim, when enabled, has already refused to start without it).
    let configured = cfg.notify.alertmanager.is_some() || cfg.notify.webhook.is_some();
    let state_dir_writable = configured.then(|| app::daemon::probe_state_dir(cfg.state.dir.clone(), stop.clone()));
    let mut pipeline = Pipeline::for_source(&cfg.processes, source.as_ref())
        .with_peak_window(cfg.poll.peak_window.get().as_secs_f64())
        .with_recent_xids(cfg.health.recent_events)
        .with_events(events.clone());
    let demo = source.demo_name().is_some();
    let (allocator, socket) = app::daemon::start_allocator(cfg, demo, stop.clone());
    if let Some(a) = &allocator {
        pipeline = pipeline.with_allocator(a.clone());
    }
    let ledger = cfg
        .ebpf
        .enabled
        .then(|| collect::ledger::Ledger::start(&cfg.ebpf, cfg.processes.proc_root.clone(), Some(events.clone())));
    if let Some(l) = &ledger {
        pipeline = pipeline.with_ledger(l.clone());
    }
    let collect::poller::Started {
        snapshots,
        supervisor: poll_loop,
        follow,
    } = collect::poller::start(source, pipeline, poll_settings(cfg), stop.clone())?;
    let points = collect::history::History::points_for(cfg.poll.history.get(), cfg.poll.interval.get());
    let history = Arc::new(std::sync::Mutex::new(collect::history::History::new(
        points,
        cfg.processes.top_n,
    )));
    let reports = Arc::new(judge::report::Reports::persisted(
        &cfg.state.dir,
        data::clock::unix_now(),
    ));
    let mut followers: Vec<app::daemon::OnSnapshot> = vec![
        Box::new(collect::history::recorder(history.clone())),
        Box::new(judge::report::recorder(reports.clone())),
    ];
    if let (true, Some(a)) = (demo, &allocator) {
        followers.push(Box::new(collect::allocator::demo::feeder(a.clone())));
    }
    if let (Some(below), Some(a)) = (cfg.allocator.record_when_full_in, &allocator) {
        let spool = cfg.state.dir.join("spool");
        followers.push(Box::new(collect::allocator::arm::follower(
            a.clone(),
            below.get().as_secs_f64(),
            spool,
        )));
    }
    Ok(Core {
        reclaimer,
        notifiers,
        state_dir_writable,
        allocator,
        ledger,
        socket,
        snapshots,
        follow,
        poll_loop: Box::pin(poll_loop),
        history,
        events,
        followers,
        reports,
    })
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
    let (stop_tx, stop_rx) = app::shutdown::channel();
    let core = start_core(&cfg, source, &stop_rx)?;
    // The allocator socket is removed when `run` ends.
    let _socket = core.socket;
    let instance = cfg.alerting.instance.clone().unwrap_or_else(act::alerts::hostname);
    let engine = act::alerts::AlertEngine::new(cfg.effective_rules(), instance, cfg.alerting.recent_transitions);
    let (alerts_tx, alerts_rx) = watch::channel(Arc::new(engine.view()));
    let web_config = cfg.server.web_config_file.clone();
    let telemetry_path = cfg.overrides.telemetry_path.clone();
    let (cfg_tx, cfg_rx) = watch::channel(Arc::new(cfg));
    let started = app::reload::ReloadStatus {
        successful: true,
        last_success: data::clock::unix_now(),
    };
    let (status_tx, status_rx) = watch::channel(started);
    let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(4);
    let counters = serve::metrics::Counters {
        reclaimer: Some(core.reclaimer.clone()),
        notifiers: core.notifiers.clone(),
        state_dir_writable: core.state_dir_writable,
        allocator: core.allocator.clone(),
        ledger: core.ledger.clone(),
        reports: Some(core.reports.clone()),
    };
    let state = serve::http::AppState {
        snapshots: core.snapshots.clone(),
        alerts: alerts_rx,
        config: cfg_rx.clone(),
        reload_status: status_rx,
        reload: reload_tx,
        counters,
        allocator: core.allocator,
        events: core.events,
        build: build_info(),
        history: core.history,
        telemetry_path: telemetry_path.unwrap_or_else(|| cli::DEFAULT_TELEMETRY_PATH.to_string()),
        reclaimer: Some(core.reclaimer.clone()),
        reports: Some(core.reports),
        scrape_memo: Default::default(),
    };
    let hook = app::daemon::alert_hooks(core.reclaimer.clone(), core.notifiers, cfg_rx.clone());
    let snapshots = core.snapshots;
    let mut followers = core.followers;
    followers.push(app::daemon::follow_reclaim(
        core.reclaimer,
        &snapshots,
        cfg_rx.clone(),
        &stop_rx,
    ));
    let alert_loop = app::daemon::AlertLoop::new(engine, (hook, followers), alerts_tx);
    core.follow.set(app::daemon::AlertLoop::follower(alert_loop.clone()));
    tokio::spawn(app::daemon::AlertLoop::follow_rules(
        alert_loop,
        cfg_rx,
        stop_rx.clone(),
    ));
    tokio::spawn(app::reload::run(cfg_tx, status_tx, reload_rx, stop_rx.clone()));
    let server = tokio::spawn(serve::http::serve(
        listener,
        serve::http::router(state),
        web_config,
        stop_rx.clone(),
    ));
    let poll_task = tokio::spawn(core.poll_loop);
    if let Some(period) = sd_notify::watchdog_enabled() {
        tokio::spawn(app::daemon::watchdog(period / 2, stop_rx.clone()));
    }
    finish(shutdown, poll_task, server, stop_tx).await
}

/// Waits for `shutdown` or for the poller or the server to end by itself,
/// stops every task, and lets in-flight requests finish within a bound.
async fn finish(
    shutdown: impl Future<Output = ()> + Send + 'static,
    mut poll_task: tokio::task::JoinHandle<Result<(), PollerError>>,
    mut server: tokio::task::JoinHandle<std::io::Result<()>>,
    stop_tx: watch::Sender<bool>,
) -> Result<(), RunError> {
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
