//! Reclaim on real processes: the test spawns children (`sleep 60`, and a
//! `sleep` that inherits an ignored SIGTERM), asks the reclaimer to terminate
//! them and checks who got which signal and what the audit log says. Every
//! wait is a poll with a deadline, never a bare sleep.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::wait_blocking;
use gpumemd::act::reclaim::{Host, Outcome, ReclaimConfig, ReclaimError, Reclaimer, SERIES, Target, read_view};
use serde_json::Value;

const GRACE: Duration = Duration::from_millis(300);
const DEADLINE: Duration = Duration::from_secs(10);
const SIGTERM: i32 = 15;
const SIGKILL: i32 = 9;

/// Polls `cond` until it holds or DEADLINE passes.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    wait_blocking(DEADLINE, what, || cond().then_some(()));
}

/// A child that is killed and reaped on drop, so a failing test leaks nothing.
struct Kid(Child);

impl Kid {
    /// `sleep 60`.
    fn sleeper() -> Kid {
        Kid::spawn("exec sleep 60")
    }

    /// `sleep 60` with SIGTERM ignored (inherited across exec).
    fn stubborn() -> Kid {
        Kid::spawn("trap '' TERM; exec sleep 60")
    }

    fn spawn(script: &str) -> Kid {
        let child = Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sh");
        let kid = Kid(child);
        let pid = kid.pid();
        // Ready once `sh` has exec'd into sleep (after the trap, if any)
        // and the exec has finished: the kernel names the task "sleep"
        // before it sets up the new argv, and a task with no argv reads as
        // a kernel thread, which reclaim refuses.
        wait_for("exec into sleep", || {
            read_view(Path::new("/proc"), pid).is_ok_and(|v| v.comm == "sleep" && v.argv0.is_some())
        });
        kid
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }

    /// Waits for the exit and returns its status.
    fn exit_status(&mut self) -> ExitStatus {
        let mut status = None;
        wait_for("child exit", || {
            status = self.0.try_wait().expect("try_wait");
            status.is_some()
        });
        status.expect("exited")
    }

