//! The safety policy: given a target, the live view of its PID and the
//! config, may it be signalled? Pure, so every rule is unit-tested on
//! hand-made views.
//!
//! Owns: the refusal reasons and their order. Must not: read files or signal.

use super::Target;
use super::config::ReclaimConfig;
use super::procview::ProcView;

/// PIDs that are never signalled whatever the config says: this daemon and
/// the process that started it (a supervisor, a shell, a test harness).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protected {
    pub self_pid: u32,
    pub parent_pid: u32,
}

impl Protected {
    /// This process and its parent.
    pub fn current() -> Self {
        Protected {
            self_pid: std::process::id(),
            parent_pid: std::os::unix::process::parent_id(),
        }
    }
}

/// Checks that need no `/proc` read, done before anything is opened.
///
/// PID 0 and PIDs above `i32::MAX` are refused because `kill(0)` and
/// `kill(-n)` signal whole process groups.
pub fn precheck(target: &Target, me: &Protected) -> Result<(), &'static str> {
    match target.pid {
        0 => Err("invalid_pid"),
        p if i32::try_from(p).is_err() => Err("invalid_pid"),
        1 => Err("pid1"),
        p if p == me.self_pid || p == me.parent_pid => Err("self"),
        _ if target.start_ticks.is_none() => Err("identity_unknown"),
        _ => Ok(()),
    }
}

/// The full decision on a live view. The order matters only for which
/// reason is reported: identity first (a reused PID says nothing about the
/// target), then what the process is, then who owns it.
pub fn check(cfg: &ReclaimConfig, me: &Protected, target: &Target, live: &ProcView) -> Result<(), &'static str> {
    precheck(target, me)?;
    if live.pid != target.pid {
        return Err("identity_changed");
    }
    if live.is_exited() {
        return Err("gone");
    }
    if Some(live.start_ticks) != target.start_ticks || target.uid.is_some_and(|uid| uid != live.uid) {
        return Err("identity_changed");
    }
    if live.is_kernel_thread() {
        return Err("kernel_thread");
    }
    // Denied if ANY name the process goes by is denied: comm can be set by
    // the process itself, argv[0] too, and the target's comm is what the
    // rule saw.
    let names = std::iter::once(live.comm.as_str())
        .chain(live.argv0_names())
        .chain(std::iter::once(target.comm.as_str()).filter(|c| !c.is_empty()));
    if names.into_iter().any(|n| cfg.denies_command(n)) {
        return Err("denied_command");
    }
    if cfg.deny_users.iter().any(|e| user_matches(e, &target.user, live.uid)) {
        return Err("denied_user");
    }
    if !cfg.allow_all_users && !cfg.allow_users.iter().any(|e| user_matches(e, &target.user, live.uid)) {
        return Err("not_allowed");
    }
    Ok(())
}

