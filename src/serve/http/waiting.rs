//! Connections that have not sent a whole request header yet (their place
//! is in `places.rs`'s waiting pool): the wait for the first byte, and the
//! header read into memory (at most the header limit) before a serving
//! place is taken (`deadline.rs` replays it to hyper). It must not parse
//! HTTP beyond finding the blank line that ends a header.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::places::Place;

/// What ends a wait early.
pub struct Bounds<'a> {
    pub place: &'a Place,
    pub timeout: Duration,
    pub shutdown: &'a mut watch::Receiver<bool>,
}

/// Waits for the first byte only (TLS: the handshake comes next, under its
/// own timeout, then the header). `false` when the client sent
/// nothing in time, left, was pushed out, or shutdown came.
pub async fn first_byte(stream: &TcpStream, b: &mut Bounds<'_>) -> bool {
    let mut one = [0u8; 1];
    tokio::select! {
        _ = b.shutdown.wait_for(|s| *s) => false,
        () = b.place.pushed_out() => false,
        r = tokio::time::timeout(b.timeout, stream.peek(&mut one)) => matches!(r, Ok(Ok(n)) if n > 0),
    }
}

/// Reads until the blank line that ends the request header (or `cap`
/// bytes: hyper then answers 431). `None` when the client sent no whole
/// header in time, left, was pushed out, or shutdown came.
pub async fn header<S: AsyncRead + Unpin>(stream: &mut S, cap: usize, b: &mut Bounds<'_>) -> Option<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + b.timeout;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::select! {
            _ = b.shutdown.wait_for(|s| *s) => return None,
            () = b.place.pushed_out() => return None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_ends_at_its_blank_line() {
        assert!(ends_header(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(ends_header(b"GET / HTTP/1.0\n\n"));
        assert!(!ends_header(b"GET / HTTP/1.1\r\nHost: x\r\n"));
    }
}
