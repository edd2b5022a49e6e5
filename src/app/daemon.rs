//! The tasks `run()` starts beside the poller and the server: alert
//! evaluation and its hooks (notifications, reclaim), the allocator view,
//! the notifiers, the state-dir probe, reclaim's reload follower and the
//! systemd watchdog. It owns how they start and stop; it must not build
//! the router, bind sockets or decide what an alert is.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::app::config::{self, Config};
use crate::collect::source::GpuSource;
use crate::data::snapshot::Snapshot;
use crate::{
    act::alerts, act::notify, act::reclaim, act::suspend_follow, collect::allocator, collect::poller, data::clock,
    data::sysnotify, judge::rules,
};

/// Called after each evaluation with its transitions and the engine (for
/// the firing set): where notifiers and reclaim plug in.
pub type OnAlerts = Box<dyn FnMut(&[rules::eval::Transition], &alerts::AlertEngine) + Send>;

/// Work each published snapshot gets beside the alert evaluation (the
/// history, the demo's allocator feed, when-free resumes), run by the
/// alert loop on the thread that published the snapshot. A follower task
/// each woke the runtime's second worker on every poll (tokio wakes an
/// idle worker for a second runnable task), at 81 us a wake-up on an idle
/// H200.
pub type OnSnapshot = Box<dyn FnMut(&Snapshot) + Send>;

