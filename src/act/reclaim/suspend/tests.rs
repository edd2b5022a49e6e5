//! Table-free unit tests of suspend and resume on a hand-made `/proc` tree
//! and the simulated driver: every path of the sequence, no GPU, no clock.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::act::reclaim::{ReclaimConfig, ResumeMode, SuspendConfig};
use crate::collect::cuda::{Call, Checkpointer, CudaError, CudaState, SimHandle, SimulatedCuda, codes};
use crate::data::units::ByteSize;

const PID: u32 = 4242;
const TICKS: u64 = 123_456;
const GIB: u64 = 1 << 30;

fn write_proc(root: &Path, ticks: u64) {
    let dir = root.join(PID.to_string());
    std::fs::create_dir_all(&dir).expect("mkdir");
    let stat = format!(
        "{PID} (python3) S 77 {PID} {PID} 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 {ticks} 1000000 500 0 0 0 0 0\n"
    );
    std::fs::write(dir.join("stat"), stat).expect("stat");
    std::fs::write(dir.join("status"), "Uid:\t1001\t1001\t1001\t1001\n").expect("status");
    std::fs::write(dir.join("cmdline"), b"/usr/bin/python3\0nb.py\0").expect("cmdline");
}

#[derive(Debug)]
struct Host(Option<u64>);

impl HostMemory for Host {
    fn available(&self) -> Option<u64> {
        self.0
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    sim: SimHandle,
    r: Reclaimer,
}

fn cfg(dry_run: bool) -> ReclaimConfig {
    ReclaimConfig {
        enabled: true,
        dry_run,
        allow_users: vec!["alice".into()],
        suspend: SuspendConfig {
            lock_timeout: Duration::from_millis(200),
            host_memory_margin: ByteSize(GIB),
            ..SuspendConfig::default()
        },
        ..ReclaimConfig::default()
    }
}

fn fixture_with(cfg: ReclaimConfig, host: Option<u64>, driver: impl FnOnce(SimHandle, &Path) -> Opener) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(std::process::id().to_string(), dir.path().join("self")).expect("self link");
    write_proc(dir.path(), TICKS);
    let sim = SimHandle::default();
    let opener = driver(sim.clone(), dir.path());
    let r = Reclaimer::new(
        cfg,
        crate::act::reclaim::Host::Real(dir.path().to_path_buf()),
        dir.path(),
    )
    .expect("valid")
    .with_cuda(opener)
    .with_host_memory(Box::new(Host(host)));
    Fixture { dir, sim, r }
}

fn sim_driver(sim: SimHandle, _: &Path) -> Opener {
    Box::new(move || Ok(Box::new(SimulatedCuda::new(sim)) as Box<dyn Checkpointer>))
}

fn fixture(cfg: ReclaimConfig) -> Fixture {
    fixture_with(cfg, Some(64 * GIB), sim_driver)
}

fn target() -> Target {
    Target {
        pid: PID,
        start_time: Some(1.0),
        start_ticks: Some(TICKS),
        uid: Some(1001),
        user: "alice".into(),
        comm: "python3".into(),
        rule: "IdleNotebook".into(),
        gpu_uuid: "GPU-0".into(),
        used_bytes: Some(8 * GIB),
    }
}

fn suspend(f: &Fixture) -> Outcome {
    f.r.suspend(vec![target()]).remove(0).1
}

