//! The effective config as `check-config` prints it, with what could be a
//! credential taken out: secrets already print as `<secret>`; URLs keep
//! scheme, host and port (where alerts go) but lose user info, path, query
//! and fragment, where webhook tokens live (Slack and Discord put them in
//! the path, others in `?token=`). It must not change the loaded config.

use super::Config;

/// Shown in place of a URL's path, query or user info.
const REDACTED: &str = "<redacted>";

/// The config as TOML text with URL credentials and tokens redacted.
///
/// # Errors
/// The config cannot be serialized (it always can; the error is passed on
/// rather than assumed away).
pub fn printable(cfg: &Config) -> Result<String, toml::ser::Error> {
    let mut table = toml::Table::try_from(cfg)?;
    redact_table(&mut table);
    toml::to_string(&table)
}

fn redact_table(t: &mut toml::Table) {
    for (k, v) in t.iter_mut() {
        let is_url = k == "url" || k == "urls" || k.ends_with("_url");
        redact_value(v, is_url);
    }
}

fn redact_value(v: &mut toml::Value, is_url: bool) {
    match v {
        toml::Value::Table(t) => redact_table(t),
        toml::Value::Array(a) => a.iter_mut().for_each(|e| redact_value(e, is_url)),
        toml::Value::String(s) if is_url => *s = redact_url(s),
        _ => {}
    }
}

/// `scheme://host:port/<redacted>`; a URL that does not parse is hidden whole.
pub fn redact_url(url: &str) -> String {
    let Ok(u) = reqwest::Url::parse(url) else {
        return REDACTED.to_string();
    };
    let mut out = format!("{}://", u.scheme());
    if !u.username().is_empty() || u.password().is_some() {
        out.push_str(REDACTED);
        out.push('@');
    }
    out.push_str(u.host_str().unwrap_or_default());
    if let Some(port) = u.port() {
        out.push_str(&format!(":{port}"));
    }
    let hidden = (u.path() != "/" && !u.path().is_empty()) || u.query().is_some() || u.fragment().is_some();
    out.push('/');
    if hidden {
        out.push_str(REDACTED);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_where_and_lose_tokens() {
        let cases = [
            ("http://localhost:9093", "http://localhost:9093/"),
            (
                "https://hooks.slack.com/services/T000/B000/XXXXSECRET",
                "https://hooks.slack.com/<redacted>",
            ),
            ("https://h.example/hook?token=abc123", "https://h.example/<redacted>"),
            ("https://u:p@h.example/", "https://<redacted>@h.example/"),
            ("not a url", "<redacted>"),
        ];
        for (url, want) in cases {
            assert_eq!(redact_url(url), want, "{url}");
        }
    }

    #[test]
    fn printed_config_has_no_token_or_secret() {
        let cfg = Config::from_toml(
            "[notify.webhook]\nurl = \"https://h.example/hook/SECRETPATH?token=SECRETQUERY\"\nsecret = \"SECRETHMAC\"\n\
             [notify.alertmanager]\nurls = [\"http://am:9093\"]\nbearer_token = \"SECRETBEARER\"\n",
            "t",
            false,
        )
        .expect("valid");
        let text = printable(&cfg).expect("printable");
        assert!(!text.contains("SECRET"), "{text}");
        assert!(text.contains("https://h.example/<redacted>"), "{text}");
        assert!(text.contains("http://am:9093/"), "{text}");
    }
}
