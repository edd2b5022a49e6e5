//! The poller: one dedicated OS thread owns the `GpuSource` and the
//! `Pipeline` (NVML serialises calls anyway and may block) and keeps the
//! interval itself; an async supervisor takes each poll's result, publishes
//! immutable snapshots on a watch channel and bounds each poll by its
//! deadline: a wedged poll is never duplicated; while it is stuck, ticks are
//! counted as overruns and the last snapshot is served marked stale. Nothing
//! here renders or serves.
//!
//! Why the thread keeps the time: a poll then reaches the async runtime
//! once (the result), instead of a timer, a request and a reply crossing
//! between them, through a doorbell eventfd the I/O driver watches (one
//! worker woken, not two: `poller/bell.rs`). The supervisor publishes from
//! a worker, so the snapshot's follower is woken there, not from another
//! thread. Its deadline moves on with each result, so its timer only fires
//! for a poll that is late.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::sync::{oneshot, watch};

use crate::clock::{monotonic_now, unix_now};
use crate::pipeline::Pipeline;
use crate::snapshot::{Device, DriverInfo, PollOutcome, PollStats, Snapshot};
use crate::source::{GpuSource, SourceError};
use crate::sysnotify::notify_systemd;
use bell::{Bell, Door, drain};

mod bell;

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
    #[error("cannot make the poll thread's doorbell: {0}")]
    Doorbell(std::io::Error),
}

/// The receiving end of the snapshot channel.
pub type Snapshots = watch::Receiver<Arc<Snapshot>>;

type Outcome = Result<(Option<DriverInfo>, Vec<Device>), SourceError>;

/// A tick later than this after its time counts as missed (as tokio's
/// `Interval` does): the next one goes back onto the grid.
const LATE: Duration = Duration::from_millis(5);

