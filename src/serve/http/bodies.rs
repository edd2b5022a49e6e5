//! Response bodies under one byte budget per server: every JSON body is
//! counted from the handler until hyper drops its bytes (written to the
//! kernel, or the connection cut), across all connections, and a body that
//! would take the bytes held past the budget gets a 503 with Retry-After
//! instead. Clients that never read can then pin at most the budget
//! together, whatever their number and whatever the size of each body. The
//! budget belongs to one `serve` (it puts it on the router as an
//! extension), so two servers in one process do not share it. It owns the
//! counting, not the serialising or the routes.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};

/// The bytes of response bodies one server holds at most, and what it
/// holds now.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    held: AtomicUsize,
    /// The most held since memory was last handed back.
    peak: AtomicUsize,
    /// The size of the last large body: what the next one likely needs.
    last_large: AtomicUsize,
}

impl Budget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            last_large: AtomicUsize::new(0),
        })
    }

    /// Bytes of response bodies held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Takes `n` bytes when they fit; a body alone is always let through,
    /// however large, so a budget below one snapshot still serves one.
    fn take(&self, n: usize) -> bool {
        let taken = self.held.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
            (held == 0 || held.saturating_add(n) <= self.limit).then(|| held.saturating_add(n))
        });
        if let Ok(before) = taken {
            self.peak.fetch_max(before.saturating_add(n), Ordering::SeqCst);
        }
        taken.is_ok()
    }

    /// `n` bytes written or dropped. When nothing is held any more after
    /// many bytes were, the C allocator is asked to hand its free pages
    /// back: bodies under its mmap threshold come from the heap, and the
    /// pages freed between live blocks stay with the process otherwise
    /// (hundreds of MB after a crowd of stuck readers left).
    fn give_back(&self, n: usize) {
        let worth = TRIM_AFTER.min(self.limit / 2).max(1);
        if self.held.fetch_sub(n, Ordering::SeqCst) == n && self.peak.load(Ordering::SeqCst) >= worth {
            self.peak.store(0, Ordering::SeqCst);
            trim();
        }
    }

    /// Whether a body as large as the last large one would not fit: a
    /// handler whose body is usually large answers [`busy`] before
    /// serialising it, so a client that pipelines refused requests costs no
    /// serialisation each.
    pub fn full(&self) -> bool {
        let held = self.held();
        let need = self.last_large.load(Ordering::SeqCst);
        held > 0 && held.saturating_add(need) > self.limit
    }
}

/// `head` (if any) then `bytes` as the body of a response with content
/// type `ct`, counted against `budget` (none: a router used without
/// `serve`, uncounted), or a 503 when they do not fit. `head` is sent as it
/// is: a text shared with other responses (the kept part of `/metrics`) is
/// not copied.
pub fn bounded(budget: Option<&Arc<Budget>>, head: Option<Arc<[u8]>>, bytes: Vec<u8>, ct: &'static str) -> Response {
    let ct = [(header::CONTENT_TYPE, HeaderValue::from_static(ct))];
    let Some(budget) = budget else {
        let frames = head.map(Bytes::from_owner).into_iter().chain([Bytes::from(bytes)]);
        return (ct, Body::new(Pinned(frames.collect()))).into_response();
    };
    let n = head.as_ref().map_or(0, |h| h.len()) + bytes.len();
    if n >= LARGE_BODY {
        budget.last_large.store(n, Ordering::SeqCst);
    }
    if !budget.take(n) {
        // The serialised copy is freed here, before the answer goes out.
        drop(bytes);
        return busy();
    }
    // The count goes with the bytes, not the body: hyper drops the body
    // once it has a frame and queues the bytes until written.
    let head = head.map(|h| Bytes::from_owner(Held(Some(h), budget.clone())));
    let frames = head
        .into_iter()
        .chain([Bytes::from_owner(Held(Some(bytes), budget.clone()))]);
    (ct, Body::new(Pinned(frames.collect()))).into_response()
}

/// From this size on a body's size is remembered for [`Budget::full`]
/// (snapshots, history, summaries; not alerts or health).
const LARGE_BODY: usize = 64 << 10;

/// The answer when the budget is spent.
pub fn busy() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, HeaderValue::from_static("5"))],
        "too many response bytes waiting for their clients; retry later\n",
    )
        .into_response()
}

