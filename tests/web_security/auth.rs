//! Basic auth on every endpoint, refusals without detail, extra headers.

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_guards_every_endpoint_and_says_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hash = bcrypt::hash("s3cret", 4).expect("bcrypt");
    let yaml = format!(
        "basic_auth_users:\n  alice: {hash}\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n"
    );
    let app = daemon(dir.path(), &yaml).await;
    let b64 = |s: &str| {
        use base64::Engine as _;
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(s))
    };
    for path in ["/metrics", "/", "/-/healthy", "/-/ready", "/api/v1/snapshot", "/nope"] {
        for auth in [
            None,
            Some(b64("alice:wrong")),
            Some(b64("bob:s3cret")),
            Some("Bearer x".into()),
        ] {
            let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
            let r = app.get_with(path, &headers).await;
            assert_eq!(r.status, 401, "{path} {auth:?}");
            assert_eq!(r.header("WWW-Authenticate"), Some("Basic"));
            assert_eq!(r.body, "Unauthorized\n", "no detail in the body");
            assert_eq!(r.header("X-Frame-Options"), Some("deny"), "headers on refusals too");
        }
    }
    let right = b64("alice:s3cret");
    for _ in 0..3 {
        // Repeats are served from the verdict cache.
        let r = app.get_with("/metrics", &[("Authorization", &right)]).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.body.contains("gpumem_"));
        assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
    }
    // The lifecycle POSTs: 401 without credentials, from this
    // layer, before the endpoint's own 403 for a lifecycle API left off.
    for action in ["suspend", "resume"] {
        let path = format!("/api/v1/processes/1/{action}");
        let r = common::request(app.addr, "POST", &path, &[]).await;
        assert_eq!(r.status, 401, "{path} without credentials");
        let r = common::request(app.addr, "POST", &path, &[("Authorization", &right)]).await;
        assert_eq!(r.status, 403, "{path} with credentials, lifecycle off: {}", r.body);
    }
    // Methods other than GET/HEAD (and POST /-/reload) stay 405 behind auth.
    let r = common::request(app.addr, "DELETE", "/metrics", &[("Authorization", &right)]).await;
    assert_eq!(r.status, 405);
    app.stop().await.expect("clean stop");
}