/// Starts the poll thread and returns the snapshot channel and the
/// supervisor future, which runs until `shutdown` turns true.
///
/// # Errors
/// `PollerError::Spawn` when the OS refuses a thread.
pub fn start(
    source: Box<dyn GpuSource>,
    pipeline: Pipeline,
    settings: PollSettings,
    shutdown: watch::Receiver<bool>,
) -> Result<(Snapshots, impl Future<Output = Result<(), PollerError>>), PollerError> {
    let demo = source.demo_name();
    let placeholder = Snapshot::placeholder(demo.clone());
    let (tx, rx) = watch::channel(Arc::new(placeholder));
    let shared = Arc::new(Shared {
        settings,
        tx,
        demo,
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
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    let (ring, bell) = bell::pair().map_err(PollerError::Doorbell)?;
    let thread_shared = shared.clone();
    let ends = (stop_rx, alive_tx, Bell { tx: done_tx, ring });
    std::thread::Builder::new()
        .name("gpumemd-poll".into())
        .spawn(move || worker(source, pipeline, &thread_shared, ends))
        .map_err(PollerError::Spawn)?;
    Ok((rx, supervise(shared, stop_tx, (alive_rx, done_rx, bell), shutdown)))
}

/// The tick grid: `next` is when the next poll is due.
struct Ticks {
    next: Instant,
    period: Duration,
}

impl Ticks {
    /// The tick due at `next` fired at `now`: move on by a period, or onto
    /// the next grid point after `now` when it fired late (missed ticks are
    /// skipped, never made up in a burst).
    fn fire(&mut self, now: Instant) {
        let due = self.next;
        self.next = if now > due + LATE {
            let period = self.period.as_nanos().max(1);
            let into = (now - due).as_nanos() % period;
            now + Duration::from_nanos(u64::try_from(period - into).unwrap_or(u64::MAX))
        } else {
            due + self.period
        };
    }
}

/// A poll's result on its way to the supervisor.
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
    state: Mutex<State>,
}

/// What the thread and the supervisor share, under one lock.
struct State {
    stats: PollStats,
    nvml_was_up: Option<bool>,
    ready_sent: bool,
    /// The poll in progress: its number, start and deadline.
    current: Option<(u64, Instant, Instant)>,
    /// The poll in progress was given up on (timeout); its result is dropped.
    stuck: bool,
    ticks: Ticks,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain data: a panic elsewhere cannot leave it torn.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The thread that owns the source: waits for each tick, polls, publishes.
/// Ends when the supervisor goes away; a panic inside a poll is caught and
/// reported as that poll's failure.
fn worker(
    mut source: Box<dyn GpuSource>,
    mut pipeline: Pipeline,
    shared: &Shared,
    (stop, _alive, done): (mpsc::Receiver<()>, oneshot::Sender<()>, Bell),
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
                reason: "panic",
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
        if shared.end() && done.send(result).is_err() {
            return;
        }
    }
}

impl Shared {
    /// A poll starts: count it and set its deadline.
    fn begin(&self, started: Instant) -> u64 {
        let mut st = self.lock();
        st.ticks.fire(started);
        st.stats.polls_total += 1;
        let seq = st.stats.polls_total;
        st.current = Some((seq, started, started + self.settings.timeout));
        seq
    }

    /// A poll returned: whether to publish it; not when it was given up on
    /// (its data is old by now; the next tick polls anew).
    fn end(&self) -> bool {
        let mut st = self.lock();
        let given_up = st.stuck;
        st.current = None;
        st.stuck = false;
        !given_up
    }

    fn publish_done(&self, d: Done) {
        let mut st = self.lock();
        st.stats.source_seconds = d.in_source.as_secs_f64();
        self.finish(&mut st, d.seq, d.outcome, d.at, d.took);
    }

    fn finish(&self, st: &mut State, seq: u64, outcome: Outcome, (now, mono): (f64, f64), took: Duration) {
        mark_ready(st);
        match outcome {
            Ok((driver, devices)) => {
                note_nvml(st, self.demo.is_some(), true, None);
                let down = devices.iter().filter(|d| !d.up).count() as u64;
                if down > 0 {
                    *st.stats.errors_total.entry("device".into()).or_default() += down;
                }
                st.stats.success = true;
                st.stats.duration_seconds = took.as_secs_f64();
                st.stats.last_success_timestamp = Some(now);
                self.publish(st, seq, now, mono, Ok((driver, devices)));
            }
            Err(SourceError::Unavailable(msg)) => {
                note_nvml(st, self.demo.is_some(), false, Some(&msg));
                *st.stats.errors_total.entry("nvml_unavailable".into()).or_default() += 1;
                st.stats.success = false;
                st.stats.duration_seconds = took.as_secs_f64();
                self.publish(st, seq, now, mono, Err(msg));
            }
            Err(SourceError::Failed { reason, message }) => self.fail(st, reason, &message, took),
        }
    }

    fn publish(
        &self,
        st: &State,
        seq: u64,
        timestamp: f64,
        monotonic: f64,
        nvml: Result<(Option<DriverInfo>, Vec<Device>), String>,
    ) {
        let outcome = PollOutcome {
            seq,
            timestamp,
            monotonic,
            nvml,
        };
        let snap = Snapshot::of_poll(outcome, self.demo.clone(), st.stats.clone());
        self.tx.send_replace(Arc::new(snap));
    }

    /// A failed poll: count it and keep serving the last data marked stale.
    fn fail(&self, st: &mut State, reason: &str, message: &str, took: Duration) {
        mark_ready(st);
        tracing::warn!(
            reason,
            error = message,
            "poll failed; serving the previous snapshot as stale"
        );
        *st.stats.errors_total.entry(reason.to_string()).or_default() += 1;
        st.stats.success = false;
        st.stats.duration_seconds = took.as_secs_f64();
        self.publish_stale(st);
    }

    fn publish_stale(&self, st: &State) {
        let mut snap = Snapshot::clone(&self.tx.borrow());
        snap.stale = true;
        // The data keeps its poll time; the monotonic clock moves on so
        // poll-health rules see time pass while polls fail.
        snap.monotonic = monotonic_now();
        snap.poll = st.stats.clone();
        self.tx.send_replace(Arc::new(snap));
    }

    /// The supervisor's look at `now`: a poll past its deadline is given up
    /// on; while one is stuck, each tick is an overrun. Returns when to look
    /// next: the running poll's deadline, the next tick while stuck, else
    /// the next poll's deadline (pushed back by every publish meanwhile).
    fn check(&self, now: Instant) -> Instant {
        let mut st = self.lock();
        let timeout = self.settings.timeout;
        if let Some((_, started, deadline)) = st.current
            && !st.stuck
            && now >= deadline
        {
            st.stuck = true;
            let message = format!("poll did not finish within {timeout:?}");
            self.fail(&mut st, "timeout", &message, now - started);
        }
        if st.stuck && now >= st.ticks.next {
            st.ticks.fire(now);
            st.stats.overruns_total += 1;
            self.publish_stale(&st);
        }
        match st.current {
            _ if st.stuck => st.ticks.next,
            Some((_, _, deadline)) => deadline,
            // The thread is late for its tick: look again a timeout on.
            None => (st.ticks.next + timeout).max(now + timeout.min(st.ticks.period)),
        }
    }
}

/// systemd's Type=notify: ready once the first poll has ended, whatever
/// its outcome, so a missing driver does not hold up boot.
fn mark_ready(st: &mut State) {
    if !st.ready_sent {
        st.ready_sent = true;
        notify_systemd(sd_notify::NotifyState::Ready);
    }
}

/// Logs NVML going away or coming back once per transition, not per poll.
fn note_nvml(st: &mut State, demo: bool, up: bool, msg: Option<&str>) {
    if st.nvml_was_up == Some(up) {
        return;
    }
    st.nvml_was_up = Some(up);
    match (up, msg) {
        (true, _) => tracing::info!(demo, "GPU source answering; serving fresh snapshots"),
        (false, Some(m)) => tracing::warn!(
            "NVML not available: {m}; retrying with backoff up to every 30s; use --demo to try without a GPU"
        ),
        (false, None) => {}
    }
}

/// Publishes each result and bounds each poll by its deadline, until
/// shutdown. Woken by each result (which moves its next look on) or by its
/// timer, which only fires for a poll that is late or stuck.
async fn supervise(
    shared: Arc<Shared>,
    stop: mpsc::Sender<()>,
    (mut alive, done, bell): (oneshot::Receiver<()>, mpsc::Receiver<Done>, Door),
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), PollerError> {
    let _stop = stop;
    let bell = bell.watch().map_err(PollerError::Doorbell)?;
    let mut look = shared.check(Instant::now());
    loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => return Ok(()),
            r = bell.readable() => {
                let Ok(guard) = r else { return Err(PollerError::WorkerDied) };
                drain(guard);
                while let Ok(d) = done.try_recv() {
                    shared.publish_done(d);
                }
                look = shared.check(Instant::now());
            }
            // The thread's end of this is dropped however the thread ends;
            // after the doorbell in the select, so its last results are in.
            _ = &mut alive => return Err(PollerError::WorkerDied),
            () = tokio::time::sleep_until(look.into()) => look = shared.check(Instant::now()),
        }
    }
}

#[cfg(test)]
mod tests;
