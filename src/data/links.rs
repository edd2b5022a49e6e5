//! Where alerts link to: the runbook (`runbook_url` annotation of the
//! built-in rules, the status page's alert groups) and the daemon itself
//! (`generatorURL` of notifications), from `[links]`. A leaf: it owns these
//! knobs and how the URLs are spelled, and must not know rules, alerts or
//! the network.

use serde::{Deserialize, Serialize};

/// The default runbook: the one this daemon serves (docs/runbook.md built
/// into the binary). It always exists, matches the running version and
/// needs no network; links to it are made absolute with the daemon's URL.
pub const DEFAULT_RUNBOOK_BASE: &str = "/runbook";

/// `[links]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinksConfig {
    /// The runbook page; each built-in rule links to `<base>#<alertname in
    /// lower case>`. An http(s) URL (a copy on an intranet wiki), or a path
    /// on this daemon (default `/runbook`, made absolute with
    /// `external_url` or `http(s)://<host>:<port>`).
    pub runbook_base_url: String,
    /// How users reach this daemon (behind a proxy, a TLS terminator, a
    /// DNS name), as Prometheus' `--web.external-url`; when unset,
    /// `http://<host name>:<listen port>/` (`https` when the web config
    /// turns TLS on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_url: Option<String>,
    /// The listener speaks TLS: set at start from the web config (not a
    /// file key), so default links say `https`.
    #[serde(skip)]
    pub tls: bool,
}

impl Default for LinksConfig {
    fn default() -> Self {
        LinksConfig {
            runbook_base_url: DEFAULT_RUNBOOK_BASE.into(),
            external_url: None,
            tls: false,
        }
    }
}

/// A `[links]` value that cannot be an absolute link: its key and value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} `{url}` is {what}")]
pub struct NotAbsolute {
    pub key: &'static str,
    pub url: String,
    pub what: &'static str,
}

impl LinksConfig {
    /// Refuses what cannot become an absolute link.
    ///
    /// # Errors
    /// The first key whose value cannot be made absolute.
    pub fn check(&self) -> Result<(), NotAbsolute> {
        let absolute = |u: &str| u.starts_with("http://") || u.starts_with("https://");
        let bad = |key, url: &str, what| NotAbsolute {
            key,
            url: url.to_owned(),
            what,
        };
        let base = &self.runbook_base_url;
        if !(absolute(base) || (base.starts_with('/') && !base.starts_with("//"))) {
            return Err(bad(
                "runbook_base_url",
                base,
                "neither an http(s) URL nor a path on this daemon (starting with /)",
            ));
        }
        match &self.external_url {
            Some(u) if !absolute(u) => Err(bad("external_url", u, "not an http(s) URL")),
            _ => Ok(()),
        }
    }

    /// The runbook section of `alertname` (the runbook's headings are the
    /// alert names; Markdown anchors are their lower case), absolute.
    /// `host` and `listen_port` make the daemon's URL when no external URL
    /// is set.
    pub fn runbook_url(&self, alertname: &str, host: &str, listen_port: u16) -> String {
        let base = self.runbook_base_url.split('#').next().unwrap_or_default();
        let base = if base.starts_with('/') {
            format!("{}{base}", self.daemon_url(host, listen_port))
        } else {
            base.to_string()
        };
        format!("{base}#{}", alertname.to_ascii_lowercase())
    }

    /// The daemon's alerts on its status page, for `generatorURL`.
    pub fn generator_url(&self, host: &str, listen_port: u16) -> String {
        format!("{}/#alerts", self.daemon_url(host, listen_port))
    }

    /// How users reach the daemon, without a trailing slash.
    fn daemon_url(&self, host: &str, listen_port: u16) -> String {
        match &self.external_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => {
                let scheme = if self.tls { "https" } else { "http" };
                format!("{scheme}://{host}:{listen_port}")
            }
        }
    }
}

/// The host name, for the `instance` label and the daemon's default URL.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_absolute() {
        let d = LinksConfig::default();
        assert!(d.check().is_ok());
        assert_eq!(
            d.runbook_url("GpuLost", "node1", 9947),
            "http://node1:9947/runbook#gpulost"
        );
        assert_eq!(d.generator_url("node1", 9947), "http://node1:9947/#alerts");
        let tls = LinksConfig {
            tls: true,
            ..LinksConfig::default()
        };
        assert_eq!(tls.generator_url("node1", 9947), "https://node1:9947/#alerts");
        assert_eq!(
            tls.runbook_url("GpuLost", "node1", 9947),
            "https://node1:9947/runbook#gpulost"
        );
        let l = LinksConfig {
            runbook_base_url: "https://wiki.example/gpu#old".into(),
            external_url: Some("https://gpu.example/node1/".into()),
            tls: false,
        };
        assert_eq!(
            l.runbook_url("GpuMemoryHigh", "x", 1),
            "https://wiki.example/gpu#gpumemoryhigh"
        );
        assert_eq!(l.generator_url("ignored", 1), "https://gpu.example/node1/#alerts");
        assert!(l.check().is_ok());
        let proxied = LinksConfig {
            external_url: Some("https://gpu.example/node1/".into()),
            ..LinksConfig::default()
        };
        assert_eq!(
            proxied.runbook_url("GpuLost", "x", 1),
            "https://gpu.example/node1/runbook#gpulost"
        );
        for bad in [
            LinksConfig {
                runbook_base_url: "docs/runbook.md".into(),
                ..LinksConfig::default()
            },
            LinksConfig {
                runbook_base_url: "//evil.example/x".into(),
                ..LinksConfig::default()
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
