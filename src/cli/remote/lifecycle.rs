//! `gpumemd suspend PID` / `gpumemd resume PID`: one POST to the daemon's
//! lifecycle API, and its answer as one line a person can act on (what
//! happened, what to do), the way `check-config` speaks. The process's
//! name and size come from the daemon's snapshot, read just before.
//!
//! Owns: the request and the wording of every answer. Must not: decide
//! anything the daemon decides, or act on processes itself.

use super::{ClientError, Daemon, SNAPSHOT_PATH};
use crate::data::snapshot::Snapshot;
use crate::data::units::{human, printable};

/// What the daemon answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// True when the request was carried out (or dry-run): exit 0.
    pub ok: bool,
    /// The line for a person.
    pub message: String,
    /// The daemon's body as it came (for `--json`).
    pub body: String,
}

/// The process as the daemon's latest snapshot shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct About {
    pub comm: String,
    pub bytes: u64,
}

/// Asks the daemon to `action` ("suspend" or "resume") `pid`.
///
/// # Errors
/// No answer came (unreachable, timed out).
pub async fn request(d: &Daemon, pid: u32, action: &str) -> Result<Answer, ClientError> {
    // Best effort: without it the message names only the PID.
    let about = match d.get(SNAPSHOT_PATH, &[]).await {
        Ok(body) => serde_json::from_str::<Snapshot>(&body)
            .ok()
            .and_then(|s| about(&s, pid, action)),
        Err(_) => None,
    };
    let (status, body, _) = d.post(&format!("/api/v1/processes/{pid}/{action}"), &[]).await?;
    Ok(answer(action, pid, status, body, about.as_ref(), d.has_credentials()))
}

/// The process's name and the bytes at stake: for a suspend, what it holds
/// on the GPU; for a resume, what is parked in host memory.
pub fn about(s: &Snapshot, pid: u32, action: &str) -> Option<About> {
    let (comm, bytes) = s.devices.iter().find_map(|d| {
        if action == "resume" {
            let p = d.suspended.iter().find(|p| p.pid == pid)?;
            Some((p.comm.to_string(), p.suspended_bytes))
        } else {
            let p = d.processes.iter().find(|p| p.pid == pid)?;
            Some((p.comm.to_string(), p.used_bytes.unwrap_or(0)))
        }
    })?;
    Some(About { comm, bytes })
}

#[derive(serde::Deserialize)]
struct Body {
    result: String,
    reason: Option<String>,
}

/// The answer to `status` and `body`, worded.
pub fn answer(action: &str, pid: u32, status: u16, body: String, about: Option<&About>, creds: bool) -> Answer {
    let what = |detail: &str| match about {
        Some(a) => format!(" ({}, {}{detail})", printable(&a.comm), human(a.bytes)),
        None => String::new(),
    };
    let parsed = serde_json::from_str::<Body>(&body).ok();
    let cannot = |why: &str| (false, format!("cannot {action} PID {pid}: {why}"));
    let (ok, message) = match (status, parsed) {
        (200..=299, Some(b)) if b.result == "dry_run" => (
            true,
            format!(
                "dry run: would {action} PID {pid}{}; nothing was done: the daemon's [reclaim] dry_run is on \
                 (set dry_run = false to act)",
                what("")
            ),
        ),
        (200..=299, _) if action == "resume" => (true, format!("resumed PID {pid}{}", what(" back on the GPU"))),
        (200..=299, _) => (true, format!("suspended PID {pid}{}", what(" to host memory"))),
        (_, Some(b)) => cannot(&refused(&b)),
        (401, None) if creds => cannot("the daemon refused the credentials; check --auth-user and --password-file"),
        (401, None) => cannot(
            "the daemon asks for credentials; give --auth-user NAME with --password-file FILE (or GPUMEMD_PASSWORD)",
        ),
        (403, None) => cannot(
            "the daemon's lifecycle API is off; set `[server] enable_lifecycle = true` in its config and reload it \
             (systemctl reload gpumemd)",
        ),
        (503, None) => {
            cannot("reclaim is not running in the daemon; set `[reclaim] enabled = true` in its config and reload it")
        }
        (_, None) => {
            let first = body.lines().next().unwrap_or("").trim();
            let said = if first.is_empty() { "no reason given" } else { first };
            cannot(&format!("{} (HTTP {status})", printable(said)))
        }
    };
    Answer { ok, message, body }
}