/// A frame's bytes (a body's own, or a text several bodies send) with
/// their share of the budget, freed together.
struct Held<T: AsRef<[u8]>>(Option<T>, Arc<Budget>);

impl<T: AsRef<[u8]>> Drop for Held<T> {
    fn drop(&mut self) {
        let n = self.as_ref().len();
        // The bytes themselves go first, then the pages they were on.
        drop(self.0.take());
        self.1.give_back(n);
    }
}

/// A drained budget hands memory back only after a peak this high (or half
/// the budget, when that is less): below it, what the allocator keeps is
/// noise.
const TRIM_AFTER: usize = 8 << 20;

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the kernel; it takes
    // the allocator's own locks and touches no live block.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Held<T> {
    fn as_ref(&self) -> &[u8] {
        self.0.as_ref().map_or(&[], T::as_ref)
    }
}

/// Data frames, sent in order.
struct Pinned(VecDeque<Bytes>);

impl HttpBody for Pinned {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Poll::Ready(self.0.pop_front().map(|d| Ok(Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.iter().map(|d| d.len() as u64).sum())
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

    #[test]
    fn bodies_past_the_budget_get_503_and_their_bytes_come_back() {
        let budget = Budget::new(10_000);
        let b = Some(&budget);
        // Held by the bytes: taking the frame out of the body keeps the count.
        let mut frame = bounded(b, None, vec![b'x'; 4000], "application/json").into_body();
        let data = futures_data(&mut frame);
        drop(frame);
        assert_eq!(budget.held(), 4000);
        drop(data);
        assert_eq!(budget.held(), 0);
        // Many small bodies add up against the same budget.
        let held: Vec<Response> = (0..10)
            .map(|_| bounded(b, None, vec![b'x'; 1000], "text/plain"))
            .collect();
        assert!(held.iter().all(|r| r.status() == StatusCode::OK));
        assert_eq!(budget.held(), 10_000);
        let refused = bounded(b, None, vec![b'x'; 10], "application/json");
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.headers().contains_key(header::RETRY_AFTER));
        assert_eq!(budget.held(), 10_000, "a refusal holds nothing");
        drop(held);
        assert_eq!(budget.held(), 0);
        // A body larger than the whole budget still goes out alone.
        let big = bounded(b, None, vec![b'x'; 50_000], "application/json");
        assert_eq!(big.status(), StatusCode::OK);
        assert_eq!(
            bounded(b, None, vec![b'x'; 1], "text/plain").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        drop(big);
        // After a large body, a handler can tell before serialising that
        // another would not fit.
        let budget = Budget::new(3 << 20);
        let b = Some(&budget);
        let first = bounded(b, None, vec![b'x'; 2 << 20], "application/json");
        assert_eq!(first.status(), StatusCode::OK);
        assert!(budget.full(), "2 MiB held, 2 MiB more would not fit in 3");
        drop(first);
        assert!(!budget.full(), "nothing held");
        // Another server's budget is its own.
        let other = Budget::new(10);
        let _kept = bounded(Some(&other), None, vec![b'x'; 10], "text/plain");
        assert_eq!((budget.held(), other.held()), (0, 10));
    }

    #[test]
    fn a_shared_head_goes_first_uncopied_and_counts_until_written() {
        let budget = Budget::new(10_000);
        let head: Arc<[u8]> = Arc::from(&b"# kept part\n"[..]);
        let mut body = bounded(Some(&budget), Some(head.clone()), b"tail\n".to_vec(), "text/plain").into_body();
        assert_eq!(budget.held(), head.len() + 5);
        let first = futures_data(&mut body);
        assert_eq!(first.as_ptr(), head.as_ptr(), "the head is sent from the shared text");
        let second = futures_data(&mut body);
        assert_eq!(&second[..], b"tail\n");
        assert!(body.is_end_stream());
        drop((body, first));
        assert_eq!(budget.held(), 5, "the tail is still queued");
        drop(second);
        assert_eq!(budget.held(), 0);
        // Without a budget (a router used without serve), the same bytes.
        let mut plain = bounded(None, Some(head.clone()), b"t".to_vec(), "text/plain").into_body();
        assert_eq!(
            (futures_data(&mut plain), futures_data(&mut plain)),
            (Bytes::from("# kept part\n"), Bytes::from("t"))
        );
    }
}
