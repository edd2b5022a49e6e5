//! The `[reclaim]` config section and its validation.
//!
//! Owns: the keys, their defaults, the built-in command floor and the checks
//! that reject a section that is unsafe or cannot do anything. Must not: read
//! `/proc` or signal anything; it is plain data.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Commands that are never signalled, whatever `deny_commands` says: system
/// and container plumbing, display servers and the NVIDIA services whose
/// death takes other users' work with them (MPS server, persistence daemon,
/// DCGM). `deny_commands` adds to this list; it cannot remove from it.
pub const PROTECTED_COMMANDS: &[&str] = &[
    "init",
    "systemd",
    "systemd-journald",
    "systemd-logind",
    "systemd-udevd",
    "dbus-daemon",
    "sshd",
    "login",
    "agetty",
    "Xorg",
    "Xwayland",
    "gdm",
    "gnome-shell",
    "kwin_wayland",
    "kwin_x11",
    "sddm",
    "lightdm",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nv-hostengine",
    "dcgm",
    "dcgmi",
    "dcgm-exporter",
    "nvidia-fabricmanager",
    "nv-fabricmanager",
    "containerd",
    "containerd-shim",
    "containerd-shim-runc-v2",
    "dockerd",
    "runc",
    "crio",
    "conmon",
    "kubelet",
    "slurmd",
    "slurmstepd",
    "gpumemd",
];

/// Longest grace period accepted: past an hour an escalation is no longer
/// "shortly after SIGTERM" and would surprise whoever reads the audit log.
const MAX_GRACE: Duration = Duration::from_secs(3600);

/// `[reclaim]`: opt-in termination (or suspension) of processes that hold
/// GPU memory when a rule with `action = "terminate"` (or `"suspend"`) fires.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReclaimConfig {
    /// Off by default: nothing is read, written or signalled.
    pub enabled: bool,
    /// On by default: decisions are audited, nothing is signalled.
    pub dry_run: bool,
    /// Time between SIGTERM and SIGKILL.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
    /// User names or numeric uids that may be signalled. Empty means nobody
    /// unless `allow_all_users` is set: an empty list must never mean "all".
    pub allow_users: Vec<String>,
    /// Explicit "any user not in deny_users".
    pub allow_all_users: bool,
    /// User names or numeric uids never signalled; wins over the allow list.
    /// Replaces the default (so root can be allowed, e.g. for containers
    /// running as uid 0), unlike `deny_commands`.
    pub deny_users: Vec<String>,
    /// Extra commands (comm or `argv[0]` basename) never signalled, on top of
    /// [`PROTECTED_COMMANDS`].
    pub deny_commands: Vec<String>,
    /// Lets `group_used_bytes` rules carry an action. A group (container,
    /// pod, systemd unit, job) is named from cgroup paths that the processes
    /// in it can often choose, so such a rule can be steered onto someone
    /// else's processes: only for hosts where nobody untrusted can.
    pub trust_group_names: bool,
    /// `[reclaim.suspend]`: the `suspend` action's own knobs.
    pub suspend: super::SuspendConfig,
}

impl Default for ReclaimConfig {
    fn default() -> Self {
        ReclaimConfig {
            enabled: false,
            dry_run: true,
            grace: Duration::from_secs(30),
            allow_users: Vec::new(),
            allow_all_users: false,
            deny_users: vec!["root".into()],
            trust_group_names: false,
            deny_commands: Vec::new(),
            suspend: super::SuspendConfig::default(),
        }
    }
}

impl ReclaimConfig {
    /// Refuses rules that would act on a whole group unless
    /// `trust_group_names` says the group names can be trusted; the error
    /// names the rule.
    ///
    /// # Errors
    /// The first such rule, with the way out.
    pub fn check_rules(&self, rules: &[crate::judge::rules::RuleConfig]) -> Result<(), InvalidSetting> {
        if self.trust_group_names {
            return Ok(());
        }
        match rules
            .iter()
            .find(|r| r.kind == crate::judge::rules::RuleKind::GroupUsedBytes && r.action.is_some())
        {
            Some(r) => Err(InvalidSetting {
                key: "trust_group_names",
                message: format!(
                    "rule `{}` acts on every process of a group, and group names come from cgroup paths that \
                     processes can often choose; set [reclaim] trust_group_names = true only if no untrusted user \
                     can name a container, pod, unit or job on this host",
                    r.name
                ),
            }),
            None => Ok(()),
        }
    }

