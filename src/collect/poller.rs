//! The poller: one dedicated OS thread owns the `GpuSource` and the
//! `Pipeline` (NVML serialises calls anyway and may block), keeps the
//! interval itself, publishes each poll's immutable snapshot on a watch
//! channel and hands it to the follower (`poller/follow.rs`: the alert
//! evaluation and the rest). An async supervisor bounds each poll by its
//! deadline: a wedged poll is never duplicated; while it is stuck, ticks
//! are counted as overruns and the last snapshot is served marked stale.
//! Nothing here renders or serves.
//!
//! Why the thread does it all: an idle poll then wakes one
//! thread, not two. The supervisor sleeps on a timerfd (`poller/alarm.rs`)
//! that the thread sets as each poll starts and ends, so it wakes only for
//! a poll that is late; results used to wake it (and the follower's task)
//! every poll, at about 100 us of wake-up for under 1 us of work on an idle
//! node.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::sync::{oneshot, watch};

use crate::collect::pipeline::Pipeline;
use crate::collect::source::{GpuSource, PollErrorReason, SourceError};
use crate::data::clock::{monotonic_now, unix_now};
use crate::data::snapshot::{Device, DriverInfo, PollOutcome, PollStats, Snapshot};
use alarm::Alarm;
use follow::FollowSlot;
pub use follow::Follower;
use state::{State, Ticks, mark_ready, note_nvml};

mod alarm;
mod follow;
mod state;

/// Timing of the poll loop.
#[derive(Debug, Clone, Copy)]
pub struct PollSettings {
    pub interval: Duration,
    pub timeout: Duration,
    pub utilization_interval: Duration,
}

#[derive(Debug, Error)]
pub enum PollerError {
    #[error("cannot start the poll thread: {0}")]
    Spawn(std::io::Error),
    #[error("the poll thread died unexpectedly")]
    WorkerDied,
    #[error("cannot make the poll supervisor's timer: {0}")]
    Alarm(std::io::Error),
}

/// The receiving end of the snapshot channel.
pub type Snapshots = watch::Receiver<Arc<Snapshot>>;

type Outcome = Result<(Option<DriverInfo>, Vec<Device>), SourceError>;

/// A running poller: the snapshot channel, the supervisor future (which
/// runs until `shutdown` turns true) and where its follower is set.
pub struct Started<S> {
    pub snapshots: Snapshots,
    pub supervisor: S,
    pub follow: FollowHandle,
}

/// Sets the follower of a running poller ([`FollowHandle::set`]).
pub struct FollowHandle(Arc<Shared>);

impl FollowHandle {
    /// From now on `follower` gets every published snapshot, on the
    /// thread that published it; it gets the current one now if that is a
    /// poll's (published before it was set).
    pub fn set(&self, follower: Follower) {
        let current = self.0.tx.borrow().clone();
        self.0.follow.set(follower, &current);
    }
}

/// Starts the poll thread (inside the caller's tokio runtime, when there
/// is one, so a follower may spawn onto it).
///
/// # Errors
/// `PollerError::Spawn` when the OS refuses a thread, `PollerError::Alarm`
/// when no timerfd can be made.
pub fn start(
    source: Box<dyn GpuSource>,
    pipeline: Pipeline,
    settings: PollSettings,
    shutdown: watch::Receiver<bool>,
) -> Result<Started<impl Future<Output = Result<(), PollerError>>>, PollerError> {
    let demo = source.demo_name();
    let placeholder = Snapshot::placeholder(demo.clone());
    let (tx, rx) = watch::channel(Arc::new(placeholder));
    let (alarm, ringer) = alarm::pair().map_err(PollerError::Alarm)?;
    let shared = Arc::new(Shared {
        settings,
        tx,
        demo,
        alarm,
        rings: std::sync::atomic::AtomicU64::new(0),
        follow: FollowSlot::default(),
        state: Mutex::new(State {
            stats: PollStats::default(),
            nvml_was_up: None,
            ready_sent: false,
            current: None,
            stuck: false,
            ticks: Ticks {
                next: Instant::now(),
                period: settings.interval,
            },
        }),
    });
    // Dropped when the supervisor ends: the thread stops at its next wait.
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    // Dropped when the thread ends, however it ends.
    let (alive_tx, alive_rx) = oneshot::channel::<()>();
    let thread_shared = shared.clone();
    let runtime = tokio::runtime::Handle::try_current().ok();
    std::thread::Builder::new()
        .name("gpumemd-poll".into())
        .spawn(move || {
            let _inside = runtime.as_ref().map(tokio::runtime::Handle::enter);
            worker(source, pipeline, &thread_shared, (stop_rx, alive_tx));
        })
        .map_err(PollerError::Spawn)?;
    Ok(Started {
        snapshots: rx,
        supervisor: supervise(shared.clone(), stop_tx, (alive_rx, ringer), shutdown),
        follow: FollowHandle(shared),
    })
}

