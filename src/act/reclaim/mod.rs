//! Opt-in reclamation: terminating processes that hold GPU memory when a
//! rule with `action = "terminate"` fires, made safe.
//!
//! Owns: the `[reclaim]` config, the safety policy, SIGTERM then SIGKILL
//! after `grace`, the audit log (`<state dir>/reclaim-audit.jsonl`) and the
//! counts behind `gpumem_reclaim_actions_total{action,result}`. Must not:
//! decide WHICH processes to target (the rule engine does), or signal
//! anything without re-reading `/proc/<pid>/stat` first: a PID alone is not
//! an identity, (pid, start ticks) is.
//!
//! Off by default; when enabled, dry-run by default. See docs/reclaim.md.

mod audit;
mod config;
mod escalate;
mod host;
mod hostmem;
mod policy;
mod procview;
mod recover;
mod signal;
mod simsignal;
mod suspend;
mod suspend_config;
mod suspend_retry;
mod suspended;
mod types;

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use thiserror::Error;

pub use audit::{AUDIT_BURST, AUDIT_FILE, AUDIT_REFILL, ReclaimStats, SERIES};
pub use config::{InvalidSetting, PROTECTED_COMMANDS, ReclaimConfig};
pub use host::Host;
pub use hostmem::{FixedHostMemory, HostMemory, Meminfo};
pub use policy::{Protected, check, precheck};
pub use procview::{ProcView, ViewError, read_view};
pub use signal::{Pinned, SignalError, Signaller};
pub use simsignal::{Kill, SimulatedSignals};
pub use suspend::{Listing, Suspended};
pub use suspend_config::{ResumeMode, SuspendConfig};
pub use suspend_retry::{MAX_RETRIES, RETRY_BACKOFF_SECS};
pub use types::{Action, Outcome, Target};

use escalate::{Pending, Worker};
use host::Procs;
use procview::ViewError as VE;

#[derive(Debug, Error)]
pub enum ReclaimError {
    #[error("invalid [reclaim] section: {0}")]
    Config(#[from] config::InvalidSetting),
    #[error("cannot open the reclaim audit log {path}: {source}")]
    Audit { path: PathBuf, source: std::io::Error },
    #[error(
        "{proc_root} does not show this process's PID namespace ({detail}); \
         reclaim would signal the wrong processes, so it refuses to start"
    )]
    PidNamespace { proc_root: PathBuf, detail: String },
}

/// State shared with the grace thread.
#[derive(Debug)]
struct Shared {
    cfg: Mutex<ReclaimConfig>,
    procs: Procs,
    signals: Box<dyn Signaller>,
    me: Protected,
    audit: audit::AuditLog,
    /// Serializes audit appends so lines never interleave.
    audit_lock: Mutex<()>,
    state: Mutex<State>,
    suspend: suspend::SuspendState,
    /// `GET /api/v1/events`: suspends and resumes done or failed go there.
    events: std::sync::OnceLock<Arc<crate::data::events::EventLog>>,
}

#[derive(Debug, Default)]
struct State {
    stats: ReclaimStats,
    /// (pid, start ticks) from delivered SIGTERM until its SIGKILL step ends.
    in_progress: HashSet<(u32, u64)>,
}

