//! A connection's I/O with a write deadline: once a write cannot proceed
//! (the client stopped reading), what is queued must be taken within a bound
//! or the connection fails, so a client that pipelines requests and never
//! reads cannot keep its socket, its permit and a response body in memory.
//! It owns only that clock; it must not parse HTTP or know the limits' source.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Wraps one connection's stream (plain TCP or TLS).
pub struct WriteDeadline<I> {
    inner: I,
    limit: Duration,
    /// Armed when a write first could not proceed; disarmed when a flush
    /// completes, which hyper asks for once its own buffer is empty, i.e.
    /// when the response so far has been handed to the kernel.
    backlog: Option<Pin<Box<Sleep>>>,
}

impl<I> WriteDeadline<I> {
    pub fn new(inner: I, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            backlog: None,
        }
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

impl<I: AsyncRead + Unpin> AsyncRead for WriteDeadline<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
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
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.stalled(cx),
            done => done,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
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
        let mut w = WriteDeadline::new(a, Duration::from_millis(200));
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
        let mut w = WriteDeadline::new(a, Duration::from_millis(300));
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
}
