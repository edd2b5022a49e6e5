//! [`Guarded`]: every CUDA call on one dedicated thread, each with a
//! deadline, the way the poller guards NVML.
//!
//! Owns: the thread, opening the driver on it (lazily, at the first call,
//! so `cuInit` is never run on a host that never suspends), and the "a hung
//! call is never duplicated" rule: while a call has not returned, every
//! later call fails at once with `Stuck` instead of queueing behind it.
//! Must not: retry, decide, or block an async worker (callers are blocking
//! threads).

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{Call, Checkpointer, CudaError, CudaState};

/// Makes the driver on the CUDA thread: `LibCuda::open`, or a stand-in.
pub type Opener = Box<dyn FnOnce() -> Result<Box<dyn Checkpointer>, CudaError> + Send>;

/// One call to make on the thread: it runs the call on the driver (or
/// takes the error that opening it gave), clears `busy`, then replies.
type Job = Box<dyn FnOnce(Result<&mut dyn Checkpointer, CudaError>, &Mutex<Option<Call>>) + Send>;

/// The CUDA thread's handle. Cheap to share behind an `Arc`.
pub struct Guarded {
    /// Held for a whole call: calls are one at a time, as on the thread.
    tx: Mutex<Sender<(Call, Job)>>,
    /// The call the thread is in, if any; set by the caller before sending,
    /// cleared by the thread when the call returns.
    busy: Arc<Mutex<Option<Call>>>,
}

impl std::fmt::Debug for Guarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded").field("busy", &*lock(&self.busy)).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Guarded {
    /// Starts the thread; `open` runs on it at the first call.
    ///
    /// # Errors
    /// The OS refused a thread.
    pub fn start(open: Opener) -> std::io::Result<Guarded> {
        let (tx, rx) = mpsc::channel::<(Call, Job)>();
        let busy = Arc::new(Mutex::new(None));
        let thread_busy = Arc::clone(&busy);
        std::thread::Builder::new()
            .name("gpumemd-cuda".into())
            .spawn(move || serve(open, &rx, &thread_busy))?;
        Ok(Guarded {
            tx: Mutex::new(tx),
            busy,
        })
    }

    /// The call the thread is stuck in, if one has outlived its deadline.
    pub fn stuck(&self) -> Option<Call> {
        *lock(&self.busy)
    }

    pub fn driver_version(&self, deadline: Duration) -> Result<i32, CudaError> {
        self.run(Call::DriverVersion, deadline, |d| d.driver_version())
    }

    pub fn state(&self, pid: u32, deadline: Duration) -> Result<CudaState, CudaError> {
        self.run(Call::GetState, deadline, move |d| d.state(pid))
    }

    /// The driver gets `timeout`; the call as a whole gets `deadline`.
    pub fn lock(&self, pid: u32, timeout: Duration, deadline: Duration) -> Result<(), CudaError> {
        self.run(Call::Lock, deadline, move |d| d.lock(pid, timeout))
    }

    pub fn checkpoint(&self, pid: u32, deadline: Duration) -> Result<(), CudaError> {
        self.run(Call::Checkpoint, deadline, move |d| d.checkpoint(pid))
    }

    pub fn restore(&self, pid: u32, deadline: Duration) -> Result<(), CudaError> {
        self.run(Call::Restore, deadline, move |d| d.restore(pid))
    }

    pub fn unlock(&self, pid: u32, deadline: Duration) -> Result<(), CudaError> {
        self.run(Call::Unlock, deadline, move |d| d.unlock(pid))
    }

    fn run<R: Send + 'static>(
        &self,
        call: Call,
        deadline: Duration,
        f: impl FnOnce(&mut dyn Checkpointer) -> Result<R, CudaError> + Send + 'static,
    ) -> Result<R, CudaError> {
        let tx = lock(&self.tx);
        {
            let mut busy = lock(&self.busy);
            if let Some(stuck) = *busy {
                return Err(CudaError::Stuck(stuck));
            }
            *busy = Some(call);
        }
        let (reply_tx, reply_rx) = mpsc::channel();
        let job: Job = Box::new(move |driver, busy| {
            let result = driver.and_then(f);
            *lock(busy) = None;
            // The caller may have given up (deadline): nobody to tell.
            let _ = reply_tx.send(result);
        });
        if tx.send((call, job)).is_err() {
            *lock(&self.busy) = None;
            return Err(CudaError::ThreadGone);
        }
        match reply_rx.recv_timeout(deadline) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(CudaError::Hung {
                // The thread may be opening the driver (cuInit) rather than
                // in the call itself: report what it is really in.
                call: lock(&self.busy).unwrap_or(call),
                after: deadline,
            }),
            Err(RecvTimeoutError::Disconnected) => Err(CudaError::ThreadGone),
        }
    }
}

