//! The limits that keep oversized, idle, numerous and slow clients (and
//! slow handlers) from holding the server.

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_and_too_many_headers_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = daemon(dir.path(), "limits:\n  max_header_bytes: 16384\n  max_headers: 20\n").await;
    // Past max_header_bytes within hyper's read buffer (twice it), where
    // the service refuses it, and past that buffer, where hyper does: both
    // are answered, not closed.
    for size in [20_000, 40_000] {
        let big = format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
            "a".repeat(size)
        );
        let r = raw(app.addr, big.as_bytes())
            .await
            .unwrap_or_else(|| panic!("no answer to a {size}-byte header"));
        assert!(r.starts_with("HTTP/1.1 431"), "{}", &r[..r.len().min(200)]);
    }
    let many: String = (0..30).map(|i| format!("X-H{i}: v\r\n")).collect();
    let r = raw(
        app.addr,
        format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{many}\r\n").as_bytes(),
    )
    .await
    .expect("an answer to too many headers");
    assert!(r.starts_with("HTTP/1.1 431"), "{r}");
    assert_eq!(app.get("/-/healthy").await.status, 200, "normal requests still served");
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_idle_connections_do_not_delay_a_scrape() {
    // The defaults (no web config): 512 connections.
    let mut cfg = test_config("100ms");
    cfg.server.web_config_file = None;
    let src = SimulatedSource::new(
        Scenario::resolve("default").expect("scenario"),
        Duration::from_millis(100),
        1_700_000_000.0,
    );
    let app = spawn_app(cfg, Box::new(src)).await;
    let mut idle = Vec::new();
    for _ in 0..500 {
        idle.push(TcpStream::connect(app.addr).await.expect("connect"));
    }
    let r = app.get("/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("gpumem_"), "a whole exposition: {}", r.body);
    // Shutdown does not wait for connections that never sent a request.
    app.stop().await.expect("clean stop with idle connections open");
    drop(idle);
}

/// Over the limit of connections without a request, the oldest is closed
/// (closing the new one instead would let silent sockets keep everyone out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_close_the_oldest_silent_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = daemon(dir.path(), "limits:\n  max_connections: 4\n").await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(app.addr).await.expect("connect"));
    }
    let mut extra = TcpStream::connect(app.addr).await.expect("connect");
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(WAIT, held[0].read(&mut buf))
        .await
        .expect("the oldest is closed, not left open");
    assert!(
        matches!(n, Ok(0) | Err(_)),
        "the oldest silent connection is closed: {n:?}"
    );
    extra
        .write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), extra.read_to_end(&mut out))
        .await
        .expect("answered within 5 s")
        .expect("read");
    assert!(out.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&out));
    drop(held);
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_is_cut_off_by_the_header_read_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = daemon(dir.path(), "limits:\n  header_read_timeout: 2s\n").await;
    let s = TcpStream::connect(app.addr).await.expect("connect");
    let (mut rd, mut wr) = s.into_split();
    let closed = tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = rd.read_to_end(&mut buf).await;
        buf
    });
    let header = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n\r\n";
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut sent = 0;
    for b in header {
        tick.tick().await;
        if closed.is_finished() || wr.write_all(&[*b]).await.is_err() {
            break;
        }
        sent += 1;
    }
    let answer = closed.await.expect("reader");
    // One byte a second against a 2 s header read timeout: cut off after
    // a few bytes, and never served.
    assert!(sent < header.len(), "the whole header got through");
    assert!(
        !answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // A half-sent header does not hold up shutdown either (stop fails the
    // test when `run` does not return).
    let mut half = TcpStream::connect(app.addr).await.expect("connect");
    half.write_all(b"GET /metrics HTTP/1.1\r\nHo").await.expect("write");
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_handlers_get_503_after_the_request_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = write(dir.path(), "web.yml", "limits:\n  request_timeout: 1s\n");
    let router = axum::Router::new()
        .route("/slow", axum::routing::get(std::future::pending::<&'static str>))
        .route("/fast", axum::routing::get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(gpumemd::serve::http::serve(listener, router, Some(yaml), rx));
    assert_eq!(common::get(addr, "/fast", &[]).await.body, "ok");
    let r = common::get(addr, "/slow", &[]).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.body, "request timed out\n");
    stop.send(true).expect("stop");
    server.await.expect("join").expect("serve");
}

/// The web config replaced by a FIFO nobody writes: the re-load check
/// refuses it at once (not a regular file), HTTP goes on serving with the
/// config in force, and a regular file written afterwards is taken up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_config_swapped_for_a_fifo_is_refused_and_a_later_one_taken() {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = write(dir.path(), "web.yml", "limits:\n  request_timeout: 5s\n");
    let router = axum::Router::new().route("/fast", axum::routing::get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(gpumemd::serve::http::serve(listener, router, Some(yaml.clone()), rx));
    assert_eq!(common::get(addr, "/fast", &[]).await.body, "ok");

    std::fs::remove_file(&yaml).expect("rm");
    let made = std::process::Command::new("mkfifo")
        .arg(&yaml)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo failed");
    // Checked once a second: requests for 2.5 s span two checks of the FIFO.
    let swapped = Instant::now();
    while swapped.elapsed() < Duration::from_millis(2500) {
        let r = tokio::time::timeout(Duration::from_secs(5), common::get(addr, "/fast", &[]))
            .await
            .expect("HTTP answers while the web config is a FIFO");
        assert_eq!(r.body, "ok");
    }
    std::fs::remove_file(&yaml).expect("rm FIFO");
    write(
        dir.path(),
        "web.yml",
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    );
    wait_until(WAIT, "the regular web config taken up", || async {
        let r = common::get(addr, "/fast", &[]).await;
        (r.header("X-Frame-Options") == Some("deny")).then_some(())
    })
    .await;
    stop.send(true).expect("stop");
    tokio::time::timeout(WAIT, server)
        .await
        .expect("serve stops")
        .expect("join")
        .expect("serve");
}

/// An idle keep-alive connection is closed by the header read timeout, which
/// starts again after each response: every connection ends within a bound
/// whatever the client does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_read_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = daemon(dir.path(), "limits:\n  header_read_timeout: 2s\n").await;
    let mut s = TcpStream::connect(app.addr).await.expect("connect");
    // The connection stays open after a response: a second request on it
    // is answered.
    for _ in 0..2 {
        s.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let head = response_head(&mut s).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    // Then, left idle, it is closed: read_to_end ends on the close.
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut rest))
        .await
        .expect("the idle connection is closed, not left open")
        .expect("read");
    app.stop().await.expect("clean stop");
}

/// One keep-alive response of `/-/healthy`: its head, its body read by
/// Content-Length, the stream left at the next response.
async fn response_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let b = tokio::time::timeout(WAIT, s.read_u8())
            .await
            .expect("an answer")
            .expect("a response on the open connection");
        head.push(b);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_owned())
        })
        .and_then(|v| v.parse().ok())
        .expect("Content-Length");
    let mut body = vec![0; len];
    s.read_exact(&mut body).await.expect("body");
    head
}
