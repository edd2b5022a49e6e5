//! `[status_page]`: where the page's links point (Grafana, the runbook).
//! Settings only; the summary copies them for the page to use.

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
    /// Base of each alert's runbook link (the page appends `#rulename` in
    /// lower case). Empty: the runbook this daemon serves at `/runbook`.
    #[serde(skip_serializing_if = "LinkBase::is_empty")]
    pub runbook_url: LinkBase,
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