fn serve(open: Opener, rx: &Receiver<(Call, Job)>, busy: &Mutex<Option<Call>>) {
    let mut open = Some(open);
    let mut driver: Option<Result<Box<dyn Checkpointer>, CudaError>> = None;
    while let Ok((call, job)) = rx.recv() {
        if driver.is_none() {
            *lock(busy) = Some(Call::Init);
            driver = open.take().map(|f| f());
            *lock(busy) = Some(call);
        }
        let d = match driver.as_mut() {
            Some(Ok(d)) => Ok(d.as_mut() as &mut dyn Checkpointer),
            Some(Err(e)) => Err(e.clone()),
            None => Err(CudaError::ThreadGone),
        };
        job(d, busy);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::SyncSender;

    use super::*;

    /// Blocks in `checkpoint` until told to return.
    struct Gate(Receiver<()>, SyncSender<()>);

    impl Checkpointer for Gate {
        fn driver_version(&mut self) -> Result<i32, CudaError> {
            Ok(12080)
        }
        fn state(&mut self, _: u32) -> Result<CudaState, CudaError> {
            Ok(CudaState::Running)
        }
        fn lock(&mut self, _: u32, _: Duration) -> Result<(), CudaError> {
            Ok(())
        }
        fn checkpoint(&mut self, _: u32) -> Result<(), CudaError> {
            let _ = self.1.send(());
            let _ = self.0.recv();
            Ok(())
        }
        fn restore(&mut self, _: u32) -> Result<(), CudaError> {
            Ok(())
        }
        fn unlock(&mut self, _: u32) -> Result<(), CudaError> {
            Ok(())
        }
    }

    #[test]
    fn a_hung_call_is_reported_and_never_duplicated() {
        let (release_tx, release_rx) = mpsc::channel();
        let (entered_tx, entered_rx) = mpsc::sync_channel(4);
        let g = Guarded::start(Box::new(move || {
            Ok(Box::new(Gate(release_rx, entered_tx)) as Box<dyn Checkpointer>)
        }))
        .expect("thread");
        assert_eq!(g.driver_version(Duration::from_secs(5)), Ok(12080));
        let err = g.checkpoint(7, Duration::from_millis(50)).expect_err("hangs");
        assert!(
            matches!(
                err,
                CudaError::Hung {
                    call: Call::Checkpoint,
                    ..
                }
            ),
            "{err:?}"
        );
        entered_rx.recv().expect("entered once");
        // While it hangs, nothing else reaches the driver.
        assert_eq!(
            g.state(7, Duration::from_secs(5)),
            Err(CudaError::Stuck(Call::Checkpoint))
        );
        assert_eq!(g.stuck(), Some(Call::Checkpoint));
        release_tx.send(()).expect("release");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while g.stuck().is_some() {
            assert!(std::time::Instant::now() < deadline, "the call returns");
            std::thread::yield_now();
        }
        assert_eq!(g.state(7, Duration::from_secs(5)), Ok(CudaState::Running));
        assert!(entered_rx.try_recv().is_err(), "checkpoint ran exactly once");
    }

    #[test]
    fn an_unusable_driver_fails_every_call_the_same_way() {
        let err = CudaError::Unavailable {
            library: "x".into(),
            detail: "missing".into(),
        };
        let e2 = err.clone();
        let g = Guarded::start(Box::new(move || Err(e2))).expect("thread");
        assert_eq!(g.state(1, Duration::from_secs(5)), Err(err.clone()));
        assert_eq!(g.lock(1, Duration::from_secs(1), Duration::from_secs(5)), Err(err));
    }
}
