//! Config checks that span more than one field's parser: the listen
//! address form, `[[rule]]` checks (reserved label names included) and the
//! mapping of `[notify]`'s keyed messages to located errors. Called from
//! `Config::validate`; it must not read files or change the config.

use std::time::Duration;

use super::locate::{KeyPath, Located};
use super::{Config, ConfigError};

/// A poll interval above this is a typo (the daemon would look dead).
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(3600);

/// Rule label names that would clash with the labels `gpumem_alerts` sets
/// itself, or that Prometheus reserves (`__` prefix).
const RESERVED_LABELS: &[&str] = &["alertname", "alertstate"];

/// A parsed `[host]:port`; `host` is `None` for all interfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddr {
    pub host: Option<String>,
    pub port: u16,
}

/// Why a listen address was refused; each text ends with the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenError {
    #[error("`{0}` has no port; {LISTEN_HINT}")]
    NoPort(String),
    #[error("`{port}` in `{addr}` is not a port number; {LISTEN_HINT}")]
    BadPort { port: String, addr: String },
    #[error("`{0}` has a space in the host; {LISTEN_HINT}")]
    SpaceInHost(String),
}

const LISTEN_HINT: &str = "use \":9947\", \"127.0.0.1:9947\" or \"[::1]:9947\"";

/// Parses ":9947", "127.0.0.1:9947", "[::1]:9947" or "localhost:9947".
///
/// # Errors
/// What is wrong, with the forms expected.
pub fn parse_listen(s: &str) -> Result<ListenAddr, ListenError> {
    let (host, port) = s.rsplit_once(':').ok_or_else(|| ListenError::NoPort(s.to_owned()))?;
    let port: u16 = port.parse().map_err(|_| ListenError::BadPort {
        port: port.to_owned(),
        addr: s.to_owned(),
    })?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.contains(char::is_whitespace) {
        return Err(ListenError::SpaceInHost(s.to_owned()));
    }
    Ok(ListenAddr {
        host: (!host.is_empty()).then(|| host.to_string()),
        port,
    })
}

impl Config {
    /// Validates every `[[rule]]`; errors name the rule and its line.
    pub(super) fn check_rules(&self, origin: &str, doc: &Located<'_>) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for (i, r) in self.rules.iter().enumerate() {
            let at = KeyPath::keys(&["rule"]).index(i);
            let fail = |path: KeyPath, message: String| ConfigError::Invalid {
                origin: origin.to_string(),
                line: doc.line_of(&path).or_else(|| doc.line_of(&at)),
                key: format!("rule {:?}", r.name),
                message,
            };
            if !seen.insert(r.name.as_str()) {
                return Err(fail(
                    at.clone().key("name"),
                    "a rule with this name is already defined".into(),
                ));
            }
            if let Some(k) = r
                .labels
                .keys()
                .find(|k| RESERVED_LABELS.contains(&k.as_str()) || k.starts_with("__"))
            {
                return Err(fail(
                    at.clone().key("labels").key(k),
                    format!(
                        "labels.{k}: `{k}` is reserved (gpumemd sets alertname and alertstate itself, and names \
                         starting with __ are Prometheus' own); choose another label name"
                    ),
                ));
            }
            crate::rules::Rule::new(r.clone()).map_err(|e| fail(at.clone().key("name"), e.to_string()))?;
        }
        Ok(())
    }
}

/// An error from `[notify]`'s own `validate()`, located by its dotted key
/// ("notify.alertmanager.urls[1]").
pub(super) fn keyed_error(origin: &str, doc: &Located<'_>, e: crate::notify::NotifyConfigError) -> ConfigError {
    let mut path = KeyPath::default();
    for part in e.key.split('.') {
        match part.split_once('[') {
            Some((k, i)) => {
                path = path.key(k);
                if let Ok(i) = i.trim_end_matches(']').parse() {
                    path = path.index(i);
                }
            }
            None => path = path.key(part),
        }
    }
    ConfigError::Invalid {
        origin: origin.to_string(),
        line: doc.line_of(&path),
        key: e.key,
        message: e.problem.to_string(),
    }
}
