//! TLS: https with the configured certificate, plain HTTP refused, TLS
//! versions, each client certificate policy, and rotation without restart.

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_metrics_and_plain_http_is_refused() {
    let (dir, ca, server) = tls_dir();
    let app = daemon(dir.path(), TLS_ONLY).await;
    let c = client(&ca, None);
    let (status, cert, body) = https(&c, app.addr, "/metrics").await.expect("https GET");
    assert_eq!(status, 200);
    assert_eq!(cert, server.der, "the configured certificate is served");
    assert!(body.contains("gpumem_build_info"), "{body}");
    // Plain HTTP on the TLS port: a 400 that says why, and no metrics.
    let r = common::get(app.addr, "/metrics", &[]).await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("HTTPS"), "{}", r.body);
    assert!(!r.body.contains("gpumem_"), "{}", r.body);
    // A client that will not go above TLS 1.2 is refused with min_version TLS13.
    app.stop().await.expect("clean stop");
    let app = daemon(dir.path(), &format!("{TLS_ONLY}  min_version: TLS13\n")).await;
    assert_eq!(https(&c, app.addr, "/metrics").await.expect("TLS 1.3").0, 200);
    let tls12 = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).expect("CA"))
        .max_tls_version(reqwest::tls::Version::TLS_1_2)
        .build()
        .expect("client");
    assert!(https(&tls12, app.addr, "/metrics").await.is_err());
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_and_verify_client_cert_accepts_only_the_ca_s_clients() {
    let (dir, ca, _) = tls_dir();
    let good = leaf(&ca, "prometheus", true);
    let stranger = leaf(&self::ca("another CA"), "intruder", true);
    let yaml = format!("{TLS_ONLY}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n");
    let app = daemon(dir.path(), &yaml).await;
    assert!(
        https(&client(&ca, None), app.addr, "/metrics").await.is_err(),
        "no client cert"
    );
    assert!(
        https(&client(&ca, Some(&stranger)), app.addr, "/metrics")
            .await
            .is_err(),
        "foreign client cert"
    );
    let (status, _, body) = https(&client(&ca, Some(&good)), app.addr, "/metrics")
        .await
        .expect("valid client cert");
    assert_eq!(status, 200);
    assert!(body.contains("gpumem_"), "{body}");
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_and_any_client_cert_policies() {
    let (dir, ca, _) = tls_dir();
    let good = leaf(&ca, "prometheus", true);
    let stranger = leaf(&self::ca("another CA"), "intruder", true);
    let yaml = format!("{TLS_ONLY}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.pem\n");
    let app = daemon(dir.path(), &yaml).await;
    assert_eq!(https(&client(&ca, None), app.addr, "/").await.expect("no cert").0, 200);
    assert_eq!(
        https(&client(&ca, Some(&good)), app.addr, "/").await.expect("good").0,
        200
    );
    assert!(
        https(&client(&ca, Some(&stranger)), app.addr, "/").await.is_err(),
        "unverifiable cert"
    );
    app.stop().await.expect("clean stop");
    // RequireAnyClientCert: some certificate is required, any issuer will do.
    let app = daemon(
        dir.path(),
        &format!("{TLS_ONLY}  client_auth_type: RequireAnyClientCert\n"),
    )
    .await;
    assert!(https(&client(&ca, None), app.addr, "/").await.is_err(), "no cert");
    assert_eq!(
        https(&client(&ca, Some(&stranger)), app.addr, "/")
            .await
            .expect("any")
            .0,
        200
    );
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificates_are_served_without_a_restart() {
    let (dir, ca, old) = tls_dir();
    let app = daemon(dir.path(), TLS_ONLY).await;
    let c = client(&ca, None);
    assert_eq!(https(&c, app.addr, "/-/healthy").await.expect("old cert").1, old.der);
    // A broken new pair keeps the old one in force: every connection in
    // the next 1.5 s (past a re-check) still gets the old certificate.
    write(dir.path(), "server.pem", "not a certificate");
    let until = Instant::now() + Duration::from_millis(1500);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while Instant::now() < until {
        tick.tick().await;
        assert_eq!(https(&c, app.addr, "/-/healthy").await.expect("old cert").1, old.der);
    }
    let new = leaf(&ca, "gpumemd server, rotated", false);
    write(dir.path(), "server.key", &new.key);
    write(dir.path(), "server.pem", &new.cert);
    wait_until(WAIT, "the rotated certificate", || async {
        https(&c, app.addr, "/-/healthy")
            .await
            .ok()
            .filter(|(_, cert, _)| *cert == new.der)
    })
    .await;
    app.stop().await.expect("clean stop");
}

/// `gpumemd resume` reaches a daemon behind a private CA that requires a
/// client certificate and basic auth: with `--ca-file`,
/// `--cert-file`/`--key-file` and the credentials it gets the endpoint's own
/// answer (403: lifecycle is off here), without the client certificate it
/// does not get an HTTP answer at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resume_cli_reaches_a_tls_daemon_with_a_client_cert() {
    let (dir, ca, _) = tls_dir();
    let good = leaf(&ca, "operator", true);
    let cert = write(dir.path(), "client.pem", &good.cert);
    let key = write(dir.path(), "client.key", &good.key);
    let pw = write(dir.path(), "pw", "s3cret\n");
    let hash = bcrypt::hash("s3cret", 4).expect("bcrypt");
    let yaml = format!(
        "{TLS_ONLY}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\nbasic_auth_users:\n  alice: {hash}\n"
    );
    let app = daemon(dir.path(), &yaml).await;
    let url = format!("https://127.0.0.1:{}", app.addr.port());
    let ca_file = dir.path().join("ca.pem");
    let run = |with_cert: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_gpumemd"));
        c.args(["resume", "4242", "--url", &url, "--user", "alice"])
            .arg("--password-file")
            .arg(&pw)
            .arg("--ca-file")
            .arg(&ca_file);
        if with_cert {
            c.arg("--cert-file").arg(&cert).arg("--key-file").arg(&key);
        }
        async move {
            let out = tokio::task::spawn_blocking(move || c.output().expect("run gpumemd resume"))
                .await
                .expect("join");
            (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
        }
    };
    let (ok, err) = run(true).await;
    assert!(
        !ok && err.contains("lifecycle API is off") && err.contains("enable_lifecycle = true"),
        "{err}"
    );
    let (ok, err) = run(false).await;
    assert!(
        !ok && err.contains("cannot ask ") && !err.contains("lifecycle API"),
        "no HTTP answer without a client cert: {err}"
    );
    app.stop().await.expect("clean stop");
}
