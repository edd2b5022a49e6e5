//! The `suspend` and `resume` actions: park an idle holder's GPU memory in
//! host memory with CUDA's checkpoint API, and put it back, with the process
//! alive throughout.
//!
//! Owns: the suspend sequence (checks, identity re-check right before the
//! lock, lock, checkpoint; on any failure after the lock, unlock and leave
//! it running), the host-memory guard, the in-flight limit, the set of
//! suspended processes, resume (manual or when its device has room) and
//! recovery from calls that outlive their deadline. Must not: signal or
//! kill anything, call the driver off [`Guarded`]'s thread, or decide whom
//! to suspend (rules and the API do).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[cfg(test)]
use super::AUDIT_FILE;
use super::hostmem::{HostMemory, Meminfo};
use super::procview::ViewError as VE;
use super::recover::recover_later;
pub use super::suspended::Suspended;
use super::{Action, Outcome, ReclaimConfig, Reclaimer, Target, check, lock, precheck};
use crate::collect::cuda::{Checkpointer, CudaError, CudaState, Guarded, LibCuda, Opener};

/// Whether NVML's latest poll still lists a PID.
pub type Listing = Arc<dyn Fn(u32) -> bool + Send + Sync>;

/// Suspend's share of the reclaimer's state.
#[derive(Debug)]
pub(super) struct SuspendState {
    inner: Mutex<Inner>,
    pub(super) retries: super::suspend_retry::Retries,
}

struct Inner {
    cuda: Option<Arc<Guarded>>,
    /// Replaces `LibCuda::open` (tests, the demo); taken at first use.
    opener: Option<Opener>,
    host: Box<dyn HostMemory>,
    listing: Option<Listing>,
    parked: BTreeMap<u32, Suspended>,
    /// PIDs a resume is under way for: a second one is refused.
    resuming: BTreeSet<u32>,
    /// (start ticks, Unix seconds) of each process's last resume, for
    /// `resumed_grace`; dropped once the grace has passed.
    resumed: BTreeMap<u32, (Option<u64>, f64)>,
    in_flight: u32,
    warned_unavailable: bool,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inner")
            .field("parked", &self.parked.keys())
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl SuspendState {
    pub(super) fn new(proc_root: &std::path::Path) -> Self {
        SuspendState {
            inner: Mutex::new(Inner {
                cuda: None,
                opener: None,
                host: Box::new(Meminfo(proc_root.join("meminfo"))),
                listing: None,
                parked: BTreeMap::new(),
                resuming: BTreeSet::new(),
                resumed: BTreeMap::new(),
                in_flight: 0,
                warned_unavailable: false,
            }),
            retries: super::suspend_retry::Retries::default(),
        }
    }

    /// A simulated fleet's: its simulated driver (none: suspend finds no
    /// driver, the real one is never loaded) and a host with room for it.
    pub(super) fn simulated(cuda: Option<crate::collect::cuda::SimHandle>) -> Self {
        let state = SuspendState::new(std::path::Path::new("/proc"));
        {
            let mut inner = lock(&state.inner);
            inner.host = Box::new(super::FixedHostMemory(1 << 40));
            inner.opener = Some(Box::new(move || match cuda {
                Some(h) => Ok(Box::new(crate::collect::cuda::SimulatedCuda::new(h))
                    as Box<dyn crate::collect::cuda::Checkpointer>),
                None => Err(crate::collect::cuda::CudaError::Unavailable {
                    library: "simulated".into(),
                    detail: "this simulated fleet has no simulated CUDA driver".into(),
                }),
            }));
        }
        state
    }
}

/// Why the sequence stopped early.
type Step<T> = Result<T, Outcome>;

impl Reclaimer {
    /// Uses `opener` instead of loading `[reclaim.suspend] cuda_lib`.
    #[must_use]
    pub fn with_cuda(self, opener: Opener) -> Self {
        lock(&self.shared.suspend.inner).opener = Some(opener);
        self
    }

    /// Reads `MemAvailable` through `host` instead of `<proc_root>/meminfo`.
    #[must_use]
    pub fn with_host_memory(self, host: Box<dyn HostMemory>) -> Self {
        lock(&self.shared.suspend.inner).host = host;
        self
    }

    /// How to ask whether NVML still lists a PID (the daemon's latest poll).
    pub fn set_listing(&self, listing: Listing) {
        lock(&self.shared.suspend.inner).listing = Some(listing);
    }