/// Never panic on a poisoned lock: the data (counters, a set) stays valid.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn config(&self) -> ReclaimConfig {
        lock(&self.cfg).clone()
    }

    /// The live view of `pid`, from the simulated tree on a simulated fleet.
    fn view(&self, pid: u32) -> Result<ProcView, ViewError> {
        match &self.procs {
            Procs::Simulated(t) => procview::read_view_in(t.as_ref(), pid),
            Procs::Real(root) => read_view(root, pid),
        }
    }

    /// Counts, audits (unless disabled/ignored) and logs one decision.
    fn record(&self, action: Action, t: &Target, outcome: &Outcome, dry_run: bool, grace_ms: Option<u64>) {
        if *outcome != Outcome::InProgress {
            lock(&self.state).stats.add(action, outcome);
        }
        log_decision(action, t, outcome);
        if matches!(outcome, Outcome::Disabled | Outcome::InProgress) {
            return;
        }
        self.list_event(action, t, outcome);
        let entry = audit::Entry {
            action,
            outcome,
            dry_run,
            grace_ms,
        };
        let _guard = lock(&self.audit_lock);
        if let Err(e) = self.audit.append(t, entry) {
            // The tracing line above is then the only record; say so loudly.
            tracing::error!(path = %self.audit.path().display(), error = %e, pid = t.pid,
                "reclaim: cannot append to the audit log");
        }
    }

    /// A suspend or resume that happened, or was tried and failed, as an
    /// event; what was refused or only dry-run changed nothing on the GPU.
    fn list_event(&self, action: Action, t: &Target, outcome: &Outcome) {
        let kind = match action {
            Action::Suspend => "suspend",
            Action::Resume => "resume",
            Action::Term | Action::Kill => return,
        };
        let (Some(log), Outcome::Done | Outcome::Failed(_)) = (self.events.get(), outcome) else {
            return;
        };
        let (result, reason) = outcome.result_and_reason();
        let mut e = crate::data::events::Event::new(kind, crate::data::clock::unix_now(), t.gpu_uuid.as_str())
            .with("pid", t.pid)
            .with("comm", t.comm.as_str())
            .with("user", t.user.as_str())
            .with("rule", t.rule.as_str())
            .with("result", result);
        if let Some(b) = t.used_bytes {
            e = e.with("bytes", b);
        }
        if let Some(r) = reason {
            e = e.with("reason", r);
        }
        log.push(e);
    }

    /// Records the SIGKILL step and releases the target.
    fn finish(&self, action: Action, t: &Target, outcome: &Outcome) {
        self.record(action, t, outcome, false, None);
        lock(&self.state)
            .in_progress
            .remove(&(t.pid, t.start_ticks.unwrap_or(0)));
    }
}

fn log_decision(action: Action, t: &Target, outcome: &Outcome) {
    let (result, reason) = outcome.result_and_reason();
    let reason = reason.unwrap_or("");
    macro_rules! emit {
        ($level:ident) => {
            tracing::$level!(action = action.as_str(), result, reason, pid = t.pid, start_ticks = ?t.start_ticks,
                user = %t.user, comm = %t.comm, rule = %t.rule, gpu_uuid = %t.gpu_uuid, used_bytes = ?t.used_bytes,
                "reclaim decision")
        };
    }
    match outcome {
        Outcome::Failed(_) => emit!(warn),
        Outcome::InProgress => emit!(debug),
        _ => emit!(info),
    }
}

/// Terminates targets on request, safely. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Reclaimer {
    shared: Arc<Shared>,
    /// Started on the first delivered SIGTERM; stopped (pending SIGKILLs
    /// cancelled and audited) when the reclaimer is dropped.
    worker: Mutex<Option<Worker>>,
}

impl Reclaimer {
    /// Validates `cfg`; when enabled, also checks that a real `/proc` is
    /// this process's PID namespace and creates
    /// `<state_dir>/reclaim-audit.jsonl`. When disabled nothing is touched on
    /// disk. Real signals and CUDA calls exist only for [`Host::Real`].
    pub fn new(cfg: ReclaimConfig, host: Host, state_dir: &Path) -> Result<Reclaimer, ReclaimError> {
        let audit = audit::AuditLog::new(state_dir);
        let (procs, signals, suspend): (_, Box<dyn Signaller>, _) = match host {
            Host::Real(root) => {
                let suspend = suspend::SuspendState::new(&root);
                (Procs::Real(root), Box::new(signal::Pidfd), suspend)
            }
            Host::Simulated { tree, kill, cuda } => {
                let signals = SimulatedSignals::new(tree.clone(), kill);
                (
                    Procs::Simulated(tree),
                    Box::new(signals),
                    suspend::SuspendState::simulated(cuda),
                )
            }
        };
        prepare(&cfg, &procs, &audit)?;
        let shared = Shared {
            cfg: Mutex::new(cfg),
            procs,
            signals,
            me: Protected::current(),
            audit,
            audit_lock: Mutex::new(()),
            state: Mutex::new(State::default()),
            suspend,
            events: std::sync::OnceLock::new(),
        };
        Ok(Reclaimer {
            shared: Arc::new(shared),
            worker: Mutex::new(None),
        })
    }