/// Why a refusal or failure the daemon explained in JSON, and what to do.
fn refused(b: &Body) -> String {
    let reason = b.reason.as_deref().unwrap_or("");
    let (why, todo) = match (b.result.as_str(), reason) {
        ("disabled", _) => (
            "reclaim is disabled in the daemon's config",
            "set `[reclaim] enabled = true` and reload it",
        ),
        ("in_progress", _) | (_, "already_resuming") | (_, "in_flight_limit") => (
            "another suspend or resume is in progress",
            "try again when it has finished",
        ),
        (_, "not_listed") => (
            "NVML lists it on no GPU",
            "check the PID with `gpumemd snapshot --url URL`",
        ),
        (_, "not_suspended") => (
            "gpumemd has not suspended it",
            "`gpumemd snapshot --url URL` shows what is suspended",
        ),
        (_, "already_suspended") => ("it is suspended already", "resume it with `gpumemd resume PID`"),
        (_, "not_allowed") => (
            "its user is not in the daemon's [reclaim] allow_users",
            "add the user there (or set allow_all_users = true) and reload",
        ),
        (_, "host_memory") => (
            "host memory cannot hold its GPU memory (MemAvailable below its size plus host_memory_margin)",
            "free host memory and try again",
        ),
        (_, "size_unknown") => ("NVML gave no size for it", "try again after the next poll"),
        (_, "identity_changed") => (
            "the PID now belongs to another process",
            "check the PID with `gpumemd snapshot --url URL`",
        ),
        (_, "cuda_unavailable") => (
            "the daemon has no usable CUDA driver with checkpoint support",
            "see docs/reclaim.md on the CUDA driver (--cuda-lib)",
        ),
        (_, "cuda_not_running") => (
            "its CUDA state cannot be checkpointed now (locked or not running)",
            "try again later",
        ),
        (_, "recently_resumed") => ("it was resumed moments ago", "try again later"),
        (_, "gone") => ("the process has exited", "nothing to do"),
        _ => ("", ""),
    };
    if why.is_empty() {
        let detail = if reason.is_empty() {
            b.result.clone()
        } else {
            format!("{}: {}", b.result, printable(reason))
        };
        return format!("{detail}; see the daemon's log and its reclaim audit");
    }
    // The daemon's own words in brackets: what the audit log and metrics say.
    let said = [b.result.as_str(), reason].join(" ");
    format!("{why} ({}); {todo}", said.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(status: u16, body: &str, about: Option<&About>) -> (bool, String) {
        let r = answer("suspend", 1234, status, body.into(), about, false);
        (r.ok, r.message)
    }

    #[test]
    fn success_names_the_process_and_its_memory() {
        let python = About {
            comm: "python".into(),
            bytes: 14_600 << 20,
        };
        let done = r#"{"pid":1234,"action":"suspend","result":"done","reason":null}"#;
        assert_eq!(
            a(200, done, Some(&python)),
            (true, "suspended PID 1234 (python, 14.3 GiB to host memory)".into())
        );
        assert_eq!(a(200, done, None), (true, "suspended PID 1234".into()));
        let r = answer("resume", 7, 200, done.into(), Some(&python), false);
        assert_eq!(r.message, "resumed PID 7 (python, 14.3 GiB back on the GPU)");
        let dry = r#"{"pid":1234,"action":"suspend","result":"dry_run","reason":null}"#;
        assert!(
            a(200, dry, None)
                .1
                .starts_with("dry run: would suspend PID 1234; nothing was done")
        );
    }

    #[test]
    fn refusals_say_why_and_what_to_do() {
        let body = r#"{"pid":1234,"action":"suspend","result":"refused","reason":"not_allowed"}"#;
        assert_eq!(
            a(409, body, None),
            (
                false,
                "cannot suspend PID 1234: its user is not in the daemon's [reclaim] allow_users (refused \
                 not_allowed); add the user there (or set allow_all_users = true) and reload"
                    .into()
            )
        );
        let (_, m) = a(403, "Lifecycle API is not enabled.\n", None);
        assert!(m.contains("set `[server] enable_lifecycle = true`"), "{m}");
        let (_, m) = a(
            404,
            "pid 1234 is not listed by NVML on any GPU in the latest poll\n",
            None,
        );
        assert_eq!(
            m,
            "cannot suspend PID 1234: pid 1234 is not listed by NVML on any GPU in the latest poll (HTTP 404)"
        );
        let (_, m) = a(
            500,
            r#"{"result":"failed","reason":"cuCheckpointProcessLock: \u001b[2J"}"#,
            None,
        );
        assert!(m.contains("failed: cuCheckpointProcessLock: \\u{1b}[2J"), "{m}");
        assert!(
            a(401, "", None)
                .1
                .contains("give --auth-user NAME with --password-file FILE")
        );
    }
}