/// A list entry is a user name or a numeric uid. "root" also matches uid 0
/// when the name could not be resolved, so an unresolved root is still root.
fn user_matches(entry: &str, name: &str, uid: u32) -> bool {
    (!name.is_empty() && entry == name) || entry.parse::<u32>() == Ok(uid) || (entry == "root" && uid == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::attribution::ProcState;

    const ME: Protected = Protected {
        self_pid: 500,
        parent_pid: 400,
    };

    fn cfg() -> ReclaimConfig {
        ReclaimConfig {
            enabled: true,
            dry_run: false,
            allow_users: vec!["alice".into(), "1002".into()],
            ..ReclaimConfig::default()
        }
    }

    fn target() -> Target {
        Target {
            pid: 4242,
            start_time: Some(1_700_000_000.5),
            start_ticks: Some(123_456),
            uid: Some(1001),
            user: "alice".into(),
            comm: "python3".into(),
            rule: "idle-holder".into(),
            gpu_uuid: "GPU-0".into(),
            used_bytes: Some(1 << 30),
        }
    }

    fn live() -> ProcView {
        ProcView {
            pid: 4242,
            ppid: 1000,
            state: ProcState::Sleeping,
            flags: 0x0040_0100,
            start_ticks: 123_456,
            uid: 1001,
            comm: "python3".into(),
            argv0: Some("/usr/bin/python3".into()),
        }
    }

    fn decide(cfg: &ReclaimConfig, t: &Target, v: &ProcView) -> Result<(), &'static str> {
        check(cfg, &ME, t, v)
    }

    #[test]
    fn allowed_user_process_passes() {
        assert_eq!(decide(&cfg(), &target(), &live()), Ok(()));
    }

    #[test]
    fn special_pids_are_refused_before_reading_proc() {
        for (pid, reason) in [
            (0, "invalid_pid"),
            (u32::MAX, "invalid_pid"),
            (1, "pid1"),
            (500, "self"),
            (400, "self"),
        ] {
            let t = Target { pid, ..target() };
            assert_eq!(precheck(&t, &ME), Err(reason), "pid {pid}");
            assert_eq!(
                decide(&cfg(), &t, &ProcView { pid, ..live() }),
                Err(reason),
                "pid {pid}"
            );
        }
        let unknown = Target {
            start_ticks: None,
            ..target()
        };
        assert_eq!(precheck(&unknown, &ME), Err("identity_unknown"));
    }

    #[test]
    fn reused_pid_or_changed_uid_is_identity_changed() {
        let reused = ProcView {
            start_ticks: 999_999,
            ..live()
        };
        assert_eq!(decide(&cfg(), &target(), &reused), Err("identity_changed"));
        let setuid = ProcView { uid: 1002, ..live() };
        assert_eq!(decide(&cfg(), &target(), &setuid), Err("identity_changed"));
        let other_pid = ProcView { pid: 4243, ..live() };
        assert_eq!(decide(&cfg(), &target(), &other_pid), Err("identity_changed"));
    }

    #[test]
    fn exited_process_is_gone() {
        for state in [ProcState::Zombie, ProcState::Dead] {
            assert_eq!(decide(&cfg(), &target(), &ProcView { state, ..live() }), Err("gone"));
        }
    }

    #[test]
    fn kernel_threads_are_refused() {
        let views = [
            ProcView {
                flags: 0x0020_8040,
                ..live()
            },
            ProcView { ppid: 2, ..live() },
            ProcView { argv0: None, ..live() },
        ];
        for v in views {
            assert_eq!(decide(&cfg(), &target(), &v), Err("kernel_thread"), "{v:?}");
        }
        let kthreadd = Target { pid: 2, ..target() };
        assert_eq!(
            decide(&cfg(), &kthreadd, &ProcView { pid: 2, ..live() }),
            Err("kernel_thread")
        );
    }

    #[test]
    fn denied_commands_match_comm_argv0_basename_and_target_comm() {
        let mut c = cfg();
        c.deny_commands = vec!["jupyter-lab".into()];
        let by_comm = ProcView {
            comm: "Xorg".into(),
            ..live()
        };
        let by_argv0 = ProcView {
            argv0: Some("/opt/bin/jupyter-lab".into()),
            ..live()
        };
        let rewritten = ProcView {
            comm: "x".into(),
            argv0: Some("sshd: alice [priv]".into()),
            ..live()
        };
        for v in [by_comm, by_argv0, rewritten] {
            assert_eq!(decide(&c, &target(), &v), Err("denied_command"), "{v:?}");
        }
        let t = Target {
            comm: "nvidia-persiste".into(),
            ..target()
        };
        assert_eq!(decide(&c, &t, &live()), Err("denied_command"));
        let not_prefix = ProcView {
            argv0: Some("/usr/bin/sshd-helper".into()),
            ..live()
        };
        assert_eq!(decide(&c, &target(), &not_prefix), Ok(()));
    }

    #[test]
    fn deny_users_win_over_allow_by_name_or_uid() {
        let mut c = cfg();
        c.allow_all_users = true;
        c.allow_users.clear();
        c.deny_users = vec!["alice".into()];
        assert_eq!(decide(&c, &target(), &live()), Err("denied_user"));
        c.deny_users = vec!["1001".into()];
        assert_eq!(decide(&c, &target(), &live()), Err("denied_user"));
        let root = Target {
            uid: Some(0),
            user: String::new(),
            ..target()
        };
        c.deny_users = vec!["root".into()];
        assert_eq!(
            decide(&c, &root, &ProcView { uid: 0, ..live() }),
            Err("denied_user"),
            "unresolved uid 0"
        );
        c.deny_users.clear();
        assert_eq!(
            decide(&c, &root, &ProcView { uid: 0, ..live() }),
            Ok(()),
            "root allowed once undenied"
        );
    }

    #[test]
    fn allow_list_is_names_or_uids_and_empty_means_nobody() {
        let bob = Target {
            uid: Some(1003),
            user: "bob".into(),
            ..target()
        };
        let bob_live = ProcView { uid: 1003, ..live() };
        assert_eq!(decide(&cfg(), &bob, &bob_live), Err("not_allowed"));
        let by_uid = Target {
            uid: Some(1002),
            user: "carol".into(),
            ..target()
        };
        assert_eq!(decide(&cfg(), &by_uid, &ProcView { uid: 1002, ..live() }), Ok(()));
        let nobody = ReclaimConfig {
            allow_users: vec![],
            ..cfg()
        };
        assert_eq!(decide(&nobody, &target(), &live()), Err("not_allowed"));
        let all = ReclaimConfig {
            allow_users: vec![],
            allow_all_users: true,
            ..cfg()
        };
        assert_eq!(decide(&all, &bob, &bob_live), Ok(()));
    }

    #[test]
    fn unresolved_name_matches_only_by_uid() {
        let t = Target {
            user: String::new(),
            ..target()
        };
        assert_eq!(decide(&cfg(), &t, &live()), Err("not_allowed"));
        let c = ReclaimConfig {
            allow_users: vec!["1001".into()],
            ..cfg()
        };
        assert_eq!(decide(&c, &t, &live()), Ok(()));
    }
}