    /// Whether it acts on a simulated fleet (never on real processes).
    #[cfg(test)]
    pub fn is_simulated(&self) -> bool {
        matches!(self.shared.procs, Procs::Simulated(_))
    }

    /// Applies a reloaded `[reclaim]` section. Pending SIGKILLs stay
    /// scheduled and are re-decided under the new config when due.
    pub fn reconfigure(&self, cfg: ReclaimConfig) -> Result<(), ReclaimError> {
        prepare(&cfg, &self.shared.procs, &self.shared.audit)?;
        *lock(&self.shared.cfg) = cfg;
        Ok(())
    }

    /// The config in force.
    pub fn config(&self) -> ReclaimConfig {
        self.shared.config()
    }

    /// Lists every suspend and resume that was done or failed in `log`
    /// (`GET /api/v1/events`); refusals and dry runs stay in the audit log.
    #[must_use]
    pub fn with_events(self, log: Arc<crate::data::events::EventLog>) -> Self {
        let _ = self.shared.events.set(log);
        self
    }

    /// Path of the audit log (it exists only once reclaim was enabled).
    pub fn audit_path(&self) -> &Path {
        self.shared.audit.path()
    }

    /// Decides each target now: SIGTERM after the checks, and a SIGKILL
    /// `grace` later if the same (pid, start ticks) still runs. Returns at
    /// once; blocking work is a few small /proc reads and one fsynced audit
    /// append per target.
    pub fn request(&self, targets: Vec<Target>) -> Vec<(Target, Outcome)> {
        let cfg = self.shared.config();
        targets
            .into_iter()
            .map(|t| {
                let outcome = self.request_one(&cfg, &t);
                (t, outcome)
            })
            .collect()
    }

    /// Counts by (action, result).
    pub fn stats(&self) -> ReclaimStats {
        lock(&self.shared.state).stats.clone()
    }

    /// Targets between SIGTERM and the end of their SIGKILL step.
    pub fn in_progress(&self) -> usize {
        lock(&self.shared.state).in_progress.len()
    }

    /// The first step of acting on `t`: refused, and audited, when reclaim
    /// is off or the same process is already being acted on; else the claim
    /// on it, which the caller releases when done. Claimed before the checks
    /// so two concurrent requests cannot both act.
    fn claim(&self, action: Action, cfg: &ReclaimConfig, t: &Target) -> Result<(u32, u64), Outcome> {
        let sh = &self.shared;
        let key = (t.pid, t.start_ticks.unwrap_or(0));
        let refused = if !cfg.enabled {
            Outcome::Disabled
        } else if !lock(&sh.state).in_progress.insert(key) {
            Outcome::InProgress
        } else {
            return Ok(key);
        };
        sh.record(action, t, &refused, cfg.dry_run, None);
        Err(refused)
    }

    fn request_one(&self, cfg: &ReclaimConfig, t: &Target) -> Outcome {
        let sh = &self.shared;
        // Released below unless a SIGKILL step follows.
        let key = match self.claim(Action::Term, cfg, t) {
            Ok(key) => key,
            Err(refused) => return refused,
        };
        let (outcome, handle) = terminate(sh, cfg, t);
        let grace_ms = handle
            .is_some()
            .then(|| u64::try_from(cfg.grace.as_millis()).unwrap_or(u64::MAX));
        sh.record(Action::Term, t, &outcome, cfg.dry_run, grace_ms);
        match handle {
            Some(handle) => self.schedule(Pending {
                target: t.clone(),
                handle,
                deadline: Instant::now() + cfg.grace,
            }),
            None => {
                lock(&sh.state).in_progress.remove(&key);
            }
        }
        outcome
    }

