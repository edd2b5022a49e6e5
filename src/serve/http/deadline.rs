//! A connection's I/O with a write deadline: once a write cannot proceed
//! (the client stopped reading), what is queued must be taken within a bound
//! or the connection fails, so a client that pipelines requests and never
//! reads cannot keep its socket, its permit and a response body in memory.
//! It also adds the configured security headers to the one response hyper
//! writes by itself (431 for a header past its buffer), which no service
//! layer sees, and gives hyper first the request header already read while
//! the connection waited (`waiting.rs`). It must not parse requests or know
//! where its settings come from.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Wraps one connection's stream (plain TCP or TLS).
pub struct WriteDeadline<I> {
    inner: I,
    /// Bytes already read from `inner`, read again before it.
    prefix: Bytes,
    limit: Duration,
    /// Armed when a write first could not proceed; disarmed when a flush
    /// completes, which hyper asks for once its own buffer is empty, i.e.
    /// when the response so far has been handed to the kernel.
    backlog: Option<Pin<Box<Sleep>>>,
    /// `name: value\r\n` lines to add to hyper's own 431.
    headers: Vec<u8>,
    /// Bytes of a rewritten 431 not yet written, and how far it got.
    rewritten: Vec<u8>,
    written: usize,
}

impl<I> WriteDeadline<I> {
    pub fn new(inner: I, prefix: Vec<u8>, limit: Duration, headers: Vec<u8>) -> Self {
        Self {
            inner,
            prefix: prefix.into(),
            limit,
            backlog: None,
            headers,
            rewritten: Vec::new(),
            written: 0,
        }
    }

    /// `buf` with the headers after its status line, when it starts hyper's
    /// 431 and does not carry them yet (the service's own 431 does).
    fn rewrite(&self, buf: &[u8]) -> Option<Vec<u8>> {
        let first = self.headers.split_inclusive(|&b| b == b'\n').next()?;
        let is_431 = buf.starts_with(b"HTTP/1.") && buf.get(8..13) == Some(b" 431 ");
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(buf.len());
        if !is_431 || buf[..end].windows(first.len()).any(|w| w == first) {
            return None;
        }
        let eol = buf.windows(2).position(|w| w == b"\r\n")? + 2;
        Some([&buf[..eol], &self.headers, &buf[eol..]].concat())
    }

    /// A write or flush would wait: fine until the backlog is older than
    /// the limit. The timer shares the task's waker, so a client that never
    /// reads again still gets its connection closed on time.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self.backlog.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client did not take the response within the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I: AsyncWrite + Unpin> WriteDeadline<I> {
    /// Writes what is left of a rewritten response.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.rewritten.len() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.rewritten[self.written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return self.stalled(cx),
            }
        }
        self.rewritten.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteDeadline<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = buf.remaining().min(this.prefix.len());
            buf.put_slice(&this.prefix.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(Err(e)) = this.drain(cx) {
            return Poll::Ready(Err(e));
        }
        if !this.rewritten.is_empty() {
            return Poll::Pending;
        }
        if let Some(full) = this.rewrite(buf) {
            // Taken whole; the rest goes out on the next write or flush.
            this.rewritten = full;
            let _ = this.drain(cx);
            return Poll::Ready(Ok(buf.len()));
        }
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Pending => this.stalled(cx),
            done => done,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if !self.headers.is_empty() {
            // One contiguous buffer per write, so a 431 can be seen whole.
            let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &**b);
            return self.poll_write(cx, first);
        }
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.stalled(cx),
            done => done,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.headers.is_empty() && self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Poll::Ready(Err(e)) = this.drain(cx) {
            return Poll::Ready(Err(e));
        }
        if !this.rewritten.is_empty() {
            return Poll::Pending;
        }
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => this.stalled(cx),
            Poll::Ready(Ok(())) => {
                this.backlog = None;
                Poll::Ready(Ok(()))
            }
            err => err,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Pending => this.stalled(cx),
            done => done,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_peer_that_never_reads_fails_the_write_within_the_limit() {
        // A duplex pipe of 64 bytes whose other end is never read.
        let (a, _b) = tokio::io::duplex(64);
        let mut w = WriteDeadline::new(a, Vec::new(), Duration::from_millis(200), Vec::new());
        let t = std::time::Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(5), w.write_all(&[0u8; 4096])).await;
        let err = r
            .expect("ended by the deadline, not the test's timeout")
            .expect_err("write fails");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    async fn a_reading_peer_gets_everything() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut w = WriteDeadline::new(a, Vec::new(), Duration::from_millis(300), Vec::new());
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut b, &mut sink)
                .await
                .map(|_| sink.len())
        });
        // Every round stalls on the small pipe until the reader catches up.
        for _ in 0..5 {
            w.write_all(&[1u8; 256]).await.expect("taken in time");
            w.flush().await.expect("flushed");
        }
        drop(w);
        assert_eq!(reader.await.unwrap().unwrap(), 5 * 256);
    }

    #[tokio::test]
    async fn the_bytes_read_while_waiting_come_first() {
        use tokio::io::AsyncReadExt;
        let (a, mut b) = tokio::io::duplex(64);
        let mut w = WriteDeadline::new(a, b"GET / HT".to_vec(), Duration::from_secs(1), Vec::new());
        b.write_all(b"TP/1.1\r\n\r\n").await.unwrap();
        drop(b);
        let mut got = Vec::new();
        w.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"GET / HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn hyper_s_own_431_gets_the_headers_once() {
        let (a, _b) = tokio::io::duplex(64);
        let w = WriteDeadline::new(
            a,
            Vec::new(),
            Duration::from_secs(1),
            b"x-frame-options: deny\r\n".to_vec(),
        );
        let hyper = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        let got = w.rewrite(hyper).expect("rewritten");
        assert_eq!(
            got,
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nx-frame-options: deny\r\ncontent-length: 0\r\n\r\n"
        );
        assert!(w.rewrite(&got).is_none(), "a 431 that has them is left alone");
        assert!(w.rewrite(b"HTTP/1.1 200 OK\r\n\r\n").is_none());
    }
}
