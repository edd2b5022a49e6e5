//! `POST /api/v1/processes/{pid}/suspend` and `.../resume`: the operator's
//! hand on the suspend action. Both are lifecycle endpoints: 403
//! unless `[server] enable_lifecycle`, behind the web config's auth like
//! every route.
//!
//! Owns: PID parsing, the target taken from the latest snapshot, and the
//! mapping of outcomes to status codes. Must not: call the driver on an
//! async worker (the reclaimer runs on the blocking pool) or decide
//! anything the reclaimer decides.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::AppState;
use crate::act::reclaim::{Outcome, Suspended, Target};

#[derive(Serialize)]
struct Answer<'a> {
    pid: u32,
    action: &'a str,
    result: &'a str,
    reason: Option<&'a str>,
}

/// A refusal: its status and a short text for the client.
type Refused = (StatusCode, String);

/// The checks both endpoints share: lifecycle on, reclaim present, a PID.
fn admit(st: &AppState, raw: &str) -> Result<(std::sync::Arc<crate::act::reclaim::Reclaimer>, u32), Refused> {
    if !st.config.borrow().server.enable_lifecycle {
        return Err((StatusCode::FORBIDDEN, "Lifecycle API is not enabled.\n".into()));
    }
    let pid = match raw.parse::<u32>() {
        Ok(p) if p > 0 => p,
        _ => {
            return Err((
                StatusCode::BAD_REQUEST,
                format!("`{raw}` is not a process id; use a positive number, e.g. /api/v1/processes/4242/resume\n"),
            ));
        }
    };
    let r = st
        .reclaimer
        .clone()
        .ok_or_else(|| (StatusCode::SERVICE_UNAVAILABLE, "reclaim is not running\n".to_string()))?;
    Ok((r, pid))
}

fn answer(pid: u32, action: &str, outcome: &Outcome) -> Response {
    let (result, reason) = outcome.result_and_reason();
    let status = match outcome {
        Outcome::Done | Outcome::DryRun => StatusCode::OK,
        Outcome::Refused("not_suspended") => StatusCode::NOT_FOUND,
        Outcome::Refused(_) | Outcome::Disabled | Outcome::InProgress => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let body = Answer {
        pid,
        action,
        result,
        reason,
    };
    match serde_json::to_string(&body) {
        Ok(json) => (status, [("content-type", "application/json")], json + "\n").into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response(),
    }
}

pub async fn resume(State(st): State<AppState>, Path(raw): Path<String>) -> Result<Response, Refused> {
    let (r, pid) = admit(&st, &raw)?;
    match tokio::task::spawn_blocking(move || r.resume(pid, "api")).await {
        Ok(o) => Ok(answer(pid, "resume", &o)),
        Err(_) => Err((StatusCode::INTERNAL_SERVER_ERROR, "resume task failed\n".into())),
    }
}

pub async fn suspend(State(st): State<AppState>, Path(raw): Path<String>) -> Result<Response, Refused> {
    let (r, pid) = admit(&st, &raw)?;
    let Some(target) = listed_target(&st, pid) else {
        // Audited and counted (it writes a line: off the async workers).
        let _ = tokio::task::spawn_blocking(move || r.refuse_unlisted(pid, "api")).await;
        return Err((
            StatusCode::NOT_FOUND,
            format!("pid {pid} is not listed by NVML on any GPU in the latest poll\n"),
        ));
    };
    match tokio::task::spawn_blocking(move || r.suspend(vec![target])).await {
        Ok(mut v) if !v.is_empty() => Ok(answer(pid, "suspend", &v.remove(0).1)),
        _ => Err((StatusCode::INTERNAL_SERVER_ERROR, "suspend task failed\n".into())),
    }
}

/// The process as the latest poll saw it, as a reclaim target.
fn listed_target(st: &AppState, pid: u32) -> Option<Target> {
    let snap = st.snapshots.borrow().clone();
    snap.devices.iter().find_map(|d| {
        let p = d.processes.iter().find(|p| p.pid == pid)?;
        Some(Target {
            pid,
            start_time: p.start_time,
            start_ticks: p.start_ticks,
            uid: p.uid,
            user: p.user.to_string(),
            comm: p.comm.to_string(),
            rule: "api".into(),
            gpu_uuid: d.uuid.clone(),
            used_bytes: p.used_bytes,
        })
    })
}

/// Lists each suspended process under its device as `"suspended"` entries
/// ([`crate::data::snapshot::SuspendedProcess`]: state `suspended`, the bytes
/// parked in host memory): NVML no longer
/// lists them, so they are not in `processes` and are neither exited nor
/// late releases. Devices without any get no key (the snapshot's shape is
/// unchanged until something is suspended).
pub fn add_suspended(snap: &mut serde_json::Value, suspended: &[Suspended]) {
    let Some(devices) = snap.get_mut("devices").and_then(|d| d.as_array_mut()) else {
        return;
    };
    for d in devices {
        let uuid = d.get("uuid").and_then(|u| u.as_str()).unwrap_or("").to_string();
        let here: Vec<serde_json::Value> = suspended
            .iter()
            .filter(|s| s.gpu_uuid == uuid)
            .filter_map(|s| serde_json::to_value(s.view()).ok())
            .collect();
        if let (false, Some(obj)) = (here.is_empty(), d.as_object_mut()) {
            obj.insert("suspended".into(), serde_json::Value::Array(here));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::snapshot::{Device, Snapshot};

    /// What the API adds is what `snapshot --url` reads back and prints.
    #[test]
    fn suspended_entries_survive_the_trip_to_the_cli_table() {
        let snap = Snapshot {
            devices: vec![
                Device {
                    uuid: "GPU-a".into(),
                    index: Some(0),
                    up: true,
                    ..Device::default()
                },
                Device {
                    uuid: "GPU-b".into(),
                    index: Some(1),
                    up: true,
                    ..Device::default()
                },
            ],
            ..Snapshot::default()
        };
        let parked = Suspended {
            pid: 4303,
            gpu_uuid: "GPU-b".into(),
            bytes: 9 << 30,
            since: 1.0,
            comm: "jupyter".into(),
            user: "alice".into(),
            rule: "IdleSuspend".into(),
            checkpoint_seconds: 2.5,
            target: Target::default(),
        };
        let mut v = serde_json::to_value(&snap).expect("to JSON");
        add_suspended(&mut v, &[parked]);
        assert!(v["devices"][0].get("suspended").is_none(), "no key without any: {v}");
        let back: Snapshot = serde_json::from_value(v).expect("a snapshot again");
        let s = &back.devices[1].suspended;
        assert_eq!(s.len(), 1, "{back:?}");
        assert_eq!(
            (s[0].pid, s[0].state.as_str(), s[0].suspended_bytes),
            (4303, "suspended", 9 << 30)
        );
        let table = crate::cli::table::render(&back);
        assert!(
            table.contains("SUSPENDED: 9.0 GiB parked in host memory by pid 4303 (jupyter, alice), rule IdleSuspend"),
            "{table}"
        );
    }
}
