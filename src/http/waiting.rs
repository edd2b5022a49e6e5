//! Connections that have not sent a whole request header yet: a pool of
//! their own, apart from the serving permits, where the oldest is closed to
//! make room when it is full (so silent sockets can delay nobody, only
//! push each other out), and the header read into memory (at most the
//! header limit) before a serving permit is taken, then replayed to hyper.
//! It must not parse HTTP beyond finding the blank line that ends a header.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};

/// The waiting connections, oldest first, each with the way to close it.
pub struct Waiting {
    max: usize,
    queue: Mutex<VecDeque<(u64, oneshot::Sender<()>)>>,
    next: AtomicU64,
}

/// A connection's place in [`Waiting`]; leaving it (drop) frees the place.
pub struct Ticket {
    pool: Arc<Waiting>,
    id: u64,
    evicted: oneshot::Receiver<()>,
}

impl Waiting {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            queue: Mutex::new(VecDeque::new()),
            next: AtomicU64::new(0),
        })
    }

    /// A place for a new connection; `true` with it when the pool was full
    /// and the oldest waiting connection was told to close.
    pub fn enter(self: &Arc<Self>) -> (Ticket, bool) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let mut evicted = false;
        while q.len() >= self.max {
            if let Some((_, close)) = q.pop_front() {
                let _ = close.send(());
                evicted = true;
            }
        }
        q.push_back((id, tx));
        let ticket = Ticket {
            pool: self.clone(),
            id,
            evicted: rx,
        };
        (ticket, evicted)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut q = self.pool.queue.lock().unwrap_or_else(PoisonError::into_inner);
        q.retain(|(id, _)| *id != self.id);
    }
}

/// What ends a wait early.
pub struct Bounds<'a> {
    pub ticket: &'a mut Ticket,
    pub timeout: Duration,
    pub shutdown: &'a mut watch::Receiver<bool>,
}

/// Waits for the first byte only (TLS: the header comes after the
/// handshake, which has its own timeout). `false` when the client sent
/// nothing in time, left, was pushed out, or shutdown came.
pub async fn first_byte(stream: &TcpStream, b: Bounds<'_>) -> bool {
    let mut one = [0u8; 1];
    tokio::select! {
        _ = b.shutdown.wait_for(|s| *s) => false,
        _ = &mut b.ticket.evicted => false,
        r = tokio::time::timeout(b.timeout, stream.peek(&mut one)) => matches!(r, Ok(Ok(n)) if n > 0),
    }
}

/// Reads until the blank line that ends the request header (or `cap`
/// bytes: hyper then answers 431). `None` when the client sent no whole
/// header in time, left, was pushed out, or shutdown came.
pub async fn header(stream: &mut TcpStream, cap: usize, b: Bounds<'_>) -> Option<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + b.timeout;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::select! {
            _ = b.shutdown.wait_for(|s| *s) => return None,
            _ = &mut b.ticket.evicted => return None,
            _ = tokio::time::sleep_until(deadline) => return None,
            r = stream.read(&mut chunk) => r.ok()?,
        };
        if n == 0 {
            return None;
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() >= cap || ends_header(&buf[from..]) {
            return Some(buf);
        }
    }
}

fn ends_header(tail: &[u8]) -> bool {
    tail.windows(4).any(|w| w == b"\r\n\r\n") || tail.windows(2).any(|w| w == b"\n\n")
}

/// A stream that first yields the bytes already read from it.
pub struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub fn new(prefix: Vec<u8>, inner: S) -> Self {
        Self { prefix, at: 0, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = out.remaining().min(self.prefix.len() - self.at);
            let at = self.at;
            out.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            if self.at == self.prefix.len() {
                self.prefix = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, out)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pool_closes_its_oldest_connection() {
        let pool = Waiting::new(2);
        let (mut a, full) = pool.enter();
        assert!(!full);
        let (mut b, _) = pool.enter();
        let (_c, full) = pool.enter();
        assert!(full, "the third place needs the oldest's");
        assert!(a.evicted.try_recv().is_ok(), "the oldest is told to close");
        assert!(b.evicted.try_recv().is_err(), "the others stay");
        drop(b);
        let (_d, full) = pool.enter();
        assert!(!full, "a place that left is free again");
    }

    #[test]
    fn the_header_ends_at_its_blank_line() {
        assert!(ends_header(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(ends_header(b"GET / HTTP/1.0\n\n"));
        assert!(!ends_header(b"GET / HTTP/1.1\r\nHost: x\r\n"));
    }
}
