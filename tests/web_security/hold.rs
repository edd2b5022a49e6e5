//! Unauthenticated clients that try to hold the server or its disk: idle
//! keep-alive and stalled TLS clients cannot keep a scraper out, one source
//! address holds at most its cap, and refused lifecycle requests cannot
//! append audit lines at their own pace.

use crate::*;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rustls::pki_types::pem::PemObject;
use tokio::io::AsyncRead;

/// A TLS client that trusts `ca` (as an attacker's script would).
fn connector(ca: &Ca) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

async fn connect_from(source: IpAddr, addr: SocketAddr) -> Option<TcpStream> {
    let sock = tokio::net::TcpSocket::new_v4().ok()?;
    sock.bind(SocketAddr::new(source, 0)).ok()?;
    sock.connect(addr).await.ok()
}

/// Reads one response (header and its Content-Length body); `None` when
/// the connection ended first.
async fn response<S: AsyncRead + Unpin>(s: &mut S) -> Option<u16> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return head.split_whitespace().nth(1)?.parse().ok();
            }
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// An idle keep-alive client without credentials: one request on connect
/// and one every 8 s (inside the 10 s idle limit), on a new connection
/// whenever the server closed the last one.
async fn idle_keep_alive(
    source: IpAddr,
    addr: SocketAddr,
    tls: tokio_rustls::TlsConnector,
    answered: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) {
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut first = true;
    // Paces the attack; nothing waits on it.
    let mut tick = tokio::time::interval(Duration::from_secs(8));
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let Some(tcp) = connect_from(source, addr).await else {
            continue;
        };
        let Ok(mut s) = tls.connect(name.clone(), tcp).await else {
            continue;
        };
        while !stop.load(Ordering::SeqCst) {
            if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await.is_err()
                || response(&mut s).await.is_none()
            {
                break;
            }
            if std::mem::take(&mut first) {
                answered.fetch_add(1, Ordering::SeqCst);
            }
            tick.tick().await;
        }
    }
}

/// A client that sends the first byte of a TLS handshake and nothing more,
/// again on a new connection each time the server closes it.
async fn stalled_tls(source: IpAddr, addr: SocketAddr, started: Arc<AtomicUsize>, stop: Arc<AtomicBool>) {
    let mut first = true;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let Some(mut s) = connect_from(source, addr).await else {
            continue;
        };
        if s.write_all(&[0x16]).await.is_err() {
            continue;
        }
        if std::mem::take(&mut first) {
            started.fetch_add(1, Ordering::SeqCst);
        }
        let mut sink = [0u8; 64];
        // Until the server closes it (or the test ends).
        while !stop.load(Ordering::SeqCst) {
            let read = tokio::time::timeout(Duration::from_secs(1), s.read(&mut sink)).await;
            if let Ok(Ok(0) | Err(_)) = read {
                break;
            }
        }
    }
}

/// More idle keep-alive TLS clients than the default 512 places, from a
/// dozen source addresses (each under its cap), and 100 clients stalled in
/// the TLS handshake: a scraper with valid credentials, on a new connection
/// each time, must still get its scrapes. Idle connections give way to it,
/// and the handshake happens before a serving place is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_and_stalled_tls_clients_cannot_keep_a_scraper_out() {
    const IDLE: usize = 600;
    const STALLED: usize = 100;
    const SCRAPES: usize = 120;
    let (dir, ca, _) = tls_dir();
    let hash = bcrypt::hash("right", 4).expect("bcrypt");
    let app = daemon(
        dir.path(),
        &format!("{TLS_ONLY}basic_auth_users:\n  prometheus: {hash}\n"),
    )
    .await;
    let addr = app.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, stalled) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tls = connector(&ca);
    let mut attack = Vec::new();
    for i in 0..IDLE {
        let source: IpAddr = [127, 0, 1, 1 + (i / 50) as u8].into();
        attack.push(tokio::spawn(idle_keep_alive(
            source,
            addr,
            tls.clone(),
            answered.clone(),
            stop.clone(),
        )));
    }
    for i in 0..STALLED {
        let source: IpAddr = [127, 0, 2, 1 + (i / 50) as u8].into();
        attack.push(tokio::spawn(stalled_tls(source, addr, stalled.clone(), stop.clone())));
    }
    // 400 answered: with the stalled ones, most places of a server that
    // gives none back would be held.
    wait_true(Duration::from_secs(120), "the attackers connected", || {
        answered.load(Ordering::SeqCst) >= 400 && stalled.load(Ordering::SeqCst) >= STALLED
    })
    .await;
    let scraper = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).expect("CA"))
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let (mut ok, mut took, mut errors) = (0, Vec::new(), Vec::new());
    for _ in 0..SCRAPES {
        let t = Instant::now();
        let r = scraper
            .get(format!("https://localhost:{}/metrics", addr.port()))
            .basic_auth("prometheus", Some("right"))
            .send()
            .await;
        match r {
            Ok(r) if r.status() == 200 => match r.text().await {
                Ok(b) if b.contains("gpumem_") => {
                    ok += 1;
                    took.push(t.elapsed());
                }
                other => errors.push(format!("body {other:?}")),
            },
            Ok(r) => errors.push(format!("status {}", r.status())),
            Err(e) => errors.push(format!("{e}")),
        }
    }
    stop.store(true, Ordering::SeqCst);
    took.sort();
    let p50 = took.get(took.len() / 2).copied();
    eprintln!(
        "{IDLE} idle keep-alive + {STALLED} stalled TLS clients: scrapes {ok}/{SCRAPES}, p50 {p50:?}, \
         max {:?}; first errors {:?}",
        took.last(),
        &errors[..errors.len().min(3)]
    );
    assert!(
        ok * 100 >= SCRAPES * 95,
        "scrapes {ok}/{SCRAPES}; first errors {:?}",
        &errors[..errors.len().min(3)]
    );
    for a in attack {
        a.abort();
    }
    app.stop().await.expect("clean stop");
}

