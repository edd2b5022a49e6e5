//! Unit tests of the poller's tick grid.
use super::*;

/// On time (within `LATE`) the next tick is a period on; late, it is
/// the next grid point after now, with the missed ones skipped.
#[test]
fn a_late_tick_goes_back_onto_the_grid() {
    let t0 = Instant::now();
    let period = Duration::from_secs(1);
    let mut t = Ticks { next: t0, period };
    t.fire(t0 + Duration::from_millis(1));
    assert_eq!(t.next, t0 + period);
    t.fire(t0 + Duration::from_millis(3500));
    assert_eq!(t.next, t0 + 4 * period);
    t.fire(t0 + 4 * period + Duration::from_millis(4));
    assert_eq!(t.next, t0 + 5 * period);
}

/// A small fleet polled every 20 ms with a deadline far away.
fn started(
    timeout: Duration,
) -> (
    Started<impl Future<Output = Result<(), PollerError>>>,
    watch::Sender<bool>,
) {
    let scenario = crate::collect::source::scenario::Scenario::resolve("default").expect("the built-in scenario");
    let source =
        crate::collect::source::simulated::SimulatedSource::new(scenario, Duration::from_millis(20), 1_767_225_600.0);
    started_with(Box::new(source), timeout)
}

/// `source` polled every 20 ms with a deadline of `timeout`.
fn started_with(
    source: Box<dyn GpuSource>,
    timeout: Duration,
) -> (
    Started<impl Future<Output = Result<(), PollerError>>>,
    watch::Sender<bool>,
) {
    let pipeline = Pipeline::for_source(&crate::app::config::Processes::default(), source.as_ref());
    let settings = PollSettings {
        interval: Duration::from_millis(20),
        timeout,
        utilization_interval: Duration::from_secs(10),
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let started = start(source, pipeline, settings, stop_rx).expect("poller starts");
    (started, stop_tx)
}

/// A source whose polls wait until the gate opens: a poll that outlives
/// its deadline whatever the machine's speed. Dropping it opens the gate,
/// so the poll thread can end with the test.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    fn open(&self) {
        *self.0.0.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.0.1.notify_all();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

impl GpuSource for Gate {
    fn poll(&mut self, _: bool) -> Result<crate::collect::source::RawPoll, SourceError> {
        let (open, turn) = &*self.0;
        let guard = open.lock().unwrap_or_else(PoisonError::into_inner);
        drop(
            turn.wait_while(guard, |open| !*open)
                .unwrap_or_else(PoisonError::into_inner),
        );
        Ok(crate::collect::source::RawPoll::default())
    }
}

/// Waits (with a deadline) until `count` says at least `n`.
async fn until(count: &std::sync::atomic::AtomicU64, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while count.load(std::sync::atomic::Ordering::SeqCst) < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n}",
            count.load(std::sync::atomic::Ordering::SeqCst)
        );
        tokio::task::yield_now().await;
        std::thread::yield_now();
    }
}

/// Every poll reaches the follower once, in order, on the poll thread, and
/// polls on time never ring the supervisor's alarm: an idle poll wakes no
/// async worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poll_thread_publishes_and_follows_without_waking_the_supervisor() {
    let (started, _stop) = started(Duration::from_secs(30));
    let shared = started.follow.0.clone();
    let supervisor = tokio::spawn(started.supervisor);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (s, c) = (seen.clone(), count.clone());
    started.follow.set(Box::new(move |snap| {
        let thread = std::thread::current().name().map(str::to_string);
        s.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((snap.seq, thread));
        c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }));
    until(&count, 10).await;
    let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    // The first may be the catch-up on the setting thread; the rest are the
    // poll thread's, one per poll, in order.
    for w in seen.windows(2) {
        assert_eq!(w[1].0, w[0].0 + 1, "every poll once, in order: {seen:?}");
        assert_eq!(w[1].1.as_deref(), Some("gpumemd-poll"));
    }
    assert_eq!(
        shared.rings.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the alarm rang for an on-time poll"
    );
    supervisor.abort();
}

/// A deadline shorter than a poll of the (stalled) source rings the alarm,
/// and the supervisor then publishes the last snapshot marked stale, which
/// reaches the follower from the supervisor's side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_past_its_deadline_rings_the_alarm_and_is_served_stale() {
    let gate = Gate::default();
    let (started, _stop) = started_with(Box::new(gate.clone()), Duration::from_millis(1));
    let shared = started.follow.0.clone();
    let supervisor = tokio::spawn(started.supervisor);
    let stale = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let s = stale.clone();
    started.follow.set(Box::new(move |snap| {
        if snap.stale {
            s.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }));
    until(&stale, 1).await;
    // The supervisor's first look, on start, may serve the stale snapshot
    // before the alarm has rung: the ring is awaited, within the deadline.
    until(&shared.rings, 1).await;
    supervisor.abort();
}
