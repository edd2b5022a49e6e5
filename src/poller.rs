//! The poller: one dedicated OS thread owns the `GpuSource` and the
//! `Pipeline` (NVML serialises calls anyway and may block), and an async
//! supervisor ticks at the interval, bounds each poll by its deadline and
//! publishes immutable snapshots on a watch channel. A wedged poll is never
//! duplicated: while it is stuck, ticks are counted as overruns and the last
//! snapshot is served marked stale. Nothing here renders or serves.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::sync::{oneshot, watch};
use tokio::time::MissedTickBehavior;

use crate::clock::{monotonic_now, unix_now};
use crate::pipeline::Pipeline;
use crate::snapshot::{Device, DriverInfo, PollOutcome, PollStats, Snapshot};
use crate::source::{GpuSource, SourceError};
use crate::sysnotify::notify_systemd;

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
}

/// The receiving end of the snapshot channel.
pub type Snapshots = watch::Receiver<Arc<Snapshot>>;

type Outcome = Result<(Option<DriverInfo>, Vec<Device>), SourceError>;

/// A poll's outcome and the part of its time spent inside the source (the
/// NVML calls), so the daemon's own share of a poll can be told apart.
type Reply = (Outcome, Duration);

struct Request {
    now: f64,
    sample_utilization: bool,
    reply: oneshot::Sender<Reply>,
}

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
    let (req_tx, req_rx) = mpsc::channel::<Request>();
    std::thread::Builder::new()
        .name("gpumemd-poll".into())
        .spawn(move || worker(source, pipeline, req_rx))
        .map_err(PollerError::Spawn)?;
    let placeholder = Snapshot::placeholder(demo.clone());
    let (tx, rx) = watch::channel(Arc::new(placeholder));
    let sup = Supervisor {
        settings,
        tx,
        req_tx,
        demo,
        stats: PollStats::default(),
        nvml_was_up: None,
        ready_sent: false,
    };
    Ok((rx, sup.run(shutdown)))
}

/// The thread that owns the source. Exits when the supervisor goes away; a
/// panic inside a poll is caught and reported as that poll's failure.
fn worker(mut source: Box<dyn GpuSource>, mut pipeline: Pipeline, rx: mpsc::Receiver<Request>) {
    while let Ok(req) = rx.recv() {
        let mut in_source = Duration::ZERO;
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let started = Instant::now();
            let raw = source.poll(req.sample_utilization);
            in_source = started.elapsed();
            raw.map(|raw| pipeline.build(raw, req.now))
        }))
        .unwrap_or_else(|_| {
            Err(SourceError::Failed {
                reason: "panic",
                message: "the poll panicked".into(),
            })
        });
        // The supervisor may have given up on this poll (timeout): fine.
        let _ = req.reply.send((outcome, in_source));
    }
}

struct Supervisor {
    settings: PollSettings,
    tx: watch::Sender<Arc<Snapshot>>,
    req_tx: mpsc::Sender<Request>,
    demo: Option<String>,
    stats: PollStats,
    nvml_was_up: Option<bool>,
    ready_sent: bool,
}

