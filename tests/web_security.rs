//! The web security layer over real sockets: TLS (certificates made here
//! with rcgen) with every client certificate policy, basic auth, extra
//! headers, certificate rotation without restart, and the limits that keep
//! idle, slow and oversized clients from holding the server. The daemon runs
//! in-process through `gpumemd::run` with `[server] web_config_file` set.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

mod common;
// An inline module in a root test file resolves its modules in the folder
// of its name: `web_security::tls` is tests/web_security/tls.rs.
mod web_security {
    mod attack;
    mod auth;
    mod config;
    mod hold;
    mod limits;
    mod tls;
}

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{App, spawn_app, test_config, wait_true, wait_until};
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(20);

/// A CA and what it signs, as PEM.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

struct Leaf {
    cert: String,
    key: String,
    der: Vec<u8>,
}

fn ca(name: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().expect("key");
    let cert = p.self_signed(&key).expect("self-sign");
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(p, key),
    }
}

fn leaf(ca: &Ca, cn: &str, client: bool) -> Leaf {
    let mut p = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("params");
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages.push(if client {
        ExtendedKeyUsagePurpose::ClientAuth
    } else {
        ExtendedKeyUsagePurpose::ServerAuth
    });
    let key = KeyPair::generate().expect("key");
    let cert = p.signed_by(&key, &ca.issuer).expect("sign");
    Leaf {
        cert: cert.pem(),
        key: key.serialize_pem(),
        der: cert.der().to_vec(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write test file");
    p
}

/// Writes `yaml` as web.yml in `dir` and starts the daemon with it.
async fn daemon(dir: &Path, yaml: &str) -> App {
    let mut cfg = test_config("100ms");
    cfg.server.web_config_file = Some(write(dir, "web.yml", yaml));
    let src = SimulatedSource::new(
        Scenario::resolve("default").expect("built-in scenario"),
        Duration::from_millis(100),
        1_700_000_000.0,
    );
    spawn_app(cfg, Box::new(src)).await
}

fn client(ca: &Ca, identity: Option<&Leaf>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).expect("CA"))
        .pool_max_idle_per_host(0)
        .tls_info(true)
        .timeout(Duration::from_secs(10));
    if let Some(l) = identity {
        let pem = format!("{}{}", l.key, l.cert);
        b = b.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"));
    }
    b.build().expect("client")
}

/// Status and, on success, the server certificate that came with it.
async fn https(c: &reqwest::Client, addr: SocketAddr, path: &str) -> Result<(u16, Vec<u8>, String), String> {
    let r = c
        .get(format!("https://{addr}{path}"))
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let cert = r
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|t| t.peer_certificate())
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    let status = r.status().as_u16();
    Ok((status, cert, r.text().await.unwrap_or_default()))
}

/// Server cert, key and CA files in a fresh directory.
fn tls_dir() -> (tempfile::TempDir, Ca, Leaf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca("gpumemd test CA");
    let server = leaf(&ca, "gpumemd server", false);
    write(dir.path(), "server.pem", &server.cert);
    write(dir.path(), "server.key", &server.key);
    write(dir.path(), "ca.pem", &ca.pem);
    (dir, ca, server)
}

const TLS_ONLY: &str = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n";

/// Writes raw bytes, then reads until the server closes; `None` when the
/// server closed without answering.
async fn raw(addr: SocketAddr, req: &[u8]) -> Option<String> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    // The server may answer and close before it has read everything.
    let _ = s.write_all(req).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    (!out.is_empty()).then(|| String::from_utf8_lossy(&out).into_owned())
}
