//! Large response bodies under a bound: at most `MAX_LARGE_BODIES` bodies of
//! `LARGE_BODY` bytes or more are held at once, across all connections, from
//! the handler until hyper drops them (sent, or the connection cut); past
//! that a clear 503. A client that never reads can then pin at most one of
//! a few places for the write timeout, not its own copy of a 25 MB snapshot.
//! It owns the counting, not the serialising or the routes.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};
use tokio::sync::{Semaphore, SemaphorePermit};

/// From this size on a body counts against the pool: every small answer
/// (the status page's summary, alerts, health) stays outside it.
pub const LARGE_BODY: usize = 1 << 20;

/// Large bodies in flight at once. Four snapshots of the `large` demo are
/// about 100 MB; nobody needs more than a few whole-fleet dumps at a time.
pub const MAX_LARGE_BODIES: usize = 4;

static LARGE_BODIES: Semaphore = Semaphore::const_new(MAX_LARGE_BODIES);

/// The bytes of the large bodies now held: what stuck readers can pin.
static HELD_BYTES: AtomicUsize = AtomicUsize::new(0);

/// The bytes of large response bodies now held, all connections together
/// (at most `MAX_LARGE_BODIES` bodies).
pub fn large_bytes_in_flight() -> usize {
    HELD_BYTES.load(Ordering::SeqCst)
}

/// `bytes` as the body of a response with `content_type`, or a 503 when it
/// is large and the pool is full.
pub fn bounded(bytes: Vec<u8>, content_type: &'static str) -> Response {
    let ct = [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))];
    if bytes.len() < LARGE_BODY {
        return (ct, bytes).into_response();
    }
    let Ok(permit) = LARGE_BODIES.try_acquire() else {
        // The serialised copy is freed here, before the answer goes out.
        drop(bytes);
        return busy();
    };
    (
        ct,
        Body::new(Pinned {
            // The place goes with the bytes, not the body: hyper drops the
            // body once it has the frame and queues the bytes until written.
            data: Some(Bytes::from_owner(Held::new(bytes, permit))),
        }),
    )
        .into_response()
}

/// Whether every place is taken: a handler whose body is usually large
/// answers [`busy`] before serialising it, so a client that pipelines
/// refused requests costs no serialisation each.
pub fn full() -> bool {
    LARGE_BODIES.available_permits() == 0
}

/// The answer when the pool is full.
pub fn busy() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, HeaderValue::from_static("5"))],
        "too many large responses in flight; retry later\n",
    )
        .into_response()
}

/// A large body's bytes with its place in the pool, freed together.
struct Held {
    bytes: Vec<u8>,
    _permit: SemaphorePermit<'static>,
}

impl Held {
    fn new(bytes: Vec<u8>, permit: SemaphorePermit<'static>) -> Self {
        HELD_BYTES.fetch_add(bytes.len(), Ordering::SeqCst);
        Self { bytes, _permit: permit }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD_BYTES.fetch_sub(self.bytes.len(), Ordering::SeqCst);
    }
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// One data frame.
struct Pinned {
    data: Option<Bytes>,
}

impl HttpBody for Pinned {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Poll::Ready(self.data.take().map(|d| Ok(Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn futures_data(body: &mut Body) -> Bytes {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        match Pin::new(body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(f))) => f.into_data().unwrap_or_default(),
            _ => Bytes::new(),
        }
    }

    fn large_in_flight() -> usize {
        MAX_LARGE_BODIES - LARGE_BODIES.available_permits()
    }

    #[test]
    fn large_bodies_past_the_pool_get_503_and_their_places_come_back() {
        // Held by the bytes: taking the frame out of the body keeps the place.
        let mut frame = bounded(vec![b'x'; LARGE_BODY], "application/json").into_body();
        let data = futures_data(&mut frame);
        drop(frame);
        assert_eq!(large_in_flight(), 1);
        assert_eq!(large_bytes_in_flight(), LARGE_BODY);
        drop(data);
        assert_eq!(large_in_flight(), 0);
        assert_eq!(large_bytes_in_flight(), 0);
        let held: Vec<Response> = (0..MAX_LARGE_BODIES)
            .map(|_| bounded(vec![b'x'; LARGE_BODY], "application/json"))
            .collect();
        assert!(held.iter().all(|r| r.status() == StatusCode::OK));
        assert_eq!(large_in_flight(), MAX_LARGE_BODIES);
        assert!(full());
        let refused = bounded(vec![b'x'; LARGE_BODY], "application/json");
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.headers().contains_key(header::RETRY_AFTER));
        // Small bodies never wait for the pool.
        assert_eq!(bounded(b"{}".to_vec(), "application/json").status(), StatusCode::OK);
        drop(held);
        assert_eq!(large_in_flight(), 0);
        assert_eq!(
            bounded(vec![b'x'; LARGE_BODY], "application/json").status(),
            StatusCode::OK
        );
    }
}