/// One source address opening more keep-alive connections than its cap
/// keeps at most the cap open: its own oldest idle ones are closed, and
/// another source is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_holds_at_most_its_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = daemon(dir.path(), "limits:\n  max_connections_per_source: 8\n").await;
    let source: IpAddr = [127, 0, 3, 1].into();
    let mut conns = Vec::new();
    for _ in 0..20 {
        let mut s = connect_from(source, app.addr).await.expect("connect");
        s.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("request");
        // Answered while it is the newest; later ones may close it.
        let first = response(&mut s).await;
        assert_eq!(first, Some(200));
        conns.push(s);
    }
    // Closed by the server: a read sees the end at once; an open one
    // makes the read wait (20 ms, which also paces the re-checks).
    let deadline = Instant::now() + WAIT;
    let open = loop {
        let mut open = 0;
        for s in &mut conns {
            let mut one = [0u8; 1];
            if tokio::time::timeout(Duration::from_millis(20), s.read(&mut one))
                .await
                .is_err()
            {
                open += 1;
            }
        }
        if open <= 8 {
            break open;
        }
        assert!(Instant::now() < deadline, "{open} of 20 still open");
    };
    eprintln!("20 keep-alive connections from one source: {open} left open (cap 8)");
    assert!(open >= 1, "the newest stay");
    assert_eq!(app.get("/-/healthy").await.status, 200, "another source is served");
    app.stop().await.expect("clean stop");
}

/// Hundreds of refused resumes a second, as anyone who reaches the
/// lifecycle API can send: the audit log gets the burst, then a summary
/// line with the count of the rest, not one fsynced line each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_lifecycle_requests_cannot_flood_the_audit_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[poll]\ninterval = \"100ms\"\n[server]\nenable_lifecycle = true\n[reclaim]\nenabled = true\n\
         allow_users = [\"alice\"]\n[state]\ndir = \"{}\"\n",
        dir.path().display()
    );
    let cfg = gpumemd::app::config::Config::from_toml(&text, "test", false).expect("config");
    let src = SimulatedSource::new(
        Scenario::resolve("default").expect("scenario"),
        Duration::from_millis(100),
        1_700_000_000.0,
    );
    let app = spawn_app(cfg, Box::new(src)).await;
    let audit = dir.path().join(gpumemd::act::reclaim::AUDIT_FILE);
    let lines = || {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
            .collect::<Vec<_>>()
    };
    const SENT: usize = 300;
    let started = Instant::now();
    for i in 0..SENT {
        let r = common::request(
            app.addr,
            "POST",
            &format!("/api/v1/processes/{}/resume", 90_000 + i),
            &[],
        )
        .await;
        assert_eq!(r.status, 404, "{}", r.body);
    }
    let took = started.elapsed();
    let refusals = |all: &[serde_json::Value]| all.iter().filter(|l| l["result"] == "refused").count();
    let summed = |all: &[serde_json::Value]| -> u64 { all.iter().filter_map(|l| l["suppressed"].as_u64()).sum() };
    let written = lines().len();
    eprintln!("{SENT} refused resumes in {took:?}: {written} audit lines");
    // One token comes back a second: the burst and one per second at most,
    // each refill with a summary line ahead of it.
    let bound = gpumemd::act::reclaim::AUDIT_BURST as usize + 2 * (took.as_secs() as usize + 1);
    assert!(
        written <= bound,
        "{written} audit lines for {SENT} refusals (bound {bound})"
    );
    // The rest is counted: the next line written carries the count, and
    // every refusal is either a line or in a summary.
    let all = wait_until(WAIT, "every refusal written or summed up", || async {
        let all = lines();
        if (refusals(&all) as u64 + summed(&all)) >= SENT as u64 {
            return Some(all);
        }
        let _ = common::request(app.addr, "POST", "/api/v1/processes/1/resume", &[]).await;
        None
    })
    .await;
    let summary = all
        .iter()
        .find(|l| l["result"] == "suppressed")
        .expect("a summary line");
    assert_eq!(summary["action"], "audit");
    assert_eq!(summary["reason"], "rate_limit");
    app.stop().await.expect("clean stop");
}