    /// Rejects values that are malformed, contradictory, or (when enabled)
    /// can never allow anything. The error names the key (for the config
    /// loader to locate in the file) and what is valid; it prints as one line.
    ///
    /// # Errors
    /// The first invalid setting.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let bad = |key: &'static str, message: String| Err(InvalidSetting { key, message });
        if self.grace.is_zero() || self.grace > MAX_GRACE {
            return bad(
                "grace",
                format!(
                    "\"{}\" is out of range; use a duration above 0 and at most 1h, e.g. \"30s\"",
                    humantime::format_duration(self.grace)
                ),
            );
        }
        self.suspend.check()?;
        check_names("allow_users", &self.allow_users)?;
        check_names("deny_users", &self.deny_users)?;
        check_names("deny_commands", &self.deny_commands)?;
        if let Some(cmd) = self.deny_commands.iter().find(|c| c.contains('/')) {
            return bad(
                "deny_commands",
                format!("`{cmd}` contains '/'; list command names (comm or the basename of argv[0])"),
            );
        }
        if self.allow_all_users && !self.allow_users.is_empty() {
            return bad(
                "allow_all_users",
                "set either allow_users or allow_all_users = true, not both".into(),
            );
        }
        if let Some(both) = self.allow_users.iter().find(|u| self.deny_users.contains(u)) {
            return bad(
                "deny_users",
                format!("user `{both}` is in both allow_users and deny_users; remove it from one"),
            );
        }
        if self.enabled && !self.allow_all_users && self.allow_users.is_empty() {
            return bad(
                "enabled",
                "true but allow_users is empty, so nothing could ever be reclaimed; list the users (names or \
                 uids) whose processes may be terminated, or set allow_all_users = true"
                    .into(),
            );
        }
        Ok(())
    }

    /// Whether `command` is refused: the built-in floor plus `deny_commands`.
    pub fn denies_command(&self, command: &str) -> bool {
        PROTECTED_COMMANDS
            .iter()
            .copied()
            .chain(self.deny_commands.iter().map(String::as_str))
            .any(|entry| command_matches(entry, command))
    }
}

/// TASK_COMM_LEN is 16 with the NUL, so the kernel cuts comm to 15 bytes:
/// "nvidia-persistenced" shows as "nvidia-persiste". A 15-byte name matches
/// an entry that starts with it, so long names in a deny list still work.
const COMM_MAX: usize = 15;

fn command_matches(entry: &str, command: &str) -> bool {
    entry == command
        || (command.len() == COMM_MAX && entry.len() > COMM_MAX && entry.as_bytes().starts_with(command.as_bytes()))
}

/// One invalid `[reclaim]` setting: its key inside the section and what is
/// wrong with it, each printed once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reclaim.{key}: {message}")]
pub struct InvalidSetting {
    pub key: &'static str,
    pub message: String,
}