    /// The processes suspended now, by PID.
    pub fn suspended(&self) -> Vec<Suspended> {
        lock(&self.shared.suspend.inner).parked.values().cloned().collect()
    }

    /// Suspends each target (blocking: run it off the async workers).
    pub fn suspend(&self, targets: Vec<Target>) -> Vec<(Target, Outcome)> {
        self.suspend_at(targets, crate::data::clock::unix_now())
    }

    /// [`Self::suspend`] at Unix time `now`, which starts a passing
    /// refusal's back-off (`suspend_retry`).
    pub(super) fn suspend_at(&self, targets: Vec<Target>, now: f64) -> Vec<(Target, Outcome)> {
        let cfg = self.shared.config();
        targets
            .into_iter()
            .map(|t| {
                let o = self.suspend_one(&cfg, &t);
                self.shared.suspend.retries.note(&t, &o, now);
                (t, o)
            })
            .collect()
    }

    /// Records a suspend asked (by the API) for a PID NVML's latest poll
    /// does not list: refused `not_listed`, audited and counted like every
    /// other refusal (disabled when reclaim is off).
    pub fn refuse_unlisted(&self, pid: u32, rule: &str) -> Outcome {
        let cfg = self.shared.config();
        let outcome = if cfg.enabled {
            Outcome::Refused("not_listed")
        } else {
            Outcome::Disabled
        };
        let t = Target {
            pid,
            rule: rule.into(),
            ..Target::default()
        };
        self.shared.record(Action::Suspend, &t, &outcome, cfg.dry_run, None);
        outcome
    }

    fn suspend_one(&self, cfg: &ReclaimConfig, t: &Target) -> Outcome {
        let sh = &self.shared;
        let key = match self.claim(Action::Suspend, cfg, t) {
            Ok(key) => key,
            Err(refused) => return refused,
        };
        let outcome = self.try_suspend(cfg, t).unwrap_or_else(|o| o);
        lock(&sh.state).in_progress.remove(&key);
        sh.record(Action::Suspend, t, &outcome, cfg.dry_run, None);
        outcome
    }

    /// Identity, allow/deny lists and process kind, on a fresh `/proc` view.
    fn verify(&self, cfg: &ReclaimConfig, t: &Target) -> Step<()> {
        let live = match self.shared.view(t.pid) {
            Ok(v) => v,
            Err(VE::Gone) => return Err(Outcome::Refused("gone")),
            Err(VE::Unreadable(e)) => return Err(Outcome::Failed(e)),
        };
        check(cfg, &self.shared.me, t, &live).map_err(Outcome::Refused)
    }

    fn try_suspend(&self, cfg: &ReclaimConfig, t: &Target) -> Step<Outcome> {
        let sc = &cfg.suspend;
        precheck(t, &self.shared.me).map_err(Outcome::Refused)?;
        self.verify(cfg, t)?;
        let bytes = self.admit(cfg, t)?;
        let cuda = self.cuda(cfg)?;
        match cuda.state(t.pid, sc.lock_deadline()) {
            Ok(CudaState::Running) => {}
            Ok(_) => return Err(Outcome::Refused("cuda_not_running")),
            Err(e) => return Err(self.driver_error(&e)),
        }
        if cfg.dry_run {
            return Ok(Outcome::DryRun);
        }
        {
            let mut inner = lock(&self.shared.suspend.inner);
            if inner.in_flight >= sc.max_in_flight {
                return Err(Outcome::Refused("in_flight_limit"));
            }
            inner.in_flight += 1;
        }
        let out = self.lock_and_checkpoint(cfg, t, bytes, &cuda);
        let mut inner = lock(&self.shared.suspend.inner);
        inner.in_flight = inner.in_flight.saturating_sub(1);
        Ok(out)
    }

    /// The checks that need no driver: not already suspended, still listed
    /// by NVML, a known size, and room for it in host memory.
    fn admit(&self, cfg: &ReclaimConfig, t: &Target) -> Step<u64> {
        let mut inner = lock(&self.shared.suspend.inner);
        if inner.parked.contains_key(&t.pid) {
            return Err(Outcome::Refused("already_suspended"));
        }
        let grace = cfg.suspend.resumed_grace.as_secs_f64();
        let now = crate::data::clock::unix_now();
        inner.resumed.retain(|_, (_, at)| now - *at < grace);
        // An operator's explicit `POST .../suspend` is not held back: the
        // grace protects a resume from the rules, not from a person.
        if t.rule != "api"
            && inner
                .resumed
                .get(&t.pid)
                .is_some_and(|(ticks, _)| *ticks == t.start_ticks)
        {
            return Err(Outcome::Refused("recently_resumed"));
        }
        if inner.listing.as_ref().is_some_and(|listed| !listed(t.pid)) {
            return Err(Outcome::Refused("not_listed"));
        }
        let bytes = t.used_bytes.ok_or(Outcome::Refused("size_unknown"))?;
        let need = bytes.saturating_add(cfg.suspend.host_memory_margin.0);
        match inner.host.available() {
            Some(avail) if avail >= need => Ok(bytes),
            avail => {
                tracing::info!(pid = t.pid, bytes, need, available = ?avail,
                    "suspend refused: host memory would not hold the process's GPU memory plus the margin");
                Err(Outcome::Refused("host_memory"))
            }
        }
    }

