//! Request handlers: each borrows the latest snapshot and answers from it.
//! Errors are short texts for the client; internals stay in the logs.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::AppState;
use crate::metrics::{self, Format};

pub async fn index() -> Html<&'static str> {
    Html(include_str!("status_page.html"))
}

pub async fn metrics(State(st): State<AppState>, headers: HeaderMap) -> Response {
    let format = Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    // Clone the Arc and release the watch lock before rendering, so a slow
    // scrape never holds up the poller's next publish.
    let snap = st.snapshots.borrow().clone();
    let body = metrics::render(&snap, &st.processes, &st.build, format);
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(format.content_type()))],
        body,
    )
        .into_response()
}

pub async fn healthy() -> &'static str {
    "Healthy\n"
}

pub async fn ready(State(st): State<AppState>) -> Response {
    let snap = st.snapshots.borrow().clone();
    if !snap.has_polled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "Not ready: the first poll has not finished\n",
        )
            .into_response();
    }
    if !snap.nvml_up {
        return (StatusCode::SERVICE_UNAVAILABLE, "Not ready: NVML is not available\n").into_response();
    }
    (StatusCode::OK, "Ready\n").into_response()
}

pub async fn snapshot(State(st): State<AppState>) -> Response {
    let snap = st.snapshots.borrow().clone();
    match serde_json::to_vec(&*snap) {
        Ok(body) => (
            [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot serialise snapshot");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response()
        }
    }
}
