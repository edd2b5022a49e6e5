//! Response compression over real HTTP: with `Accept-Encoding: gzip` the
//! exposition and the JSON API come gzipped and decompress to what a plain
//! request gets; without it (or asking only for an encoding gpumemd does
//! not speak) they come plain. The daemon polls once (a long interval), so
//! two requests see the same snapshot.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use crate::common;

use std::io::Read as _;
use std::net::SocketAddr;
use std::time::Duration;

use common::{App, spawn_app, test_config, wait_until};
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;

const WAIT: Duration = Duration::from_secs(20);

/// A response with its body as bytes, de-chunked.
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        let h = self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name));
        h.map(|(_, v)| v.as_str())
    }

    /// The body as text, gunzipped when it says it is gzip.
    fn text(&self) -> String {
        let mut out = String::new();
        if self.header("content-encoding") == Some("gzip") {
            flate2::read::GzDecoder::new(&self.body[..])
                .read_to_string(&mut out)
                .expect("valid gzip");
        } else {
            out = String::from_utf8(self.body.clone()).expect("utf-8 body");
        }
        out
    }
}

async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Raw {
    let raw = common::request_raw(addr, "GET", path, headers).await;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("end of header");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut r = Raw {
        status: status.expect("status line"),
        headers,
        body: raw[split + 4..].to_vec(),
    };
    if r.header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        r.body = dechunk(&r.body);
    }
    r
}

fn dechunk(mut s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = s.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&s[..eol]).unwrap_or("0");
        let n = usize::from_str_radix(size.split(';').next().unwrap_or("0").trim(), 16).unwrap_or(0);
        let rest = &s[eol + 2..];
        if n == 0 || rest.len() < n {
            break;
        }
        out.extend_from_slice(&rest[..n]);
        s = rest[n..].strip_prefix(b"\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// The demo, polled once: the next poll is a minute away.
async fn demo() -> App {
    let sc = Scenario::resolve("default").expect("built-in scenario");
    let src = SimulatedSource::new(sc, Duration::from_secs(60), 1_700_000_000.0);
    let app = spawn_app(test_config("60s"), Box::new(src)).await;
    wait_until(WAIT, "ready", || async {
        (app.get("/-/ready").await.status == 200).then_some(())
    })
    .await;
    app
}

/// The exposition without the `process_*` samples, which are read from
/// /proc/self at each scrape (CPU time, open files) and may differ.
fn stable(exposition: &str) -> String {
    let keep = |l: &&str| !l.starts_with("process_");
    exposition.lines().filter(keep).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn metrics_are_gzipped_when_asked_and_plain_otherwise() {
    let app = demo().await;
    let plain = get(app.addr, "/metrics", &[]).await;
    let gz = get(app.addr, "/metrics", &[("Accept-Encoding", "gzip")]).await;
    assert_eq!((plain.status, gz.status), (200, 200));
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(gz.header("content-type"), plain.header("content-type"));
    // Caches must not give a gzipped body to a client that did not ask.
    assert!(
        gz.header("vary")
            .is_some_and(|v| v.to_ascii_lowercase().contains("accept-encoding"))
    );
    let (p, g) = (plain.text(), gz.text());
    assert!(p.contains("gpumem_device_memory_used_bytes{"), "{p}");
    assert_eq!(stable(&g), stable(&p));
    assert!(
        gz.body.len() * 4 < plain.body.len(),
        "gzip {} vs plain {} bytes",
        gz.body.len(),
        plain.body.len()
    );
    // What Prometheus sends, and an encoding gpumemd does not speak.
    let prom = get(app.addr, "/metrics", &[("Accept-Encoding", "gzip, identity;q=0.5")]).await;
    assert_eq!(prom.header("content-encoding"), Some("gzip"));
    let br = get(app.addr, "/metrics", &[("Accept-Encoding", "br")]).await;
    assert_eq!(br.header("content-encoding"), None);
    assert_eq!(stable(&br.text()), stable(&p));
    // OpenMetrics bodies are gzipped too, and a client may refuse gzip.
    let om = [("Accept", "application/openmetrics-text; version=1.0.0")];
    let om_plain = get(app.addr, "/metrics", &om).await;
    let om_gz = get(app.addr, "/metrics", &[om[0], ("Accept-Encoding", "gzip")]).await;
    assert!(
        om_gz
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/openmetrics-text"))
    );
    assert_eq!(om_gz.header("content-encoding"), Some("gzip"));
    assert!(om_gz.text().ends_with("# EOF\n"));
    assert_eq!(stable(&om_gz.text()), stable(&om_plain.text()));
    let refused = get(app.addr, "/metrics", &[("Accept-Encoding", "gzip;q=0")]).await;
    assert_eq!(refused.header("content-encoding"), None);
    app.stop().await.expect("clean stop");
}

#[tokio::test]
async fn json_api_is_gzipped_when_asked() {
    let app = demo().await;
    for path in ["/api/v1/snapshot", "/api/v1/alerts"] {
        let plain = get(app.addr, path, &[]).await;
        let gz = get(app.addr, path, &[("Accept-Encoding", "gzip")]).await;
        assert_eq!((plain.status, gz.status), (200, 200), "{path}");
        assert_eq!(plain.header("content-encoding"), None, "{path}");
        assert_eq!(gz.header("content-encoding"), Some("gzip"), "{path}");
        let (p, g) = (plain.text(), gz.text());
        let parsed: serde_json::Value = serde_json::from_str(&g).expect("gunzipped JSON parses");
        assert!(parsed.is_object(), "{path}: {g}");
        assert_eq!(g, p, "{path}");
    }
    app.stop().await.expect("clean stop");
}
