//! `http::webconfig::parse`: the exporter-toolkit web config (YAML). The
//! text is parsed as if it were `web.yml` in a folder that holds a real
//! certificate and key (`server.pem`, `server.key`, `ca.pem`, made here), so
//! mutations that keep the TLS section reach certificate loading and the
//! rustls config, not only "cannot read".

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use gpumemd::serve::http::webconfig;
use proptest::prelude::*;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

use super::mutate;
use crate::{Seed, assert_one_line, bounded, cases, corpus};

const DICT: &[&str] = &[
    "tls_server_config:",
    "http_server_config:",
    "basic_auth_users:",
    "rate_limit:",
    "limits:",
    "cert_file: server.pem",
    "key_file: server.key",
    "client_ca_file: ca.pem",
    "cert_file",
    "key_file",
    "cert",
    "key",
    "client_ca",
    "client_auth_type",
    "RequireAndVerifyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAnyClientCert",
    "RequestClientCert",
    "NoClientCert",
    "min_version",
    "max_version",
    "TLS10",
    "TLS12",
    "TLS13",
    "cipher_suites",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "curve_preferences",
    "X25519",
    "CurveP384",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
    "http2",
    "headers",
    "X-Frame-Options",
    "Strict-Transport-Security",
    "X-Content-Type-Options: nosniff",
    "Server",
    "prometheus: $2b$10$7.xz4xtrQsjPFQf9srN9COKv7O.20sBWiouBYKmvSKHS8tHDevO/u",
    "$2y$04$",
    "interval",
    "burst",
    "max_connections",
    "max_connections_per_source",
    "max_held_response_bytes",
    "max_header_bytes",
    "max_headers",
    "header_read_timeout",
    "request_timeout",
    "tls_handshake_timeout",
    "-----BEGIN CERTIFICATE-----",
    "-----END CERTIFICATE-----",
    ":",
    ": ",
    "- ",
    "\n  ",
    "\n    ",
    "\n",
    "&a ",
    "*a",
    "<<: *a",
    "!!binary ",
    "!!str ",
    "!custom ",
    "---\n",
    "...\n",
    "{",
    "}",
    "[",
    "]",
    "|\n",
    ">-\n",
    "'",
    "\"",
    "#",
    "? ",
    "%YAML 1.2\n",
    "~",
    "null",
    "0x1F",
    "-1",
    "1e400",
    ".inf",
    "10s",
    "0s",
];

/// A folder with `server.pem` (a self-signed certificate that is also
/// `ca.pem`) and `server.key`, made once for the whole run.
fn tls_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, "gpumemd fuzz");
        let key = KeyPair::generate().expect("key");
        let cert = p.self_signed(&key).expect("self-sign");
        for (name, text) in [
            ("server.pem", cert.pem()),
            ("ca.pem", cert.pem()),
            ("server.key", key.serialize_pem()),
        ] {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        dir
    })
    .path()
}

fn check((text, path): (String, PathBuf)) -> Result<(), String> {
    webconfig::parse(&text, &path).map(drop).map_err(|e| {
        let msg = e.to_string();
        assert_one_line("web config", &msg);
        assert!(
            msg.starts_with(&format!("web config {}", path.display())),
            "error does not name the file: {msg}"
        );
        msg
    })
}

fn run(text: String) -> Result<(), String> {
    bounded("webconfig", (text, tls_dir().join("web.yml")), check)
}

fn seeds() -> Vec<Seed> {
    corpus("webconfig", &[])
}

fn trees() -> Vec<serde_json::Value> {
    seeds()
        .iter()
        .map(|s| {
            serde_yaml_ng::from_str::<serde_json::Value>(&s.text())
                .unwrap_or_else(|e| panic!("{}: {e}", s.name))
                // An empty document is null; mutations start from a mapping.
                .as_object()
                .map(|m| serde_json::Value::Object(m.clone()))
                .unwrap_or_else(|| serde_json::json!({}))
        })
        .collect()
}

#[test]
fn every_seed_is_a_valid_web_config() {
    for s in seeds() {
        if let Err(e) = run(s.text()) {
            panic!("seed {} does not load: {e}", s.name);
        }
    }
}

#[test]
fn deep_nesting_and_alias_bombs_are_errors_not_crashes() {
    let _ = run("[".repeat(50_000));
    let _ = run("a: ".repeat(20_000));
    // "Billion laughs": each level refers to the one below nine times.
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
    for i in 1..30 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    assert!(run(bomb).is_err(), "an alias bomb is refused");
}

/// Found by this file: a file name with a carriage return broke the
/// one-line rule before errors escaped control characters.
#[test]
fn regressions() {
    let err = run("tls_server_config:\n  cert_file: server.pem\n  key_file: \"a\\rb\"\n".into())
        .expect_err("no such key file");
    assert!(err.contains("a\\rb"), "the name is shown escaped: {err}");
}

format_properties!(yaml_tokens, 40, |t| serde_yaml_ng::to_string(t).ok());
