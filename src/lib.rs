//! gpumemd as a library: `run()` wires a `GpuSource`, the poller, the
//! pipeline and the HTTP server together and runs them until shutdown. The
//! binary (`main.rs`) only parses the CLI, sets up logging, binds and maps
//! errors to exit codes; tests call `run()` directly on 127.0.0.1:0.

pub mod alerts;
pub mod allocator;
pub mod attribution;
pub mod check;
pub mod cli;
pub mod clock;
pub mod config;
pub mod cuda;
pub mod diagnosis;
pub mod events;
pub mod health;
pub mod history;
pub mod http;
pub mod links;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod pipeline;
pub mod poller;
pub mod reclaim;
pub mod reload;
pub mod remote;
pub mod rules;
pub mod shutdown;
pub mod snapshot;
pub mod snapshot_cmd;
pub mod source;
pub mod statuspage;
pub mod suspend_follow;
pub mod sysnotify;
pub mod table;
pub mod units;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

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
    #[error("reclaim: {0}")]
    Reclaim(#[from] reclaim::ReclaimError),
}

/// Poll settings from a config.
pub fn poll_settings(cfg: &Config) -> PollSettings {
    PollSettings {
        interval: cfg.poll.interval.get(),
        timeout: cfg.poll.effective_timeout(),
        utilization_interval: cfg.processes.utilization_interval.get(),
    }
}

/// Called after each evaluation with its transitions and the engine (for
/// the firing set): where notifiers and reclaim plug in.
pub type OnAlerts = Box<dyn FnMut(&[rules::eval::Transition], &alerts::AlertEngine) + Send>;

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
    // `GET /api/v1/events`; kept whether or not the allocator view is on.
    let events = events::EventLog::shared();
    let reclaimer = Arc::new(demo_reclaim(
        reclaim::Reclaimer::new(cfg.reclaim.clone(), cfg.processes.proc_root.clone(), &cfg.state.dir)?
            .with_events(events.clone()),
        source.as_ref(),
    ));
    let notifiers = start_notifiers(&cfg, stop_rx.clone());
    // Notifications are what an unwritable state dir silently turns off
    // (reclaim, when enabled, has already refused to start without it).
    let configured = cfg.notify.alertmanager.is_some() || cfg.notify.webhook.is_some();
    let state_dir_writable = configured.then(|| probe_state_dir(cfg.state.dir.clone(), stop_rx.clone()));
    let mut pipeline = Pipeline::for_source(&cfg.processes, source.as_ref())
        .with_peak_window(cfg.poll.peak_window.get().as_secs_f64())
        .with_recent_xids(cfg.health.recent_events);
    pipeline = pipeline.with_events(events.clone());
    let demo = source.demo_name().is_some();
    // `_socket` removes the allocator socket when `run` ends.
    let (allocator, _socket) = start_allocator(&cfg, demo, stop_rx.clone());
    if let Some(a) = &allocator {
        pipeline = pipeline.with_allocator(a.clone());
    }
    let (snapshots, poll_loop) = poller::start(source, pipeline, poll_settings(&cfg), stop_rx.clone())?;
    let points = history::History::points_for(cfg.poll.history.get(), cfg.poll.interval.get());
    let recent = Arc::new(std::sync::Mutex::new(history::History::new(
        points,
        cfg.processes.top_n,
    )));
    tokio::spawn(history::follow(snapshots.clone(), recent.clone(), stop_rx.clone()));
    if let (true, Some(a)) = (demo, &allocator) {
        tokio::spawn(allocator::demo::follow(snapshots.clone(), a.clone(), stop_rx.clone()));
    }
    let snapshots_for_reclaim = snapshots.clone();
    let instance = cfg.alerting.instance.clone().unwrap_or_else(alerts::hostname);
    let engine = alerts::AlertEngine::new(cfg.effective_rules(), instance, cfg.alerting.recent_transitions);
    let (alerts_tx, alerts_rx) = watch::channel(Arc::new(engine.view()));
    let web_config = cfg.server.web_config_file.clone();
    let telemetry_path = cfg.overrides.telemetry_path.clone();
    let (cfg_tx, cfg_rx) = watch::channel(Arc::new(cfg));
    let started = reload::ReloadStatus {
        successful: true,
        last_success: clock::unix_now(),
    };
    let (status_tx, status_rx) = watch::channel(started);
    let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(4);
    let state = http::AppState {
        snapshots: snapshots.clone(),
        alerts: alerts_rx,
        config: cfg_rx.clone(),
        reload_status: status_rx,
        reload: reload_tx,
        counters: metrics::Counters::following(Some(reclaimer.clone()), notifiers.clone(), state_dir_writable)
            .with_allocator(allocator.clone()),
        allocator,
        events,
        build: build_info(),
        history: recent,
        telemetry_path: telemetry_path.unwrap_or_else(|| cli::DEFAULT_TELEMETRY_PATH.to_string()),
        reclaimer: Some(reclaimer.clone()),
    };
    let hook = alert_hooks(reclaimer.clone(), notifiers, cfg_rx.clone());
    tokio::spawn(alert_loop(
        snapshots,
        cfg_rx.clone(),
        alerts_tx,
        engine,
        hook,
        stop_rx.clone(),
    ));
    reclaimer.set_listing(suspend_follow::listing(snapshots_for_reclaim.clone()));
    tokio::spawn(suspend_follow::follow(
        reclaimer.clone(),
        snapshots_for_reclaim,
        stop_rx.clone(),
    ));
    tokio::spawn(follow_reclaim_config(reclaimer, cfg_rx, stop_rx.clone()));
    tokio::spawn(reload::run(cfg_tx, status_tx, reload_rx, stop_rx.clone()));
    let mut server = tokio::spawn(http::serve(listener, http::router(state), web_config, stop_rx.clone()));
    let mut poll_task = tokio::spawn(poll_loop);
    if let Some(period) = sd_notify::watchdog_enabled() {
        tokio::spawn(watchdog(period / 2, stop_rx.clone()));
    }
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

