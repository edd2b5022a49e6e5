//! The accept loop: the web config in force, one task per accepted
//! connection with its place (`places.rs`), taken to its first request by
//! `arrive.rs` and served by `conn.rs`, the server's response budget on the
//! router, and a graceful stop that waits for every connection. It must not
//! know the routes: it serves whatever `Router` it is given.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::{Extension, Router};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::arrive;
use super::bodies::Budget;
use super::conn::{App, stopped};
use super::places::{Places, Throttle};
use super::webwatch::WebConfigWatch;

/// Serves `router` on `listener` until `shutdown` turns true, then stops
/// accepting and lets in-flight requests finish (the caller bounds that).
/// `web_config` is the `--web.config.file`; without one: plain HTTP, no auth,
/// the default limits.
///
/// # Errors
/// An unusable web config (`InvalidInput`, one line). Accept errors are
/// logged and survived, never returned.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    web_config: Option<PathBuf>,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let web = WebConfigWatch::new(web_config.as_deref()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let first = web.current();
    let limits = first.limits;
    tracing::info!(
        tls = first.tls.is_some(),
        basic_auth = first.auth.is_some(),
        max_connections = limits.max_connections,
        max_connections_per_source = limits.max_connections_per_source,
        "HTTP server started"
    );
    let web = Arc::new(web);
    tokio::spawn(web.clone().follow(shutdown.clone()));
    // This server's own: another server in the process has its own budget.
    let router = router.layer(Extension(Budget::new(limits.max_held_response_bytes)));
    let app = Arc::new(App { router, web });
    let places = Places::new(limits.max_connections, limits.max_connections_per_source);
    let mut accept_log = Throttle::default();
    loop {
        let (stream, peer) = tokio::select! {
            _ = stopped(&mut shutdown) => break,
            r = listener.accept() => match r {
                Ok(v) => v,
                Err(e) => {
                    accept_failed(&e, &mut accept_log).await;
                    continue;
                }
            },
        };
        // Refused (and logged, rate-limited) by `places`: closed at once.
        let Ok(place) = places.enter(peer.ip()) else { continue };
        let (app, stop) = (app.clone(), shutdown.clone());
        tokio::spawn(arrive::accepted(app, stream, peer, place, stop));
    }
    drop(listener);
    places.all_gone().await;
    Ok(())
}

/// Accept fails for one client (reset before accept) or for all (out of
/// file descriptors); neither should end the server. The pause stops a
/// busy loop while descriptors are short.
async fn accept_failed(e: &io::Error, log: &mut Throttle) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(e.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        return;
    }
    if log.ready() {
        tracing::error!(error = %e, "cannot accept connections");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
}