    fn lock_and_checkpoint(&self, cfg: &ReclaimConfig, t: &Target, bytes: u64, cuda: &Arc<Guarded>) -> Outcome {
        let sc = &cfg.suspend;
        // The PID is re-checked right before the lock: it may have exited
        // and been reused since the rule saw it.
        if let Err(o) = self.verify(cfg, t) {
            return o;
        }
        if let Err(e) = cuda.lock(t.pid, sc.lock_timeout, sc.lock_deadline()) {
            if matches!(e, CudaError::Hung { .. }) {
                recover_later(Arc::clone(cuda), t.pid);
            }
            return Outcome::Failed(format!("{e}; the process was left running"));
        }
        let started = Instant::now();
        match cuda.checkpoint(t.pid, sc.call_timeout) {
            Ok(()) => {
                let secs = started.elapsed().as_secs_f64();
                tracing::info!(pid = t.pid, bytes, seconds = secs, gpu_uuid = %t.gpu_uuid, "suspend: checkpointed");
                lock(&self.shared.suspend.inner).parked.insert(
                    t.pid,
                    Suspended {
                        pid: t.pid,
                        gpu_uuid: t.gpu_uuid.clone(),
                        bytes,
                        since: crate::data::clock::unix_now(),
                        comm: t.comm.clone(),
                        user: t.user.clone(),
                        rule: t.rule.clone(),
                        checkpoint_seconds: secs,
                        target: t.clone(),
                    },
                );
                Outcome::Done
            }
            Err(e @ CudaError::Hung { .. }) => {
                recover_later(Arc::clone(cuda), t.pid);
                Outcome::Failed(format!("{e}; it is unlocked (or restored) when it returns"))
            }
            Err(e) => match cuda.unlock(t.pid, sc.lock_deadline()) {
                Ok(()) => Outcome::Failed(format!("{e}; unlocked, the process was left running")),
                Err(u) => Outcome::Failed(format!("{e}; the unlock that followed failed too: {u}")),
            },
        }
    }

    /// The driver on its thread, started at the first use.
    fn cuda(&self, cfg: &ReclaimConfig) -> Step<Arc<Guarded>> {
        let mut inner = lock(&self.shared.suspend.inner);
        if let Some(c) = &inner.cuda {
            return Ok(Arc::clone(c));
        }
        let opener = inner.opener.take().unwrap_or_else(|| {
            let lib = cfg.suspend.cuda_lib.clone();
            Box::new(move || LibCuda::open(&lib).map(|c| Box::new(c) as Box<dyn Checkpointer>))
        });
        let g = Guarded::start(opener)
            .map(Arc::new)
            .map_err(|e| Outcome::Failed(format!("cannot start the CUDA thread: {e}")))?;
        inner.cuda = Some(Arc::clone(&g));
        Ok(g)
    }

    /// A missing driver is a refusal, logged once at warn (then at debug).
    fn driver_error(&self, e: &CudaError) -> Outcome {
        if !matches!(e, CudaError::Unavailable { .. }) {
            return Outcome::Failed(e.to_string());
        }
        let first = !std::mem::replace(&mut lock(&self.shared.suspend.inner).warned_unavailable, true);
        if first {
            tracing::warn!(error = %e, "suspend is refused: no usable CUDA driver (set [reclaim.suspend] cuda_lib or \
                --cuda-lib); monitoring is not affected");
        } else {
            tracing::debug!(error = %e, "suspend refused: no usable CUDA driver");
        }
        Outcome::Refused("cuda_unavailable")
    }