fn audit(f: &Fixture) -> Vec<serde_json::Value> {
    std::fs::read_to_string(f.dir.path().join(AUDIT_FILE))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn suspend_then_resume_goes_round_the_state_machine_and_is_audited() {
    let f = fixture(cfg(false));
    assert_eq!(suspend(&f), Outcome::Done);
    assert_eq!(f.sim.state_of(PID), CudaState::Checkpointed);
    let s = f.r.suspended();
    assert_eq!((s.len(), s[0].bytes, s[0].gpu_uuid.as_str()), (1, 8 * GIB, "GPU-0"));
    assert_eq!(suspend(&f), Outcome::Refused("already_suspended"));
    assert_eq!(f.r.resume(PID, "api"), Outcome::Done);
    assert_eq!(f.sim.state_of(PID), CudaState::Running);
    assert!(f.r.suspended().is_empty());
    let lines = audit(&f);
    let got: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l["action"].as_str().unwrap_or(""), l["result"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(got, [("suspend", "done"), ("suspend", "refused"), ("resume", "done")]);
    assert_eq!(lines[2]["rule"], "api");
    assert_eq!(lines[0]["signal"], serde_json::Value::Null, "suspend sends no signal");
    let stats = f.r.stats();
    assert_eq!((stats.get("suspend", "done"), stats.get("resume", "done")), (1, 1));
}

#[test]
fn dry_run_and_disabled_touch_nothing() {
    let f = fixture(cfg(true));
    assert_eq!(suspend(&f), Outcome::DryRun);
    assert_eq!(f.sim.state_of(PID), CudaState::Running);
    let off = fixture(ReclaimConfig {
        enabled: false,
        ..cfg(false)
    });
    assert_eq!(suspend(&off), Outcome::Disabled);
    assert_eq!(off.sim.state_of(PID), CudaState::Running);
}

#[test]
fn refusals_leave_the_process_running() {
    let not_allowed = fixture(ReclaimConfig {
        allow_users: vec!["bob".into()],
        ..cfg(false)
    });
    assert_eq!(suspend(&not_allowed), Outcome::Refused("not_allowed"));
    let f = fixture(cfg(false));
    f.r.set_listing(Arc::new(|_| false));
    assert_eq!(suspend(&f), Outcome::Refused("not_listed"));
    // 8 GiB + 1 GiB margin does not fit in 8.5 GiB.
    let small = fixture_with(cfg(false), Some(8 * GIB + GIB / 2), sim_driver);
    assert_eq!(suspend(&small), Outcome::Refused("host_memory"));
    let unreadable = fixture_with(cfg(false), None, sim_driver);
    assert_eq!(suspend(&unreadable), Outcome::Refused("host_memory"));
    let no_size = fixture(cfg(false));
    let t = Target {
        used_bytes: None,
        ..target()
    };
    assert_eq!(no_size.r.suspend(vec![t]).remove(0).1, Outcome::Refused("size_unknown"));
    let busy = fixture(cfg(false));
    lock(&busy.r.shared.suspend.inner).in_flight = 1;
    assert_eq!(suspend(&busy), Outcome::Refused("in_flight_limit"));
    let locked = fixture(cfg(false));
    SimulatedCuda::new(locked.sim.clone())
        .lock(PID, Duration::from_secs(1))
        .expect("lock");
    assert_eq!(suspend(&locked), Outcome::Refused("cuda_not_running"));
    for f in [&not_allowed, &f, &small, &unreadable, &no_size, &busy] {
        assert_eq!(f.sim.state_of(PID), CudaState::Running);
    }
}

#[test]
fn a_missing_driver_is_refused_and_counted() {
    let f = fixture_with(cfg(false), Some(64 * GIB), |_, _| {
        Box::new(|| {
            Err(CudaError::Unavailable {
                library: "libcuda.so.1".into(),
                detail: "not found".into(),
            })
        })
    });
    assert_eq!(suspend(&f), Outcome::Refused("cuda_unavailable"));
    assert_eq!(suspend(&f), Outcome::Refused("cuda_unavailable"));
    assert_eq!(f.r.stats().get("suspend", "refused"), 2);
    assert!(lock(&f.r.shared.suspend.inner).warned_unavailable);
}

#[test]
fn failures_after_the_lock_unlock_and_leave_it_running() {
    for call in [Call::Lock, Call::Checkpoint] {
        let f = fixture(cfg(false));
        f.sim.fail_next(call, codes::NOT_SUPPORTED);
        match suspend(&f) {
            Outcome::Failed(e) => assert!(e.contains("left running"), "{call}: {e}"),
            o => panic!("{call}: {o:?}"),
        }
        assert_eq!(f.sim.state_of(PID), CudaState::Running, "{call}");
        assert!(f.r.suspended().is_empty());
    }
}

/// The simulated driver, calling a hook (with the `/proc` root) before
/// each state query and restore.
struct Hooked(SimulatedCuda, Box<dyn FnMut(Call) + Send>);

fn hooked(mut hook: impl FnMut(Call, &Path) + Send + 'static) -> impl FnOnce(SimHandle, &Path) -> Opener {
    move |sim, root| {
        let root = root.to_path_buf();
        let hook = Box::new(move |c| hook(c, &root));
        Box::new(move || Ok(Box::new(Hooked(SimulatedCuda::new(sim), hook)) as Box<dyn Checkpointer>))
    }
}

impl Checkpointer for Hooked {
    fn driver_version(&mut self) -> Result<i32, CudaError> {
        self.0.driver_version()
    }
    fn state(&mut self, pid: u32) -> Result<CudaState, CudaError> {
        (self.1)(Call::GetState);
        self.0.state(pid)
    }
    fn lock(&mut self, pid: u32, t: Duration) -> Result<(), CudaError> {
        self.0.lock(pid, t)
    }
    fn checkpoint(&mut self, pid: u32) -> Result<(), CudaError> {
        self.0.checkpoint(pid)
    }
    fn restore(&mut self, pid: u32) -> Result<(), CudaError> {
        (self.1)(Call::Restore);
        self.0.restore(pid)
    }
    fn unlock(&mut self, pid: u32) -> Result<(), CudaError> {
        self.0.unlock(pid)
    }
}

#[test]
fn pid_reuse_between_decision_and_lock_is_caught_before_the_lock() {
    // Asking for the state replaces the process behind the PID.
    let f = fixture_with(
        cfg(false),
        Some(64 * GIB),
        hooked(|_, root| write_proc(root, TICKS + 1)),
    );
    assert_eq!(suspend(&f), Outcome::Refused("identity_changed"));
    assert_eq!(f.sim.state_of(PID), CudaState::Running, "never locked");
}

#[test]
fn resume_refuses_strangers_and_keeps_a_failed_restore_checkpointed() {
    let f = fixture(cfg(false));
    assert_eq!(f.r.resume(PID, "api"), Outcome::Refused("not_suspended"));
    assert_eq!(suspend(&f), Outcome::Done);
    f.sim.fail_next(Call::Restore, codes::ILLEGAL_STATE);
    assert!(matches!(f.r.resume(PID, "api"), Outcome::Failed(_)));
    assert_eq!(f.sim.state_of(PID), CudaState::Checkpointed);
    assert_eq!(f.r.suspended().len(), 1, "still suspended, still listed");
    assert_eq!(f.r.resume(PID, "api"), Outcome::Done);
}

#[test]
fn a_second_resume_while_one_is_under_way_is_refused() {
    let (entered, in_restore) = std::sync::mpsc::channel();
    let (go, gate) = std::sync::mpsc::channel::<()>();
    let f = fixture_with(
        cfg(false),
        Some(64 * GIB),
        hooked(move |c, _| {
            if c == Call::Restore {
                let _ = entered.send(());
                let _ = gate.recv();
            }
        }),
    );
    assert_eq!(suspend(&f), Outcome::Done);
    std::thread::scope(|s| {
        let first = s.spawn(|| f.r.resume(PID, "api"));
        in_restore.recv().expect("the first resume restores");
        assert_eq!(f.r.resume(PID, "api"), Outcome::Refused("already_resuming"));
        go.send(()).expect("the first resume waits");
        assert_eq!(first.join().ok(), Some(Outcome::Done));
    });
    assert_eq!(f.r.resume(PID, "api"), Outcome::Refused("not_suspended"));
}

#[test]
fn a_resumed_process_is_left_alone_for_the_grace_then_suspendable_again() {
    let f = fixture(cfg(false));
    assert_eq!(suspend(&f), Outcome::Done);
    assert_eq!(f.r.resume(PID, "api"), Outcome::Done);
    assert_eq!(
        suspend(&f),
        Outcome::Refused("recently_resumed"),
        "its owner just asked for it back"
    );
    assert_eq!(f.sim.state_of(PID), CudaState::Running);
    let by_hand = Target {
        rule: "api".into(),
        ..target()
    };
    assert_eq!(
        f.r.suspend(vec![by_hand])[0].1,
        Outcome::Done,
        "an operator's request is not held back"
    );
    let no_grace = fixture(ReclaimConfig {
        suspend: SuspendConfig {
            resumed_grace: std::time::Duration::ZERO,
            ..cfg(false).suspend
        },
        ..cfg(false)
    });
    assert_eq!(suspend(&no_grace), Outcome::Done);
    assert_eq!(no_grace.r.resume(PID, "api"), Outcome::Done);
    assert_eq!(suspend(&no_grace), Outcome::Done, "with no grace, at once");
}

#[test]
fn when_free_resumes_only_with_room_for_the_bytes_and_the_margin() {
    let f = fixture(ReclaimConfig {
        suspend: SuspendConfig {
            resume: ResumeMode::WhenFree,
            resume_margin: ByteSize(GIB),
            ..cfg(false).suspend
        },
        ..cfg(false)
    });
    assert_eq!(suspend(&f), Outcome::Done);
    let t = f.r.suspended()[0].since;
    assert!(f.r.resume_when_free(&|_| Some(9 * GIB - 1), t).is_empty());
    assert!(f.r.resume_when_free(&|_| None, t).is_empty());
    assert_eq!(f.r.resume_when_free(&|_| Some(9 * GIB), t), [(PID, Outcome::Done)]);
    assert_eq!(f.sim.state_of(PID), CudaState::Running);
    let manual = fixture(cfg(false));
    assert_eq!(suspend(&manual), Outcome::Done);
    let t = manual.r.suspended()[0].since;
    assert!(
        manual.r.resume_when_free(&|_| Some(80 * GIB), t).is_empty(),
        "manual mode"
    );
}

#[test]
fn when_free_waits_resume_after_even_with_room() {
    let f = fixture(ReclaimConfig {
        suspend: SuspendConfig {
            resume: ResumeMode::WhenFree,
            resume_after: std::time::Duration::from_secs(60),
            ..cfg(false).suspend
        },
        ..cfg(false)
    });
    assert_eq!(suspend(&f), Outcome::Done);
    let t = f.r.suspended()[0].since;
    for early in [t, t + 59.0] {
        assert!(
            f.r.resume_when_free(&|_| Some(80 * GIB), early).is_empty(),
            "at +{}",
            early - t
        );
    }
    assert_eq!(
        f.r.resume_when_free(&|_| Some(80 * GIB), t + 60.0),
        [(PID, Outcome::Done)]
    );
}

#[test]
fn a_passing_refusal_is_retried_after_a_back_off_while_the_alert_fires() {
    use crate::act::reclaim::{MAX_RETRIES, RETRY_BACKOFF_SECS};
    let f = fixture(cfg(false));
    let t0 = 1000.0;
    f.sim.fail_next(Call::Lock, codes::TIMEOUT);
    assert!(matches!(
        f.r.suspend_at(vec![target()], t0).remove(0).1,
        Outcome::Failed(_)
    ));
    assert!(f.r.suspend_retries_pending());
    let firing = || vec![target()];
    assert!(
        f.r.retry_suspends(firing(), t0 + RETRY_BACKOFF_SECS - 1.0).is_empty(),
        "within the back-off"
    );
    assert!(
        f.r.retry_suspends(Vec::new(), t0 + RETRY_BACKOFF_SECS).is_empty(),
        "alert resolved"
    );
    let again = f.r.retry_suspends(firing(), t0 + RETRY_BACKOFF_SECS);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].1, Outcome::Done);
    assert!(!f.r.suspend_retries_pending(), "done: nothing left to retry");

    // A refusal that would answer the same again is not retried...
    let g = fixture(ReclaimConfig {
        allow_users: vec!["bob".into()],
        ..cfg(false)
    });
    assert_eq!(
        g.r.suspend_at(vec![target()], t0).remove(0).1,
        Outcome::Refused("not_allowed")
    );
    assert!(!g.r.suspend_retries_pending());
    // ...and a passing one only MAX_RETRIES times, the wait doubling.
    let h = fixture(cfg(false));
    let mut now = t0;
    h.sim.fail_next(Call::Lock, codes::TIMEOUT);
    h.r.suspend_at(vec![target()], now);
    let mut waits = Vec::new();
    for _ in 0..MAX_RETRIES {
        h.sim.fail_next(Call::Lock, codes::TIMEOUT);
        let next = (1..=1_000_000)
            .map(|s| now + f64::from(s))
            .find(|&at| !h.r.retry_suspends(vec![target()], at).is_empty())
            .expect("retried");
        waits.push(next - now);
        now = next;
    }
    assert_eq!(waits[0], RETRY_BACKOFF_SECS);
    assert!(waits.windows(2).all(|w| w[1] == 2.0 * w[0]), "{waits:?}");
    assert!(!h.r.suspend_retries_pending(), "bounded: {waits:?}");
}
