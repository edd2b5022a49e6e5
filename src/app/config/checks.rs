//! Config checks that span more than one field's parser: `Config::validate`
//! (poll bounds, process limits, and each section's own checks, located by
//! toml's spans), the listen address form, `[[rule]]` checks (reserved label
//! names included) and the mapping of `[notify]`'s keyed errors to located
//! ones. It must not read files; it only normalises the config it checks.

use std::time::Duration;

use super::locate::{KeyPath, Located};
use super::{Config, ConfigError, PositiveDuration, ProcessMode};

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

/// Parses `:9947`, `127.0.0.1:9947`, `[::1]:9947` or `localhost:9947`.
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
    /// Cross-field checks that a single field's parser cannot make; errors
    /// are located in `text` by toml's spans.
    pub(super) fn validate(mut self, origin: &str, text: &str) -> Result<Config, ConfigError> {
        let doc = Located::parse(text);
        let invalid = |keys: &[&str], message: String| ConfigError::at(origin, &doc, &KeyPath::keys(keys), message);
        let interval = self.poll.interval.get();
        let timeout = self.poll.effective_timeout();
        if interval > MAX_POLL_INTERVAL {
            return Err(invalid(
                &["poll", "interval"],
                format!(
                    "{} is more than the maximum of 1h; a monitor must poll at least hourly",
                    humantime::format_duration(interval)
                ),
            ));
        }
        if timeout >= interval {
            return Err(invalid(
                &["poll", "timeout"],
                format!(
                    "{} is not below poll.interval ({}); a poll must end before the next one is due",
                    humantime::format_duration(timeout),
                    humantime::format_duration(interval)
                ),
            ));
        }
        if self.processes.top_n == 0 && self.processes.mode == ProcessMode::PerProcess {
            return Err(invalid(
                &["processes", "top_n"],
                "0 exports no process at all; use mode = \"off\" for that, or a positive number".into(),
            ));
        }
        if self.processes.label_max_bytes < 8 {
            return Err(invalid(&["processes", "label_max_bytes"], "must be at least 8".into()));
        }
        parse_listen(&self.server.listen).map_err(|e| invalid(&["server", "listen"], e.to_string()))?;
        self.check_rules(origin, &doc)?;
        self.status_page.alias_runbook_into(&mut self.links);
        self.links.check().map_err(|e| invalid(&["links"], e.to_string()))?;
        self.notify.validate().map_err(|e| keyed_error(origin, &doc, e))?;
        self.reclaim
            .validate()
            .and_then(|()| self.reclaim.check_rules(&self.rules))
            .map_err(|e| invalid(&["reclaim", e.key], e.message))?;
        self.allocator
            .check()
            .map_err(|(key, message)| invalid(&["allocator", key], message))?;
        self.ebpf
            .check()
            .map_err(|(key, message)| invalid(&["ebpf", key], message))?;
        self.processes.group_by.sort();
        self.processes.group_by.dedup();
        // Fill in the derived timeout so `check-config` prints what is used.
        self.poll.timeout = PositiveDuration::new(timeout);
        Ok(self)
    }

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
            crate::judge::rules::Rule::new(r.clone()).map_err(|e| fail(at.clone().key("name"), e.to_string()))?;
        }
        Ok(())
    }
}

/// An error from `[notify]`'s own `validate()`, located by its dotted key
/// ("notify.alertmanager.urls[1]").
pub(super) fn keyed_error(origin: &str, doc: &Located<'_>, e: crate::act::notify::NotifyConfigError) -> ConfigError {
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
    // The path prints as the key it was read from.
    ConfigError::at(origin, doc, &path, e.problem.to_string())
}