/// The allocator view's shared state when `[allocator]` is enabled (with
/// its receiver thread) or in the demo (fed by the demo's processes, with a
/// socket only if enabled too). A socket that cannot be made is logged once
/// and the state kept (figures stay absent; the counters still export).
pub(crate) fn start_allocator(
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
pub(crate) fn start_notifiers(cfg: &Config, shutdown: watch::Receiver<bool>) -> Option<Arc<notify::Notifiers>> {
    if cfg.notify.alertmanager.is_none() && cfg.notify.webhook.is_none() {
        return None;
    }
    notify::Notifiers::start(&cfg.notify, &cfg.state.dir, shutdown)
        .inspect_err(|e| tracing::error!(error = %e, "alert notifications disabled: cannot start the notifiers"))
        .ok()
        .map(Arc::new)
}

/// What happens after each evaluation: notifications for alerts that fired
/// or resolved (and resends of the firing set), and reclaim for alerts that
/// fired with `action = "terminate"`. Both write files (outbox, audit log),
/// so they run on the blocking pool, never on the async workers.
pub(crate) fn alert_hooks(
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

/// Where reclaim acts. On a simulated fleet (any source with its own
/// `/proc` or a scenario name) it acts on the simulation only: its `/proc`,
/// its kill function, a simulated CUDA driver (the source hides what it
/// checkpoints) and a host with room for it. Only real hardware gets the
/// real `/proc`, signals and driver.
pub(crate) fn reclaim_host(cfg: &reclaim::ReclaimConfig, proc_root: PathBuf, source: &dyn GpuSource) -> reclaim::Host {
    let tree = source.proc_tree();
    if tree.is_none() && source.demo_name().is_none() {
        return reclaim::Host::Real(proc_root);
    }
    let cuda = source.simulated_cuda();
    if cuda.is_some() && cfg.enabled {
        tracing::info!("DEMO MODE: suspend and resume act on a simulated CUDA driver, not on real processes");
    } else if cuda.is_some() {
        tracing::info!(
            "DEMO: to see suspend and resume (simulated CUDA checkpoint), run `gpumemd --demo --config config/demo-suspend.toml`"
        );
    }
    let kill = source
        .simulated_kill()
        .map(|k| Arc::new(move |pid| k.kill(pid)) as reclaim::Kill);
    reclaim::Host::Simulated {
        // A simulated fleet without a tree shows no process: nothing is acted on.
        tree: tree.unwrap_or_else(|| Arc::new(crate::collect::attribution::MemTree::new(0))),
        kill,
        cuda,
    }
}

/// Lets the reclaimer follow the daemon: the processes it may suspend
/// (from the snapshots) and its `[reclaim]` settings (from reloads).
/// Returns the snapshot follower for when-free resumes.
pub(crate) fn follow_reclaim(
    reclaimer: Arc<reclaim::Reclaimer>,
    snapshots: &poller::Snapshots,
    cfg: watch::Receiver<Arc<Config>>,
    shutdown: &watch::Receiver<bool>,
) -> OnSnapshot {
    reclaimer.set_listing(suspend_follow::listing(snapshots.clone()));
    tokio::spawn(follow_reclaim_config(reclaimer.clone(), cfg, shutdown.clone()));
    Box::new(suspend_follow::when_free(reclaimer))
}

/// Applies `[reclaim]` changes from reloads; a config the reclaimer refuses
/// leaves the previous one in force.
async fn follow_reclaim_config(
    reclaimer: Arc<reclaim::Reclaimer>,
    cfg: watch::Receiver<Arc<Config>>,
    shutdown: watch::Receiver<bool>,
) {
    on_reload(cfg, shutdown, move |c| {
        let next = c.reclaim.clone();
        if next != reclaimer.config()
            && let Err(e) = reclaimer.reconfigure(next)
        {
            tracing::error!(error = %e, "reclaim settings not applied; keeping the previous ones");
        }
    })
    .await;
}

/// Calls `apply` with each reloaded config (not the one in force at the
/// start: that is the caller's), until shutdown or the config's sender is
/// gone.
async fn on_reload(
    mut cfg: watch::Receiver<Arc<Config>>,
    mut shutdown: watch::Receiver<bool>,
    mut apply: impl FnMut(Arc<Config>),
) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            r = cfg.changed() => {
                if r.is_err() {
                    return;
                }
                let c = cfg.borrow_and_update().clone();
                apply(c);
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
pub(crate) fn probe_state_dir(dir: std::path::PathBuf, mut shutdown: watch::Receiver<bool>) -> Arc<AtomicBool> {
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
pub(crate) async fn watchdog(every: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tick.tick() => sysnotify::notify_systemd(sd_notify::NotifyState::Watchdog),
        }
    }
}

/// The alert evaluation and what follows each snapshot beside it: run by
/// the poller on the thread that published the snapshot
/// ([`AlertLoop::follower`]), and after every reload by
/// [`AlertLoop::follow_rules`]'s task.
pub(crate) struct AlertLoop {
    engine: alerts::AlertEngine,
    on_alerts: OnAlerts,
    followers: Vec<OnSnapshot>,
    out: watch::Sender<Arc<alerts::AlertsView>>,
}

impl AlertLoop {
    pub(crate) fn new(
        engine: alerts::AlertEngine,
        (on_alerts, followers): (OnAlerts, Vec<OnSnapshot>),
        out: watch::Sender<Arc<alerts::AlertsView>>,
    ) -> Arc<std::sync::Mutex<Self>> {
        Arc::new(std::sync::Mutex::new(Self {
            engine,
            on_alerts,
            followers,
            out,
        }))
    }

    /// Hands a published snapshot to the followers and evaluates the rules
    /// on it (a placeholder that never polled only goes to the followers).
    fn on_snapshot(&mut self, snap: &Snapshot) {
        for f in &mut self.followers {
            f(snap);
        }
        if !snap.has_polled() {
            return;
        }
        self.engine.evaluate(snap);
        self.after(None);
    }

    /// Logs and hooks the last evaluation's transitions (or `reloaded`'s),
    /// and publishes the alert view when it changed.
    fn after(&mut self, reloaded: Option<&[rules::eval::Transition]>) {
        let transitions = reloaded.unwrap_or_else(|| self.engine.last_transitions());
        for t in transitions {
            tracing::info!(alert = %t.alert.rule, to = t.to.as_str(), labels = ?t.alert.labels, "alert state changed");
        }
        (self.on_alerts)(transitions, &self.engine);
        // An evaluation that changed nothing (the usual one at idle)
        // leaves the published view as it is.
        if self.engine.take_changed() {
            self.out.send_replace(Arc::new(self.engine.view()));
        }
    }

    /// The poller's follower: this loop, on each published snapshot.
    pub(crate) fn follower(this: Arc<std::sync::Mutex<Self>>) -> poller::Follower {
        Box::new(move |snap| lock(&this).on_snapshot(snap))
    }

    /// Applies the rules of every reload, until shutdown.
    pub(crate) async fn follow_rules(
        this: Arc<std::sync::Mutex<Self>>,
        cfg: watch::Receiver<Arc<Config>>,
        shutdown: watch::Receiver<bool>,
    ) {
        on_reload(cfg, shutdown, move |c| {
            let mut alerts = lock(&this);
            let reloaded = alerts.engine.set_rules(c.effective_rules(), clock::unix_now());
            alerts.after(Some(&reloaded));
        })
        .await;
    }
}

/// The loop's lock: a follower that panicked mid-evaluation leaves an
/// engine the next evaluation rebuilds from the snapshot.
fn lock(this: &std::sync::Mutex<AlertLoop>) -> std::sync::MutexGuard<'_, AlertLoop> {
    this.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use crate::collect::source::parked::ParkedSource;
    use crate::collect::source::scenario::Scenario;
    use crate::collect::source::simulated::SimulatedSource;
    use crate::collect::source::{GpuSource, RawPoll, SourceError};

    /// Real hardware as far as reclaim can tell: no tree, no scenario.
    struct Hardware;

    impl GpuSource for Hardware {
        fn poll(&mut self, _: bool) -> Result<RawPoll, SourceError> {
            Ok(RawPoll::default())
        }
    }

    /// The demo's source (a parked simulated fleet, as `--demo` builds it)
    /// gets the simulated host, kill function and driver; so does a bare
    /// simulated fleet; only a source with neither tree nor scenario gets
    /// the real kernel.
    #[test]
    fn demo_wiring_installs_the_simulated_signaller() {
        let cfg = crate::act::reclaim::ReclaimConfig::default();
        let scenario = Scenario::resolve("default").expect("default scenario");
        let fleet = SimulatedSource::new(scenario, std::time::Duration::from_secs(1), 1_700_000_000.0);
        let bare = super::reclaim_host(&cfg, "/proc".into(), &fleet);
        assert!(matches!(
            bare,
            crate::act::reclaim::Host::Simulated { kill: Some(_), .. }
        ));
        let demo = ParkedSource::new(Box::new(fleet), Default::default());
        let host = super::reclaim_host(&cfg, "/proc".into(), &demo);
        assert!(matches!(
            host,
            crate::act::reclaim::Host::Simulated {
                kill: Some(_),
                cuda: Some(_),
                ..
            }
        ));
        let dir = tempfile::tempdir().expect("tempdir");
        let r = crate::act::reclaim::Reclaimer::new(cfg.clone(), host, dir.path()).expect("reclaimer");
        assert!(r.is_simulated());
        assert!(!super::reclaim_host(&cfg, "/proc".into(), &Hardware).is_simulated());
    }

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
