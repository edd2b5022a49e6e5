//! The vocabulary of reclaim: a [`Target`] (the rules' type), the [`Action`] taken on it and
//! the [`Outcome`] recorded (metric labels, audit fields).
//!
//! Owns: the names. Must not: decide or act.

/// A process as a rule's alert (or the API) names it; defined beside the
/// rules that produce it.
pub use crate::judge::rules::Target;

/// The two signals, by their metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Term,
    Kill,
    Suspend,
    Resume,
}

impl Action {
    /// The `action` label: "terminate" or "kill".
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Term => "terminate",
            Action::Kill => "kill",
            Action::Suspend => "suspend",
            Action::Resume => "resume",
        }
    }

    /// The signal sent, for the audit log; suspend and resume send none.
    pub fn signal_name(self) -> &'static str {
        match self {
            Action::Term => "SIGTERM",
            Action::Kill => "SIGKILL",
            Action::Suspend | Action::Resume => "",
        }
    }
}

/// What became of one target (or of its SIGKILL step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed every check; not signalled because `dry_run = true`.
    DryRun,
    Signalled,
    /// A safety rule said no: "invalid_pid", "pid1", "self", "identity_unknown",
    /// "kernel_thread", "denied_user", "denied_command", "not_allowed",
    /// "identity_changed", "gone"; for suspend also "cuda_unavailable",
    /// "cuda_not_running", "not_listed", "host_memory", "size_unknown",
    /// "in_flight_limit", "already_suspended", "recently_resumed", and for
    /// resume "not_suspended", "already_resuming".
    Refused(&'static str),
    Failed(String),
    /// SIGKILL step only: the process ended within the grace period.
    Exited,
    /// SIGKILL step only: "shutdown" or "disabled" (by a reload) first.
    Cancelled(&'static str),
    /// `enabled = false`: counted and logged, not audited.
    Disabled,
    /// The same (pid, start ticks) is already being terminated: ignored.
    InProgress,
    /// Suspend or resume: the process was checkpointed (or restored) and is
    /// unlocked or parked as intended.
    Done,
}

impl Outcome {
    /// The `result` label and the audit `reason`.
    pub fn result_and_reason(&self) -> (&'static str, Option<&str>) {
        match self {
            Outcome::DryRun => ("dry_run", None),
            Outcome::Signalled => ("signalled", None),
            Outcome::Refused(r) => ("refused", Some(r)),
            Outcome::Failed(e) => ("failed", Some(e.as_str())),
            Outcome::Exited => ("exited", None),
            Outcome::Cancelled(r) => ("cancelled", Some(r)),
            Outcome::Disabled => ("disabled", None),
            Outcome::InProgress => ("in_progress", None),
            Outcome::Done => ("done", None),
        }
    }
}