/// A poll's result, as the thread publishes it.
struct Done {
    seq: u64,
    outcome: Outcome,
    in_source: Duration,
    at: (f64, f64),
    took: Duration,
}

struct Shared {
    settings: PollSettings,
    tx: watch::Sender<Arc<Snapshot>>,
    demo: Option<String>,
    /// When the supervisor must look next; set under the state lock.
    alarm: Alarm,
    /// How often the alarm rang (tests: an on-time poll must not ring it).
    rings: std::sync::atomic::AtomicU64,
    follow: FollowSlot,
    state: Mutex<State>,
}

/// The thread that owns the source: waits for each tick, polls, publishes
/// and follows. Ends when the supervisor goes away; a panic inside a poll
/// is caught and reported as that poll's failure.
fn worker(
    mut source: Box<dyn GpuSource>,
    mut pipeline: Pipeline,
    shared: &Shared,
    (stop, _alive): (mpsc::Receiver<()>, oneshot::Sender<()>),
) {
    let mut last_util: Option<Instant> = None;
    loop {
        let due = shared.lock().ticks.next;
        let wait = due.saturating_duration_since(Instant::now());
        if !wait.is_zero() && !matches!(stop.recv_timeout(wait), Err(RecvTimeoutError::Timeout)) {
            return;
        }
        if matches!(stop.try_recv(), Err(mpsc::TryRecvError::Disconnected)) {
            return;
        }
        let sample = last_util.is_none_or(|t| t.elapsed() >= shared.settings.utilization_interval);
        if sample {
            last_util = Some(Instant::now());
        }
        let now = unix_now();
        let mono = monotonic_now();
        let started = Instant::now();
        let seq = shared.begin(started);
        let mut in_source = Duration::ZERO;
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let t = Instant::now();
            let raw = source.poll(sample);
            in_source = t.elapsed();
            let built = raw.map(|raw| pipeline.build(raw, now));
            if pipeline.departed() {
                source.note_departure();
            }
            built
        }))
        .unwrap_or_else(|_| {
            Err(SourceError::Failed {
                reason: PollErrorReason::Panic,
                message: "the poll panicked".into(),
            })
        });
        let result = Done {
            seq,
            outcome,
            in_source,
            at: (now, mono),
            took: started.elapsed(),
        };
        if let Some(snap) = shared.end(result) {
            shared.follow.follow(&snap);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain data: a panic elsewhere cannot leave it torn.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A poll starts: count it, set its deadline and the alarm to it.
    fn begin(&self, started: Instant) -> u64 {
        let mut st = self.lock();
        st.ticks.fire(started);
        st.stats.polls_total += 1;
        let seq = st.stats.polls_total;
        let deadline = started + self.settings.timeout;
        st.current = Some((seq, started, deadline));
        self.alarm.set(deadline);
        seq
    }

    /// A poll returned: publishes it, unless it was given up on (its data
    /// is old by now; the next tick polls anew), and sets the alarm to the
    /// next poll's deadline. Returns what was published.
    fn end(&self, d: Done) -> Option<Arc<Snapshot>> {
        let mut st = self.lock();
        let given_up = st.stuck;
        st.current = None;
        st.stuck = false;
        let published = (!given_up).then(|| self.finish(&mut st, d));
        self.alarm.set(self.next_look(&st, Instant::now()));
        published
    }

    fn finish(&self, st: &mut State, d: Done) -> Arc<Snapshot> {
        mark_ready(st);
        st.stats.source_seconds = d.in_source.as_secs_f64();
        let (now, mono) = d.at;
        let nvml = match d.outcome {
            Ok((driver, devices)) => {
                note_nvml(st, self.demo.is_some(), true, None);
                let down = devices.iter().filter(|d| !d.up).count() as u64;
                if down > 0 {
                    count_error(&mut st.stats, PollErrorReason::Device, down);
                }
                st.stats.last_success_timestamp = Some(now);
                Ok((driver, devices))
            }
            Err(SourceError::Unavailable(msg)) => {
                note_nvml(st, self.demo.is_some(), false, Some(&msg));
                count_error(&mut st.stats, PollErrorReason::NvmlUnavailable, 1);
                Err(msg)
            }
            Err(SourceError::Failed { reason, message }) => return self.fail(st, reason, &message, d.took),
        };
        st.stats.success = nvml.is_ok();
        st.stats.duration_seconds = d.took.as_secs_f64();
        self.publish(st, d.seq, now, mono, nvml)
    }

    fn publish(
        &self,
        st: &State,
        seq: u64,
        timestamp: f64,
        monotonic: f64,
        nvml: Result<(Option<DriverInfo>, Vec<Device>), String>,
    ) -> Arc<Snapshot> {
        let outcome = PollOutcome {
            seq,
            timestamp,
            monotonic,
            nvml,
        };
        let snap = Arc::new(Snapshot::of_poll(outcome, self.demo.clone(), st.stats.clone()));
        self.tx.send_replace(snap.clone());
        snap
    }

    /// A failed poll: count it and keep serving the last data marked stale.
    fn fail(&self, st: &mut State, reason: PollErrorReason, message: &str, took: Duration) -> Arc<Snapshot> {
        mark_ready(st);
        tracing::warn!(
            reason = reason.as_str(),
            error = message,
            "poll failed; serving the previous snapshot as stale"
        );
        count_error(&mut st.stats, reason, 1);
        st.stats.success = false;
        st.stats.duration_seconds = took.as_secs_f64();
        self.publish_stale(st)
    }

    fn publish_stale(&self, st: &State) -> Arc<Snapshot> {
        let mut snap = Snapshot::clone(&self.tx.borrow());
        snap.stale = true;
        // The data keeps its poll time; the monotonic clock moves on so
        // poll-health rules see time pass while polls fail.
        snap.monotonic = monotonic_now();
        snap.poll = st.stats.clone();
        let snap = Arc::new(snap);
        self.tx.send_replace(snap.clone());
        snap
    }

    /// The supervisor's look at `now`, when the alarm rang: a poll past its
    /// deadline is given up on; while one is stuck, each tick is an
    /// overrun. Sets the alarm for the next look and returns the stale
    /// copy it published, if any.
    fn check(&self, now: Instant) -> Option<Arc<Snapshot>> {
        let mut st = self.lock();
        let mut published = None;
        let timeout = self.settings.timeout;
        if let Some((_, started, deadline)) = st.current
            && !st.stuck
            && now >= deadline
        {
            st.stuck = true;
            let message = format!("poll did not finish within {timeout:?}");
            published = Some(self.fail(&mut st, PollErrorReason::Timeout, &message, now - started));
        }
        if st.stuck && now >= st.ticks.next {
            st.ticks.fire(now);
            st.stats.overruns_total += 1;
            published = Some(self.publish_stale(&st));
        }
        self.alarm.set(self.next_look(&st, now));
        published
    }

    /// When to look next: the next tick while stuck, else the running
    /// poll's deadline, else the next poll's (a timeout after its tick).
    fn next_look(&self, st: &State, now: Instant) -> Instant {
        let timeout = self.settings.timeout;
        match st.current {
            _ if st.stuck => st.ticks.next,
            Some((_, _, deadline)) => deadline,
            // The thread is late for its tick: look again a timeout on.
            None => (st.ticks.next + timeout).max(now + timeout.min(st.ticks.period)),
        }
    }
}

/// Bounds each poll by its deadline, until shutdown: woken only by the
/// alarm (a poll late or stuck) or by the thread's end.
async fn supervise(
    shared: Arc<Shared>,
    stop: mpsc::Sender<()>,
    (mut alive, ringer): (oneshot::Receiver<()>, alarm::Ringer),
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), PollerError> {
    let _stop = stop;
    let alarm = ringer.watch().map_err(PollerError::Alarm)?;
    if let Some(snap) = shared.check(Instant::now()) {
        shared.follow.follow(&snap);
    }
    loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => return Ok(()),
            _ = &mut alive => return Err(PollerError::WorkerDied),
            r = alarm.readable() => {
                let Ok(guard) = r else { return Err(PollerError::WorkerDied) };
                alarm::drain(guard);
                shared.rings.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if let Some(snap) = shared.check(Instant::now()) {
                    shared.follow.follow(&snap);
                }
            }
        }
    }
}

/// Counts `n` failures of `reason` in the stats every snapshot carries.
fn count_error(stats: &mut PollStats, reason: PollErrorReason, n: u64) {
    *stats.errors_total.entry(reason.as_str().to_owned()).or_default() += n;
}

#[cfg(test)]
mod tests;