fn check_names(key: &'static str, names: &[String]) -> Result<(), InvalidSetting> {
    match names
        .iter()
        .find(|n| n.is_empty() || n.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        Some(bad) => Err(InvalidSetting {
            key,
            message: format!("{bad:?} is not a valid name; use a non-empty name without spaces"),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled() -> ReclaimConfig {
        ReclaimConfig {
            enabled: true,
            allow_users: vec!["alice".into()],
            ..ReclaimConfig::default()
        }
    }

    #[test]
    fn defaults_are_off_and_dry() {
        let c = ReclaimConfig::default();
        assert!(!c.enabled && c.dry_run && !c.allow_all_users);
        assert_eq!(c.grace, Duration::from_secs(30));
        assert_eq!(c.deny_users, ["root"]);
        assert!(c.allow_users.is_empty());
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn parses_toml_with_durations() {
        let c: ReclaimConfig =
            toml::from_str("enabled = true\ndry_run = false\ngrace = \"1m30s\"\nallow_users = [\"alice\", \"1001\"]")
                .expect("valid section");
        assert_eq!(c.grace, Duration::from_secs(90));
        assert_eq!(c.deny_users, ["root"], "unset keys keep defaults");
        assert_eq!(c.validate(), Ok(()));
        let back: ReclaimConfig = toml::from_str(&toml::to_string(&c).expect("serializes")).expect("round trip");
        assert_eq!(back, c);
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_rejected() {
        assert!(toml::from_str::<ReclaimConfig>("enable = true").is_err());
        let err = toml::from_str::<ReclaimConfig>("grace = \"soon\"").expect_err("not a duration");
        assert!(err.to_string().contains("\"soon\", expected a duration"), "{err}");
    }

    #[test]
    fn grace_must_be_positive_and_bounded() {
        for grace in [Duration::ZERO, Duration::from_secs(3601)] {
            let err = ReclaimConfig { grace, ..enabled() }
                .validate()
                .expect_err("out of range");
            assert!(err.to_string().contains("reclaim.grace"), "{err}");
        }
        assert_eq!(
            ReclaimConfig {
                grace: Duration::from_millis(1),
                ..enabled()
            }
            .validate(),
            Ok(())
        );
    }

    #[test]
    fn enabled_with_nobody_allowed_is_an_error() {
        let c = ReclaimConfig {
            allow_users: vec![],
            ..enabled()
        };
        assert!(
            c.validate()
                .expect_err("useless")
                .to_string()
                .contains("allow_users is empty")
        );
        let dry = ReclaimConfig {
            enabled: false,
            ..c.clone()
        };
        assert_eq!(dry.validate(), Ok(()), "disabled: nothing to check");
        assert_eq!(
            ReclaimConfig {
                allow_all_users: true,
                ..c
            }
            .validate(),
            Ok(())
        );
    }

    #[test]
    fn contradictions_and_bad_names_are_errors() {
        let both = ReclaimConfig {
            allow_all_users: true,
            ..enabled()
        };
        assert!(both.validate().is_err());
        let overlap = ReclaimConfig {
            deny_users: vec!["alice".into()],
            ..enabled()
        };
        assert!(overlap.validate().expect_err("overlap").to_string().contains("alice"));
        for bad in ["", "two words", "tab\t"] {
            let c = ReclaimConfig {
                deny_users: vec![bad.into()],
                ..enabled()
            };
            assert!(c.validate().expect_err(bad).to_string().contains("reclaim.deny_users"));
        }
        let path = ReclaimConfig {
            deny_commands: vec!["/usr/bin/python3".into()],
            ..enabled()
        };
        assert!(path.validate().expect_err("path").to_string().contains("'/'"));
    }

    #[test]
    fn command_floor_cannot_be_removed_and_matches_truncated_comm() {
        let c = ReclaimConfig {
            deny_commands: vec!["my-server".into()],
            ..enabled()
        };
        for name in [
            "sshd",
            "systemd",
            "my-server",
            "nvidia-persiste",
            "nvidia-cuda-mps",
            "containerd-shim",
        ] {
            assert!(c.denies_command(name), "{name}");
        }
        for name in ["python3", "sshd2", "ssh", "my-serve", "nvidia-smi", ""] {
            assert!(!c.denies_command(name), "{name}");
        }
    }

    #[test]
    fn group_rules_with_an_action_need_trusted_group_names() {
        let rule = |group: bool| {
            let kind = if group {
                "group_used_bytes\"\ngroup_by = \"container"
            } else {
                "process_used_bytes"
            };
            format!("[[rule]]\nname = \"R\"\nkind = \"{kind}\"\nabove = \"1GiB\"\naction = \"terminate\"\n")
        };
        let err = crate::app::config::Config::from_toml(&rule(true), "t.toml", false)
            .expect_err("a group rule with an action is refused");
        let text = err.to_string();
        assert!(text.contains("trust_group_names") && text.contains("`R`"), "{text}");
        let trusted = format!("{}[reclaim]\ntrust_group_names = true\n", rule(true));
        crate::app::config::Config::from_toml(&trusted, "t.toml", false).expect("explicit opt-in");
        crate::app::config::Config::from_toml(&rule(false), "t.toml", false).expect("process rules are not affected");
    }
}