    /// Queues the SIGKILL step, starting the thread on first use. If it
    /// cannot run, the step is recorded as failed (the SIGTERM stands).
    fn schedule(&self, p: Pending) {
        let mut worker = lock(&self.worker);
        if worker.is_none() {
            match Worker::spawn(Arc::clone(&self.shared)) {
                Ok(w) => *worker = Some(w),
                Err(e) => {
                    let msg = format!("cannot start the grace timer thread: {e}");
                    return self.shared.finish(Action::Kill, &p.target, &Outcome::Failed(msg));
                }
            }
        }
        if let Some(Err(p)) = worker.as_ref().map(|w| w.schedule(p)) {
            let msg = "grace timer thread is gone".to_string();
            self.shared.finish(Action::Kill, &p.target, &Outcome::Failed(msg));
        }
    }
}

/// The SIGTERM step. Returns the pinned handle when a SIGTERM was delivered.
fn terminate(sh: &Shared, cfg: &ReclaimConfig, t: &Target) -> (Outcome, Option<Box<dyn signal::Pinned>>) {
    if let Err(reason) = precheck(t, &sh.me) {
        return (Outcome::Refused(reason), None);
    }
    // Pin first, then verify: see signal.rs for why this order is safe.
    let handle = match sh.signals.open(t.pid) {
        Ok(h) => h,
        Err(SignalError::Gone) => return (Outcome::Refused("gone"), None),
        Err(SignalError::Failed(e)) => return (Outcome::Failed(e), None),
    };
    let live = match sh.view(t.pid) {
        Ok(v) => v,
        Err(VE::Gone) => return (Outcome::Refused("gone"), None),
        Err(VE::Unreadable(e)) => return (Outcome::Failed(e), None),
    };
    if let Err(reason) = check(cfg, &sh.me, t, &live) {
        return (Outcome::Refused(reason), None);
    }
    if cfg.dry_run {
        return (Outcome::DryRun, None);
    }
    match handle.send(Action::Term) {
        Ok(()) => (Outcome::Signalled, Some(handle)),
        Err(SignalError::Gone) => (Outcome::Refused("gone"), None),
        Err(SignalError::Failed(e)) => (Outcome::Failed(e), None),
    }
}

/// Validation plus, when enabled, the checks that must hold before anything
/// is read or signalled (a simulated fleet has no PID namespace to check).
fn prepare(cfg: &ReclaimConfig, procs: &Procs, audit: &audit::AuditLog) -> Result<(), ReclaimError> {
    cfg.validate().map_err(ReclaimError::Config)?;
    if !cfg.enabled {
        return Ok(());
    }
    if let Procs::Real(proc_root) = procs {
        check_pid_namespace(proc_root)?;
    }
    audit.ensure().map_err(|source| ReclaimError::Audit {
        path: audit.path().to_path_buf(),
        source,
    })
}

/// `<proc_root>/self` names the reader's PID as that procfs sees it. If it is
/// not our own PID, the tree belongs to another PID namespace (e.g. the
/// host's /proc mounted into a container) and its PIDs are not ours to kill.
fn check_pid_namespace(proc_root: &Path) -> Result<(), ReclaimError> {
    let link = proc_root.join("self");
    let seen = fs::read_link(&link).map(|p| p.to_string_lossy().into_owned());
    match seen {
        Ok(s) if s.parse::<u32>().ok() == Some(std::process::id()) => Ok(()),
        Ok(s) => Err(ReclaimError::PidNamespace {
            proc_root: proc_root.to_path_buf(),
            detail: format!("self is {s}, this process is {}", std::process::id()),
        }),
        Err(e) => Err(ReclaimError::PidNamespace {
            proc_root: proc_root.to_path_buf(),
            detail: format!("cannot read {}: {e}", link.display()),
        }),
    }
}
