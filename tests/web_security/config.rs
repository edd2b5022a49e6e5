//! Web config validation: each bad file is one line naming the problem,
//! from the library and from the binary.

use crate::*;

fn load_err(dir: &Path, yaml: &str) -> String {
    let p = write(dir, "bad.yml", yaml);
    match gpumemd::serve::http::webconfig::load(&p) {
        Ok(_) => panic!("accepted:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

/// (file, what the error must say); run in a `tls_dir()` with a client key.
fn bad_cases() -> Vec<(String, &'static str)> {
    vec![
        ("tls_server_config:\n  certfile: x\n".into(), "unknown field `certfile`"),
        ("nonsense: 1\n".into(), "unknown field `nonsense`"),
        (
            "tls_server_config:\n  cert_file: server.pem\n".into(),
            "missing one of key or key_file",
        ),
        (
            "tls_server_config:\n  cert_file: nope.pem\n  key_file: server.key\n".into(),
            "cannot read",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: client.key\n".into(),
            "do not make a pair",
        ),
        (
            format!("{TLS_ONLY}  min_version: TLS11\n"),
            "TLS 1.0 and 1.1 are not supported",
        ),
        (
            format!("{TLS_ONLY}  min_version: TLS13\n  max_version: TLS12\n"),
            "above max_version",
        ),
        (
            format!("{TLS_ONLY}  client_ca_file: ca.pem\n"),
            "client CAs are configured",
        ),
        (
            format!("{TLS_ONLY}  client_auth_type: RequireAndVerifyClientCert\n"),
            "needs client_ca_file",
        ),
        (format!("{TLS_ONLY}  client_auth_type: Maybe\n"), "is not one of"),
        (
            format!("{TLS_ONLY}  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n"),
            "not supported",
        ),
        (format!("{TLS_ONLY}  curve_preferences: [CurveP521]\n"), "is not one of"),
        (format!("{TLS_ONLY}  client_allowed_sans: [a]\n"), "not supported"),
        (
            "basic_auth_users:\n  alice: plain\n".into(),
            "basic_auth_users.alice: not a bcrypt hash",
        ),
        (
            "http_server_config:\n  headers:\n    Server: x\n".into(),
            "can not be configured",
        ),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n".into(),
            "invalid value for X-Frame-Options",
        ),
        ("rate_limit:\n  interval: 1s\n".into(), "rate_limit.burst"),
        (
            "rate_limit:\n  interval: 99999999h\n  burst: 1\n".into(),
            "longer than 30 days",
        ),
        ("limits:\n  max_header_bytes: 100\n".into(), "at least 8192"),
        ("limits:\n  request_timeout: soon\n".into(), "limits.request_timeout"),
        // hyper reserves room per request for every allowed header.
        (
            "limits:\n  max_headers: 100000000\n".into(),
            "limits.max_headers: 100000000 is not between 1 and 1024",
        ),
        ("limits:\n  max_header_bytes: 4294967296\n".into(), "at most 1048576"),
        (
            "limits:\n  request_timeout: 9999999999h\n".into(),
            "limits.request_timeout: \"9999999999h\" is more than the maximum of 1h",
        ),
        (
            "limits:\n  max_connections_per_source: 0\n".into(),
            "limits.max_connections_per_source: 0 is not between 1 and 2^31",
        ),
        (
            "limits:\n  max_held_response_bytes: 0\n".into(),
            "limits.max_held_response_bytes must be above 0",
        ),
    ]
}

#[test]
fn bad_web_configs_are_refused_with_one_line() {
    let (dir, ca, _) = tls_dir();
    let client = leaf(&ca, "c", true);
    write(dir.path(), "client.key", &client.key);
    for (yaml, want) in bad_cases() {
        let e = load_err(dir.path(), &yaml);
        assert!(e.contains(want), "{yaml}\n got: {e}\nwant: {want}");
        assert!(e.starts_with("web config "), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

#[test]
fn every_supported_key_loads() {
    let (dir, _, _) = tls_dir();
    let d = dir.path();
    let good = format!(
        "{TLS_ONLY}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  min_version: TLS12\n  \
         cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n  \
         curve_preferences: [X25519, CurveP256]\n  prefer_server_cipher_suites: true\n\
         http_server_config:\n  http2: false\n  headers:\n    Strict-Transport-Security: max-age=31536000\n\
         rate_limit:\n  interval: 100ms\n  burst: 10\nlimits:\n  max_connections_per_source: 8\n"
    );
    let p = write(d, "good.yml", &good);
    let cfg = gpumemd::serve::http::webconfig::load(&p).expect("good config");
    assert!(cfg.tls.is_some() && cfg.rate_limit.is_some() && cfg.auth.is_none());
    assert_eq!(cfg.limits.max_connections_per_source, 8);
    let empty = write(d, "empty.yml", "");
    assert!(
        gpumemd::serve::http::webconfig::load(&empty)
            .expect("empty")
            .tls
            .is_none()
    );
}

#[test]
fn a_bad_web_config_file_stops_the_binary_with_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write(
        dir.path(),
        "web.yml",
        "tls_server_config:\n  cert_file: /nonexistent.pem\n  key_file: k\n",
    );
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpumemd"))
        .args(["--demo", "--web.listen-address", "127.0.0.1:0", "--web.config.file"])
        .arg(&p)
        .env_remove("RUST_LOG")
        .output()
        .expect("run gpumemd");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let want = format!(
        "gpumemd: web config {}: tls_server_config: cert_file /nonexistent.pem",
        p.display()
    );
    assert!(err.starts_with(&want), "got: {err}\nwant: {want}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// `/dev/zero` (or any device) as the web config is refused at once, not
/// read until memory runs out.
#[test]
fn a_device_as_web_config_is_refused() {
    let e = gpumemd::serve::http::webconfig::load(Path::new("/dev/zero"))
        .expect_err("a device is no web config")
        .to_string();
    assert!(e.contains("character device, not a regular file"), "{e}");
}