/// The allocator view's shared state when `[allocator]` is enabled (with
/// its receiver thread) or in the demo (fed by the demo's processes, with a
/// socket only if enabled too). A socket that cannot be made is logged once
/// and the state kept (figures stay absent; the counters still export).
fn start_allocator(
    cfg: &Config,
    demo: bool,
    shutdown: watch::Receiver<bool>,
) -> (
    Option<Arc<allocator::AllocatorState>>,
    Option<allocator::receiver::SocketGuard>,
) {
    if !cfg.allocator.enabled && !demo {
        return (None, None);
    }
    let state = Arc::new(allocator::AllocatorState::new(&cfg.allocator));
    let socket = cfg
        .allocator
        .enabled
        .then(|| allocator::receiver::start(&cfg.allocator, state.clone(), shutdown))
        .flatten();
    (Some(state), socket)
}

/// Starts delivery to Alertmanager / the webhook when any is configured. An
/// unusable state dir does not stop them: they deliver from memory and
/// retry opening their outbox; only a bad config or client setup does.
fn start_notifiers(cfg: &Config, shutdown: watch::Receiver<bool>) -> Option<Arc<notify::Notifiers>> {
    if cfg.notify.alertmanager.is_none() && cfg.notify.webhook.is_none() {
        return None;
    }
    match notify::Notifiers::start(&cfg.notify, &cfg.state.dir, shutdown) {
        Ok(n) => Some(Arc::new(n)),
        Err(e) => {
            tracing::error!(error = %e, "alert notifications disabled: cannot start the notifiers");
            None
        }
    }
}

/// What happens after each evaluation: notifications for alerts that fired
/// or resolved (and resends of the firing set), and reclaim for alerts that
/// fired with `action = "terminate"`. Both write files (outbox, audit log),
/// so they run on the blocking pool, never on the async workers.
fn alert_hooks(
    reclaimer: Arc<reclaim::Reclaimer>,
    notifiers: Option<Arc<notify::Notifiers>>,
    cfg: watch::Receiver<Arc<Config>>,
) -> OnAlerts {
    let host = alerts::hostname();
    Box::new(move |transitions, engine| {
        if let Some(n) = &notifiers {
            // Read at each evaluation, so a reload of `[links]` applies.
            let generator = {
                let c = cfg.borrow();
                let port = config::parse_listen(&c.server.listen).map_or(0, |a| a.port);
                c.links.generator_url(&host, port)
            };
            let with_link = |mut p: notify::AlertPayload| {
                p.generator_url.clone_from(&generator);
                p
            };
            let changed: Vec<_> = alerts::changed_payloads(transitions)
                .into_iter()
                .map(with_link)
                .collect();
            let firing: Vec<_> = engine.firing().map(alerts::payload).map(with_link).collect();
            let n = n.clone();
            tokio::task::spawn_blocking(move || n.submit(&changed, &firing));
        }
        let targets = alerts::reclaim_targets(transitions);
        if !targets.is_empty() {
            let r = reclaimer.clone();
            tokio::task::spawn_blocking(move || r.request(targets));
        }
        // Suspends take seconds per GiB: their own blocking task each time.
        // Passing refusals are retried while the alert fires (suspend_retry).
        let targets = alerts::targets_of(transitions, rules::RuleAction::Suspend);
        let retry = if reclaimer.suspend_retries_pending() {
            alerts::firing_targets_of(engine.firing(), rules::RuleAction::Suspend)
        } else {
            Vec::new()
        };
        if !targets.is_empty() || !retry.is_empty() {
            let r = reclaimer.clone();
            tokio::task::spawn_blocking(move || {
                r.suspend(targets);
                r.retry_suspends(retry, clock::unix_now())
            });
        }
    })
}

