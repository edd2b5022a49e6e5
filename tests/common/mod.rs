//! Shared helpers of the integration tests: `spawn_app` runs the daemon
//! in-process on 127.0.0.1:0, `get` is a minimal HTTP/1.1 client (so the
//! tests need no HTTP client crate), and `wait_until` polls a condition
//! against a deadline instead of sleeping: the one wait of the integration
//! tests (`wait_true` and `wait_blocking` are its other forms).
#![allow(dead_code)] // each test binary uses a different subset
// Test helpers: a failed expectation is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod alertmanager;
pub mod proc;

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use gpumemd::app::config::Config;
use gpumemd::collect::source::GpuSource;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A real peer (python3) a test needs: `found`,
/// or, when it is not installed, one line saying the test was skipped and how
/// to install the peer. `GPUMEMD_REQUIRE_PEERS=1` (set by `.ci/run`) turns
/// that skip into a failure, so CI always runs these tests for real while a
/// fresh machine with only the Rust toolchain still passes `cargo test`.
pub fn peer_or_skip<T>(peer: &str, found: Option<T>, install: &str) -> Option<T> {
    if found.is_some() {
        return found;
    }
    let test = std::thread::current().name().unwrap_or("this test").to_string();
    let required = std::env::var("GPUMEMD_REQUIRE_PEERS").is_ok_and(|v| v == "1");
    assert!(!required, "{peer} not found and GPUMEMD_REQUIRE_PEERS=1: {install}");
    // Straight to the stderr handle: the test harness captures eprintln!
    // of passing tests, and this line is for the person running them.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {peer} not found; {install} (GPUMEMD_REQUIRE_PEERS=1 makes this a failure)"
    );
    None
}

pub struct App {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    handle: JoinHandle<Result<(), gpumemd::RunError>>,
}

impl App {
    /// Asks the daemon to stop and returns what `run` returned.
    pub async fn stop(mut self) -> Result<(), gpumemd::RunError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match tokio::time::timeout(Duration::from_secs(10), &mut self.handle).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => panic!("run task panicked: {e}"),
            Err(_) => panic!("run did not return within 10 s of shutdown"),
        }
    }

    pub async fn get(&self, path: &str) -> Response {
        get(self.addr, path, &[]).await
    }

    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        get(self.addr, path, headers).await
    }
}

/// A config for tests: fast polls, processes read from a /proc that has none
/// of the simulated PIDs (the simulated source brings its own identities).
pub fn test_config(interval: &str) -> Config {
    let text = format!("[poll]\ninterval = \"{interval}\"\n[state]\ndir = \"/nonexistent-gpumemd-test\"\n");
    Config::from_toml(&text, "test", false).unwrap_or_else(|e| panic!("{e}"))
}

pub async fn spawn_app(cfg: Config, source: Box<dyn GpuSource>) -> App {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(gpumemd::run(cfg, source, listener, async move {
        let _ = rx.await;
    }));
    App {
        addr,
        stop: Some(tx),
        handle,
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One GET with `Connection: close`; panics on transport errors (a test
/// failure), returns any HTTP status.
pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    request(addr, "GET", path, headers).await
}

pub async fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    parse(&request_raw(addr, method, path, headers).await)
}

/// The whole response, header and body, as bytes (for bodies that are not
/// text, such as gzip).
pub async fn request_raw(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.expect("write request");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .expect("response within 10 s")
        .expect("read response");
    raw
}

fn parse(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("header/body separator");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_string() };
    Response { status, headers, body }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Re-evaluates `check` until it returns `Some` or `timeout` passes.
pub async fn wait_until<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    // Re-check every 10 ms: the condition is what ends the wait, the tick
    // only paces the re-checks.
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    loop {
        tick.tick().await;
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
    }
}

/// `wait_until` for a plain synchronous condition.
pub async fn wait_true(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    wait_until(timeout, what, || std::future::ready(cond().then_some(()))).await
}

/// `wait_until` for a test without a runtime (a plain `#[test]`): blocks
/// the calling thread. Inside an async test, await `wait_until` instead.
pub fn wait_blocking<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime for the wait")
        .block_on(wait_until(timeout, what, || std::future::ready(check())))
}

/// The value of the first sample of `metric` whose line contains every
/// `must` fragment.
pub fn sample(body: &str, metric: &str, must: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with(['{', ' ']))
        .find(|l| must.iter().all(|m| l.contains(m)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A stand-in HTTP receiver on 127.0.0.1 (webhook, Alertmanager): answers
/// every request 200 and counts them. Its thread lives as long as the test
/// binary.
pub fn http_sink() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the sink");
    let addr = listener.local_addr().expect("sink addr");
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            // One request per connection is all a counter needs; a read
            // timeout keeps a silent client from stalling the sink.
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 64 * 1024];
            let _ = conn.read(&mut buf);
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (addr, count)
}

/// Lines of a child's stream, read on a thread so a test can wait for one
/// with a deadline instead of blocking on a child that never prints it.
pub struct Lines {
    rx: std::sync::mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Lines {
    pub fn new(stream: impl std::io::Read + Send + 'static) -> Self {
        use std::io::BufRead;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stream).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines { rx, seen: Vec::new() }
    }

    /// The first line (seen before or arriving within `timeout`) that
    /// contains `needle`; panics with everything seen when none does.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no line with {needle:?} within {timeout:?}; got:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }
}
