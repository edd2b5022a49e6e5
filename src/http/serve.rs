//! The accept loop: plain HTTP or TLS per the web config, one hyper HTTP/1.1
//! connection task per client, bounded in number (`places.rs`: a waiting
//! pool for clients without a whole request header yet, TLS handshake
//! included, serving places for the others, idle keep-alive ones giving way
//! to newcomers, and a cap per source address) and in time (first byte,
//! handshake, header, request, and writing the response), basic auth and
//! extra headers around the router, and a graceful stop. It must not know
//! the routes: it serves whatever `Router` it is given.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response, StatusCode};
use axum::{Extension, Router};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

use super::auth;
use super::bodies::Budget;
use super::deadline::WriteDeadline;
use super::places::{Place, Places};
use super::waiting::{self, Bounds, Prefixed};
use super::webconfig::WebConfig;
use super::webwatch::WebConfigWatch;

/// What every connection task shares.
struct App {
    router: Router,
    web: Arc<WebConfigWatch>,
}

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
        tokio::spawn(accepted(app, stream, peer, place, stop));
    }
    drop(listener);
    places.all_gone().await;
    Ok(())
}

/// One connection from accept to close: in the waiting pool until its first
/// request header is whole (with TLS: first byte, handshake, then header),
/// then in a serving place. Returns early when the client sends too little
/// in time, is pushed out, shutdown comes, or every serving place is busy.
async fn accepted(
    app: Arc<App>,
    mut stream: TcpStream,
    peer: SocketAddr,
    place: Place,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let cfg = app.web.current();
    let cap = cfg.limits.max_header_bytes.saturating_mul(2);
    let timeout = cfg.limits.header_read_timeout;
    let Some(tls) = cfg.tls.clone() else {
        let bounds = Bounds {
            place: &place,
            timeout,
            shutdown: &mut stop,
        };
        let Some(prefix) = waiting::header(&mut stream, cap, bounds).await else {
            return;
        };
        return served(app, Prefixed::new(prefix, stream), peer.ip(), &cfg, place, stop).await;
    };
    let bounds = Bounds {
        place: &place,
        timeout,
        shutdown: &mut stop,
    };
    if !waiting::first_byte(&stream, bounds).await {
        return;
    }
    let handshake = tokio::time::timeout(cfg.limits.tls_handshake_timeout, tls_accept(tls, stream));
    let mut stream = tokio::select! {
        _ = stopped(&mut stop) => return,
        () = place.pushed_out() => return,
        r = handshake => match r {
            Ok(Ok(Some(s))) => s,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => return tracing::debug!(peer = %peer, error = %e, "TLS handshake failed"),
            Err(_) => return tracing::debug!(peer = %peer, "TLS handshake timed out"),
        },
    };
    let bounds = Bounds {
        place: &place,
        timeout,
        shutdown: &mut stop,
    };
    let Some(prefix) = waiting::header(&mut stream, cap, bounds).await else {
        return;
    };
    served(app, Prefixed::new(prefix, stream), peer.ip(), &cfg, place, stop).await;
}

/// Takes a serving place (refused: the connection closes) and serves.
async fn served<I>(app: Arc<App>, io: I, peer: IpAddr, cfg: &WebConfig, place: Place, stop: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if place.serve().is_err() {
        return;
    }
    http(app, io, peer, cfg, Arc::new(place), stop).await;
}

/// Resolves once shutdown is asked for (or its sender is gone). Holds no
/// watch guard across awaits, so the futures that use it stay `Send`.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Logs at most one line per interval for conditions an attacker can repeat.
#[derive(Default)]
struct Throttle(Option<Instant>);

impl Throttle {
    fn ready(&mut self) -> bool {
        let now = Instant::now();
        let due = self.0.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(10));
        if due {
            self.0 = Some(now);
        }
        due
    }
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

/// The handshake, after a look at the first byte: a plain HTTP request on
/// the TLS port gets a readable 400 instead of a failed handshake.
async fn tls_accept(
    tls: Arc<rustls::ServerConfig>,
    stream: TcpStream,
) -> io::Result<Option<tokio_rustls::server::TlsStream<TcpStream>>> {
    let mut first = [0u8; 1];
    if stream.peek(&mut first).await? == 0 {
        return Ok(None);
    }
    // 0x16 starts every TLS handshake record; a letter starts "GET ".
    if first[0].is_ascii_uppercase() {
        const MSG: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n\
Client sent an HTTP request to an HTTPS server.\n";
        // Read what the client sent first: closing with unread bytes would
        // reset the connection and could destroy the answer in flight.
        let mut sink = [0u8; 4096];
        while matches!(stream.try_read(&mut sink), Ok(n) if n > 0) {}
        stream.writable().await?;
        let _ = stream.try_write(MSG);
        return Ok(None);
    }
    tokio_rustls::TlsAcceptor::from(tls).accept(stream).await.map(Some)
}

/// Serves HTTP/1.1 on one connection until the client leaves, a limit cuts
/// it off, it is pushed out while idle, or shutdown (after the request in
/// flight, if any). A response the client does not take within the request
/// timeout ends the connection: producing and delivering a response get the
/// same bound.
async fn http<I>(
    app: Arc<App>,
    io: I,
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
            TokioIo::new(WriteDeadline::new(io, cfg.limits.request_timeout, header_lines(cfg))),
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
