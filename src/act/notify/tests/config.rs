//! Config parsing, defaults, redaction and validation messages.

use std::time::Duration;

use super::super::{NotifyConfig, Secret};

fn parse(text: &str) -> NotifyConfig {
    toml::from_str(text).unwrap_or_else(|e| panic!("parse {text}: {e}"))
}

fn invalid(text: &str) -> String {
    match parse(text).validate() {
        Ok(()) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn defaults_fill_in() {
    let c = parse("[alertmanager]\nurls = [\"http://am:9093\"]\n[webhook]\nurl = \"https://hooks.example/x\"\n");
    let am = c.alertmanager.as_ref().expect("am");
    assert_eq!(am.resend, Duration::from_secs(60));
    assert_eq!(am.timeout, Duration::from_secs(10));
    assert_eq!(am.max_queue, 10_000);
    let wh = c.webhook.as_ref().expect("webhook");
    assert_eq!(
        (wh.retry_initial, wh.retry_max),
        (Duration::from_secs(1), Duration::from_secs(300))
    );
    assert_eq!(wh.max_attempts, None);
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(NotifyConfig::default().validate(), Ok(()));
}

#[test]
fn durations_secrets_and_auth_parse() {
    let c = parse(concat!(
        "[alertmanager]\nurls = [\"https://am:9093/\"]\nresend = \"1m30s\"\ntimeout = \"500ms\"\n",
        "basic_auth = { username = \"u\", password = \"hunter2\" }\n",
        "[webhook]\nurl = \"http://h/x?token=1\"\nsecret = \"s3\"\nmax_attempts = 5\n"
    ));
    let am = c.alertmanager.as_ref().expect("am");
    assert_eq!(am.resend, Duration::from_secs(90));
    assert_eq!(am.timeout, Duration::from_millis(500));
    assert_eq!(am.basic_auth.as_ref().map(|b| b.password.expose()), Some("hunter2"));
    assert_eq!(
        c.webhook.as_ref().and_then(|w| w.secret.clone()),
        Some(Secret::new("s3"))
    );
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn secrets_never_print() {
    let c = parse(concat!(
        "[alertmanager]\nurls = [\"http://am:9093\"]\nbearer_token = \"tok-123\"\n",
        "[webhook]\nurl = \"http://h/x\"\nsecret = \"hmac-456\"\n"
    ));
    let debug = format!("{c:?}");
    let toml_out = toml::to_string(&c).expect("serialize");
    for shown in [&debug, &toml_out] {
        assert!(!shown.contains("tok-123") && !shown.contains("hmac-456"), "{shown}");
        assert!(shown.contains("<secret>"), "{shown}");
    }
    assert!(toml_out.contains("resend = \"1m\""), "{toml_out}");
}

#[test]
fn unknown_keys_and_bad_durations_are_rejected_by_serde() {
    for text in [
        "[alertmanager]\nurls = []\nresnd = \"1m\"\n",
        "[alertmanager]\nurls = []\nresend = \"soon\"\n",
        "[pagerduty]\nkey = \"x\"\n",
    ] {
        assert!(toml::from_str::<NotifyConfig>(text).is_err(), "{text}");
    }
}

#[test]
fn validation_names_the_key() {
    let am = |rest: &str| format!("[alertmanager]\n{rest}\n");
    let cases = [
        (am("urls = []"), "notify.alertmanager.urls: at least one"),
        (
            am("urls = [\"http://a:9093\", \"ftp://x\"]"),
            "notify.alertmanager.urls[1]: `ftp://x` is not an http(s) URL",
        ),
        (am("urls = [\"\"]"), "notify.alertmanager.urls[0]: must not be empty"),
        (
            am("urls = [\"am:9093\"]"),
            "notify.alertmanager.urls[0]: `am:…` is not an http(s) URL",
        ),
        (
            am("urls = [\"http://u:p@am:9093\"]"),
            "notify.alertmanager.urls[0]: credentials in the URL",
        ),
        (
            am("urls = [\"http://am:9093?token=SECRET\"]"),
            "notify.alertmanager.urls[0]: `http://am:9093…` must be a base URL",
        ),
        (
            am("urls = [\"ftp://u:SECRET@am\"]"),
            "notify.alertmanager.urls[0]: `ftp://am…` is not an http(s) URL",
        ),
        (
            am("urls = [\"ftp://hooks.example.com/services/T0/SECRET\"]"),
            "notify.alertmanager.urls[0]: `ftp://hooks.example.com…` is not an http(s) URL",
        ),
        (
            am("urls = [\"http://a/SECRET\", \"http://a/SECRET\"]"),
            "notify.alertmanager.urls[1]: `http://a…` is listed twice",
        ),
        (
            am("urls = [\"hooks.example.com/SECRET\"]"),
            "notify.alertmanager.urls[0]: `hooks.example.com…` is not an http(s) URL",
        ),
        (
            am("urls = [\"http://a\", \"http://a/\"]"),
            "notify.alertmanager.urls[1]: `http://a` is listed twice",
        ),
        (
            am("urls = [\"http://a\"]\nresend = \"0s\""),
            "notify.alertmanager.resend: must be above zero",
        ),
        (
            am("urls = [\"http://a\"]\nresend = \"2d\""),
            "notify.alertmanager.resend: 2days is more than a day",
        ),
        (
            am("urls = [\"http://a\"]\nmax_queue = 0"),
            "notify.alertmanager.max_queue: must be at least 1",
        ),
        (
            am("urls = [\"http://a\"]\nbearer_token = \"t\"\nbasic_auth = { username = \"u\", password = \"p\" }"),
            "notify.alertmanager: set basic_auth or bearer_token, not both",
        ),
        (
            am("urls = [\"http://a\"]\nbasic_auth = { username = \"\", password = \"p\" }"),
            "notify.alertmanager.basic_auth.username",
        ),
        ("[webhook]\nurl = \"\"".into(), "notify.webhook.url: must not be empty"),
        (
            "[webhook]\nurl = \"file:///etc/passwd\"".into(),
            "notify.webhook.url: `file:…` is not an http(s) URL",
        ),
        (
            "[webhook]\nurl = \"http://h\"\nsecret = \"\"".into(),
            "notify.webhook.secret: must not be empty",
        ),
        (
            "[webhook]\nurl = \"http://h\"\ntimeout = \"0s\"".into(),
            "notify.webhook.timeout: must be above zero",
        ),
        (
            "[webhook]\nurl = \"http://h\"\nretry_initial = \"10s\"\nretry_max = \"1s\"".into(),
            "notify.webhook.retry_max: 1s is below",
        ),
        (
            "[webhook]\nurl = \"http://h\"\nmax_attempts = 0".into(),
            "notify.webhook.max_attempts: must be at least 1",
        ),
    ];
    for (text, want) in cases {
        let got = invalid(&text);
        assert!(got.starts_with(want), "for {text:?}\n got: {got}\nwant: {want}");
    }
}
