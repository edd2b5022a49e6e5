//! Request handlers: each borrows the latest snapshot and answers from it.
//! Errors are short texts for the client; internals stay in the logs.

use std::sync::Arc;

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

use super::AppState;
use super::bodies::{self, Budget};
use crate::serve::statuspage;

pub async fn index() -> Html<&'static str> {
    Html(include_str!("status_page.html"))
}

/// The server's response budget (`bodies.rs`), put on the router by `serve`.
pub(super) type ServerBudget = Option<Extension<Arc<Budget>>>;

pub(super) fn budget(b: &ServerBudget) -> Option<&Arc<Budget>> {
    b.as_ref().map(|Extension(b)| b)
}

pub async fn healthy() -> &'static str {
    "Healthy\n"
}

pub async fn ready(State(st): State<AppState>) -> (StatusCode, &'static str) {
    let snap = st.snapshots.borrow().clone();
    if !snap.has_polled() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "Not ready: the first poll has not finished\n",
        )
    } else if !snap.nvml_up {
        (StatusCode::SERVICE_UNAVAILABLE, "Not ready: NVML is not available\n")
    } else {
        (StatusCode::OK, "Ready\n")
    }
}

pub async fn snapshot(State(st): State<AppState>, b: ServerBudget) -> Response {
    if budget(&b).is_some_and(|b| b.full()) {
        return bodies::busy();
    }
    let snap = st.snapshots.borrow().clone();
    with_suspended(&st, &b, &*snap)
}

/// `?gpu=UUID` (one device and its processes), `?since=UNIX_SECONDS`,
/// `?points=N` (at most N evenly spaced points) and `?processes=false`
/// (device series only: what the status page's sparklines need).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    gpu: Option<String>,
    since: Option<f64>,
    points: Option<usize>,
    processes: Option<bool>,
}

pub async fn history(
    State(st): State<AppState>,
    b: ServerBudget,
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Response, BadQuery> {
    let q = query(q, "?gpu=UUID&since=UNIX_SECONDS&points=N&processes=false")?;
    if budget(&b).is_some_and(|b| b.full()) {
        return Ok(bodies::busy());
    }
    let opts = crate::collect::history::ViewOptions {
        gpu: q.gpu.as_deref(),
        since: q.since,
        points: q.points,
        processes: q.processes.unwrap_or(true),
    };
    let view = st
        .history
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .view_with(&opts);
    Ok(json(&b, &view))
}

/// `?top=N` processes per GPU (at most 200; by default 10, or 3 from 9
/// devices on, when the page shows a grid) and `?gpu=UUID`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryQuery {
    top: Option<usize>,
    gpu: Option<String>,
}

/// `GET /api/v1/summary`: what the status page draws, sized for a screen.
pub async fn summary(
    State(st): State<AppState>,
    b: ServerBudget,
    q: Result<Query<SummaryQuery>, QueryRejection>,
) -> Result<Response, BadQuery> {
    let q = query(q, "?top=N&gpu=UUID")?;
    if budget(&b).is_some_and(|b| b.full()) {
        return Ok(bodies::busy());
    }
    let snap = st.snapshots.borrow().clone();
    let alerts = st.alerts.borrow().clone();
    let cfg = st.config.borrow().clone();
    let top = q
        .top
        .unwrap_or_else(|| statuspage::default_top(snap.devices.len()))
        .min(statuspage::MAX_TOP);
    let links = crate::app::config::status_page::PageLinks::new(&cfg.status_page, &cfg.links, &st.telemetry_path);
    let summary = statuspage::summarize(&snap, &alerts, &links, top, q.gpu.as_deref());
    Ok(with_suspended(&st, &b, &summary))
}

/// A 400 that says what was wrong with a query and shows the accepted form.
type BadQuery = (StatusCode, String);

/// The parsed query, or a 400 that shows the accepted `form`.
fn query<T>(q: Result<Query<T>, QueryRejection>, form: &str) -> Result<T, BadQuery> {
    q.map(|Query(q)| q).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("bad query: {}; use {form}\n", e.body_text()),
        )
    })
}

/// `body` as JSON, with the processes gpumemd suspended listed under their
/// devices (`lifecycle::add_suspended`); `body` as it is when none are.
fn with_suspended<T: serde::Serialize>(st: &AppState, b: &ServerBudget, body: &T) -> Response {
    let suspended = st.reclaimer.as_ref().map(|r| r.suspended()).unwrap_or_default();
    if suspended.is_empty() {
        return json(b, body);
    }
    match serde_json::to_value(body) {
        Ok(mut v) => {
            super::lifecycle::add_suspended(&mut v, &suspended);
            json(b, &v)
        }
        Err(_) => json(b, body),
    }
}

/// `GET /runbook`: docs/runbook.md, one anchor per alert rule.
pub async fn runbook() -> Html<String> {
    Html(statuspage::runbook::html())
}

pub async fn alerts(State(st): State<AppState>, b: ServerBudget) -> Response {
    let view = st.alerts.borrow().clone();
    json(&b, &*view)
}

/// `POST /-/reload`, Prometheus style: 403 unless `enable_lifecycle`.
pub async fn reload(State(st): State<AppState>) -> Response {
    if !st.config.borrow().server.enable_lifecycle {
        return (StatusCode::FORBIDDEN, "Lifecycle API is not enabled.\n").into_response();
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    if st.reload.send(tx).await.is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match rx.await {
        Ok(Ok(())) => (StatusCode::OK, "config reloaded\n").into_response(),
        // The config error names a file and line the operator owns; it
        // reveals nothing they do not already have.
        Ok(Err(e)) => (StatusCode::BAD_REQUEST, format!("failed to reload config: {e}\n")).into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response(),
    }
}

/// `GET /api/v1/events`: the shared event list (Xid, ...) and the
/// allocator view's out-of-memory events (when it is on), as one list by
/// time, oldest first; each event has a `kind`.
pub async fn events(State(st): State<AppState>, b: ServerBudget) -> Response {
    let ooms = st.allocator.as_ref().map(|a| a.events()).unwrap_or_default();
    let events = crate::data::events::merge(st.events.list(), &ooms);
    json(&b, &serde_json::json!({ "events": events }))
}

/// `GET /api/v1/reports`: job-end memory reports, newest first, subjects
/// still open first (`state` "running" or "ending"); `?job=ID`, `?pod=UID`,
/// `?pid=PID`, `?user=NAME`, `?limit=N` narrow them.
pub async fn reports(
    State(st): State<AppState>,
    b: ServerBudget,
    q: Result<Query<crate::judge::report::Query>, QueryRejection>,
) -> Result<Response, BadQuery> {
    let q = query(q, "?job=ID&pod=UID&pid=PID&user=NAME&limit=N")?;
    let list = st.reports.as_ref().map(|r| r.query(&q)).unwrap_or_default();
    Ok(json(&b, &serde_json::json!({ "reports": list })))
}

fn json<T: serde::Serialize>(b: &ServerBudget, v: &T) -> Response {
    match serde_json::to_vec(v) {
        // Whole snapshots run to tens of MB, summaries to hundreds of KB:
        // counted, so stuck readers cannot pin one copy each.
        Ok(body) => bodies::bounded(budget(b), None, body, "application/json"),
        Err(e) => {
            tracing::error!(error = %e, "cannot serialise snapshot");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response()
        }
    }
}
