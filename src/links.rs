//! Where alerts link to: the runbook (`runbook_url` annotation of the
//! built-in rules) and the daemon itself (`generatorURL` of notifications),
//! from `[links]`. A leaf: it owns these two knobs and how the URLs are
//! spelled, and must not know rules, alerts or the network.

use serde::{Deserialize, Serialize};

/// The project's runbook, as published with the source.
pub const DEFAULT_RUNBOOK_BASE: &str = "https://github.com/gpumemd/gpumemd/blob/main/docs/runbook.md";

/// `[links]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinksConfig {
    /// The runbook page; each built-in rule links to `<base>#<alertname in
    /// lower case>`. Point it at a copy you host (an intranet wiki, the
    /// installed /usr/share/doc/gpumemd/runbook.md behind a web server).
    pub runbook_base_url: String,
    /// How users reach this daemon (behind a proxy, a TLS terminator, a
    /// DNS name), as Prometheus' `--web.external-url`; when unset,
    /// `http://<host name>:<listen port>/`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_url: Option<String>,
}

impl Default for LinksConfig {
    fn default() -> Self {
        LinksConfig {
            runbook_base_url: DEFAULT_RUNBOOK_BASE.into(),
            external_url: None,
        }
    }
}

/// A `[links]` value that cannot be an absolute link: its key and value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} `{url}` is not an http(s) URL")]
pub struct NotAbsolute {
    pub key: &'static str,
    pub url: String,
}

impl LinksConfig {
    /// Refuses what cannot be an absolute link.
    ///
    /// # Errors
    /// The first key whose value is not an http(s) URL.
    pub fn check(&self) -> Result<(), NotAbsolute> {
        let absolute = |u: &str| u.starts_with("http://") || u.starts_with("https://");
        let bad = |key, url: &str| NotAbsolute {
            key,
            url: url.to_owned(),
        };
        if !absolute(&self.runbook_base_url) {
            return Err(bad("runbook_base_url", &self.runbook_base_url));
        }
        match &self.external_url {
            Some(u) if !absolute(u) => Err(bad("external_url", u)),
            _ => Ok(()),
        }
    }

    /// The runbook section of `alertname` (the runbook's headings are the
    /// alert names; Markdown anchors are their lower case).
    pub fn runbook_url(&self, alertname: &str) -> String {
        let base = self.runbook_base_url.split('#').next().unwrap_or_default();
        format!("{base}#{}", alertname.to_ascii_lowercase())
    }

    /// The daemon's alerts on its status page, for `generatorURL`.
    /// `host` and `listen_port` make the default when no external URL is set.
    pub fn generator_url(&self, host: &str, listen_port: u16) -> String {
        let base = match &self.external_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => format!("http://{host}:{listen_port}"),
        };
        format!("{base}/#alerts")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_absolute() {
        let d = LinksConfig::default();
        assert_eq!(d.runbook_url("GpuLost"), format!("{DEFAULT_RUNBOOK_BASE}#gpulost"));
        assert_eq!(d.generator_url("node1", 9947), "http://node1:9947/#alerts");
        let l = LinksConfig {
            runbook_base_url: "https://wiki.example/gpu#old".into(),
            external_url: Some("https://gpu.example/node1/".into()),
        };
        assert_eq!(l.runbook_url("GpuMemoryHigh"), "https://wiki.example/gpu#gpumemoryhigh");
        assert_eq!(l.generator_url("ignored", 1), "https://gpu.example/node1/#alerts");
        assert!(l.check().is_ok());
        for bad in [
            LinksConfig {
                runbook_base_url: "docs/runbook.md".into(),
                external_url: None,
            },
            LinksConfig {
                external_url: Some("node1:9947".into()),
                ..LinksConfig::default()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }
}
