//! One served connection: hyper HTTP/1.1 over it until the client leaves, a
//! limit cuts it off, it is pushed out while idle, or shutdown; the guards
//! around the router (header size, rate limit, basic auth, request timeout,
//! extra headers); and the count of requests in flight that keeps its place
//! busy. It must not accept connections or know the routes.

use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response, StatusCode};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

use super::auth;
use super::deadline::WriteDeadline;
use super::places::Place;
use super::webconfig::WebConfig;
use super::webwatch::WebConfigWatch;

/// What every connection task shares.
pub(super) struct App {
    pub(super) router: Router,
    pub(super) web: Arc<WebConfigWatch>,
}

/// Resolves once shutdown is asked for (or its sender is gone). Holds no
/// watch guard across awaits, so the futures that use it stay `Send`.
pub(super) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Serves HTTP/1.1 on one connection, `prefix` (what was read of it while
/// it waited) first, until the client leaves, a limit cuts it off, it is
/// pushed out while idle, or shutdown (after the request in flight, if any).
/// A response the client does not take within the request timeout ends the
/// connection: producing and delivering a response get the same bound.
pub(super) async fn http<I>(
    app: Arc<App>,
    io: I,
    prefix: Vec<u8>,
    peer: IpAddr,
    cfg: &WebConfig,
    place: Arc<Place>,
    mut shutdown: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let inflight = Arc::new(Inflight {
        count: AtomicUsize::new(0),
        idle: Notify::new(),
        place: place.clone(),
    });
    let counter = inflight.clone();
    let svc = hyper::service::service_fn(move |req| {
        // Counted from here (hyper calls this as soon as a header is
        // complete) until hyper drops the response body.
        let guard = InflightGuard::new(counter.clone());
        let app = app.clone();
        async move {
            Ok::<_, Infallible>(app.handle(req, peer).await.map(|b| {
                Body::new(Tracked {
                    inner: b,
                    _guard: guard,
                })
            }))
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(cfg.limits.header_read_timeout)
        // Twice the limit: hyper's own check is loose (it only looks after a
        // read), ours in `guarded` is exact and answers with the configured
        // headers; hyper's stays as the backstop for far larger headers.
        .max_buf_size(cfg.limits.max_header_bytes.saturating_mul(2))
        .max_headers(cfg.limits.max_headers)
        .serve_connection(
            TokioIo::new(WriteDeadline::new(
                io,
                prefix,
                cfg.limits.request_timeout,
                header_lines(cfg),
            )),
            svc,
        );
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            drain(conn.as_mut(), &inflight).await
        }
        // Chosen only while idle; a request that came in meanwhile is
        // answered first, as at shutdown.
        () = place.pushed_out() => {
            conn.as_mut().graceful_shutdown();
            drain(conn.as_mut(), &inflight).await
        }
    };
    if let Err(e) = result {
        // Timeouts, resets, oversize headers: the client's problem, and
        // repeatable by anyone, so not worth more than a debug line.
        tracing::debug!(error = %e, "HTTP connection ended with an error");
    }
}

/// How long a connection with no request in flight may take to close
/// after shutdown: enough to flush a response already produced, too short
/// for a half-sent header to hold the drain until its timeout.
const FLUSH_GRACE: Duration = Duration::from_secs(1);

/// Waits for the requests in flight on a connection hyper was told to
/// close, then gives it `FLUSH_GRACE` to finish.
async fn drain<F>(mut conn: Pin<&mut F>, inflight: &Inflight) -> hyper::Result<()>
where
    F: Future<Output = hyper::Result<()>>,
{
    loop {
        let idle = inflight.idle.notified();
        tokio::pin!(idle);
        // Registered before the count is read, so a drop to zero in
        // between still wakes us.
        idle.as_mut().enable();
        if inflight.count.load(Ordering::SeqCst) == 0 {
            return tokio::time::timeout(FLUSH_GRACE, conn).await.unwrap_or(Ok(()));
        }
        tokio::select! {
            r = conn.as_mut() => return r,
            _ = idle => {}
        }
    }
}

/// Requests of one connection between header and the end of the response,
/// and the connection's place, busy while there are any.
struct Inflight {
    count: AtomicUsize,
    idle: Notify,
    place: Arc<Place>,
}

struct InflightGuard(Arc<Inflight>);

impl InflightGuard {
    fn new(i: Arc<Inflight>) -> Self {
        if i.count.fetch_add(1, Ordering::SeqCst) == 0 {
            i.place.busy();
        }
        Self(i)
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.place.idle();
            self.0.idle.notify_waiters();
        }
    }
}

/// A response body that keeps its request counted until hyper is done
/// with it.
struct Tracked {
    inner: Body,
    _guard: InflightGuard,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl App {
    /// The guards in order (rate limit, auth, router), under the request
    /// timeout, then the configured extra headers on whatever came out.
    async fn handle(&self, req: Request<Incoming>, peer: IpAddr) -> Response<Body> {
        let cfg = self.web.current();
        let mut resp = match tokio::time::timeout(cfg.limits.request_timeout, self.guarded(&cfg, req, peer)).await {
            Ok(r) => r,
            Err(_) => auth::plain(StatusCode::SERVICE_UNAVAILABLE, "request timed out\n"),
        };
        for (k, v) in &cfg.headers {
            resp.headers_mut().insert(k.clone(), v.clone());
        }
        resp
    }

    async fn guarded(&self, cfg: &WebConfig, req: Request<Incoming>, peer: IpAddr) -> Response<Body> {
        // hyper's read buffer lets a header somewhat past the limit through
        // when it arrives in one read; counted here, the limit is exact (and
        // the refusal carries the configured headers).
        if header_bytes(&req) > cfg.limits.max_header_bytes {
            return auth::plain(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "Request Header Fields Too Large\n",
            );
        }
        if cfg.rate_limit.as_ref().is_some_and(|r| !r.allow()) {
            return auth::plain(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n");
        }
        if let Some(a) = &cfg.auth {
            match a.check(req.headers(), peer).await {
                auth::Verdict::Allow => {}
                auth::Verdict::Deny => return auth::unauthorized(),
                auth::Verdict::Busy => return auth::busy(),
            }
        }
        match self.router.clone().oneshot(req.map(Body::new)).await {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }
}

/// The request line and header as sent, less optional whitespace:
/// `METHOD SP target SP HTTP/1.1 CRLF`, `name: value CRLF` each, `CRLF`.
fn header_bytes<B>(req: &Request<B>) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 12;
    let fields: usize = req.headers().iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum();
    line + fields + 2
}

/// The configured extra headers as `name: value CRLF` lines, for the
/// responses hyper writes without the service.
fn header_lines(cfg: &WebConfig) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in &cfg.headers {
        out.extend_from_slice(k.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}
