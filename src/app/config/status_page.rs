//! `[status_page]`: where the page's links point (Grafana, the runbook).
//! Settings only; the status page's summary and the HTTP handler copy them
//! for the page. Owned by the config rather than the page, so that `app`
//! needs nothing from `serve`.

use serde::{Deserialize, Serialize};

/// `[status_page]` in the config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatusPageConfig {
    /// Grafana's base URL (e.g. `https://grafana.example.com`); when set the
    /// page links the fleet and each GPU to the bundled dashboards
    /// (`/d/gpumemd-fleet`, `/d/gpumemd-gpu?var-uuid=...`). Empty: no links.
    #[serde(skip_serializing_if = "LinkBase::is_empty")]
    pub grafana_url: LinkBase,
    /// Deprecated alias of `[links] runbook_base_url` (one knob for every
    /// runbook link): when set and that is not, it becomes that.
    #[serde(skip_serializing_if = "LinkBase::is_empty")]
    pub runbook_url: LinkBase,
}

impl StatusPageConfig {
    /// Moves the deprecated `runbook_url` into `[links]` unless that is set
    /// too (then `[links]` wins); warns either way, so the old key is seen.
    pub fn alias_runbook_into(&mut self, links: &mut crate::data::links::LinksConfig) {
        if self.runbook_url.is_empty() {
            return;
        }
        tracing::warn!(
            "[status_page] runbook_url is deprecated: set [links] runbook_base_url (the one runbook knob) instead"
        );
        if links.runbook_base_url == crate::data::links::DEFAULT_RUNBOOK_BASE {
            links.runbook_base_url = self.runbook_url.as_str().to_string();
        }
        self.runbook_url = LinkBase::default();
    }
}

/// A URL the page turns into a link: empty, or `http(s)://...` or a path
/// starting with `/`, so a config value can never become a `javascript:`
/// link. Refused when the config is read, with the key's line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LinkBase(String);

impl LinkBase {
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Why a link base was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkBaseError {
    #[error("`{0}` is not a link base; use http(s)://host/... or a path starting with /")]
    NotABase(String),
    #[error("`{}` contains spaces or control characters", .0.escape_debug())]
    Unprintable(String),
}

impl TryFrom<String> for LinkBase {
    type Error = LinkBaseError;
    fn try_from(s: String) -> Result<Self, LinkBaseError> {
        let ok = s.is_empty()
            || s.starts_with("https://")
            || s.starts_with("http://")
            || (s.starts_with('/') && !s.starts_with("//"));
        if !ok {
            return Err(LinkBaseError::NotABase(s));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(LinkBaseError::Unprintable(s));
        }
        Ok(LinkBase(s.trim_end_matches('/').to_string()))
    }
}

impl From<LinkBase> for String {
    fn from(l: LinkBase) -> String {
        l.0
    }
}

/// The links the page draws, resolved from the live config at each
/// summary: Grafana's base, the runbook's (a path on this daemon stays
/// relative, so it works through any proxy or tunnel) and the metrics path
/// (`--web.telemetry-path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageLinks {
    pub grafana_url: String,
    pub runbook_url: String,
    pub metrics_path: String,
}

impl PageLinks {
    pub fn new(page: &StatusPageConfig, links: &crate::data::links::LinksConfig, metrics_path: &str) -> Self {
        PageLinks {
            grafana_url: page.grafana_url.as_str().to_string(),
            runbook_url: links.runbook_base_url.split('#').next().unwrap_or_default().to_string(),
            metrics_path: metrics_path.to_string(),
        }
    }

    /// An alert's `runbook_url` annotation that points at a daemon's own
    /// runbook path (`http://node:9947/runbook#rule`, as the built-in rules
    /// get by default) is dropped for the page: the relative base serves
    /// the same page from wherever the page itself was loaded.
    pub fn page_runbook(&self, annotation: Option<String>) -> Option<String> {
        let local = self.runbook_url.starts_with('/');
        annotation.filter(|u| !(local && u.split('#').next().unwrap_or_default().ends_with(&self.runbook_url)))
    }
}

impl Default for PageLinks {
    fn default() -> Self {
        PageLinks {
            grafana_url: String::new(),
            runbook_url: crate::data::links::DEFAULT_RUNBOOK_BASE.into(),
            metrics_path: "/metrics".into(),
        }
    }
}