    /// Puts a suspended process back: restore, then unlock. On a restore
    /// failure it stays checkpointed (and listed as suspended). `why` is the
    /// audit's `rule` ("api", "when-free").
    pub fn resume(&self, pid: u32, why: &str) -> Outcome {
        let sh = &self.shared;
        let cfg = sh.config();
        let (parked, busy) = {
            let mut inner = lock(&sh.suspend.inner);
            let p = inner.parked.get(&pid).cloned();
            // Claimed with the lookup, under one lock: one resume at a time.
            let busy = p.is_some() && !inner.resuming.insert(pid);
            (p, busy)
        };
        let Some(p) = parked else {
            let t = Target {
                pid,
                rule: why.into(),
                ..Target::default()
            };
            let o = Outcome::Refused("not_suspended");
            sh.record(Action::Resume, &t, &o, false, None);
            return o;
        };
        let t = Target {
            rule: why.into(),
            ..p.target.clone()
        };
        if busy {
            let o = Outcome::Refused("already_resuming");
            sh.record(Action::Resume, &t, &o, false, None);
            return o;
        }
        let outcome = self.try_resume(&cfg, &t).unwrap_or_else(|o| o);
        let mut inner = lock(&sh.suspend.inner);
        inner.resuming.remove(&pid);
        if matches!(outcome, Outcome::Done | Outcome::Refused("gone")) {
            inner.parked.remove(&pid);
            if outcome == Outcome::Done {
                inner
                    .resumed
                    .insert(pid, (t.start_ticks, crate::data::clock::unix_now()));
            }
        }
        drop(inner);
        sh.record(Action::Resume, &t, &outcome, false, None);
        outcome
    }

    fn try_resume(&self, cfg: &ReclaimConfig, t: &Target) -> Step<Outcome> {
        let sc = &cfg.suspend;
        match self.shared.view(t.pid) {
            Ok(v) if !v.is_exited() && Some(v.start_ticks) == t.start_ticks => {}
            Ok(_) | Err(VE::Gone) => return Err(Outcome::Refused("gone")),
            Err(VE::Unreadable(e)) => return Err(Outcome::Failed(e)),
        }
        let cuda = self.cuda(cfg)?;
        let state = cuda
            .state(t.pid, sc.lock_deadline())
            .map_err(|e| self.driver_error(&e))?;
        let started = Instant::now();
        match state {
            CudaState::Checkpointed => {
                if let Err(e) = cuda.restore(t.pid, sc.call_timeout) {
                    if matches!(e, CudaError::Hung { .. }) {
                        recover_later(Arc::clone(&cuda), t.pid);
                    }
                    return Ok(Outcome::Failed(format!("{e}; the process stays checkpointed")));
                }
            }
            CudaState::Locked => {}
            // Restored behind our back (another tool): nothing left to do.
            CudaState::Running => return Ok(Outcome::Done),
            other => return Ok(Outcome::Failed(format!("CUDA state is {}", other.as_str()))),
        }
        let restored = started.elapsed().as_secs_f64();
        match cuda.unlock(t.pid, sc.lock_deadline()) {
            Ok(()) => {
                tracing::info!(pid = t.pid, seconds = restored, bytes = ?t.used_bytes, "resume: restored and unlocked");
                Ok(Outcome::Done)
            }
            Err(e) => Ok(Outcome::Failed(format!("{e}; restored but still locked"))),
        }
    }

    /// `resume = "when-free"`: resumes each suspended process whose device
    /// now has its bytes free plus `resume_margin`. `free` maps a GPU UUID
    /// to its free bytes in the latest poll.
    pub fn resume_when_free(&self, free: &dyn Fn(&str) -> Option<u64>, now: f64) -> Vec<(u32, Outcome)> {
        let cfg = self.shared.config();
        if cfg.suspend.resume != super::ResumeMode::WhenFree {
            return Vec::new();
        }
        let mut budget: BTreeMap<String, u64> = BTreeMap::new();
        let mut out = Vec::new();
        let wait = cfg.suspend.resume_after.as_secs_f64();
        for p in self.suspended() {
            if now - p.since < wait {
                continue;
            }
            let room = *budget
                .entry(p.gpu_uuid.clone())
                .or_insert_with(|| free(&p.gpu_uuid).unwrap_or(0));
            let need = p.bytes.saturating_add(cfg.suspend.resume_margin.0);
            if room < need {
                continue;
            }
            let o = self.resume(p.pid, "when-free");
            if o == Outcome::Done {
                budget.insert(p.gpu_uuid.clone(), room - p.bytes);
            }
            out.push((p.pid, o));
        }
        out
    }
}

#[cfg(test)]
mod tests;