/// On a simulated fleet, reclaim acts on the simulation: its `/proc`, a
/// simulated CUDA driver (the source hides what it checkpoints) and a host
/// with room for it. Real hardware is left as configured.
fn demo_reclaim(r: reclaim::Reclaimer, source: &dyn GpuSource) -> reclaim::Reclaimer {
    let r = match source.proc_tree() {
        Some(tree) => r.with_proc_tree(tree),
        None => r,
    };
    let Some(handle) = source.simulated_cuda() else {
        return r;
    };
    if r.config().enabled {
        tracing::info!("DEMO MODE: suspend and resume act on a simulated CUDA driver, not on real processes");
    } else {
        tracing::info!(
            "DEMO: to see suspend and resume (simulated CUDA checkpoint), run `gpumemd --demo --config config/demo-suspend.toml`"
        );
    }
    r.with_cuda(Box::new(move || {
        Ok(Box::new(cuda::SimulatedCuda::new(handle)) as Box<dyn cuda::Checkpointer>)
    }))
    .with_host_memory(Box::new(reclaim::FixedHostMemory(1 << 40)))
}

/// Applies `[reclaim]` changes from reloads; a config the reclaimer refuses
/// leaves the previous one in force.
async fn follow_reclaim_config(
    reclaimer: Arc<reclaim::Reclaimer>,
    mut cfg: watch::Receiver<Arc<Config>>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            r = cfg.changed() => {
                if r.is_err() {
                    return;
                }
                let next = cfg.borrow_and_update().reclaim.clone();
                if next != reclaimer.config() {
                    if let Err(e) = reclaimer.reconfigure(next) {
                        tracing::error!(error = %e, "reclaim settings not applied; keeping the previous ones");
                    }
                }
            }
        }
    }
}

/// Whether data can be written to `dir` (made if missing) and reach the
/// disk, as the outbox needs: a block of data and an fsync, because an
/// empty file is created even on a full disk.
fn state_dir_writable(dir: &std::path::Path) -> bool {
    use std::io::Write as _;
    let probe = dir.join(format!(".gpumemd-probe-{}", std::process::id()));
    let ok = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::File::create(&probe))
        .and_then(|mut f| f.write_all(&[b'.'; 4096]).and_then(|()| f.sync_all()))
        .is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

/// Probes the state dir now and then again in the background (every 2 s
/// while it fails, every 30 s while it works), so that
/// `gpumem_state_dir_writable` follows a disk that fills or is freed.
fn probe_state_dir(dir: std::path::PathBuf, mut shutdown: watch::Receiver<bool>) -> Arc<AtomicBool> {
    let ok = Arc::new(AtomicBool::new(state_dir_writable(&dir)));
    let out = ok.clone();
    tokio::spawn(async move {
        loop {
            let every = if ok.load(Ordering::Relaxed) { 30 } else { 2 };
            tokio::select! {
                _ = shutdown.wait_for(|s| *s) => return,
                () = tokio::time::sleep(Duration::from_secs(every)) => {}
            }
            let d = dir.clone();
            let now = tokio::task::spawn_blocking(move || state_dir_writable(&d))
                .await
                .unwrap_or(false);
            ok.store(now, Ordering::Relaxed);
        }
    });
    out
}

/// Pings systemd's watchdog at half its period. It proves the runtime is
/// alive, whatever the poll interval; a dead poll task ends `run()` by
/// itself, and a hung NVML call is what metrics and alerts report, not a
/// reason to restart and lose state.
async fn watchdog(every: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tick.tick() => sysnotify::notify_systemd(sd_notify::NotifyState::Watchdog),
        }
    }
}

/// Evaluates the rules on every published snapshot and after every reload,
/// and publishes the alert view.
async fn alert_loop(
    mut snaps: poller::Snapshots,
    mut cfg: watch::Receiver<Arc<Config>>,
    out: watch::Sender<Arc<alerts::AlertsView>>,
    mut engine: alerts::AlertEngine,
    mut on_alerts: OnAlerts,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let transitions = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            r = snaps.changed() => {
                if r.is_err() {
                    return;
                }
                let snap = snaps.borrow_and_update().clone();
                if !snap.has_polled() {
                    continue;
                }
                engine.evaluate(&snap)
            }
            r = cfg.changed() => {
                if r.is_err() {
                    return;
                }
                let c = cfg.borrow_and_update().clone();
                engine.set_rules(c.effective_rules(), clock::unix_now())
            }
        };
        for t in &transitions {
            tracing::info!(alert = %t.alert.rule, to = t.to.as_str(), labels = ?t.alert.labels, "alert state changed");
        }
        on_alerts(&transitions, &engine);
        out.send_replace(Arc::new(engine.view()));
    }
}

#[cfg(test)]
mod tests {
    /// A full disk accepts an empty file but no data: the probe's file
    /// replaced by a link to /dev/full (every write fails with ENOSPC) must
    /// read as not writable, and the same dir with room as writable.
    #[test]
    fn the_state_dir_probe_sees_a_full_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let probe = dir.path().join(format!(".gpumemd-probe-{}", std::process::id()));
        std::os::unix::fs::symlink("/dev/full", &probe).expect("symlink");
        assert!(
            std::fs::File::create(&probe).is_ok(),
            "creating the file works on a full disk"
        );
        assert!(!super::state_dir_writable(dir.path()), "a full disk read as writable");
        // The probe removes its file (here the link): the disk has room again.
        assert!(
            super::state_dir_writable(dir.path()),
            "a dir with room read as not writable"
        );
    }
}