impl Supervisor {
    async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), PollerError> {
        let mut ticker = tokio::time::interval(self.settings.interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut stuck: Option<oneshot::Receiver<Reply>> = None;
        let mut last_util: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                _ = shutdown.changed() => return Ok(()),
                _ = ticker.tick() => {}
            }
            if let Some(rx) = stuck.as_mut() {
                match rx.try_recv() {
                    Err(oneshot::error::TryRecvError::Empty) => {
                        self.stats.overruns_total += 1;
                        self.publish_stale();
                        continue;
                    }
                    // The wedged poll returned; its data is old, so poll anew.
                    _ => stuck = None,
                }
            }
            let sample = last_util.is_none_or(|t| t.elapsed() >= self.settings.utilization_interval);
            if sample {
                last_util = Some(Instant::now());
            }
            let now = unix_now();
            let mono = monotonic_now();
            let started = Instant::now();
            let (reply, mut rx) = oneshot::channel();
            self.req_tx
                .send(Request {
                    now,
                    sample_utilization: sample,
                    reply,
                })
                .map_err(|_| PollerError::WorkerDied)?;
            self.stats.polls_total += 1;
            tokio::select! {
                biased;
                _ = shutdown.changed() => return Ok(()),
                r = tokio::time::timeout(self.settings.timeout, &mut rx) => match r {
                    Ok(Ok((outcome, in_source))) => {
                        self.stats.source_seconds = in_source.as_secs_f64();
                        self.finish(outcome, (now, mono), started.elapsed());
                    }
                    Ok(Err(_)) => return Err(PollerError::WorkerDied),
                    Err(_) => {
                        self.fail("timeout", &format!("poll did not finish within {:?}", self.settings.timeout), started.elapsed());
                        stuck = Some(rx);
                    }
                },
            }
        }
    }

    fn finish(&mut self, outcome: Outcome, (now, mono): (f64, f64), took: Duration) {
        self.mark_ready();
        match outcome {
            Ok((driver, devices)) => {
                self.note_nvml(true, None);
                let down = devices.iter().filter(|d| !d.up).count() as u64;
                if down > 0 {
                    *self.stats.errors_total.entry("device".into()).or_default() += down;
                }
                self.stats.success = true;
                self.stats.duration_seconds = took.as_secs_f64();
                self.stats.last_success_timestamp = Some(now);
                self.publish(now, mono, Ok((driver, devices)));
            }
            Err(SourceError::Unavailable(msg)) => {
                self.note_nvml(false, Some(&msg));
                *self.stats.errors_total.entry("nvml_unavailable".into()).or_default() += 1;
                self.stats.success = false;
                self.stats.duration_seconds = took.as_secs_f64();
                self.publish(now, mono, Err(msg));
            }
            Err(SourceError::Failed { reason, message }) => self.fail(reason, &message, took),
        }
    }

    fn publish(&mut self, timestamp: f64, monotonic: f64, nvml: Result<(Option<DriverInfo>, Vec<Device>), String>) {
        let outcome = PollOutcome {
            seq: self.stats.polls_total,
            timestamp,
            monotonic,
            nvml,
        };
        let snap = Snapshot::of_poll(outcome, self.demo.clone(), self.stats.clone());
        self.tx.send_replace(Arc::new(snap));
    }

    /// systemd's Type=notify: ready once the first poll has ended, whatever
    /// its outcome, so a missing driver does not hold up boot.
    fn mark_ready(&mut self) {
        if !self.ready_sent {
            self.ready_sent = true;
            notify_systemd(sd_notify::NotifyState::Ready);
        }
    }

    /// A failed poll: count it and keep serving the last data marked stale.
    fn fail(&mut self, reason: &str, message: &str, took: Duration) {
        self.mark_ready();
        tracing::warn!(
            reason,
            error = message,
            "poll failed; serving the previous snapshot as stale"
        );
        *self.stats.errors_total.entry(reason.to_string()).or_default() += 1;
        self.stats.success = false;
        self.stats.duration_seconds = took.as_secs_f64();
        self.publish_stale();
    }

    fn publish_stale(&mut self) {
        let mut snap = Snapshot::clone(&self.tx.borrow());
        snap.stale = true;
        // The data keeps its poll time; the monotonic clock moves on so
        // poll-health rules see time pass while polls fail.
        snap.monotonic = monotonic_now();
        snap.poll = self.stats.clone();
        self.tx.send_replace(Arc::new(snap));
    }

    /// Logs NVML going away or coming back once per transition, not per poll.
    fn note_nvml(&mut self, up: bool, msg: Option<&str>) {
        if self.nvml_was_up == Some(up) {
            return;
        }
        self.nvml_was_up = Some(up);
        match (up, msg) {
            (true, _) => tracing::info!(
                demo = self.demo.is_some(),
                "GPU source answering; serving fresh snapshots"
            ),
            (false, Some(m)) => tracing::warn!(
                "NVML not available: {m}; retrying with backoff up to every 30s; use --demo to try without a GPU"
            ),
            (false, None) => {}
        }
    }
}