    /// What the rule engine would send for this child.
    fn target(&self) -> Target {
        let v = read_view(Path::new("/proc"), self.pid()).expect("child view");
        Target {
            pid: self.pid(),
            start_time: None,
            start_ticks: Some(v.start_ticks),
            uid: Some(v.uid),
            user: String::new(),
            comm: v.comm,
            rule: "idle-holder".into(),
            gpu_uuid: "GPU-test-0".into(),
            used_bytes: Some(3 << 30),
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn my_uid() -> String {
    read_view(Path::new("/proc"), std::process::id())
        .expect("own view")
        .uid
        .to_string()
}

/// Enabled, live, this test's uid allowed (tests may run as root, so
/// deny_users is emptied), short grace.
fn live_config() -> ReclaimConfig {
    ReclaimConfig {
        enabled: true,
        dry_run: false,
        grace: GRACE,
        allow_users: vec![my_uid()],
        deny_users: vec![],
        ..ReclaimConfig::default()
    }
}

fn reclaimer(cfg: ReclaimConfig) -> (Reclaimer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = Reclaimer::new(cfg, Host::Real(PathBuf::from("/proc")), dir.path()).expect("reclaimer");
    (r, dir)
}

fn audit_lines(r: &Reclaimer) -> Vec<Value> {
    let text = fs::read_to_string(r.audit_path()).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
        .collect()
}

fn one(r: &Reclaimer, t: Target) -> Outcome {
    let mut out = r.request(vec![t]);
    assert_eq!(out.len(), 1);
    out.remove(0).1
}

fn nonzero(r: &Reclaimer) -> Vec<(&'static str, &'static str, u64)> {
    r.stats().entries().into_iter().filter(|e| e.2 > 0).collect()
}

fn wait_idle(r: &Reclaimer) {
    wait_for("escalations to finish", || r.in_progress() == 0);
}

#[test]
fn reclaimer_can_be_shared_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Reclaimer>();
}

#[test]
fn stats_export_every_series_from_zero() {
    let (r, _dir) = reclaimer(live_config());
    let entries = r.stats().entries();
    assert_eq!(entries.len(), SERIES.len());
    assert!(entries.iter().all(|&(a, res, n)| n == 0 && SERIES.contains(&(a, res))));
}

#[test]
fn disabled_touches_nothing_not_even_the_state_dir() {
    let mut kid = Kid::sleeper();
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let r = Reclaimer::new(ReclaimConfig::default(), Host::Real(PathBuf::from("/proc")), &state)
        .expect("disabled is valid");
    assert_eq!(one(&r, kid.target()), Outcome::Disabled);
    assert!(kid.alive());
    assert!(!state.exists(), "no audit file while disabled");
    assert_eq!(nonzero(&r), [("terminate", "disabled", 1)]);
}

#[test]
fn dry_run_audits_and_signals_nothing() {
    let mut kid = Kid::sleeper();
    let (r, _dir) = reclaimer(ReclaimConfig {
        dry_run: true,
        ..live_config()
    });
    let t = kid.target();
    assert_eq!(one(&r, t.clone()), Outcome::DryRun);
    assert_eq!(r.in_progress(), 0, "no SIGKILL step in a dry run");
    assert!(kid.alive());
    let lines = audit_lines(&r);
    assert_eq!(lines.len(), 1);
    let l = &lines[0];
    assert_eq!(
        (l["action"].as_str(), l["result"].as_str()),
        (Some("terminate"), Some("dry_run"))
    );
    assert_eq!(l["dry_run"], Value::Bool(true));
    assert_eq!(l["signal"], Value::Null);
    assert_eq!(l["pid"].as_u64(), Some(u64::from(t.pid)));
    assert_eq!(l["start_ticks"].as_u64(), t.start_ticks);
    assert_eq!(l["used_bytes"].as_u64(), Some(3 << 30));
    assert_eq!(
        (l["rule"].as_str(), l["gpu_uuid"].as_str()),
        (Some("idle-holder"), Some("GPU-test-0"))
    );
    assert!(
        l["time"].as_str().is_some_and(|t| t.ends_with('Z') && t.contains('T')),
        "{l}"
    );
    assert_eq!(r.stats().get("terminate", "dry_run"), 1);
}

#[test]
fn terminates_only_the_target_with_sigterm_first() {
    let mut target = Kid::sleeper();
    let mut bystander = Kid::sleeper();
    let (r, _dir) = reclaimer(live_config());
    assert_eq!(one(&r, target.target()), Outcome::Signalled);
    assert_eq!(target.exit_status().signal(), Some(SIGTERM));
    wait_idle(&r);
    assert!(bystander.alive());
    let lines = audit_lines(&r);
    let steps: Vec<_> = lines
        .iter()
        .map(|l| (l["action"].as_str(), l["result"].as_str()))
        .collect();
    assert_eq!(
        steps,
        [(Some("terminate"), Some("signalled")), (Some("kill"), Some("exited"))]
    );
    assert_eq!(lines[0]["signal"].as_str(), Some("SIGTERM"));
    assert_eq!(lines[0]["grace_ms"].as_u64(), Some(300));
    assert!(lines.iter().all(|l| l["pid"].as_u64() == Some(u64::from(target.pid()))));
    assert_eq!(nonzero(&r), [("kill", "exited", 1), ("terminate", "signalled", 1)]);
}

#[test]
fn ignores_sigterm_gets_sigkill_after_grace() {
    let mut kid = Kid::stubborn();
    let (r, _dir) = reclaimer(live_config());
    let t = kid.target();
    let asked = Instant::now();
    assert_eq!(one(&r, t.clone()), Outcome::Signalled);
    assert_eq!(one(&r, t), Outcome::InProgress, "a repeat during grace is ignored");
    let status = kid.exit_status();
    assert!(
        asked.elapsed() >= GRACE,
        "SIGKILL came before the grace period: {:?}",
        asked.elapsed()
    );
    assert_eq!(status.signal(), Some(SIGKILL));
    wait_idle(&r);
    let lines = audit_lines(&r);
    let steps: Vec<_> = lines
        .iter()
        .map(|l| (l["action"].as_str(), l["signal"].as_str()))
        .collect();
    assert_eq!(
        steps,
        [(Some("terminate"), Some("SIGTERM")), (Some("kill"), Some("SIGKILL"))]
    );
    assert_eq!(r.stats().get("kill", "signalled"), 1);
    assert_eq!(
        r.stats().get("terminate", "in_progress"),
        0,
        "ignored repeats are not counted"
    );
}

#[test]
fn reused_pid_is_not_signalled() {
    let mut kid = Kid::sleeper();
    let (r, _dir) = reclaimer(live_config());
    let mut t = kid.target();
    t.start_ticks = t.start_ticks.map(|s| s + 1);
    assert_eq!(one(&r, t), Outcome::Refused("identity_changed"));
    assert!(kid.alive());
    let lines = audit_lines(&r);
    assert_eq!(lines[0]["result"].as_str(), Some("refused"));
    assert_eq!(lines[0]["reason"].as_str(), Some("identity_changed"));
}

/// The SIGKILL step re-reads stat: a fixture /proc whose start ticks change
/// during the grace period stands in for a PID reused by another process.
#[test]
fn identity_is_rechecked_before_sigkill() {
    let mut kid = Kid::stubborn();
    let t = kid.target();
    let fake = tempfile::tempdir().expect("tempdir");
    let (root, pid) = (fake.path(), kid.pid());
    std::os::unix::fs::symlink(std::process::id().to_string(), root.join("self")).expect("self link");
    fs::create_dir(root.join(pid.to_string())).expect("pid dir");
    for f in ["stat", "status", "cmdline"] {
        let real = fs::read(format!("/proc/{pid}/{f}")).expect("real proc file");
        fs::write(root.join(format!("{pid}/{f}")), real).expect("copy");
    }
    let state = tempfile::tempdir().expect("tempdir");
    let cfg = ReclaimConfig {
        grace: Duration::from_secs(2),
        ..live_config()
    };
    let r = Reclaimer::new(cfg, Host::Real(root.to_path_buf()), state.path()).expect("reclaimer");
    assert_eq!(one(&r, t.clone()), Outcome::Signalled);
    let stat = fs::read_to_string(root.join(format!("{pid}/stat"))).expect("stat");
    fs::write(root.join(format!("{pid}/stat")), with_start_ticks(&stat, 1)).expect("rewrite stat");
    wait_idle(&r);
    assert!(kid.alive(), "a changed identity must not be SIGKILLed");
    let last = audit_lines(&r).pop().expect("kill line");
    assert_eq!(
        (last["action"].as_str(), last["reason"].as_str()),
        (Some("kill"), Some("identity_changed"))
    );
}

/// `stat` with field 22 (start ticks) moved by `delta`, as a reused PID has.
fn with_start_ticks(stat: &str, delta: u64) -> String {
    let close = stat.rfind(')').expect("comm");
    let mut rest: Vec<String> = stat[close + 1..].split_whitespace().map(String::from).collect();
    let ticks: u64 = rest[22 - 3].parse().expect("ticks");
    rest[22 - 3] = (ticks + delta).to_string();
    format!("{} {}\n", &stat[..=close], rest.join(" "))
}

#[test]
fn deny_and_allow_lists_refuse() {
    let mut kid = Kid::sleeper();
    let uid = my_uid();
    let cases = [
        (
            ReclaimConfig {
                deny_commands: vec!["sleep".into()],
                ..live_config()
            },
            "denied_command",
        ),
        (
            ReclaimConfig {
                allow_users: vec![],
                allow_all_users: true,
                deny_users: vec![uid],
                ..live_config()
            },
            "denied_user",
        ),
        (
            ReclaimConfig {
                allow_users: vec!["4000000".into()],
                ..live_config()
            },
            "not_allowed",
        ),
    ];
    for (cfg, reason) in cases {
        let (r, _dir) = reclaimer(cfg);
        assert_eq!(one(&r, kid.target()), Outcome::Refused(reason));
        assert_eq!(audit_lines(&r)[0]["reason"].as_str(), Some(reason));
        assert_eq!(nonzero(&r), [("terminate", "refused", 1)]);
    }
    assert!(kid.alive());
}

#[test]
fn pid1_self_and_parent_are_refused() {
    let (r, _dir) = reclaimer(ReclaimConfig {
        allow_all_users: true,
        allow_users: vec![],
        ..live_config()
    });
    let me = Kid::sleeper().target();
    let with_pid = |pid| Target { pid, ..me.clone() };
    let parent = std::os::unix::process::parent_id();
    let out = r.request(vec![
        with_pid(1),
        with_pid(std::process::id()),
        with_pid(parent),
        with_pid(0),
    ]);
    let got: Vec<_> = out.into_iter().map(|(_, o)| o).collect();
    let want = ["pid1", "self", "self", "invalid_pid"].map(Outcome::Refused);
    assert_eq!(got, want);
    assert_eq!(r.stats().get("terminate", "refused"), 4);
}

#[test]
fn gone_process_is_refused() {
    let mut kid = Kid::sleeper();
    let t = kid.target();
    let _ = kid.0.kill();
    kid.exit_status();
    let (r, _dir) = reclaimer(live_config());
    assert_eq!(one(&r, t), Outcome::Refused("gone"));
}

#[test]
fn drop_cancels_pending_sigkill() {
    let mut kid = Kid::stubborn();
    let (r, _dir) = reclaimer(ReclaimConfig {
        grace: Duration::from_secs(60),
        ..live_config()
    });
    assert_eq!(one(&r, kid.target()), Outcome::Signalled);
    let audit = r.audit_path().to_path_buf();
    drop(r);
    assert!(kid.alive(), "shutdown never sends an early SIGKILL");
    let text = fs::read_to_string(audit).expect("audit");
    let last: Value = serde_json::from_str(text.lines().last().expect("line")).expect("json");
    assert_eq!(
        (last["result"].as_str(), last["reason"].as_str()),
        (Some("cancelled"), Some("shutdown"))
    );
}

#[test]
fn reload_to_dry_run_cancels_pending_sigkill() {
    let mut kid = Kid::stubborn();
    let (r, _dir) = reclaimer(live_config());
    assert_eq!(one(&r, kid.target()), Outcome::Signalled);
    r.reconfigure(ReclaimConfig {
        dry_run: true,
        ..live_config()
    })
    .expect("valid");
    wait_idle(&r);
    assert!(kid.alive());
    assert_eq!(r.stats().get("kill", "cancelled"), 1);
}

#[test]
fn enabling_checks_the_pid_namespace_and_config() {
    let empty = tempfile::tempdir().expect("tempdir");
    let err = Reclaimer::new(live_config(), Host::Real(empty.path().to_path_buf()), empty.path()).expect_err("no self");
    assert!(matches!(err, ReclaimError::PidNamespace { .. }), "{err}");
    let other = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink("1", other.path().join("self")).expect("link");
    let err =
        Reclaimer::new(live_config(), Host::Real(other.path().to_path_buf()), empty.path()).expect_err("pid 1 view");
    assert!(err.to_string().contains("PID namespace"), "{err}");
    let useless = ReclaimConfig {
        allow_users: vec![],
        ..live_config()
    };
    let err = Reclaimer::new(useless, Host::Real(PathBuf::from("/proc")), empty.path()).expect_err("nobody allowed");
    assert!(matches!(err, ReclaimError::Config(_)), "{err}");
}
