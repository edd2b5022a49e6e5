//! `POST /api/v1/processes/{pid}/record[?dump=true|stop=true]`: asks a
//! reporting PyTorch process to start its memory history (a bounded ring,
//! dumped on its next out-of-memory error), to dump it now, or to stop. A
//! lifecycle endpoint: 403 unless `[server] enable_lifecycle`, behind the
//! web config's auth like every route.
//!
//! Owns: the PID and its user from the latest snapshot, and the mapping of
//! outcomes to status codes. Must not: talk to the process itself (the
//! allocator view's recorder does) or pick the spool's place (`[state] dir`).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::collect::allocator::recorder::{Ask, RecordError};

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordQuery {
    dump: Option<bool>,
    stop: Option<bool>,
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, body.into()).into_response()
}

pub async fn record(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    q: Result<Query<RecordQuery>, QueryRejection>,
) -> Response {
    let cfg = st.config.borrow().clone();
    if !cfg.server.enable_lifecycle {
        return text(StatusCode::FORBIDDEN, "Lifecycle API is not enabled.\n");
    }
    let Ok(Query(q)) = q else {
        return text(StatusCode::BAD_REQUEST, "bad query; use ?dump=true or ?stop=true\n");
    };
    let pid = match raw.parse::<u32>() {
        Ok(p) if p > 0 => p,
        _ => return text(StatusCode::BAD_REQUEST, format!("`{raw}` is not a process id\n")),
    };
    let Some(alloc) = st.allocator.clone() else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the allocator view is off ([allocator] enabled)\n",
        );
    };
    let snap = st.snapshots.borrow().clone();
    let uid = snap
        .devices
        .iter()
        .flat_map(|d| &d.processes)
        .find(|p| p.pid == pid)
        .and_then(|p| p.who.uid);
    let Some(uid) = uid else {
        return text(
            StatusCode::NOT_FOUND,
            format!("PID {pid} holds no GPU memory (or its user is unknown)\n"),
        );
    };
    let ask = match (q.dump.unwrap_or(false), q.stop.unwrap_or(false)) {
        (true, _) => Ask::Dump,
        (_, true) => Ask::Stop,
        _ => Ask::Record,
    };
    let spool = cfg.state.dir.join("spool");
    match alloc.recorder.ask(pid, uid, ask, &spool) {
        Ok(dir) => {
            let body = serde_json::json!({ "pid": pid, "action": ask.as_str(), "spool": dir });
            (
                StatusCode::OK,
                [("content-type", "application/json")],
                format!("{body}\n"),
            )
                .into_response()
        }
        Err(e @ RecordError::NotReporting(_)) => text(StatusCode::NOT_FOUND, format!("{e}\n")),
        Err(e) => {
            tracing::warn!(pid, error = %e, "flight recorder request failed");
            text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"))
        }
    }
}
