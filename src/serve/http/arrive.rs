//! A connection from accept to its serving place: in the waiting pool until
//! its first request header is whole (with TLS: first byte, handshake under
//! its own timeout, then the header), so neither silent sockets nor stalled
//! handshakes hold a serving place; a plain HTTP request on the TLS port gets
//! a readable 400. It must not serve requests: `serve.rs` does.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::conn::{App, http, stopped};
use super::places::Place;
use super::waiting::{self, Bounds};
use super::webconfig::WebConfig;

/// One connection from accept to close: in the waiting pool until its first
/// request header is whole (with TLS: first byte, handshake, then header),
/// then in a serving place. Returns early when the client sends too little
/// in time, is pushed out, shutdown comes, or every serving place is busy.
pub(super) async fn accepted(
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
    // One set of bounds for every wait before the request: the header (and,
    // with TLS, the first byte before the handshake).
    let mut bounds = Bounds {
        place: &place,
        timeout,
        shutdown: &mut stop,
    };
    let Some(tls) = cfg.tls.clone() else {
        let Some(prefix) = waiting::header(&mut stream, cap, &mut bounds).await else {
            return;
        };
        return served(app, stream, prefix, peer.ip(), &cfg, place, stop).await;
    };
    if !waiting::first_byte(&stream, &mut bounds).await {
        return;
    }
    let handshake = tokio::time::timeout(cfg.limits.tls_handshake_timeout, tls_accept(tls, stream));
    let mut stream = tokio::select! {
        _ = stopped(bounds.shutdown) => return,
        () = place.pushed_out() => return,
        r = handshake => match r {
            Ok(Ok(Some(s))) => s,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => return tracing::debug!(peer = %peer, error = %e, "TLS handshake failed"),
            Err(_) => return tracing::debug!(peer = %peer, "TLS handshake timed out"),
        },
    };
    let Some(prefix) = waiting::header(&mut stream, cap, &mut bounds).await else {
        return;
    };
    served(app, stream, prefix, peer.ip(), &cfg, place, stop).await;
}

/// Takes a serving place (refused: the connection closes) and serves.
async fn served<I>(
    app: Arc<App>,
    io: I,
    prefix: Vec<u8>,
    peer: IpAddr,
    cfg: &WebConfig,
    place: Place,
    stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if place.serve().is_err() {
        return;
    }
    http(app, io, prefix, peer, cfg, Arc::new(place), stop).await;
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
